/*
 * dc_window.h - the combine's window between switches (dc_window.c): the set
 * chunks a switch sends a switch port go under a window per owner and link,
 * in the owner's (epoch, chunk) order, each answered by a CREDIT that names
 * the owner once the far side's item of it is done; the partials that come
 * back answer those set chunks, so the window bounds them too.
 */
#ifndef INCMOE_SWITCH_DC_WINDOW_H
#define INCMOE_SWITCH_DC_WINDOW_H

#include "coll_item.h"

/* Send the set chunk of item ci (h->root its owner, payload valid while ci lives) to the
   switch port p under the window of its owner on that link (queued while it has no room, or
   an earlier combine is not finished here).  h is a FWD down or a DATA up. */
void dc_window_send(membership_t *m, job_t *job, int p, coll_item_t *ci,
                    const struct inc_wire_hdr *h, const void *payload);
/* The switch port p sent a set chunk of owner: 1 if within the window of the link (counted
   until dc_window_done), else 0 (the job failed: the peer broke the protocol). */
int dc_window_in(membership_t *m, job_t *job, int p, uint32_t owner);
/* This switch's item of such a set chunk is done: the CREDIT that names its owner goes back
   to p. */
void dc_window_done(membership_t *m, job_t *job, int p, uint32_t owner, uint64_t epoch);
/* The switch port p returned n combine credits of owner (a CREDIT); more than were out fails
   the job. */
void dc_window_credit(membership_t *m, job_t *job, int p, uint32_t owner, uint64_t n);
/* A combine collective may have finished here: the set chunks that waited for it go. */
void dc_window_pump(job_t *job);
/* The job failed: what waits for a window never goes. */
void dc_window_drop(job_t *job);

#endif
