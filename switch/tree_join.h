/*
 * tree_join.h - joining a job (tree_join.c): a rank's JOIN, a child switch's
 * TREE_JOIN, and a child's own join to its parent with the JOIN_ACK that
 * answers it.  Above membership.c, whose admission and forming it uses.
 */
#ifndef INCMOE_SWITCH_TREE_JOIN_H
#define INCMOE_SWITCH_TREE_JOIN_H

#include "membership.h"

/* A JOIN from a new connection (its bootstrap session checked by the server): admitted, and the
   job formed once all N are in (at a child: registered with the parent); anything wrong
   refuses the connection.  A TREE_JOIN as the first message goes to member_tree_join. */
void member_join(membership_t *m, conn_t *conn, const struct inc_wire_hdr *hdr, const char *payload,
                 size_t length);
/* A TREE_JOIN from a child switch: on a new connection (after member_join's bootstrap check) or
   adding ranks on the child's connection while the job forms. */
void member_tree_join(membership_t *m, conn_t *conn, const struct inc_wire_hdr *hdr,
                      const char *payload, size_t length);
/* The parent's JOIN_ACK: the job's agreed settings and everyone's address; the job forms. */
void tree_on_parent_ack(membership_t *m, job_t *job, const struct inc_wire_hdr *h,
                        const char *payload, size_t length);

#endif
