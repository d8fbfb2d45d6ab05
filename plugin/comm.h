/*
 * comm.h - comm.c's entry points under the public API (the lifecycle and the
 * proxy loop): the message handler and the drain of submissions, which
 * fuzz/fuzz_client_msg.c drives without a proxy thread.
 */
#ifndef INCMOE_COMM_H
#define INCMOE_COMM_H

#include "client.h"

/* The worker's active-message handler: every message to this communicator arrives here. */
ucs_status_t client_am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param);
/* Proxy thread: start every collective the posting calls queued since the last turn. */
void client_drain_submissions(incmoe_comm_t *comm);

#endif
