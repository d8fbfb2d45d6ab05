/*
 * config.h - every INCMOE_* setting, declared once in config.c's table.
 * `incmoe config` prints the table with the values in force.
 */
#ifndef INCMOE_CONFIG_H
#define INCMOE_CONFIG_H

#include <stddef.h>

typedef struct {
    const char *name;        /* environment variable */
    const char *default_val; /* as text; NULL when unset by default */
    const char *doc;
} config_entry_t;

extern const config_entry_t config_table[];
extern const size_t         config_table_size;

/* The variable's value, else the table's default.  Names must be in the table. */
const char *config_get_str(const char *name);
long long config_get_int(const char *name);
/* Parse "64M", "1G", "4096": bytes, or -1 on bad input. */
long long config_parse_size(const char *text);

#endif
