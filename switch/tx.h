/*
 * tx.h - what the server shares with the rooms above it: a connection as
 * they see it, and switch_tx, the small interface through which they send,
 * receive rendezvous payloads and drop connections without knowing UCX
 * endpoints, egress queues or the event loop.
 */
#ifndef INCMOE_SWITCH_TX_H
#define INCMOE_SWITCH_TX_H

#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "base/bootstrap.h"
#include "base/wire.h"

struct job;
struct queued_send;

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

/* Who is at the other end (tree.c): a rank, a child switch, or this switch's parent. */
typedef enum { CONN_RANK = 0, CONN_CHILD, CONN_PARENT } conn_role_t;

typedef struct conn {
    struct conn *next;
    ucp_ep_h ep;
    conn_state_t state;
    conn_role_t role;
    /* Membership's: the job this connection joined, its rank (a switch: the key of its port,
       the lowest rank it covers), whether it said LEAVE (its disconnect is then no failure). */
    struct job *job;
    int rank;
    int left;
    uint64_t parent_job; /* CONN_PARENT: the job the link serves (its first answer binds it) */
    /* The server's: */
    ucp_ep_h rx_ep;                /* the endpoint its messages arrive from, bound by JOIN */
    uint8_t token[INC_BOOT_TOKEN]; /* the bootstrap session's, single use: JOIN carries it */
    int refs;                      /* sends in flight that name this connection */
    int closed;                    /* ep closed */
    double created, last_rx, last_tx;
    /* Output queue toward this rank: at most egress_limit payload bytes are handed to UCX
       at once, so a result is never stuck behind megabytes of multicast copies. */
    struct queued_send *queue_head[EGRESS_CLASSES], *queue_tail[EGRESS_CLASSES];
    size_t egress_inflight;
} conn_t;

/* A send completed (status UCS_OK or an error). */
typedef void (*switch_tx_cb_t)(void *arg, ucs_status_t status);

/* Writes a message's payload (hdr->length bytes) into buf when its output queue takes it. */
typedef void (*switch_tx_build_t)(void *arg, const struct inc_wire_hdr *hdr, void *buf);

/* The link to the parent is up (conn: CONN_JOINED, role CONN_PARENT, its token the bootstrap
   session's) or failed (conn NULL; status and why say what). */
typedef void (*switch_parent_cb_t)(void *arg, conn_t *conn, incmoe_status_t status,
                                   const char *why);

/* A rendezvous receive; the caller embeds it and owns it until done runs. */
typedef struct switch_rx {
    void (*done)(struct switch_rx *rx, ucs_status_t status);
} switch_rx_t;

typedef struct {
    /* Send one message; hdr is copied; payload must stay valid until cb runs. */
    void (*send)(void *server, conn_t *conn, const struct inc_wire_hdr *hdr, const void *payload,
                 size_t length, switch_tx_cb_t cb, void *arg);
    /* The same for bulk data, through the destination's output queue in class cls. */
    void (*send_data)(void *server, conn_t *conn, egress_class_t cls,
                      const struct inc_wire_hdr *hdr, const void *payload, size_t length,
                      switch_tx_cb_t cb, void *arg);
    /* send_data of a payload built only when the queue hands it to UCX: build writes it into
       a buffer the server owns until the send completes, so the copies toward a destination
       are bounded by its queue, not by what waits in it.  Out of memory there completes the
       send with UCS_ERR_NO_MEMORY. */
    void (*send_built)(void *server, conn_t *conn, egress_class_t cls,
                       const struct inc_wire_hdr *hdr, switch_tx_build_t build, switch_tx_cb_t cb,
                       void *arg);
    /* ERROR with a reason; used for refusals and job failures. */
    void (*send_error)(void *server, conn_t *conn, uint64_t job, incmoe_status_t status,
                       uint32_t rank, const char *text);
    /* Mark a connection dead; it is closed from the event loop. */
    void (*drop)(void *server, conn_t *conn);
    /* Start connecting to the parent switch (settings' parent) for job: the bootstrap
       handshake with its key, run as states of the event loop (parent_link.c), then an
       endpoint.  done runs once: from the event loop, or before this returns if it cannot
       start. */
    void (*connect_parent)(void *server, uint64_t job, switch_parent_cb_t done, void *arg);
    /* Receive a rendezvous payload (the data argument of on_message) into buf. */
    void (*recv_data)(void *server, void *desc, void *buf, size_t length, switch_rx_t *rx);
    /* Give back an eager payload kept with UCS_INPROGRESS. */
    void (*release_data)(void *server, void *data);
} switch_tx_ops_t;

typedef struct {
    const switch_tx_ops_t *ops;
    void *server;
} switch_tx_t;

#endif
