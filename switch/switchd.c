/*
 * incmoe-switchd - the INC switch emulator: jobs of N ranks, multicast
 * AllGather, rooted-reduction ReduceScatter, AllReduce and barrier over UCX.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "engine.h"
#include "server.h"

#include "base/config.h"
#include "base/keyfile.h"
#include "base/log.h"

static server_t *running;

static void on_signal(int sig)
{
    (void)sig;
    if (running != NULL)
        atomic_store(&running->stop, 1);
}

/* SIGINT and SIGTERM stop the switch in order; a rank gone mid-send is no SIGPIPE. */
static int install_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    struct sigaction ign = {.sa_handler = SIG_IGN};
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0 ||
        sigaction(SIGPIPE, &ign, NULL) != 0) {
        fprintf(stderr, "incmoe-switchd: cannot install signal handlers: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: incmoe-switchd --listen HOST:PORT [options]\n"
            "\n"
            "  --listen HOST:PORT     the TCP port ranks bootstrap on (port 0..65535; 0: any\n"
            "                         free); a connection must finish the handshake within\n"
            "                         5 s, at most 64 may be handshaking at once, and an\n"
            "                         address failing more than 5 times is refused for a\n"
            "                         growing period (1 s doubling to 60 s)\n"
            "  --auth-key-file FILE   ranks must prove they hold the key in FILE's first line\n"
            "                         (1..64 bytes; it never crosses the wire).  Without it,\n"
            "                         anyone who can reach the port can join any job\n"
            "  --parent HOST:PORT     serve as a child switch in a tree: every job joins the\n"
            "                         parent switch at HOST:PORT (its --listen) for the ranks\n"
            "                         beneath this switch, over the same bootstrap as ranks;\n"
            "                         without it this switch is a root (README, \"Switch trees\")\n"
            "  --parent-key-file FILE the key that link proves (FILE's first line); default\n"
            "                         the --auth-key-file key, keyless without one\n"
            "  --threads N            threads that reduce, 1..64 (default 1: the event loop)\n"
            "  --max-memory BYTES     bound on buffered data over all jobs, 1..1T (default 4G;\n"
            "                         K/M/G/T suffixes); jobs that would exceed it are refused\n"
            "  --chunk-size BYTES     bytes of one data chunk, 64..1G, a multiple of 8\n"
            "                         (default INCMOE_CHUNK_SIZE, 128K)\n"
            "  --credits N            chunks a rank may have in flight per stream, 1..4096\n"
            "                         (default INCMOE_CREDITS, 64)\n"
            "  --link-window N        with --parent: chunks of each stream (and of each owner's\n"
            "                         ReduceScatter partials and combine set chunks) the\n"
            "                         parent may send this switch, and of each owner's combine\n"
            "                         set chunks this switch may send it, ahead of credits,\n"
            "                         1..4096 (default: --credits)\n"
            "  --timeout-ms MS        floor of every job's liveness timeout, 1..86400000\n"
            "                         (default INCMOE_TIMEOUT_MS, 10000); ranks may ask a\n"
            "                         longer one, never a shorter\n"
            "  --progress-timeout-ms MS  a collective some ranks posted fails the job if a\n"
            "                         live rank has not posted it within MS, 0..86400000\n"
            "                         (default 600000; 0: wait for ever); a job's ranks may\n"
            "                         ask another\n"
            "  --rndv-thresh BYTES    send payloads from this size rendezvous, 0..1T (default\n"
            "                         INCMOE_RNDV_THRESH; 0: always eager, best on TCP)\n"
            "  --egress-chunks N      chunks in flight toward one rank, 1..1024 (default 2);\n"
            "                         results go ahead of multicast copies in each rank's queue\n"
            "  --heap-keep BYTES      freed buffer memory kept for reuse instead of returned to\n"
            "                         the system, 0..1G (default 64M; 0: the C library's own\n"
            "                         policy); chunks are malloc'd and freed at line rate, and\n"
            "                         memory handed back must be page-faulted in again\n"
            "  --log-level LEVEL      error, warn, info, debug, trace (or INCMOE_LOG_LEVEL)\n"
            "  --help\n"
            "\n"
            "The first line on stdout is 'incmoe-switchd listening on HOST:PORT'.\n"
            "Each job may buffer at most credits x ((chunk-size + 8N) x 3N + 6 x chunk-size)\n"
            "bytes; with --parent, link-window x chunk-size x (2 + N) more.\n");
}

#define PROG "incmoe-switchd"

typedef struct {
    const char *listen, *keyfile, *parent_keyfile;
    long long egress_chunks;
    long long heap_keep;
} args_t;

/* The INCMOE_* settings the switch takes its defaults from; -1 when one is out of range. */
static int settings_defaults(switch_settings_t *set, args_t *a)
{
    long long chunk, credits, timeout, rndv;
    if (inc_config_get_int("INCMOE_CHUNK_SIZE", &chunk) != INCMOE_OK ||
        inc_config_get_int("INCMOE_CREDITS", &credits) != INCMOE_OK ||
        inc_config_get_int("INCMOE_TIMEOUT_MS", &timeout) != INCMOE_OK ||
        inc_config_get_int("INCMOE_RNDV_THRESH", &rndv) != INCMOE_OK)
        return -1;
    set->chunk_size = (uint64_t)chunk;
    set->credits = (uint32_t)credits;
    set->timeout_ms = (int)timeout;
    set->progress_timeout_ms = 600000; /* PyTorch's collective watchdog waits as long */
    set->rndv_thresh = rndv == 0 ? SIZE_MAX : (size_t)rndv;
    set->max_memory = (size_t)4 << 30;
    set->nthreads = 1;
    a->egress_chunks = 2;
    a->heap_keep = 64ll << 20;
    return 0;
}

/* HOST:PORT with PORT in 0..65535 (0 for --listen: any free port); the host is resolved when
   it is used. */
static int check_hostport(const char *flag, const char *text)
{
    const char *colon = strrchr(text, ':');
    long long port;
    char what[64];
    if (colon == NULL || colon == text) {
        fprintf(stderr, PROG ": bad value '%s' for %s: want HOST:PORT\n", text, flag);
        return -1;
    }
    snprintf(what, sizeof(what), "%s's port", flag);
    return inc_parse_arg(PROG, what, colon + 1, 0, 65535, 0, &port);
}

/* --parent HOST:PORT: -1 to go on, or the exit status. */
static int apply_parent(switch_settings_t *set, const char *arg)
{
    if (check_hostport("--parent", arg) != 0)
        return 2;
    if (strlen(arg) >= sizeof(set->parent)) {
        fprintf(stderr, PROG ": --parent '%s' is longer than %zu bytes\n", arg,
                sizeof(set->parent) - 1);
        return 2;
    }
    strcpy(set->parent, arg);
    return -1;
}

/* --log-level NAME: -1 to go on, or the exit status. */
static int apply_log_level(const char *arg)
{
    int level = inc_log_level_parse(arg);
    if (level < 0) {
        fprintf(stderr, "incmoe-switchd: unknown log level '%s'\n", arg);
        return 2;
    }
    inc_log_set_level(level);
    return -1;
}

/* --link-window N: -1 to go on, or the exit status. */
static int apply_link_window(switch_settings_t *set, const char *arg)
{
    long long v;
    if (inc_parse_arg(PROG, "--link-window", arg, 1, INCMOE_WIRE_MAX_WINDOW, 0, &v))
        return 2;
    set->link_window = (uint32_t)v;
    return -1;
}

/* One option from getopt_long: -1 to go on, or the exit status. */
static int apply_option(int c, switch_settings_t *set, args_t *a)
{
    long long v;
    switch (c) {
    case 'l':
        a->listen = optarg;
        return -1;
    case 'k':
        a->keyfile = optarg;
        return -1;
    case 'p':
        return apply_parent(set, optarg);
    case 'q':
        a->parent_keyfile = optarg;
        return -1;
    case 't':
        if (inc_parse_arg(PROG, "--threads", optarg, 1, 64, 0, &v))
            return 2;
        set->nthreads = (int)v;
        return -1;
    case 'm':
        if (inc_parse_arg(PROG, "--max-memory", optarg, 1, 1ll << 40, 1, &v))
            return 2;
        set->max_memory = (size_t)v;
        return -1;
    case 'c':
        if (inc_parse_arg(PROG, "--chunk-size", optarg, 64, 1ll << 30, 1, &v))
            return 2;
        set->chunk_size = (uint64_t)v;
        return -1;
    case 'r':
        if (inc_parse_arg(PROG, "--credits", optarg, 1, 4096, 0, &v))
            return 2;
        set->credits = (uint32_t)v;
        return -1;
    case 'W':
        return apply_link_window(set, optarg);
    case 'T':
        if (inc_parse_arg(PROG, "--timeout-ms", optarg, 1, INC_TIMEOUT_MS_MAX, 0, &v))
            return 2;
        set->timeout_ms = (int)v;
        return -1;
    case 'P':
        if (inc_parse_arg(PROG, "--progress-timeout-ms", optarg, 0, INC_TIMEOUT_MS_MAX, 0, &v))
            return 2;
        set->progress_timeout_ms = (int)v;
        return -1;
    case 'R':
        if (inc_parse_arg(PROG, "--rndv-thresh", optarg, 0, 1ll << 40, 1, &v))
            return 2;
        set->rndv_thresh = v == 0 ? SIZE_MAX : (size_t)v;
        return -1;
    case 'E':
        if (inc_parse_arg(PROG, "--egress-chunks", optarg, 1, 1024, 0, &a->egress_chunks))
            return 2;
        return -1;
    case 'K':
        if (inc_parse_arg(PROG, "--heap-keep", optarg, 0, 1ll << 30, 1, &a->heap_keep))
            return 2;
        return -1;
    case 'L':
        return apply_log_level(optarg);
    case 'h':
        usage(stdout);
        return 0;
    default:
        usage(stderr);
        return 2;
    }
}

/* The command line: -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv, switch_settings_t *set, args_t *a)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"auth-key-file", required_argument, NULL, 'k'},
        {"parent", required_argument, NULL, 'p'},
        {"parent-key-file", required_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 't'},
        {"max-memory", required_argument, NULL, 'm'},
        {"chunk-size", required_argument, NULL, 'c'},
        {"credits", required_argument, NULL, 'r'},
        {"link-window", required_argument, NULL, 'W'},
        {"timeout-ms", required_argument, NULL, 'T'},
        {"progress-timeout-ms", required_argument, NULL, 'P'},
        {"log-level", required_argument, NULL, 'L'},
        {"egress-chunks", required_argument, NULL, 'E'},
        {"rndv-thresh", required_argument, NULL, 'R'},
        {"heap-keep", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int st = apply_option(c, set, a);
        if (st >= 0)
            return st;
    }
    if (optind != argc) {
        fprintf(stderr, "incmoe-switchd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (a->listen == NULL) {
        fprintf(stderr, "incmoe-switchd: --listen HOST:PORT is required\n");
        usage(stderr);
        return 2;
    }
    if (check_hostport("--listen", a->listen) != 0)
        return 2;
    if (set->link_window == 0)
        set->link_window = set->credits;
    /* The 16-bit reductions work in element pairs: keep chunks element-aligned for all types. */
    if (set->chunk_size % 8 != 0) {
        fprintf(stderr, "incmoe-switchd: the chunk size (--chunk-size or INCMOE_CHUNK_SIZE) must "
                        "be a multiple of 8\n");
        return 2;
    }
    return -1;
}

/* The shared secret is the first line of keyfile. */
static int read_secret(const char *keyfile, switch_settings_t *set)
{
    char why[256];
    if (inc_keyfile_read(keyfile, set->secret, &set->secret_len, why, sizeof(why)) != INCMOE_OK) {
        fprintf(stderr, PROG ": --auth-key-file: %s\n", why);
        return -1;
    }
    set->have_secret = 1;
    return 0;
}

/* The key of the link to the parent: --parent-key-file's, else the switch's own. */
static int read_parent_secret(const args_t *a, switch_settings_t *set)
{
    if (a->parent_keyfile != NULL && set->parent[0] == '\0') {
        fprintf(stderr, PROG ": --parent-key-file without --parent\n");
        return -1;
    }
    if (a->parent_keyfile == NULL) {
        memcpy(set->parent_secret, set->secret, set->secret_len);
        set->parent_secret_len = set->have_secret ? set->secret_len : 0;
        return 0;
    }
    char why[256];
    if (inc_keyfile_read(a->parent_keyfile, set->parent_secret, &set->parent_secret_len, why,
                         sizeof(why)) != INCMOE_OK) {
        fprintf(stderr, PROG ": --parent-key-file: %s\n", why);
        return -1;
    }
    return 0;
}

/*
 * Every chunk the switch holds is malloc'd (by UCX when it assembles a
 * multi-fragment eager message, or here for a result) and freed once
 * forwarded.  glibc's default hands the heap's free top back to the system as
 * soon as it exceeds twice the largest freed chunk, so at line rate the heap
 * shrinks and grows all the time and every page comes back through a page
 * fault that zeroes it: a fifth of the switch's CPU on the bulk path.  Keep up
 * to keep bytes of free top instead; the heap never grows past the peak of
 * what is buffered, which --max-memory bounds.  Setting the trim threshold
 * fixes glibc's sliding mmap threshold, so set that to the top of its sliding
 * range (32 MiB on 64-bit): chunks up to it come from the heap, as before.
 */
static void heap_keep(long long keep)
{
    if (keep == 0)
        return;
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, (int)keep) != 1)
        log_info("switch",
                 "mallopt refused the --heap-keep settings (as under ASan): the C library's own "
                 "policy applies");
}

/* Serve until SIGINT or SIGTERM; the exit status. */
static int serve(const switch_settings_t *set, const char *listen)
{
    if (install_signals() != 0)
        return 1;
    switch_stats_t stats = {0};
    server_t srv;
    engine_t eng;
    server_init(&srv, set, &stats, &engine_ops, &eng);
    if (engine_init(&eng, set, &stats, server_tx(&srv)) != 0)
        return 1;
    running = &srv;
    if (server_start(&srv, listen) != INCMOE_OK) {
        fprintf(stderr, "incmoe-switchd: cannot start on %s\n", listen);
        engine_fini(&eng);
        return 1;
    }
    if (set->parent[0] != '\0')
        log_info("switch", "a child switch in a tree: every job joins the parent at %s",
                 set->parent);
    else
        log_info("switch", "a root switch: jobs form here (child switches may join them)");
    server_run(&srv);
    server_stop(&srv);
    engine_fini(&eng);
    /* CPU time (every thread) beside the bytes moved: BENCHMARKS.md's switch CPU per GB. */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    log_info("switch",
             "stopped: %llu jobs (%llu failed, %llu refused), %llu bad messages, %llu ranks lost, "
             "%llu bytes in, %llu out, peak %zu bytes buffered, cpu %.3f s user %.3f s sys",
             (unsigned long long)stats.jobs_started, (unsigned long long)stats.jobs_failed,
             (unsigned long long)stats.jobs_refused, (unsigned long long)stats.bad_messages,
             (unsigned long long)stats.peers_lost, (unsigned long long)stats.bytes_in,
             (unsigned long long)stats.bytes_out, stats.mem_peak,
             (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
             (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    switch_settings_t set = {0};
    args_t args = {0};
    if (settings_defaults(&set, &args) != 0)
        return 2;
    int st = parse_args(argc, argv, &set, &args);
    if (st >= 0)
        return st;
    if (args.keyfile != NULL && read_secret(args.keyfile, &set) != 0)
        return 2;
    if (read_parent_secret(&args, &set) != 0)
        return 2;
    set.egress_limit = (size_t)args.egress_chunks * set.chunk_size;
    inc_log_set_ident("switchd");
    heap_keep(args.heap_keep);
    return serve(&set, args.listen);
}
