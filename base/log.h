/* log.h - leveled logging by subsystem; the level comes from INCMOE_LOG_LEVEL. */
#ifndef INC_LOG_H
#define INC_LOG_H

#include <stdarg.h>

typedef enum {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN,
    LOG_LEVEL_INFO,
    LOG_LEVEL_DEBUG,
    LOG_LEVEL_TRACE,
} inc_log_level_t;

extern int inc_log_current_level;

/* Parse "error|warn|info|debug|trace" (or 0-4); -1 when unknown. */
int inc_log_level_parse(const char *text);
void inc_log_set_level(int level);
/* Prefix every line with this process's identity, e.g. "switchd" or "rank 3". */
void inc_log_set_ident(const char *ident);
/* Send lines somewhere else than stderr (the NCCL plugin hands them to NCCL's logger). */
typedef void (*inc_log_sink_t)(int level, const char *line);
void inc_log_set_sink(inc_log_sink_t sink);

void inc_log_emit(int level, const char *subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define log_at(level, subsys, ...)                                                                 \
    do {                                                                                           \
        if ((level) <= inc_log_current_level)                                                      \
            inc_log_emit((level), (subsys), __FILE__, __LINE__, __VA_ARGS__);                      \
    } while (0)

#define log_error(subsys, ...) log_at(LOG_LEVEL_ERROR, subsys, __VA_ARGS__)
#define log_warn(subsys, ...)  log_at(LOG_LEVEL_WARN, subsys, __VA_ARGS__)
#define log_info(subsys, ...)  log_at(LOG_LEVEL_INFO, subsys, __VA_ARGS__)
#define log_debug(subsys, ...) log_at(LOG_LEVEL_DEBUG, subsys, __VA_ARGS__)
#define log_trace(subsys, ...) log_at(LOG_LEVEL_TRACE, subsys, __VA_ARGS__)

#endif
