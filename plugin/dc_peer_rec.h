/*
 * dc_peer_rec.h - what the files of dispatch and combine between the ranks
 * share (dc_peer.h is what the algorithms call): a collective's record, a
 * receive landing, the peer state, and the records' own functions
 * (dc_peer_rec.c).  The files call only downward:
 *
 *   dc_peer.c           the entries: messages in, start, progress, close
 *   dc_peer_plan.c      PEER_PLAN out and in, the verdict
 *   dc_peer_rows.c      a dispatch's rows out and in
 *   dc_peer_partials.c  a combine's partials out and in, the owner's reduction
 *   dc_peer_land.c      a payload landing in place (eager or rendezvous)
 *   dc_peer_rec.c       records: find, finish, free; a piece out; failing
 */
#ifndef INCMOE_DC_PEER_REC_H
#define INCMOE_DC_PEER_REC_H

#include "client.h"
#include "dc_peer.h"
#include "mesh.h"

#include "base/wire.h"

/* Owner side of one combine chunk. */
typedef struct {
    char *stage;     /* its contributors' pieces, ascending rank, or NULL before the first */
    uint32_t landed; /* pieces in the stage */
} client_dcp_chunk_t;

/* This rank's part of one dispatch or combine, from its start until every row it sends went
   out and every row it expects came (it holds op for that long). */
typedef struct client_dcp_rec {
    struct client_dcp_rec *next;
    coll_op_t *op;
    int nplans;                 /* peers' plans in */
    char **plan;                /* [nranks] each peer's PEER_PLAN payload (own: NULL) */
    int decided, ok;            /* the verdict was applied; it let rows move */
    uint64_t *cursor;           /* [nranks] dispatch: next own row to look at for the peer; combine:
                                   next position in the peer's block */
    uint64_t *sent;             /* [nranks] rows sent to the peer */
    uint64_t *next_in;          /* [nranks] rows expected next from the peer (their offset) */
    size_t rpc;                 /* rows per chunk */
    size_t nchunks;             /* combine, owner side: chunks of this rank's rows */
    uint32_t *cnt;              /* [nchunks * nranks] rows of chunk c whose set holds d */
    client_dcp_chunk_t *chunks; /* [nchunks] */
    int ll;                     /* the low-latency form (ll_peer.c): sent[r] is 1 once its
                                   PEER_LL to r went, cursor[r] the credits r's took (returned
                                   once decided), decided once every other rank's came */
} client_dcp_rec_t;

typedef struct client_dcp_recv client_dcp_recv_t;

/* What a rendezvous receive does once its payload landed: the handler that posted it
   (plan, rows, partials) hands its own, so the landing calls back up by pointer. */
typedef void (*client_dcp_landed_t)(incmoe_comm_t *comm, client_dc_peer_t *dcp,
                                    client_dcp_recv_t *rr, size_t length);

/* A rendezvous payload on its way into place. */
struct client_dcp_recv {
    struct client_dcp_recv *next, *prev; /* dcp->landing */
    incmoe_comm_t *comm;
    struct client_dc_peer *dcp; /* NULL once closed: the callback only frees */
    client_dcp_rec_t *rec;
    int from;
    uint64_t rows;              /* dispatch: rows landing */
    size_t chunk;               /* combine: the owner chunk */
    client_dcp_landed_t landed; /* called once it landed, unless it failed or was closed */
    char *buf;                  /* a buffer of its own it lands in (owned; landed may take it) */
    struct inc_wire_hdr hdr;
};

struct client_dc_peer {
    client_dcp_rec_t *recs;     /* started, unfinished, in start order */
    client_kept_t *early;       /* for a collective not started or not decided, in arrival order */
    client_dcp_recv_t *landing; /* rendezvous receives in flight */
    uint32_t *credits;          /* [nranks] combine credits this rank may still use toward each
                                   owner (bulk pieces and low-latency messages alike) */
    uint32_t *dispatch_credits; /* [nranks] the same for the low-latency dispatch's messages */
    uint32_t window;            /* the credits' bound, and a dispatch's messages in flight */
    /* The messages kept for (stream, epoch) handled once more, now that its verdict let them
       in: dc_peer.c's, handed down at open so the verdict (dc_peer_plan.c) reaches it. */
    void (*replay)(incmoe_comm_t *comm, client_dc_peer_t *dcp, unsigned stream, uint64_t epoch);
};

static inline int client_dcp_is_dispatch(const coll_op_t *op)
{
    return op->stream == INCMOE_STREAM_DISPATCH;
}

/* The grant is known once the job formed: JOIN_ACK's credits, taken when first needed. */
void client_dcp_init_credits(incmoe_comm_t *comm, client_dc_peer_t *dcp);
void client_dcp_rec_free(client_dcp_rec_t *rec, int nranks);
/* The credits toward each rank of the stream (dispatch or combine). */
uint32_t *client_dcp_credits(client_dc_peer_t *dcp, unsigned stream);
/* PEER_CREDIT: n credits of op's stream back to peer (this rank took what they carried). */
void client_dcp_credit_back(incmoe_comm_t *comm, coll_op_t *op, int peer, uint32_t n);
/* The started record of (stream, epoch), or NULL. */
client_dcp_rec_t *client_dcp_rec_find(client_dc_peer_t *dcp, unsigned stream, uint64_t epoch);
/* Once every row it sends went out and every row it expects came (or its verdict failed):
   the record goes and its collective progresses (which may free it). */
void client_dcp_rec_check_done(incmoe_comm_t *comm, client_dc_peer_t *dcp, client_dcp_rec_t *rec);
/* A failure mid-collective: the other ranks wait for this one's rows, so the job fails for
   them too, with the reason. */
void client_dcp_fail(incmoe_comm_t *comm, incmoe_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A peer broke the protocol.  Returns what the message's handler answers UCX. */
ucs_status_t client_dcp_refuse(incmoe_comm_t *comm, const struct inc_wire_hdr *h, int from,
                               const char *what);
/* One PEER_ROWS or PEER_PARTIALS of op to peer: fields' root, offset, length, total and chunk;
   owned (or NULL) is freed once it went. */
void client_dcp_send_piece(incmoe_comm_t *comm, coll_op_t *op, inc_wire_msg_t msg, int peer,
                           const struct inc_wire_hdr *fields, const void *payload, ucp_mem_h memh,
                           void *owned);

#endif
