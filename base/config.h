/*
 * config.h - every INCMOE_* setting, declared once in config.c's table, and
 * the one parser of numbers that come from a user (settings and command
 * lines): decimal, range-checked, never wrapped.
 * `incmoe config` prints the table with the values in force.
 */
#ifndef INC_CONFIG_H
#define INC_CONFIG_H

#include <stddef.h>

#include "incmoe/incmoe.h"

/* Dead-peer bound in ms: at most a day, so that twice it still fits an int. */
#define INC_TIMEOUT_MS_MAX 86400000

typedef enum {
    INC_CONFIG_TEXT, /* read with inc_config_get_str only */
    INC_CONFIG_INT,  /* decimal integer */
    INC_CONFIG_SIZE, /* bytes: decimal with an optional K, M, G or T suffix */
} inc_config_kind_t;

typedef struct {
    const char *name;        /* environment variable */
    const char *default_val; /* as text; NULL when unset by default */
    const char *doc;
    inc_config_kind_t kind;
    long long min, max; /* allowed range of a number */
} inc_config_entry_t;

extern const inc_config_entry_t inc_config_table[];
extern const size_t inc_config_table_size;

/* The table's entry of name; a name not in the table is an internal error (aborts). */
const inc_config_entry_t *inc_config_entry(const char *name);

/* The variable's value, else the table's default.  Names must be in the table. */
const char *inc_config_get_str(const char *name);

/*
 * A number setting in its table range (unset: the default, 0 when the table
 * has none).  When the variable is not such a number, INCMOE_ERR_INVALID_ARG,
 * logged once with the variable, its value and the range, and *out is the
 * default (callers that cannot fail go on with it).
 */
incmoe_status_t inc_config_get_int(const char *name, long long *out);

/* The allowed range of a number setting as text, e.g. "1..86400000" or "64..1G bytes". */
void inc_config_range(const inc_config_entry_t *e, char *buf, size_t len);

/*
 * text as an integer in lo..hi (with size, a K/M/G/T suffix multiplies by
 * 2^10/2^20/2^30/2^40; "KiB", "KB" are accepted too).  0, or -1 with why set to
 * what is wrong and the allowed range, e.g. "out of range (allowed: 1..64)".
 */
int inc_parse_int(const char *text, long long lo, long long hi, int size, long long *out, char *why,
                  size_t why_len);

/* For command lines: as inc_parse_int, printing "PROG: bad value 'TEXT' for FLAG: WHY" on
   stderr when the value is refused. */
int inc_parse_arg(const char *prog, const char *flag, const char *text, long long lo, long long hi,
                  int size, long long *out);

#endif
