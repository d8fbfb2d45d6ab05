/*
 * coll_item.h - what a collective holds in the switch, and when it is freed:
 * a chunk of a chunked collective (chunked.c), the state of a small one
 * (small.c), a dispatch or combine chunk or SMALL (dc_item.c, dc_form.c) embeds a coll_item_t, and
 * both live by the rule of coll_item.c.
 */
#ifndef INCMOE_SWITCH_COLL_ITEM_H
#define INCMOE_SWITCH_COLL_ITEM_H

#include "membership.h"

struct coll;
struct coll_item;

/* What differs between the kinds of item. */
typedef struct {
    /* A rendezvous receive into the item completed while its job is active and it is still in
       its collective: rank from's contribution is in. */
    void (*arrived)(struct coll_item *item, int from);
    /* Every send of coll_item_send completed while its job is active and it is still in its
       collective. */
    void (*sent)(struct coll_item *item);
    /* Its last hold is gone: free its buffers and the item. */
    void (*release)(struct coll_item *item);
} coll_item_ops_t;

typedef struct coll_item {
    const coll_item_ops_t *ops;
    job_t *job;
    struct coll *coll; /* the collective it belongs to; NULL once it has left */
    int refs;          /* holds: its collective's, and one per operation not yet called back */
    int sending;       /* sends still out: the item sets how many before the first goes */
} coll_item_t;

/* Born with one hold, its collective's. */
void coll_item_init(coll_item_t *item, const coll_item_ops_t *ops, job_t *job, struct coll *c);
/* A hold for an operation that calls back later, or for code that must read the item after
   something that may end inline; it holds the job too. */
void coll_item_hold(coll_item_t *item);
/* Give that hold back: the last frees the item, and the job if nothing else keeps it. */
void coll_item_put(coll_item_t *item);
/* The item leaves its collective (taken out of the collective's list by the caller): coll
   becomes NULL and the collective's hold is put. */
void coll_item_leave(coll_item_t *item);
/* Does anyone but the one caller hold the item? */
int coll_item_shared(const coll_item_t *item);

/* Receive a rendezvous payload (desc: the data argument of on_message) into buf, holding the
   item until ops->arrived has run; UCS_INPROGRESS, or UCS_ERR_NO_MEMORY (the job failed). */
ucs_status_t coll_item_receive(coll_item_t *item, int from, void *desc, void *buf, size_t length);
/* Send one result message (hdr->length bytes of payload, which stays valid while the item
   lives) through conn's output queue in class cls, holding the item until it completes. */
void coll_item_send(coll_item_t *item, conn_t *conn, egress_class_t cls,
                    const struct inc_wire_hdr *hdr, const void *payload);
/* The same with a payload that build(item, hdr, buf) writes from the item when the queue
   takes the send (tx.h, send_built). */
void coll_item_send_built(coll_item_t *item, conn_t *conn, egress_class_t cls,
                          const struct inc_wire_hdr *hdr, switch_tx_build_t build);

/* Which ports get a copy of the item (p: a port's key), and the send of one. */
typedef int (*coll_item_receives_fn)(const coll_item_t *item, int p, const void *arg);
typedef void (*coll_item_copy_fn)(coll_item_t *item, int p, void *arg);
/* Send the item's copies: send(item, p, arg) to each port p that receives(item, p, arg), in
   key order.  They are counted before the first goes, so only the last completion calls
   ops->sent; with none, ops->sent runs at once.  A send may complete inline and the last may
   retire the collective: receives must read only the item and arg. */
void coll_item_send_copies(coll_item_t *item, coll_item_receives_fn receives,
                           coll_item_copy_fn send, void *arg);

#endif
