/*
 * config.h - every INCMOE_* setting, declared once in config.c's table.
 * `incmoe config` prints the table with the values in force.
 */
#ifndef INC_CONFIG_H
#define INC_CONFIG_H

#include <stddef.h>

typedef struct {
    const char *name;        /* environment variable */
    const char *default_val; /* as text; NULL when unset by default */
    const char *doc;
} inc_config_entry_t;

extern const inc_config_entry_t inc_config_table[];
extern const size_t inc_config_table_size;

/* The variable's value, else the table's default.  Names must be in the table. */
const char *inc_config_get_str(const char *name);
long long inc_config_get_int(const char *name);
/* Parse "64M", "1G", "4096": bytes, or -1 on bad input. */
long long inc_config_parse_size(const char *text);

#endif
