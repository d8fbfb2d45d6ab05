/* switchd_path.c - see switchd_path.h. */
#include "switchd_path.h"
#include "base/config.h"
#include "base/ucx_util.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/clock.h"

const char *switchd_path(void)
{
    static char path[PATH_MAX];
    const char *env = inc_config_get_str("INCMOE_SWITCHD");
    if (env != NULL)
        return env;
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n > 0) {
        path[n] = '\0';
        char *slash = strrchr(path, '/');
        if (slash != NULL && (size_t)(slash - path) + sizeof("/incmoe-switchd") < sizeof(path)) {
            strcpy(slash, "/incmoe-switchd");
            if (access(path, X_OK) == 0)
                return path;
        }
    }
    return SWITCHD_BUILD_PATH;
}

pid_t switchd_spawn(const char *path, char *addr, size_t addr_len)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the embedded switch dies with its tool */
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl(path, path, "--listen", "127.0.0.1:0", (char *)NULL);
        fprintf(stderr, "incmoe: cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char line[256] = "";
    size_t have = 0;
    double deadline = inc_now_s() + 20;
    while (have < sizeof(line) - 1 && strchr(line, '\n') == NULL && inc_now_s() < deadline) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t k = read(fds[0], line + have, sizeof(line) - 1 - have);
        if (k <= 0)
            break;
        have += (size_t)k;
        line[have] = '\0';
    }
    close(fds[0]);
    const char *at = strstr(line, "listening on ");
    if (at == NULL) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    snprintf(addr, addr_len, "%s", at + strlen("listening on "));
    addr[strcspn(addr, " \n")] = '\0';
    return pid;
}
