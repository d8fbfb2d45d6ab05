/*
 * job.h - the switch engine: jobs of N ranks and their in-network
 * collectives (multicast AllGather, rooted-reduction ReduceScatter,
 * AllReduce, barrier), with credit-based flow control.  See wire.h for the
 * protocol.
 */
#ifndef INCMOE_SWITCH_JOB_H
#define INCMOE_SWITCH_JOB_H

#include "server.h"
#include "base/wire.h"

/* One chunk of one window of one collective, and what the switch holds of it. */
typedef struct item {
    struct item *next;
    struct coll *coll;
    struct job *job;
    uint32_t root, chunk;
    uint64_t offset, length, total;
    void **contrib;     /* [nranks]: received payloads, NULL while missing */
    uint8_t *arrived;   /* [nranks]: payload complete (rendezvous may still be running) */
    uint8_t *ucx_owned; /* [nranks]: contrib is UCX's eager buffer (ucp_am_data_release) */
    int narrived, nexpected, nreceiving;
    void *out;    /* reduction result (ReduceScatter, AllReduce) */
    int reducing; /* in a reduction thread */
    int sends_pending;
    int forwarded; /* the result went out */
    struct item *pool_next;
} item_t;

typedef struct coll {
    struct coll *next;
    int stream;
    uint64_t epoch;
    uint64_t sig;
    int dtype, redop;
    int has_desc;    /* sig/dtype/redop set by the first POST or DATA */
    uint8_t *posted; /* [nranks] */
    uint64_t *bytes; /* [nranks] announced by each rank's POST */
    int nposted;
    int armed;          /* everyone posted: results may flow */
    uint64_t remaining; /* bytes still to forward once armed */
    int done;
    int holds; /* code still walking it: forwards may complete inline */
    item_t *items;
} coll_t;

typedef enum { JOB_FORMING = 0, JOB_ACTIVE, JOB_FAILED } job_state_t;

typedef struct job {
    struct job *next;
    uint64_t id;
    int nranks;
    int njoined, nleft;
    job_state_t state;
    conn_t **conns; /* [nranks] */
    void **addr;    /* [nranks] ring listener addresses, relayed in JOIN_ACK */
    uint32_t *addr_len;
    void *ack_payload; /* JOIN_ACK, shared by the N sends */
    int timeout_ms;
    uint32_t (*inflight)[INC_STREAM_COUNT]; /* [nranks][stream] DATA held */
    coll_t *colls[INC_STREAM_COUNT];
    uint64_t retired[INC_STREAM_COUNT]; /* every epoch <= this is finished */
    size_t mem_bound, mem_used, mem_peak;
    int refs; /* sends, receives and reductions in flight */
} job_t;

/* A JOIN from a new connection. */
void job_on_join(server_t *srv, conn_t *conn, const struct inc_wire_hdr *hdr, const char *payload,
                 size_t length);
/* Any other message from a member. */
ucs_status_t job_on_message(server_t *srv, conn_t *conn, const struct inc_wire_hdr *hdr, void *data,
                            size_t length, const ucp_am_recv_param_t *param);
/* The connection is gone (transport error or silence). */
void job_on_conn_lost(server_t *srv, conn_t *conn, const char *why);
/* A reduction thread finished it. */
void job_item_reduced(server_t *srv, item_t *it);
/* Compute a reduction (called in a reduction thread or inline). */
void job_item_compute(item_t *it);
/* Liveness checks and freeing of finished jobs, from the event loop. */
void job_tick(server_t *srv);
/* Fail every job (shutdown). */
void job_fail_all(server_t *srv, const char *why);

#endif
