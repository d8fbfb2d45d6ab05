/*
 * dc_peer_land.c - a payload of another rank landing in place: copied at once
 * when it came eager, received straight there when rendezvous.  A rendezvous
 * receive tells the handler that posted it through the landed function it was
 * handed (the records may be gone by then: closing orphans it).
 */
#include "dc_peer_land.h"

#include <stdlib.h>
#include <string.h>

#include "dc_peer_rec.h"

static void landing_unlink(client_dcp_recv_t *rr)
{
    if (rr->prev != NULL)
        rr->prev->next = rr->next;
    else if (rr->dcp != NULL)
        rr->dcp->landing = rr->next;
    if (rr->next != NULL)
        rr->next->prev = rr->prev;
}

static void recv_landed_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    client_dcp_recv_t *rr = user_data;
    incmoe_comm_t *comm = rr->comm;
    client_dc_peer_t *dcp = rr->dcp;
    if (request != NULL)
        ucp_request_free(request);
    if (dcp == NULL || comm->freeing) { /* closed: its records are gone */
        free(rr->buf);
        free(rr);
        return;
    }
    landing_unlink(rr);
    if (status != UCS_OK) {
        client_dcp_fail(comm, inc_ucx_status(status), "%s from rank %d: the receive failed: %s",
                        inc_wire_msg_name(rr->hdr.msg), rr->from, ucs_status_string(status));
    } else {
        rr->landed(comm, dcp, rr, length);
    }
    free(rr->buf);
    free(rr);
}

int client_dcp_land(incmoe_comm_t *comm, void *data, size_t length, int rndv, char *dst,
                    ucp_mem_h memh, client_dcp_recv_t *rr)
{
    if (!rndv) {
        memcpy(dst, data, length);
        free(rr);
        return 1;
    }
    client_dc_peer_t *dcp = rr->dcp;
    rr->next = dcp->landing;
    if (dcp->landing != NULL)
        dcp->landing->prev = rr;
    dcp->landing = rr;
    inc_ucx_am_recv_data(comm->node.worker, data, dst, length, memh, recv_landed_cb, rr);
    return 0;
}

client_dcp_recv_t *client_dcp_recv_ctx(incmoe_comm_t *comm, client_dc_peer_t *dcp,
                                       client_dcp_rec_t *rec, int from,
                                       const struct inc_wire_hdr *h, client_dcp_landed_t landed)
{
    client_dcp_recv_t *rr = calloc(1, sizeof(*rr));
    if (rr == NULL) {
        client_dcp_fail(comm, INCMOE_ERR_NO_MEMORY, "no memory for a receive");
        return NULL;
    }
    rr->comm = comm;
    rr->dcp = dcp;
    rr->rec = rec;
    rr->from = from;
    rr->hdr = *h;
    rr->landed = landed;
    return rr;
}
