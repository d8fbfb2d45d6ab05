/*
 * tree.h - what a tree of switches (base/wire.h, "Switch trees") adds to the
 * collectives: the credits of the sends up, the child's window for the sends
 * down, and the TREE_POST that tells a switch port everything on this side
 * posted (joining is tree_join.h's).  The collectives themselves run on ports
 * (coll_form.h): this file is what only a tree has.
 */
#ifndef INCMOE_SWITCH_TREE_H
#define INCMOE_SWITCH_TREE_H

#include "coll_item.h"
#include "coll_table.h"

/* Send a DATA or SMALL of item ci up under the parent's credits (queued in order while none
   is left); build, if not NULL, writes the payload when it goes. */
void tree_send_up(membership_t *m, job_t *job, coll_item_t *ci, egress_class_t cls,
                  const struct inc_wire_hdr *h, const void *payload, switch_tx_build_t build);
/* Does a FWD of this stream down to a child switch take the child's window (tree.c says
   which do, and why not the others)? */
int tree_windowed(int stream);
/* Send a FWD of item ci of a windowed stream to the child switch port p under the window its
   TREE_JOIN announced (queued in order while none is left); build as above. */
void tree_send_down(membership_t *m, job_t *job, int p, coll_item_t *ci, egress_class_t cls,
                    const struct inc_wire_hdr *h, const void *payload, switch_tx_build_t build);
/* Send a ReduceScatter partial of item ci (hdr.root its owner) to the child switch port p
   under its owner's window, in (epoch, chunk) order (queued until both allow). */
void tree_send_partial_down(membership_t *m, job_t *job, int p, coll_item_t *ci, egress_class_t cls,
                            const struct inc_wire_hdr *h, const void *payload);
/* The parent sent a ReduceScatter partial of owner root: 1 if within this switch's window
   (counted until tree_parent_partial_done), else 0 (the job failed). */
int tree_parent_partial_in(membership_t *m, job_t *job, uint32_t root);
/* Its item went on: the caller sends the parent the CREDIT that names root. */
void tree_parent_partial_done(job_t *job, uint32_t root);
/* The parent returned credits (CREDIT, or the one a SMALL_FWD carries). */
void tree_up_credit(membership_t *m, job_t *job, int stream, uint64_t n);
/* The child switch port p returned credits of its window (a CREDIT; root: the owner, for a
   ReduceScatter's); more than were out, or of a stream without a window, fails the job. */
void tree_down_credit(membership_t *m, job_t *job, int p, int stream, uint32_t root, uint64_t n);
/* Rank r joined through a child switch that announced window (1..INCMOE_WIRE_MAX_WINDOW, its
   TREE_JOIN): the port's, if r is its key.  0: no memory. */
int tree_window_set(job_t *job, int r, uint32_t window);
/* The job failed: what waits for a credit or a window never goes. */
void tree_drop_queues(job_t *job);

/* After a POST: a TREE_POST to every switch port all of whose other side has now posted. */
void tree_relay_posts(membership_t *m, job_t *job, coll_t *c);

#endif
