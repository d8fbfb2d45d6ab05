/* keyfile.c - see keyfile.h. */
#include "keyfile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

incmoe_status_t inc_keyfile_read(const char *path, char *secret, size_t *len, char *why,
                                 size_t why_len)
{
    char shown[128];
    inc_text_sanitize(shown, sizeof(shown), path, strlen(path));
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(why, why_len, "cannot read key file %s: %s", shown, strerror(errno));
        return INCMOE_ERR_AUTH;
    }
    /* One byte more than the longest key with its "\r\n": enough to see that a key is too long. */
    char buf[INCMOE_MAX_SECRET + 3];
    size_t n = fread(buf, 1, sizeof(buf), f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        snprintf(why, why_len, "cannot read key file %s", shown);
        return INCMOE_ERR_AUTH;
    }
    size_t k = 0;
    while (k < n && buf[k] != '\n' && buf[k] != '\r' && buf[k] != '\0')
        k++;
    if (k < n && buf[k] == '\0') {
        snprintf(why, why_len, "the key in %s holds a NUL byte: it must be 1..%d bytes, none NUL",
                 shown, INCMOE_MAX_SECRET);
        return INCMOE_ERR_INVALID_ARG;
    }
    if (k == 0 || k > INCMOE_MAX_SECRET) {
        snprintf(why, why_len, "the key in %s is %s: it must be 1..%d bytes (its first line)",
                 shown, k == 0 ? "empty" : "too long", INCMOE_MAX_SECRET);
        return INCMOE_ERR_INVALID_ARG;
    }
    memcpy(secret, buf, k);
    *len = k;
    return INCMOE_OK;
}
