/* fuzz_log.h - the log of a fuzz target: every message is formatted (the formatting is code
   under test) and printed only when FUZZ_LOG is set, for reading what an input did. */
#ifndef INCMOE_FUZZ_LOG_H
#define INCMOE_FUZZ_LOG_H

#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"

static void fuzz_log_sink(int level, const char *line)
{
    (void)level;
    if (getenv("FUZZ_LOG") != NULL)
        fprintf(stderr, "%s\n", line);
}

/* The log at its most detailed level, into fuzz_log_sink. */
static inline void fuzz_log_quiet(void)
{
    inc_log_set_sink(fuzz_log_sink);
    inc_log_set_level(LOG_LEVEL_DEBUG);
}

#endif
