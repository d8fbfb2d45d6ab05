/*
 * coll_form.h - the forms table: the shapes a collective can take on the
 * wire (base/wire.h) and what the router (engine.c) reaches each through.
 *
 * A collective's first message sets its form, and every rank must send it in
 * that form (coll_set_form).  Today's forms, one file each:
 *  - chunked (chunked.c): POST, then DATA chunk by chunk, FWD back;
 *  - small (small.c): one SMALL in per rank, one SMALL_FWD out;
 *  - dispatch and combine (dc_form.c): POST or SMALL, a PLAN, then chunks
 *    whose destinations travel with the rows;
 *  - their low-latency form (ll_form.c): one LL in per rank, LL_FWDs out.
 * A new form is a new file exporting a coll_form_t and one line in the
 * router's choice (engine.c, form_of).  A message a form does not take is a
 * NULL entry: the router fails the job with a reason naming the message.
 */
#ifndef INCMOE_SWITCH_COLL_FORM_H
#define INCMOE_SWITCH_COLL_FORM_H

#include "membership.h"
#include "reduce_pool.h"

struct coll;

/* What a form's handlers may use besides the job: the job table, and the reduction workers
   (--threads). */
typedef struct coll_env {
    membership_t *m;
    reduce_pool_t *pool;
} coll_env_t;

/* One message of a collective from conn (a rank, a child switch, or the parent), its header
   checked and screened (member_screen).  Returns what UCX hears: UCS_OK, UCS_INPROGRESS (an
   eager payload kept) or an error (a rendezvous payload refused; the job failed). */
typedef ucs_status_t (*coll_msg_fn)(const coll_env_t *env, job_t *job, conn_t *conn,
                                    const struct inc_wire_hdr *h, void *data, size_t length,
                                    const ucp_am_recv_param_t *param);

typedef struct coll_form {
    const char *what;        /* how a rank sends it, for the reason when ranks disagree */
    coll_msg_fn post;        /* a rank's POST */
    coll_msg_fn data;        /* a rank's or a child switch's DATA */
    coll_msg_fn small;       /* a rank's SMALL */
    coll_msg_fn ll;          /* a rank's LL */
    coll_msg_fn tree_post;   /* a switch port's TREE_POST: every rank it covers posted */
    coll_msg_fn parent_post; /* the parent's POST: a rank's beyond this switch, relayed */
    /* The parent's answer for the ports beyond this switch: result_msg (FWD or SMALL_FWD),
       which parent_result takes. */
    int result_msg;
    coll_msg_fn parent_result;
    /* The collective is going (retired, or its job ended): let go of the form's state, which
       lives on while a send, receive or reduction holds it (coll_item.c). */
    void (*detach)(struct coll *c);
    /* The collective stopped moving (coll_table.c's progress timeout): what it waits for, in
       a few words, into why (empty if nothing to say).  NULL: the form says nothing. */
    void (*stalled)(const struct coll *c, char *why, size_t len);
} coll_form_t;

#endif
