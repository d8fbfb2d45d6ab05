/*
 * server.h - incmoe-switchd's service plumbing: the UCX listener, the
 * connections, message sending, the event loop and the reduction threads.
 * The job and collective logic is in job.c.
 */
#ifndef INCMOE_SWITCH_SERVER_H
#define INCMOE_SWITCH_SERVER_H

#include <pthread.h>
#include <stdint.h>

#include "base/ucx_util.h"
#include "base/wire.h"

struct job;
struct item;

typedef enum {
    CONN_NEW = 0, /* connected, no JOIN yet */
    CONN_JOINED,  /* member of a job */
    CONN_DEAD,    /* transport failed or refused; waiting to be closed */
} conn_state_t;

/* Egress classes: results that give credits back go before multicast forwards. */
typedef enum {
    EGRESS_CONTROL = 0, /* small, never queued */
    EGRESS_RESULT,      /* ReduceScatter / AllReduce results */
    EGRESS_FORWARD,     /* AllGather multicast copies */
    EGRESS_CLASSES
} egress_class_t;

struct queued_send;

typedef struct conn {
    struct conn *next;
    ucp_ep_h ep;
    conn_state_t state;
    struct job *job;
    int rank;
    int left;   /* said LEAVE: its disconnect is no failure */
    int refs;   /* sends in flight that name this connection */
    int closed; /* ep closed */
    double created, last_rx, last_tx;
    /* Output queue toward this rank: at most egress_limit payload bytes are handed to UCX
       at once, so a result is never stuck behind megabytes of multicast copies. */
    struct queued_send *queue_head[EGRESS_CLASSES], *queue_tail[EGRESS_CLASSES];
    size_t egress_inflight;
} conn_t;

/* Counters printed at exit and with --stats. */
typedef struct {
    uint64_t jobs_started, jobs_failed, jobs_refused;
    uint64_t bad_messages; /* malformed, out of range, mismatched, unauthenticated */
    uint64_t peers_lost;
    uint64_t bytes_in, bytes_out;
    size_t mem_peak;
} server_stats_t;

typedef struct server {
    inc_ucx_node_t node;
    ucp_listener_h listener;
    conn_t *conns;
    struct job *jobs;    /* live jobs, by id */
    struct job *orphans; /* failed or finished jobs waiting for their sends */

    /* settings */
    uint64_t chunk_size;
    uint32_t credits;
    size_t max_memory;
    int timeout_ms;
    char secret[INCMOE_MAX_SECRET];
    size_t secret_len;
    int have_secret;
    size_t rndv_thresh;
    size_t egress_limit; /* payload bytes in flight per destination */

    size_t mem_reserved; /* sum of the admitted jobs' bounds */
    size_t mem_used;
    server_stats_t stats;
    volatile int stop;

    /* reduction threads (--threads > 1) */
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t pool_lock;
    pthread_cond_t pool_cond;
    struct item *pool_todo, *pool_done;
    int pool_stop;
    int pool_fd; /* eventfd: reductions finished */
} server_t;

/* Called when a send completes (status UCS_OK or an error). */
typedef void (*server_send_cb_t)(server_t *srv, void *arg, ucs_status_t status);

/* Send one message; hdr is copied; payload must stay valid until cb runs. */
void server_send(server_t *srv, conn_t *conn, const struct inc_wire_hdr *hdr, const void *payload,
                 size_t length, server_send_cb_t cb, void *arg);
/* The same for bulk data, through the destination's output queue in class cls. */
void server_send_data(server_t *srv, conn_t *conn, egress_class_t cls,
                      const struct inc_wire_hdr *hdr, const void *payload, size_t length,
                      server_send_cb_t cb, void *arg);
/* ERROR with a reason; used for refusals and job failures. */
void server_send_error(server_t *srv, conn_t *conn, uint64_t job, incmoe_status_t status,
                       uint32_t rank, const char *text);
/* Mark a connection dead; it is closed from the event loop. */
void server_drop_conn(server_t *srv, conn_t *conn);

/* Reduction threads: hand an item over; job.c's job_item_reduced() runs when it is done. */
int server_pool_submit(server_t *srv, struct item *it);

incmoe_status_t server_start(server_t *srv, const char *listen_addr);
void server_run(server_t *srv);
void server_stop(server_t *srv);

#endif
