/* wire.c - header construction and validation (see wire.h for the protocol). */
#include "wire.h"

#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "hash.h"
#include "vformat.h"

static const char *const wire_msg_names[] = {
    [WIRE_MSG_JOIN] = "JOIN",
    [WIRE_MSG_JOIN_ACK] = "JOIN_ACK",
    [WIRE_MSG_ERROR] = "ERROR",
    [WIRE_MSG_HEARTBEAT] = "HEARTBEAT",
    [WIRE_MSG_LEAVE] = "LEAVE",
    [WIRE_MSG_POST] = "POST",
    [WIRE_MSG_DATA] = "DATA",
    [WIRE_MSG_FWD] = "FWD",
    [WIRE_MSG_CREDIT] = "CREDIT",
    [WIRE_MSG_DONE] = "DONE",
    [WIRE_MSG_PEER_HELLO] = "PEER_HELLO",
    [WIRE_MSG_RING_REDUCE] = "RING_REDUCE",
    [WIRE_MSG_RING_GATHER] = "RING_GATHER",
    [WIRE_MSG_SMALL] = "SMALL",
    [WIRE_MSG_SMALL_FWD] = "SMALL_FWD",
    [WIRE_MSG_PLAN] = "PLAN",
    [WIRE_MSG_PEER_PLAN] = "PEER_PLAN",
    [WIRE_MSG_PEER_ROWS] = "PEER_ROWS",
    [WIRE_MSG_PEER_PARTIALS] = "PEER_PARTIALS",
    [WIRE_MSG_PEER_CREDIT] = "PEER_CREDIT",
    [WIRE_MSG_TREE_JOIN] = "TREE_JOIN",
    [WIRE_MSG_TREE_POST] = "TREE_POST",
    [WIRE_MSG_LL] = "LL",
    [WIRE_MSG_LL_FWD] = "LL_FWD",
    [WIRE_MSG_PEER_LL] = "PEER_LL",
    [WIRE_MSG_SHRINK] = "SHRINK",
    [WIRE_MSG_SHRINK_ACK] = "SHRINK_ACK",
};

static const char *const wire_stream_names[] = {"allgather", "reducescatter", "allreduce",
                                                "barrier",   "dispatch",      "combine"};

const char *inc_wire_msg_name(unsigned msg)
{
    return (msg >= WIRE_MSG_JOIN && msg <= WIRE_MSG_LAST) ? wire_msg_names[msg] : "unknown";
}

const char *inc_wire_stream_name(unsigned stream)
{
    return stream < INC_STREAM_COUNT ? wire_stream_names[stream] : "unknown";
}

void inc_wire_hdr_init(struct inc_wire_hdr *hdr, inc_wire_msg_t msg, uint64_t job)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->magic = INCMOE_WIRE_MAGIC;
    hdr->version = INCMOE_WIRE_VERSION;
    hdr->msg = (uint8_t)msg;
    hdr->job = job;
}

incmoe_status_t inc_wire_reject(char *why, size_t why_len, const char *fmt, ...)
{
    if (why != NULL && why_len > 0)
        INC_VFORMAT(why, why_len, fmt);
    return INCMOE_ERR_PROTOCOL;
}

#define FAIL(...) return inc_wire_reject(why, why_len, __VA_ARGS__)

/* The byte range of a data message (DATA, FWD, RING_REDUCE, RING_GATHER): what it carries,
   inside its window, and for a reduction, whole elements of a known datatype. */
static incmoe_status_t check_data_range(const struct inc_wire_hdr *h, size_t payload_length,
                                        char *why, size_t why_len)
{
    if (h->stream == INCMOE_STREAM_BARRIER)
        FAIL("%s on the barrier stream", inc_wire_msg_name(h->msg));
    if (h->length != payload_length)
        FAIL("%s says %llu bytes but carries %zu: truncated or overlong", inc_wire_msg_name(h->msg),
             (unsigned long long)h->length, payload_length);
    if (h->length == 0)
        FAIL("empty %s", inc_wire_msg_name(h->msg));
    if (h->offset > h->total || h->length > h->total - h->offset)
        FAIL("%s range [%llu, +%llu) outside a window of %llu bytes", inc_wire_msg_name(h->msg),
             (unsigned long long)h->offset, (unsigned long long)h->length,
             (unsigned long long)h->total);
    if (h->stream != INCMOE_STREAM_ALLGATHER) {
        if (h->dtype >= INC_DTYPE_COUNT || h->redop >= INC_REDOP_COUNT)
            FAIL("%s with unknown datatype %u or operation %u", inc_wire_msg_name(h->msg), h->dtype,
                 h->redop);
        size_t esize = incmoe_dtype_size((incmoe_dtype_t)h->dtype);
        if (h->offset % esize != 0 || h->length % esize != 0)
            FAIL("%s range not aligned to %zu-byte %s elements", inc_wire_msg_name(h->msg), esize,
                 incmoe_dtype_name((incmoe_dtype_t)h->dtype));
    }
    return INCMOE_OK;
}

/* Largest POST payload of a dispatch or combine: a refused combine's of INCMOE_MAX_RANKS
   ranks. */
#define DC_POST_MAX                                                                                \
    (sizeof(struct inc_wire_dc_post) + 8 * (uint64_t)INCMOE_MAX_RANKS + INCMOE_REFUSAL_MAX - 1)

/* The messages of dispatch and combine (wire.h, "Dispatch and combine"); the payloads' own
   fields are checked where they are read, against the collective. */
static incmoe_status_t check_dc_msg(const struct inc_wire_hdr *h, size_t payload_length, char *why,
                                    size_t why_len)
{
    const char *name = inc_wire_msg_name(h->msg);
    switch ((inc_wire_msg_t)h->msg) {
    case WIRE_MSG_CREDIT:
        if (payload_length != 0)
            FAIL("CREDIT carries %zu payload bytes", payload_length);
        return INCMOE_OK;
    case WIRE_MSG_POST:
    case WIRE_MSG_SMALL:
    case WIRE_MSG_DATA:
    case WIRE_MSG_FWD:
    case WIRE_MSG_PLAN:
        break;
    default:
        FAIL("%s on the %s stream", name, inc_wire_stream_name(h->stream));
    }
    if (h->length != payload_length)
        FAIL("%s says %llu bytes but carries %zu: truncated or overlong", name,
             (unsigned long long)h->length, payload_length);
    if (h->msg == WIRE_MSG_POST &&
        (payload_length < sizeof(struct inc_wire_dc_post) || payload_length > DC_POST_MAX))
        FAIL("%s POST of %zu payload bytes", inc_wire_stream_name(h->stream), payload_length);
    if (h->msg == WIRE_MSG_SMALL && payload_length < sizeof(struct inc_wire_dc_post))
        FAIL("%s SMALL of %zu payload bytes", inc_wire_stream_name(h->stream), payload_length);
    if (h->msg == WIRE_MSG_PLAN &&
        (payload_length < sizeof(struct inc_wire_dc_plan) ||
         payload_length > sizeof(struct inc_wire_dc_plan) + 4 * (uint64_t)INCMOE_MAX_RANKS))
        FAIL("PLAN of %zu payload bytes", payload_length);
    if ((h->msg == WIRE_MSG_DATA || h->msg == WIRE_MSG_FWD) && payload_length == 0)
        FAIL("empty %s", name);
    if (h->stream == INCMOE_STREAM_COMBINE && h->msg != WIRE_MSG_PLAN &&
        (h->dtype >= INC_DTYPE_COUNT || h->redop >= INC_REDOP_COUNT))
        FAIL("%s with unknown datatype %u or operation %u", name, h->dtype, h->redop);
    return INCMOE_OK;
}

/* The messages of a collective's stream (POST, DATA, FWD, RING_REDUCE, RING_GATHER, CREDIT,
   DONE): a known stream and an epoch; POST, CREDIT and DONE carry nothing, the others data. */
static incmoe_status_t check_stream_msg(const struct inc_wire_hdr *h, size_t payload_length,
                                        char *why, size_t why_len)
{
    if (h->stream >= INC_STREAM_COUNT)
        FAIL("%s for unknown stream %u", inc_wire_msg_name(h->msg), h->stream);
    if (inc_wire_is_dc(h->stream))
        return check_dc_msg(h, payload_length, why, why_len);
    if (h->epoch == 0)
        FAIL("%s with epoch 0", inc_wire_msg_name(h->msg));
    if (h->msg == WIRE_MSG_CREDIT || h->msg == WIRE_MSG_DONE || h->msg == WIRE_MSG_POST) {
        if (payload_length != 0)
            FAIL("%s carries %zu payload bytes", inc_wire_msg_name(h->msg), payload_length);
        return INCMOE_OK;
    }
    return check_data_range(h, payload_length, why, why_len);
}

/* SMALL and SMALL_FWD: a whole collective of a data stream in one message. */
static incmoe_status_t check_small_msg(const struct inc_wire_hdr *h, size_t payload_length,
                                       char *why, size_t why_len)
{
    if (h->stream >= INCMOE_STREAM_BARRIER)
        FAIL("%s for stream %u, not a data stream", inc_wire_msg_name(h->msg), h->stream);
    if (h->epoch == 0)
        FAIL("%s with epoch 0", inc_wire_msg_name(h->msg));
    if (h->length != payload_length)
        FAIL("%s says %llu bytes but carries %zu: truncated or overlong", inc_wire_msg_name(h->msg),
             (unsigned long long)h->length, payload_length);
    if (h->root != 0 || h->offset != 0 || h->chunk != 0)
        FAIL("%s with root %u, offset %llu, chunk %u (all must be 0)", inc_wire_msg_name(h->msg),
             h->root, (unsigned long long)h->offset, h->chunk);
    if (h->msg == WIRE_MSG_SMALL_FWD && h->total != h->length)
        FAIL("SMALL_FWD of %llu bytes says its total is %llu", (unsigned long long)h->length,
             (unsigned long long)h->total);
    if (h->stream != INCMOE_STREAM_ALLGATHER &&
        (h->dtype >= INC_DTYPE_COUNT || h->redop >= INC_REDOP_COUNT))
        FAIL("%s with unknown datatype %u or operation %u", inc_wire_msg_name(h->msg), h->dtype,
             h->redop);
    return INCMOE_OK;
}

/* Dispatch and combine between the ranks: the stream each message belongs to, an epoch, and
   for rows a range inside what the receiver was announced, whole elements of partials. */
static incmoe_status_t check_peer_dc_msg(const struct inc_wire_hdr *h, size_t payload_length,
                                         char *why, size_t why_len)
{
    const char *name = inc_wire_msg_name(h->msg);
    int dispatch = h->stream == INCMOE_STREAM_DISPATCH,
        combine = h->stream == INCMOE_STREAM_COMBINE;
    if (!(dispatch || combine) || (h->msg == WIRE_MSG_PEER_ROWS && !dispatch) ||
        (h->msg == WIRE_MSG_PEER_PARTIALS && !combine))
        FAIL("%s on the %s stream", name, inc_wire_stream_name(h->stream));
    if (h->epoch == 0)
        FAIL("%s with epoch 0", name);
    if (h->msg == WIRE_MSG_PEER_CREDIT) {
        if (payload_length != 0 || h->length == 0)
            FAIL("PEER_CREDIT of %llu credits carries %zu payload bytes",
                 (unsigned long long)h->length, payload_length);
        return INCMOE_OK;
    }
    if (h->length != payload_length)
        FAIL("%s says %llu bytes but carries %zu: truncated or overlong", name,
             (unsigned long long)h->length, payload_length);
    if (h->msg == WIRE_MSG_PEER_PLAN) {
        if (payload_length < sizeof(struct inc_wire_dc_post))
            FAIL("PEER_PLAN payload of %zu bytes is truncated", payload_length);
        return INCMOE_OK;
    }
    if (h->length == 0)
        FAIL("empty %s", name);
    if (h->offset >= h->total)
        FAIL("%s at row %llu of %llu", name, (unsigned long long)h->offset,
             (unsigned long long)h->total);
    if (combine) {
        if (h->dtype >= INC_DTYPE_COUNT || h->redop >= INC_REDOP_COUNT)
            FAIL("%s with unknown datatype %u or operation %u", name, h->dtype, h->redop);
        if (h->length % incmoe_dtype_size((incmoe_dtype_t)h->dtype) != 0)
            FAIL("%s of %llu bytes: not whole %s elements", name, (unsigned long long)h->length,
                 incmoe_dtype_name((incmoe_dtype_t)h->dtype));
    }
    return INCMOE_OK;
}

/* LL, LL_FWD and PEER_LL (wire.h, "The low-latency form"): a dispatch or combine epoch, the
   payload the header announces, at least a head (or an LL_FWD verdict's reason); the payload
   itself is base/ll_wire.h's to check. */
static incmoe_status_t check_ll_msg(const struct inc_wire_hdr *h, size_t payload_length, char *why,
                                    size_t why_len)
{
    const char *name = inc_wire_msg_name(h->msg);
    if (!inc_wire_is_dc(h->stream))
        FAIL("%s on the %s stream", name, inc_wire_stream_name(h->stream));
    if (h->epoch == 0)
        FAIL("%s with epoch 0", name);
    if (h->length != payload_length)
        FAIL("%s says %llu bytes but carries %zu: truncated or overlong", name,
             (unsigned long long)h->length, payload_length);
    if (h->offset != 0 || h->chunk != 0)
        FAIL("%s with offset %llu, chunk %u (both must be 0)", name, (unsigned long long)h->offset,
             h->chunk);
    if (h->msg == WIRE_MSG_LL && h->root != 0)
        FAIL("LL with root %u (must be 0)", h->root);
    if (h->msg == WIRE_MSG_LL_FWD && h->status != 0) {
        if (h->status > 0 || payload_length == 0 || payload_length > INCMOE_WIRE_MAX_TEXT)
            FAIL("LL_FWD verdict %d with a reason of %zu bytes", h->status, payload_length);
        return INCMOE_OK;
    }
    if (h->status != 0)
        FAIL("%s with status %d", name, h->status);
    if (payload_length < sizeof(struct inc_wire_ll))
        FAIL("%s payload of %zu bytes is truncated", name, payload_length);
    return INCMOE_OK;
}

static incmoe_status_t check_tree_post(const struct inc_wire_hdr *h, size_t payload_length,
                                       char *why, size_t why_len)
{
    if (h->stream >= INC_STREAM_COUNT || inc_wire_is_dc(h->stream))
        FAIL("TREE_POST for stream %u", h->stream);
    if (h->epoch == 0)
        FAIL("TREE_POST with epoch 0");
    if (h->length != payload_length || payload_length == 0 || payload_length % 8 != 0 ||
        payload_length > 8 * (size_t)INCMOE_MAX_RANKS)
        FAIL("TREE_POST of %zu payload bytes (header says %llu)", payload_length,
             (unsigned long long)h->length);
    return INCMOE_OK;
}

incmoe_status_t inc_wire_hdr_check(const void *header, size_t header_length, size_t payload_length,
                                   char *why, size_t why_len)
{
    struct inc_wire_hdr h;
    if (header == NULL || header_length != sizeof(h))
        FAIL("header of %zu bytes, expected %zu", header_length, sizeof(h));
    memcpy(&h, header, sizeof(h)); /* the UCX header buffer need not be aligned */
    if (h.magic != INCMOE_WIRE_MAGIC)
        FAIL("bad magic 0x%08x", h.magic);
    if (h.version != INCMOE_WIRE_VERSION)
        FAIL("wire version %u, this build speaks %u", h.version, INCMOE_WIRE_VERSION);
    if (h.msg < WIRE_MSG_JOIN || h.msg > WIRE_MSG_LAST)
        FAIL("unknown message type %u", h.msg);

    switch ((inc_wire_msg_t)h.msg) {
    case WIRE_MSG_JOIN:
        if (payload_length < sizeof(struct inc_wire_join))
            FAIL("JOIN payload of %zu bytes is truncated", payload_length);
        break;
    case WIRE_MSG_JOIN_ACK:
        if (payload_length < sizeof(struct inc_wire_join_ack))
            FAIL("JOIN_ACK payload of %zu bytes is truncated", payload_length);
        break;
    case WIRE_MSG_ERROR:
        if (payload_length > INCMOE_WIRE_MAX_TEXT)
            FAIL("ERROR reason of %zu bytes", payload_length);
        break;
    case WIRE_MSG_POST:
    case WIRE_MSG_DATA:
    case WIRE_MSG_FWD:
    case WIRE_MSG_RING_REDUCE:
    case WIRE_MSG_RING_GATHER:
    case WIRE_MSG_CREDIT:
    case WIRE_MSG_DONE:
        return check_stream_msg(&h, payload_length, why, why_len);
    case WIRE_MSG_SMALL:
    case WIRE_MSG_SMALL_FWD:
        if (inc_wire_is_dc(h.stream))
            return check_stream_msg(&h, payload_length, why, why_len);
        return check_small_msg(&h, payload_length, why, why_len);
    case WIRE_MSG_PLAN:
        if (!inc_wire_is_dc(h.stream))
            FAIL("PLAN for stream %u, neither dispatch nor combine", h.stream);
        return check_stream_msg(&h, payload_length, why, why_len);
    case WIRE_MSG_PEER_PLAN:
    case WIRE_MSG_PEER_ROWS:
    case WIRE_MSG_PEER_PARTIALS:
    case WIRE_MSG_PEER_CREDIT:
        return check_peer_dc_msg(&h, payload_length, why, why_len);
    case WIRE_MSG_LL:
    case WIRE_MSG_LL_FWD:
    case WIRE_MSG_PEER_LL:
        return check_ll_msg(&h, payload_length, why, why_len);
    case WIRE_MSG_TREE_JOIN:
        if (payload_length < sizeof(struct inc_wire_tree_join))
            FAIL("TREE_JOIN payload of %zu bytes is truncated", payload_length);
        break;
    case WIRE_MSG_TREE_POST:
        return check_tree_post(&h, payload_length, why, why_len);
    case WIRE_MSG_SHRINK_ACK:
        if (payload_length != sizeof(struct inc_wire_shrink_ack))
            FAIL("SHRINK_ACK payload of %zu bytes, not %zu", payload_length,
                 sizeof(struct inc_wire_shrink_ack));
        break;
    case WIRE_MSG_HEARTBEAT:
    case WIRE_MSG_LEAVE:
    case WIRE_MSG_SHRINK:
        if (payload_length != 0)
            FAIL("%s carries %zu payload bytes", inc_wire_msg_name(h.msg), payload_length);
        break;
    case WIRE_MSG_PEER_HELLO:
        if (payload_length != INCMOE_WIRE_TOKEN)
            FAIL("PEER_HELLO carries %zu payload bytes, not the %d of a peer token", payload_length,
                 INCMOE_WIRE_TOKEN);
        break;
    }
    return INCMOE_OK;
}

uint64_t inc_wire_signature(incmoe_stream_t stream, incmoe_dtype_t dtype, incmoe_redop_t op,
                            const uint64_t *bytes, int nranks)
{
    /* FNV-1a over the description: cheap, and equal wherever the inputs are. */
    uint64_t h = INC_FNV1A_INIT;
    h = inc_fnv1a_u64(h, (uint64_t)stream);
    h = inc_fnv1a_u64(h, (uint64_t)dtype);
    h = inc_fnv1a_u64(h, (uint64_t)op);
    h = inc_fnv1a_u64(h, (uint64_t)nranks);
    for (int r = 0; r < nranks; r++)
        h = inc_fnv1a_u64(h, bytes[r]);
    return h;
}

int inc_wire_is_small(incmoe_stream_t stream, const uint64_t *bytes, int nranks,
                      uint64_t chunk_size)
{
    if (nranks < 2 || stream >= INCMOE_STREAM_BARRIER)
        return 0;
    if (stream == INCMOE_STREAM_ALLREDUCE)
        return bytes[0] <= chunk_size;
    /* The switch holds an AllGather's blocks twice over (see SMALL_FWD): half a chunk. */
    uint64_t limit = stream == INCMOE_STREAM_ALLGATHER ? chunk_size / 2 : chunk_size, sum = 0;
    for (int r = 0; r < nranks; r++) {
        if (bytes[r] > limit - sum)
            return 0;
        sum += bytes[r];
    }
    return 1;
}

uint64_t inc_wire_small_length(incmoe_stream_t stream, const uint64_t *bytes, int nranks, int rank)
{
    uint64_t n = 8 * (uint64_t)nranks;
    if (stream == INCMOE_STREAM_ALLGATHER)
        return n + bytes[rank];
    if (stream == INCMOE_STREAM_ALLREDUCE)
        return n + bytes[0];
    for (int r = 0; r < nranks; r++)
        if (r != rank)
            n += bytes[r];
    return n;
}

uint64_t inc_wire_small_result_length(incmoe_stream_t stream, const uint64_t *bytes, int nranks,
                                      int rank)
{
    if (stream == INCMOE_STREAM_ALLREDUCE)
        return bytes[0];
    if (stream == INCMOE_STREAM_REDUCESCATTER)
        return bytes[rank];
    uint64_t n = 0;
    for (int r = 0; r < nranks; r++)
        if (r != rank)
            n += bytes[r];
    return n;
}

int inc_wire_is_dc(unsigned stream)
{
    return stream == INCMOE_STREAM_DISPATCH || stream == INCMOE_STREAM_COMBINE;
}

uint64_t inc_wire_dc_rows_per_chunk(uint64_t row_bytes, int nranks, uint64_t chunk_size)
{
    uint64_t per_row = row_bytes + 8 * (uint64_t)INCMOE_SET_WORDS(nranks);
    uint64_t rows = chunk_size / per_row;
    return rows > 0 ? rows : 1;
}

uint64_t inc_wire_dc_post_length(incmoe_stream_t stream, int nranks, unsigned refused)
{
    uint64_t counts = stream == INCMOE_STREAM_COMBINE ? 2 : 1;
    return sizeof(struct inc_wire_dc_post) + 4 * counts * (uint64_t)nranks + refused;
}

uint64_t inc_wire_dc_fields_length(incmoe_stream_t stream, int nranks, const void *payload,
                                   uint64_t length)
{
    struct inc_wire_dc_post p;
    if (length < sizeof(p))
        return sizeof(p);
    memcpy(&p, payload, sizeof(p));
    return inc_wire_dc_post_length(stream, nranks, p.refused);
}

int inc_wire_dc_is_small(uint64_t pieces_length, uint64_t chunk_size)
{
    return pieces_length <= chunk_size;
}

uint64_t inc_wire_dc_piece_length(uint64_t length)
{
    return sizeof(struct inc_wire_dc_piece) + ((length + 7) & ~(uint64_t)7);
}
