/* switchd_find.c - see switchd_find.h. */
#include "switchd_find.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"

#define SWITCHD "incmoe-switchd"

const char *inc_switchd_find(char *why, size_t why_len)
{
    static char path[PATH_MAX + 32]; /* the directory plus the longest suffix below */
    const char *env = inc_config_get_str("INCMOE_SWITCHD");
    if (env != NULL) {
        if (access(env, X_OK) == 0)
            return env;
        snprintf(why, why_len, "INCMOE_SWITCHD=%s: %s", env, strerror(errno));
        return NULL;
    }
    char dir[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
    if (n <= 0) {
        snprintf(why, why_len,
                 "%s not found: /proc/self/exe unreadable (%s); set INCMOE_SWITCHD=PATH", SWITCHD,
                 strerror(errno));
        return NULL;
    }
    dir[n] = '\0';
    *strrchr(dir, '/') = '\0'; /* the kernel's link is always an absolute path */
    static const char *const rel[] = {"/", "/../switch/", "/../../switch/"};
    size_t used = (size_t)snprintf(why, why_len, "%s not found (tried", SWITCHD);
    for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        snprintf(path, sizeof(path), "%s%s%s", dir, rel[i], SWITCHD);
        if (access(path, X_OK) == 0)
            return path;
        if (used < why_len)
            used += (size_t)snprintf(why + used, why_len - used, "%s %s", i ? "," : "", path);
    }
    if (used < why_len)
        snprintf(why + used, why_len - used, "); set INCMOE_SWITCHD=PATH");
    return NULL;
}
