/*
 * wait.h - the layer's bounded wait for one collective, used by every file that
 * posts outside the FIFO (the header exchange, calibration, the path's probes
 * and agreements).
 */
#ifndef INCMOE_MOE_WAIT_H
#define INCMOE_MOE_WAIT_H

#include "incmoe/incmoe.h"

/* Waits for req on comm at most timeout_ms: its status, or INCMOE_ERR_TIMEOUT. */
incmoe_status_t moe_wait_bounded(incmoe_comm_t *comm, int timeout_ms, const incmoe_req_t *req);

#endif
