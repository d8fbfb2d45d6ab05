/* config.c - the table of every INCMOE_* setting, and the parser of numbers users give. */
#include "config.h"
#include "log.h"
#include "text.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Numbers: kind, then the allowed range (bounds that keep every product the code forms in range).
 */
#define TEXT INC_CONFIG_TEXT, 0, 0
const inc_config_entry_t inc_config_table[] = {
    {"INCMOE_LOG_LEVEL", "warn", "log level: error, warn, info, debug, trace", TEXT},
    {"INCMOE_SWITCH", NULL, "host:port of incmoe-switchd (NCCL plugin, tools)", TEXT},
    {"INCMOE_ALGO", "inc",
     "torch backend: the algorithm of its communicators: inc (in-network), ring, or a2a (the "
     "ring's collectives, every rank connected to every other; all_to_all_single on ring and "
     "a2a)",
     TEXT},
    {"INCMOE_AUTH_KEY", NULL, "shared key proven to the switch, never sent (1..64 bytes)", TEXT},
    {"INCMOE_AUTH_KEY_FILE", NULL, "file holding the shared secret (first line, 1..64 bytes)",
     TEXT},
    {"INCMOE_TIMEOUT_MS", "10000",
     "bound on joining, and the liveness timeout this rank asks of the switch (the job uses the "
     "largest asked, never below the switch's --timeout-ms)",
     INC_CONFIG_INT, 1, INC_TIMEOUT_MS_MAX},
    {"INCMOE_CHUNK_SIZE", "131072",
     "switch: bytes of one data chunk (a multiple of 8); the switch stores and forwards whole "
     "chunks, so each collective pays about two chunk times of one-way traffic",
     INC_CONFIG_SIZE, 64, 1ll << 30},
    {"INCMOE_CREDITS", "64", "switch: chunks a rank may have in flight per stream", INC_CONFIG_INT,
     1, 4096},
    {"INCMOE_RNDV_THRESH", "0",
     "payloads from this size go rendezvous, landing zero-copy (good on RDMA); 0 = always eager "
     "(best on TCP, where rendezvous requests queue behind bulk data in the same socket)",
     INC_CONFIG_SIZE, 0, 1ll << 40},
    {"INCMOE_JOB_ID", NULL, "NCCL plugin: job id override (default: derived from commId)", TEXT},
    {"INCMOE_SWITCHD", NULL, "tools: incmoe-switchd to start for embedded runs", TEXT},
    {"INCMOE_NCCL_ADDR", NULL,
     "NCCL plugin: IP its point-to-point net listens on (default: the route to INCMOE_SWITCH)",
     TEXT},
    {"INCMOE_MOE_BANDS", NULL, "MoE layer: bands per layer (default: chosen for the token count)",
     INC_CONFIG_INT, 1, 1 << 20},
    {"INCMOE_MOE_WORKERS", NULL, "MoE layer: gather,compute,reduce worker threads, e.g. 1,2,1",
     TEXT},
    {"INCMOE_MOE_TAIL", NULL, "MoE layer: last bands the gather workers help reduce (0 = off)",
     INC_CONFIG_INT, 0, 1 << 20},
    {"INCMOE_MOE_ROUTING", "full",
     "MoE layer: routing of a forward that does not name one: full (AllGather and "
     "ReduceScatter), masked (dispatch and combine) or auto",
     TEXT},
    {"INCMOE_MOE_DEPTH", "4",
     "MoE layer: collectives each poster keeps in flight (AllGathers, each reduce worker's "
     "ReduceScatters)",
     INC_CONFIG_INT, 1, 8},
    {"INCMOE_MOE_CALIBRATE", "1",
     "MoE layer: measure the link and band costs below at create where unset (0 = defaults)",
     INC_CONFIG_INT, 0, 1},
    {"INCMOE_MOE_LINK_MBPS", "1000",
     "MoE layer config model: per-rank link bandwidth, Mbit/s (unset: measured; slowest rank's)",
     INC_CONFIG_INT, 1, 1 << 30},
    {"INCMOE_MOE_GFLOPS", "20",
     "MoE layer config model: GEMM rate of one compute worker (slowest rank's)", INC_CONFIG_INT, 1,
     1 << 30},
    {"INCMOE_MOE_BAND_US", "4000",
     "MoE layer config model: fixed cost of one band, microseconds (unset: measured; slowest "
     "rank's)",
     INC_CONFIG_INT, 0, 1 << 30},
};
#undef TEXT
const size_t inc_config_table_size = sizeof(inc_config_table) / sizeof(inc_config_table[0]);

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

static const inc_config_entry_t *config_entry(const char *name)
{
    for (size_t i = 0; i < inc_config_table_size; i++)
        if (strcmp(inc_config_table[i].name, name) == 0)
            return &inc_config_table[i];
    fprintf(stderr, "incmoe: internal error: setting %s is not in the table\n", name);
    abort();
}

incmoe_status_t inc_config_get_int(const char *name, long long *out)
{
    const inc_config_entry_t *e = config_entry(name);
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

const char *inc_config_get_str(const char *name)
{
    const inc_config_entry_t *e = config_entry(name);
    const char *v = getenv(name);
    return (v != NULL && *v != '\0') ? v : e->default_val;
}
