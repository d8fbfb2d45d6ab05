/* trips.c - each job's messages counted, and the counting tx (see trips.h). */
#include "trips.h"

#include <stdio.h>

#include "membership.h"

static int is_trip(unsigned msg)
{
    switch ((inc_wire_msg_t)msg) {
    case WIRE_MSG_POST:
    case WIRE_MSG_DATA:
    case WIRE_MSG_FWD:
    case WIRE_MSG_CREDIT:
    case WIRE_MSG_DONE:
    case WIRE_MSG_SMALL:
    case WIRE_MSG_SMALL_FWD:
    case WIRE_MSG_PLAN:
    case WIRE_MSG_LL:
    case WIRE_MSG_LL_FWD:
        return 1;
    default:
        return 0;
    }
}

void trips_count(trips_t *t, int direction, const struct inc_wire_hdr *h)
{
    if (h->stream < INC_STREAM_COUNT && is_trip(h->msg))
        t->n[direction][h->stream][h->msg]++;
}

int trips_format(const trips_t *t, int stream, char *buf, size_t len)
{
    size_t at = 0;
    int any = 0;
    buf[0] = '\0';
    for (int dir = TRIPS_IN; dir <= TRIPS_OUT; dir++) {
        at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s",
                               dir == TRIPS_IN ? "in" : " out");
        for (unsigned msg = WIRE_MSG_JOIN; msg <= WIRE_MSG_LAST; msg++) {
            uint64_t n = t->n[dir][stream][msg];
            if (n == 0)
                continue;
            any = 1;
            at += (size_t)snprintf(buf + at, at < len ? len - at : 0, " %s=%llu",
                                   inc_wire_msg_name(msg), (unsigned long long)n);
        }
    }
    return any;
}

/* ------------------------------------------------------------------------ */
/* the counting tx                                                           */

static void count_out(conn_t *conn, const struct inc_wire_hdr *hdr)
{
    if (conn != NULL && conn->role == CONN_RANK && conn->job != NULL)
        trips_count(&conn->job->trips, TRIPS_OUT, hdr);
}

static void tx_send(void *server, conn_t *conn, const struct inc_wire_hdr *hdr, const void *payload,
                    size_t length, switch_tx_cb_t cb, void *arg)
{
    const switch_tx_t *in = &((trips_tx_arg_t *)server)->inner;
    count_out(conn, hdr);
    in->ops->send(in->server, conn, hdr, payload, length, cb, arg);
}

static void tx_send_data(void *server, conn_t *conn, egress_class_t cls,
                         const struct inc_wire_hdr *hdr, const void *payload, size_t length,
                         switch_tx_cb_t cb, void *arg)
{
    const switch_tx_t *in = &((trips_tx_arg_t *)server)->inner;
    count_out(conn, hdr);
    in->ops->send_data(in->server, conn, cls, hdr, payload, length, cb, arg);
}

static void tx_send_built(void *server, conn_t *conn, egress_class_t cls,
                          const struct inc_wire_hdr *hdr, switch_tx_build_t build,
                          switch_tx_cb_t cb, void *arg)
{
    const switch_tx_t *in = &((trips_tx_arg_t *)server)->inner;
    count_out(conn, hdr);
    in->ops->send_built(in->server, conn, cls, hdr, build, cb, arg);
}

static void tx_send_error(void *server, conn_t *conn, uint64_t job, incmoe_status_t status,
                          uint32_t rank, const char *text)
{
    const switch_tx_t *in = &((trips_tx_arg_t *)server)->inner;
    in->ops->send_error(in->server, conn, job, status, rank, text);
}

static void tx_drop(void *server, conn_t *conn)
{
    const switch_tx_t *in = &((trips_tx_arg_t *)server)->inner;
    in->ops->drop(in->server, conn);
}

static void tx_connect_parent(void *server, uint64_t job, switch_parent_cb_t done, void *arg)
{
    const switch_tx_t *in = &((trips_tx_arg_t *)server)->inner;
    in->ops->connect_parent(in->server, job, done, arg);
}

static void tx_recv_data(void *server, void *desc, void *buf, size_t length, switch_rx_t *rx)
{
    const switch_tx_t *in = &((trips_tx_arg_t *)server)->inner;
    in->ops->recv_data(in->server, desc, buf, length, rx);
}

static void tx_release_data(void *server, void *data)
{
    const switch_tx_t *in = &((trips_tx_arg_t *)server)->inner;
    in->ops->release_data(in->server, data);
}

static const switch_tx_ops_t trips_tx_ops = {
    .send = tx_send,
    .send_data = tx_send_data,
    .send_built = tx_send_built,
    .send_error = tx_send_error,
    .drop = tx_drop,
    .connect_parent = tx_connect_parent,
    .recv_data = tx_recv_data,
    .release_data = tx_release_data,
};

switch_tx_t trips_tx(trips_tx_arg_t *arg, switch_tx_t inner)
{
    arg->inner = inner;
    return (switch_tx_t){.ops = &trips_tx_ops, .server = arg};
}
