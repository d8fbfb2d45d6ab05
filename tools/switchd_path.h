/* switchd_path.h - how the tools find incmoe-switchd and start an embedded one. */
#ifndef INCMOE_SWITCHD_PATH_H
#define INCMOE_SWITCHD_PATH_H

#include <stddef.h>
#include <sys/types.h>

/* INCMOE_SWITCHD if set, else incmoe-switchd beside the running program, else the build tree's. */
const char *switchd_path(void);

/*
 * Start path --listen 127.0.0.1:0 and wait (at most 20 s) for its first line,
 * "incmoe-switchd listening on HOST:PORT"; addr gets HOST:PORT.  Returns the
 * child's pid, or -1 (the child is reaped) when it did not come up.
 */
pid_t switchd_spawn(const char *path, char *addr, size_t addr_len);

#endif
