/*
 * membership.h - the switch's jobs: who joined, the
 * job table, memory admission against --max-memory and per-job accounting,
 * liveness (heartbeats, timeouts), failure and retirement.  The collectives
 * of a job are the collective table's (coll_table.c); membership only asks
 * the engine to drop them when the job retires.
 */
#ifndef INCMOE_SWITCH_MEMBERSHIP_H
#define INCMOE_SWITCH_MEMBERSHIP_H

#include "settings.h"
#include "trips.h"
#include "tx.h"

#include "base/shrink_wire.h"

struct coll;

typedef enum { JOB_FORMING = 0, JOB_ACTIVE, JOB_FAILED } job_state_t;

/* One direction of a link between switches (tree.c): per stream, the messages that may go
   before the far side returns credits, and those that wait for them, in order. */
typedef struct link_window {
    uint32_t left[INC_STREAM_COUNT];
    uint32_t granted; /* per stream */
    struct link_send *head[INC_STREAM_COUNT], *tail[INC_STREAM_COUNT];
    struct link_send *partials; /* ReduceScatter partials down, waiting for their owner's window
                                   or turn (tree.c), in no order */
} link_window_t;

/* A rank as the owner of ReduceScatter blocks over a tree (tree.c): its partials go down each
   link under a window of their own, in (epoch, chunk) order. */
typedef struct tree_owner {
    uint32_t left;        /* the window left toward the child switch port covering it */
    uint32_t from_parent; /* below a parent: its partials the parent sent, not yet credited */
    uint64_t next_epoch;  /* the next of its partials to go down: (next_epoch, next_chunk) */
    uint32_t next_chunk;
} tree_owner_t;

/* The combine's window of one link between switches, by the far side's port key
   (dc_window.c): per owner, the set chunks sent there and not yet credited, those that came
   from there and whose items are not yet done, and the set chunks waiting to go. */
typedef struct combine_link {
    uint32_t *out;                /* [nranks] by owner; one block with held */
    uint32_t *held;               /* [nranks] by owner */
    struct combine_send *waiting; /* in (epoch, chunk) order */
} combine_link_t;

typedef struct job {
    struct job *next;
    struct membership *members; /* the table it belongs to, for completions that release it */
    uint64_t id;
    int nranks;
    int njoined, nleft;
    job_state_t state;
    conn_t **conns; /* [nranks] */
    void **addr;    /* [nranks] UCX worker addresses for the ring, relayed in JOIN_ACK */
    uint32_t *addr_len;
    void *ack_payload; /* JOIN_ACK, shared by the N sends */
    int timeout_ms;
    /* The largest any rank asked while the job forms (0: none), then the job's: that, else the
       switch's --progress-timeout-ms (0: none). */
    int progress_timeout_ms;
    uint8_t ring_token[INCMOE_WIRE_TOKEN]; /* ring neighbours prove they belong to the job */
    size_t mem_bound, mem_used, mem_peak;
    int dc_admitted; /* its bound includes dispatch and combine (job_admit_dc) */
    int refs;        /* JOIN_ACK sends in flight, and every hold on a collective's item but the
                        collective's own (coll_item.c) */
    /* The collective table's (coll_table.c). */
    uint32_t (*inflight)[INC_STREAM_COUNT]; /* [nranks][stream] DATA held */
    struct coll *colls[INC_STREAM_COUNT];
    uint64_t retired[INC_STREAM_COUNT];     /* every epoch <= this is finished */
    double all_posted_at[INC_STREAM_COUNT]; /* when a collective last got its N-th POST */
    double moved_at[INC_STREAM_COUNT]; /* when a message of the stream last came or one was done */
    /* Ports (tree.c): conns[r] is the connection of the port covering rank r (a rank, a child
       switch, or the parent); rep[r] the port's key, the lowest rank it covers (r itself on
       one switch).  Set when the job forms. */
    int *rep;
    int tree;                /* some data goes through a switch port: the tree rules apply */
    conn_t *parent;          /* this switch's link to its parent for the job; NULL at the root */
    uint64_t parent_pending; /* the link is being made (tree_join.c): its serial, else 0 */
    int parent_rep;   /* the parent port's key; -1 when it covers no rank (or there is none) */
    int up_rank;      /* the key of this switch's port at its parent: its lowest rank */
    int nlocal;       /* ranks beneath this switch (all N at the root) */
    link_window_t up; /* DATA and SMALL up: the credits of the parent's JOIN_ACK */
    /* [nranks], by a child switch port's key: the window its TREE_JOIN announced for the FWDs
       down (tree.c); NULL without child switches. */
    link_window_t *down;
    tree_owner_t *owners;      /* [nranks] by owner (tree.c); NULL until a tree needs it */
    combine_link_t *clinks;    /* [nranks] by switch port key (dc_window.c); NULL until a
                                  combine's set chunk crosses a link */
    trips_t trips;             /* its ranks' messages (trips.c), logged when it is released */
    struct job_shrink *shrink; /* shrink.c's, from the first SHRINK; NULL before */
} job_t;

typedef struct membership {
    const switch_settings_t *set;
    switch_stats_t *stats;
    switch_tx_t tx;
    job_t *jobs;         /* live jobs, by id */
    job_t *orphans;      /* failed or finished jobs waiting for their sends */
    size_t mem_reserved; /* sum of the admitted jobs' bounds */
    size_t mem_used;
    uint64_t link_serial; /* the last link to a parent asked for (tree_join.c) */
    /* shrink.c's: the last INC_SHRUNK_IDS jobs shrunk (a ring), the serial new ids mix in. */
    uint64_t shrunk[INC_SHRUNK_IDS];
    unsigned shrunk_next;
    uint64_t shrink_serial;
    /* The engine's: free a retiring job's collectives. */
    void (*drop_collectives)(void *engine, job_t *job);
    void *engine;
} membership_t;

void membership_init(membership_t *m, const switch_settings_t *set, switch_stats_t *stats,
                     switch_tx_t tx, void (*drop_collectives)(void *engine, job_t *job),
                     void *engine);

/* The job a JOIN (or TREE_JOIN) of hdr->rank names, admitted against --max-memory if it is new,
   or NULL (the connection is refused). */
job_t *member_admit(membership_t *m, conn_t *conn, const struct inc_wire_hdr *hdr, uint32_t nranks);
/* The live job with this id, or NULL. */
job_t *job_find(membership_t *m, uint64_t id);
/* Refuse a connection that asked to join: an ERROR with the reason, counted and logged. */
void member_refuse(membership_t *m, conn_t *conn, uint64_t job, incmoe_status_t st,
                   const char *text);
/* May this member's message go on to the engine?  UCS_OK, or UCX's answer for it (the job
   has failed, or the message breaks the protocol and fails it now). */
ucs_status_t member_screen(membership_t *m, conn_t *conn, const struct inc_wire_hdr *h, int rndv);
/* An orderly LEAVE (the engine has checked nobody waits on the rank). */
void member_leave(membership_t *m, conn_t *conn);
/* An ERROR from a member: its job fails with the member's reason. */
void member_on_error(membership_t *m, conn_t *conn, const struct inc_wire_hdr *h, const void *text,
                     size_t length);
/* The member's connection is gone. */
void member_conn_lost(membership_t *m, conn_t *conn, const char *why);
/* Liveness: JOIN and silence timeouts, heartbeats toward quiet connections. */
void member_tick(membership_t *m, conn_t *conns);
/* Fail every job (shutdown). */
void member_fail_all(membership_t *m, const char *why);

/* End a job: every member hears why, its collectives go, its id can be reused. */
void job_fail(membership_t *m, job_t *job, incmoe_status_t status, int rank, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A message that breaks the protocol: counted, and the job ends. */
#define JOB_BAD(m, job, status, rank, ...)                                                         \
    do {                                                                                           \
        (m)->stats->bad_messages++;                                                                \
        job_fail((m), (job), (status), (rank), __VA_ARGS__);                                       \
    } while (0)
/* Every rank is in (at the root) or the parent's JOIN_ACK came (below it): the ports are set
   and every port but the parent gets JOIN_ACK with credits of this switch. */
void job_form(membership_t *m, job_t *job);
/* Is conn the first port connection of the job seen at or before rank r's (one message per
   port when walking the ranks)? */
int job_port_first(const job_t *job, int r);
/* Free a job once no connection, send, receive or reduction refers to it. */
void job_release(membership_t *m, job_t *job);

/* The job's first dispatch or combine: its bound grows by what they may hold, admitted
   against --max-memory now; 0: refused, the job failed (rank: whose message asked). */
int job_admit_dc(membership_t *m, job_t *job, int rank);

/* Memory the job buffers, counted against its bound and the switch's. */
void job_account(membership_t *m, job_t *job, size_t n);
void job_unaccount(membership_t *m, job_t *job, size_t n);
/* malloc within the job's bound (NULL beyond it), and its free. */
void *job_alloc(membership_t *m, job_t *job, size_t n);
void job_free_mem(membership_t *m, job_t *job, void *p, size_t n);

#endif
