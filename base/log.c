/* log.c - leveled logging to stderr or to a sink. */
#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include "config.h"
#include "vformat.h"

int inc_log_current_level = LOG_LEVEL_WARN;

static char log_ident[64] = "incmoe";
static inc_log_sink_t log_sink;

static const char *const log_level_names[] = {"error", "warn", "info", "debug", "trace"};

int inc_log_level_parse(const char *text)
{
    if (text == NULL || *text == '\0')
        return -1;
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0')
        return text[0] - '0';
    for (int i = 0; i <= LOG_LEVEL_TRACE; i++)
        if (strcasecmp(text, log_level_names[i]) == 0)
            return i;
    if (strcasecmp(text, "warning") == 0)
        return LOG_LEVEL_WARN;
    return -1;
}

void inc_log_set_level(int level)
{
    if (level >= LOG_LEVEL_ERROR && level <= LOG_LEVEL_TRACE)
        inc_log_current_level = level;
}

void inc_log_set_ident(const char *ident)
{
    snprintf(log_ident, sizeof(log_ident), "%s", ident);
}

void inc_log_set_sink(inc_log_sink_t sink)
{
    log_sink = sink;
}

/* Read INCMOE_LOG_LEVEL once, before main(), so every component logs alike. */
__attribute__((constructor)) static void log_init_from_env(void)
{
    int level = inc_log_level_parse(inc_config_get_str("INCMOE_LOG_LEVEL"));
    if (level >= 0)
        inc_log_current_level = level;
}

void inc_log_emit(int level, const char *subsys, const char *file, int line, const char *fmt, ...)
{
    char text[1024];
    INC_VFORMAT(text, sizeof(text), fmt);

    if (log_sink != NULL) {
        char full[1200];
        snprintf(full, sizeof(full), "%s %s: %s", log_ident, subsys, text);
        log_sink(level, full);
        return;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    const char *base = strrchr(file, '/');
    /* One fprintf per line so lines of different threads do not interleave. */
    fprintf(stderr, "[%ld.%06ld] %s %s %s %s:%d %s\n", (long)tv.tv_sec, (long)tv.tv_usec, log_ident,
            log_level_names[level < 0   ? 0
                            : level > 4 ? 4
                                        : level],
            subsys, base ? base + 1 : file, line, text);
}
