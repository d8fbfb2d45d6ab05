/*
 * shrink.h - a job's survivors go on without the ranks it lost (base/wire.h, SHRINK and
 * SHRINK_ACK): the switch collects one SHRINK per live member, then tells each its number in
 * a new job; a member lost after it asked (before the answer), or the job's timeout passing,
 * fails the shrink for good (one lost without asking is left out).
 * The switch remembers the last INC_SHRUNK_IDS shrunk job ids and refuses JOINs to them, so a
 * lost rank that comes back cannot rejoin the old job.
 */
#ifndef INCMOE_SWITCH_SHRINK_H
#define INCMOE_SWITCH_SHRINK_H

#include "membership.h"

/* A SHRINK from conn (a member of conn->job, failed or not): answered now or once every live
   member asked. */
void shrink_on_request(membership_t *m, conn_t *conn, const struct inc_wire_hdr *h);
/* Rank `rank` of job is lost (its connection is gone): under way, a shrink it asked for fails,
   one it did not ask for may now be answered. */
void shrink_on_lost(membership_t *m, job_t *job, int rank);
/* A shrink whose job's timeout passed before every live member asked fails. */
void shrink_tick(membership_t *m);
/* Was job id shrunk (one of the last INC_SHRUNK_IDS)?  Its reason for refusing a JOIN, in
   text, when so. */
int shrink_refuses_join(const membership_t *m, uint64_t id, char *text, size_t text_len);
/* The job's shrink state goes with it. */
void shrink_free(job_t *job);

#endif
