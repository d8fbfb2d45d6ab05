/* config.c - the parser of numbers users give, and the number settings of the table
   (config_table.c) read through it. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "text.h"

/* v as text, with the largest exact K/M/G/T suffix for sizes. */
static void format_num(long long v, int size, char *buf, size_t len)
{
    static const char suffix[] = "TGMK";
    for (int i = 0; size && v != 0 && i < 4; i++) {
        int shift = 40 - 10 * i;
        if (v % (1ll << shift) == 0) {
            snprintf(buf, len, "%lld%c", v >> shift, suffix[i]);
            return;
        }
    }
    snprintf(buf, len, "%lld", v);
}

/* The multiplier of a size suffix at *end (advanced past it): 1 without one, 0 when unknown. */
static long long size_unit(char **end)
{
    int shift = 0;
    switch (toupper((unsigned char)**end)) {
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift > 0) {
        (*end)++;
        if (**end == 'i')
            (*end)++;
    }
    if (**end == 'B')
        (*end)++;
    return **end == '\0' ? 1ll << shift : 0;
}

int inc_parse_int(const char *text, long long lo, long long hi, int size, long long *out, char *why,
                  size_t why_len)
{
    char los[32], his[32], dummy[1];
    format_num(lo, size, los, sizeof(los));
    format_num(hi, size, his, sizeof(his));
    if (why == NULL) {
        why = dummy;
        why_len = sizeof(dummy);
    }
    /* strtoll alone would take leading blanks and '+', and saturate on overflow. */
    const char *p = text != NULL && *text == '-' ? text + 1 : text;
    char *end;
    errno = 0;
    long long v = p != NULL && isdigit((unsigned char)*p) ? strtoll(text, &end, 10) : 0;
    long long unit = p != NULL && isdigit((unsigned char)*p) ? 1 : 0;
    if (unit != 0 && size)
        unit = size_unit(&end);
    else if (unit != 0 && *end != '\0')
        unit = 0;
    if (unit == 0) {
        snprintf(why, why_len, "not %s (allowed: %s..%s%s)", size ? "a size" : "an integer", los,
                 his, size ? " bytes, K/M/G/T suffixes" : "");
        return -1;
    }
    if (errno == ERANGE || v > LLONG_MAX / unit || v < LLONG_MIN / unit || v * unit < lo ||
        v * unit > hi) {
        snprintf(why, why_len, "out of range (allowed: %s..%s%s)", los, his, size ? " bytes" : "");
        return -1;
    }
    *out = v * unit;
    return 0;
}

int inc_parse_arg(const char *prog, const char *flag, const char *text, long long lo, long long hi,
                  int size, long long *out)
{
    char why[128], shown[64];
    if (inc_parse_int(text, lo, hi, size, out, why, sizeof(why)) == 0)
        return 0;
    fprintf(stderr, "%s: bad value '%s' for %s: %s\n", prog,
            inc_text_sanitize(shown, sizeof(shown), text, strlen(text)), flag, why);
    return -1;
}

void inc_config_range(const inc_config_entry_t *e, char *buf, size_t len)
{
    char lo[32], hi[32];
    int size = e->kind == INC_CONFIG_SIZE;
    format_num(e->min, size, lo, sizeof(lo));
    format_num(e->max, size, hi, sizeof(hi));
    snprintf(buf, len, "%s..%s%s", lo, hi, size ? " bytes" : "");
}

incmoe_status_t inc_config_get_int(const char *name, long long *out)
{
    const inc_config_entry_t *e = inc_config_entry(name);
    int size = e->kind == INC_CONFIG_SIZE;
    if (e->kind == INC_CONFIG_TEXT) {
        fprintf(stderr, "incmoe: internal error: setting %s is not a number\n", name);
        abort();
    }
    const char *v = inc_config_get_str(name);
    char why[128], shown[64];
    if (v != NULL && inc_parse_int(v, e->min, e->max, size, out, why, sizeof(why)) == 0)
        return INCMOE_OK;
    *out = 0;
    if (e->default_val != NULL)
        inc_parse_int(e->default_val, e->min, e->max, size, out, NULL, 0);
    if (v == NULL) /* unset without a default: the caller decides */
        return INCMOE_OK;
    log_error("config", "%s=%s: %s", name, inc_text_sanitize(shown, sizeof(shown), v, strlen(v)),
              why);
    return INCMOE_ERR_INVALID_ARG;
}
