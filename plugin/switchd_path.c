/* switchd_path.c - see switchd_path.h. */
#include "switchd_path.h"
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *switchd_path(void)
{
    static char path[PATH_MAX];
    const char *env = config_get_str("INCMOE_SWITCHD");
    if (env != NULL)
        return env;
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n > 0) {
        path[n]     = '\0';
        char *slash = strrchr(path, '/');
        if (slash != NULL && (size_t)(slash - path) + sizeof("/incmoe-switchd") < sizeof(path)) {
            strcpy(slash, "/incmoe-switchd");
            if (access(path, X_OK) == 0)
                return path;
        }
    }
    return SWITCHD_BUILD_PATH;
}
