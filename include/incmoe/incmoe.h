/*
 * incmoe.h - the end-host client of the INC switch (and of the ring baseline).
 *
 * A communicator joins N ranks into a job.  Buffers are registered once;
 * collectives are posted on byte ranges of registered buffers and complete
 * asynchronously.  Every collective belongs to one of six streams (AllGather,
 * ReduceScatter, AllReduce, barrier, dispatch, combine).  Each stream has its own epoch counter:
 * the k-th collective posted on a stream has epoch k (starting at 1) and the
 * stream's completion counter counts the collectives retired in order.  A
 * request is therefore just (stream, epoch): it is done once the counter has
 * reached the epoch.  Counters never go back, so they are never reset.
 *
 * Every rank must post the collectives of one stream in the same order (as in
 * MPI and NCCL); the streams are independent of each other, so one thread may
 * post AllGathers while another posts ReduceScatters.
 *
 * The padded layout (paper section 3.1): an N-block buffer holds block r of
 * rank r at byte offset r * block_stride.  A collective covers the same
 * window [offset, offset + length) of every block, clipped to the bytes that
 * hold data in that block (valid[r]), so ranks may own different amounts of
 * data, including none.
 *
 * Window.  A stream holds at most INCMOE_STREAM_WINDOW collectives posted and
 * not yet completed.  A post beyond that (legal: nothing need be waited on
 * between posts) first waits, sleeping, until the stream's oldest collective
 * completes; if that takes longer than the communicator's timeout_ms it
 * returns INCMOE_ERR_TIMEOUT, nothing was posted and the communicator stays
 * usable.  A communicator that failed while the post waited returns its error.
 *
 * Errors are negative incmoe_status_t values; output arguments are written
 * only on success.
 *
 * Failures of a job end every rank's collectives with an error and a reason
 * (incmoe_comm_error) instead of a hang: a rank that dies or falls silent
 * (INCMOE_ERR_PEER_FAILED), ranks that disagree on a collective
 * (INCMOE_ERR_MISMATCH), and a collective that some ranks posted and a live
 * rank did not post within the job's progress timeout (what its ranks asked
 * with progress_timeout_ms, else incmoe-switchd --progress-timeout-ms, default
 * 600 s, 0 for none): INCMOE_ERR_TIMEOUT on every rank of the job, the laggard
 * included, with a reason such as "allgather epoch 7: rank 2 did not post
 * within 600.0 s".
 *
 * Threads.  Communicators are independent of each other (each has its own
 * UCX context and proxy thread), so different communicators may be used from
 * different threads freely.  On one communicator:
 *   - incmoe_allgather, incmoe_reducescatter, incmoe_allreduce, incmoe_barrier,
 *     incmoe_dispatch, incmoe_combine, incmoe_dispatch_result,
 *     incmoe_dispatch_release, incmoe_mem_register, incmoe_mem_deregister,
 *     incmoe_comm_error, incmoe_req_error, incmoe_test, incmoe_wait,
 *     incmoe_stream_completed, incmoe_comm_rank and incmoe_comm_nranks may
 *     run concurrently from any number of threads.
 *     Posting is serialised inside, and the epoch is fixed by the order in
 *     which posts take the communicator's lock: posts of one stream must be
 *     ordered by the caller (one thread per stream, or a lock of its own),
 *     since every rank has to post a stream in the same order.
 *   - incmoe_comm_destroy (or incmoe_comm_release) must be the last call on
 *     the communicator: no other call on it may run concurrently with it or
 *     start after it, and every FIFO made on it (incmoe_fifo.h) must be
 *     destroyed first.
 * The functions without a communicator (incmoe_strerror, incmoe_dtype_*,
 * incmoe_redop_name, incmoe_reduce_supported, incmoe_layout_bytes,
 * incmoe_get_version) only read their arguments and may be called anywhere.
 *
 * Buffers.  Memory given to incmoe_mem_register must stay allocated and
 * mapped until incmoe_mem_deregister returns for it; deregister a region only
 * after every collective that uses it has completed, and not while a post
 * that names it is running.  From the post of a collective until incmoe_test
 * or incmoe_wait reports it done (INCMOE_OK), its byte ranges belong to the
 * library: the caller may read but not write the send range, and may neither
 * read nor write the receive range (an in-place collective's range is a
 * receive range).  If the communicator fails, the ranges of collectives that
 * did not complete belong to the library until incmoe_comm_destroy returns.
 * Argument structs (params, layout and its valid[] array, requests) are only
 * read during the call.
 *
 * Versions and ABI.  INCMOE_VERSION_MAJOR/MINOR/PATCH (incmoe_version.h) name
 * the release the headers belong to; incmoe_get_version() the library's.
 *   - PATCH: fixes only; no function, type or constant changes.
 *   - MINOR: additions (functions, enum values, parameter fields behind a new
 *     field_mask bit); a program built against an older MINOR of the same
 *     MAJOR runs unchanged.
 *   - MAJOR: anything that breaks programs built before (a removed or changed
 *     function, type, constant or struct layout).
 * libincmoe and libincmoe_moe carry libtool -version-info current:revision:age
 * set in configure.ac and changed once per release: a PATCH release bumps
 * revision; a MINOR release sets current+1, revision 0, age+1; a MAJOR
 * release sets current+1, revision 0, age 0 (the soname changes).
 */
#ifndef INCMOE_H
#define INCMOE_H

#include <stddef.h>
#include <stdint.h>

#include "incmoe_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One status type everywhere: 0 is success, errors are negative. */
typedef enum {
    INCMOE_OK = 0,
    INCMOE_IN_PROGRESS = 1,       /* not an error: the operation is still running */
    INCMOE_ERR_INVALID_ARG = -1,  /* an argument is out of its range */
    INCMOE_ERR_NO_MEMORY = -2,    /* an allocation failed or a memory bound was hit */
    INCMOE_ERR_UNREACHABLE = -3,  /* the switch or a peer could not be reached */
    INCMOE_ERR_AUTH = -4,         /* wrong or missing shared secret */
    INCMOE_ERR_PEER_FAILED = -5,  /* a rank (or the switch) died or disconnected */
    INCMOE_ERR_TIMEOUT = -6,      /* a bounded wait ran out */
    INCMOE_ERR_PROTOCOL = -7,     /* a malformed, truncated or unexpected message */
    INCMOE_ERR_MISMATCH = -8,     /* ranks disagree on a collective or on the job */
    INCMOE_ERR_OUT_OF_RANGE = -9, /* a byte range outside a registered buffer */
    INCMOE_ERR_UNSUPPORTED = -10, /* a datatype/operation that is not implemented */
    INCMOE_ERR_JOB = -11,         /* the job refused this rank (duplicate rank, rank >= N, full) */
    INCMOE_ERR_TRANSPORT = -12,   /* the transport (UCX) reported an error */
    INCMOE_ERR_CLOSED = -13,      /* the communicator was closed or has failed */
    INCMOE_ERR_BUSY = -14,        /* still used by a collective in flight; nothing was changed */
} incmoe_status_t;

const char *incmoe_strerror(incmoe_status_t status);

/* The version of the library this program runs with (the macros in
   incmoe_version.h give the version it was compiled against).  Any output
   pointer may be NULL. */
void incmoe_get_version(unsigned *major_p, unsigned *minor_p, unsigned *patch_p);

typedef enum {
    INCMOE_INT8 = 0,
    INCMOE_UINT8,
    INCMOE_INT32,
    INCMOE_UINT32,
    INCMOE_INT64,
    INCMOE_UINT64,
    INCMOE_FLOAT16,
    INCMOE_FLOAT32,
    INCMOE_FLOAT64,
    INCMOE_BFLOAT16,
} incmoe_dtype_t;

typedef enum {
    INCMOE_SUM = 0,
    INCMOE_PROD,
    INCMOE_MAX,
    INCMOE_MIN,
} incmoe_redop_t;

/* Bytes of one element; 0 for an unknown type. */
size_t incmoe_dtype_size(incmoe_dtype_t dtype);
const char *incmoe_dtype_name(incmoe_dtype_t dtype);
const char *incmoe_redop_name(incmoe_redop_t op);
/* Whether the switch (and the ring) reduce this type with this operation. */
int incmoe_reduce_supported(incmoe_dtype_t dtype, incmoe_redop_t op);

typedef enum {
    INCMOE_ALGO_INC = 0,  /* in-network: the switch multicasts and reduces */
    INCMOE_ALGO_RING = 1, /* bandwidth-optimal ring between the ranks, no switch in the data path */
    INCMOE_ALGO_A2A = 2,  /* point to point between the ranks (full mesh) for dispatch and
                             combine; AllGather, ReduceScatter and AllReduce run as on the ring */
} incmoe_algo_t;

typedef enum {
    INCMOE_STREAM_ALLGATHER = 0,
    INCMOE_STREAM_REDUCESCATTER = 1,
    INCMOE_STREAM_ALLREDUCE = 2,
    INCMOE_STREAM_BARRIER = 3,
    INCMOE_STREAM_DISPATCH = 4,
    INCMOE_STREAM_COMBINE = 5,
} incmoe_stream_t;

/* A posted collective: done once its stream's counter reaches epoch. */
typedef struct {
    incmoe_stream_t stream;
    uint64_t epoch;
} incmoe_req_t;

/* Fields of incmoe_comm_params_t that the caller set (the struct may grow). */
enum {
    INCMOE_COMM_PARAM_SECRET = 1u << 0,
    INCMOE_COMM_PARAM_ALGO = 1u << 1,
    INCMOE_COMM_PARAM_TIMEOUT = 1u << 2,
    INCMOE_COMM_PARAM_LISTEN_DEV = 1u << 3,
    INCMOE_COMM_PARAM_PROGRESS_TIMEOUT = 1u << 4,
};

typedef struct {
    uint32_t field_mask; /* INCMOE_COMM_PARAM_* for the optional fields below */
    const char
        *switch_addr;   /* "host:port" of incmoe-switchd (it also introduces ranks to each other) */
    uint64_t job_id;    /* the same on every rank of the job */
    int rank;           /* 0 .. nranks-1 */
    int nranks;         /* 1 .. INCMOE_MAX_RANKS */
    const void *secret; /* shared key this rank and the switch prove to each other (optional) */
    size_t secret_len;  /* at most INCMOE_MAX_SECRET bytes */
    incmoe_algo_t algo; /* default INCMOE_ALGO_INC */
    int timeout_ms;     /* 1..86400000 (0: INCMOE_TIMEOUT_MS or 10000): bound on
                           joining; the liveness timeout asked of the switch (below) */
    int progress_timeout_ms; /* 1..86400000 (0: the switch's --progress-timeout-ms): the
                                progress timeout asked of the switch (below) */
} incmoe_comm_params_t;

/*
 * Timeouts.  timeout_ms (default INCMOE_TIMEOUT_MS, else 10000) bounds
 * incmoe_comm_create's wait for the job to form.  Once joined, the switch owns
 * the job's liveness timeout: its --timeout-ms (default 10 s) is the floor, a
 * rank may ask for a longer one with timeout_ms, and the job uses the largest
 * any rank asked; a shorter ask gets the switch's.  Every rank then heartbeats
 * and gives up on a silent switch (INCMOE_ERR_PEER_FAILED) by that timeout,
 * and uses it for the bounded waits of incmoe_comm_destroy.  A dead or silent
 * rank fails its peers' collectives within about that timeout.
 *
 * The progress timeout bounds each collective instead: how long the ranks that
 * posted it wait for a live rank that has not (INCMOE_ERR_TIMEOUT on every rank,
 * see the top of this file).  A rank may ask for one with progress_timeout_ms
 * (INCMOE_COMM_PARAM_PROGRESS_TIMEOUT), longer or shorter than the switch's
 * --progress-timeout-ms; the job uses the largest any rank asked, or the
 * switch's when none asked.  It does not change the liveness timeout: a dead
 * rank is still found within seconds.
 */

#define INCMOE_MAX_RANKS  256
#define INCMOE_MAX_SECRET 64
/* Collectives of one stream a rank may have posted and not yet completed; see "Window". */
#define INCMOE_STREAM_WINDOW 1024

typedef struct incmoe_comm incmoe_comm_t;
typedef struct incmoe_mr incmoe_mr_t;

/*
 * Connect to the switch and wait (at most timeout_ms) until all ranks joined.
 * A switch that is down fails it with INCMOE_ERR_UNREACHABLE, one that does
 * not answer (stopped, or ranks missing) with INCMOE_ERR_TIMEOUT.
 */
incmoe_status_t incmoe_comm_create(const incmoe_comm_params_t *params, incmoe_comm_t **comm_p);
/*
 * Leaves the job and frees the communicator.  No other thread may be inside,
 * or enter, a call on comm once destroy has started.
 *
 * First it waits, at most the job's timeout, until every collective this rank
 * posted has completed (or the communicator failed); with INCMOE_ALGO_RING or
 * INCMOE_ALGO_A2A it then runs a barrier, bounded the same way, so no other
 * rank still needs this rank's data.  Destroy therefore returns within about two timeouts plus a
 * few seconds of closing, whatever the peers do.  Then:
 *   - all completed: the rank leaves in order; returns INCMOE_OK.
 *   - the communicator had failed: returns that error (the switch has already
 *     failed the job on the other ranks), at once: its closing waits are then
 *     a fraction of a second.
 *   - collectives still in flight: they are abandoned.  The switch is told,
 *     and ends the job: every other rank's collectives of this job, posted or
 *     later, fail with INCMOE_ERR_PEER_FAILED and a reason naming this rank
 *     (incmoe_comm_error).  Returns INCMOE_ERR_TIMEOUT.
 * In every case this rank's requests are gone with comm (never test or wait
 * on them afterwards), every region still registered is deregistered, and
 * once destroy returns no transfer of this communicator touches any buffer.
 */
incmoe_status_t incmoe_comm_destroy(incmoe_comm_t *comm);
/*
 * incmoe_comm_destroy without waiting for anyone, for a caller that cannot
 * block (a finalizer, an exit path): collectives still in flight are
 * abandoned at once (the other ranks' fail with INCMOE_ERR_PEER_FAILED and
 * a reason naming this rank; returns INCMOE_ERR_TIMEOUT), the ring's closing
 * barrier is skipped, and the closing waits get the short bound of a failed
 * communicator, so it returns within a fraction of a second whatever the
 * peers and the switch do.  With nothing in flight the rank leaves in order,
 * as with destroy.  The same rules hold: the last call on comm.
 */
incmoe_status_t incmoe_comm_release(incmoe_comm_t *comm);
/* The first error the communicator hit (INCMOE_OK if none), with its text. */
incmoe_status_t incmoe_comm_error(incmoe_comm_t *comm, char *msg, size_t msg_len);
int incmoe_comm_rank(const incmoe_comm_t *comm);
int incmoe_comm_nranks(const incmoe_comm_t *comm);
/* The job the communicator is in: its params' job_id, or for one incmoe_comm_shrink made, the
   id the switch gave the shrunk job. */
uint64_t incmoe_comm_job_id(const incmoe_comm_t *comm);

/*
 * Shrink: the ranks that survive a lost rank keep working on a new
 * communicator without it (after a failure, or on request with none).  Every
 * survivor calls incmoe_comm_shrink on its communicator of the old job; the
 * switch, which knows from its liveness which ranks it lost, answers once
 * every member it still hears from asked.  Each gets *new_comm: a new job of
 * the survivors, renumbered densely in ascending old rank order
 * (incmoe_comm_rank / incmoe_comm_nranks tell the new numbers), on the same
 * switch with the same key, algorithm (inc, ring, a2a: their peer mesh is
 * built anew) and timeouts.  comm stays the caller's to destroy (before or
 * after the new one; its collectives in flight stay failed).
 *
 * Bounds and failures.  Survivors that ask right after the failure get the
 * new communicator within milliseconds plus the new job's join; the switch
 * waits for members that have not asked at most the job's timeout from the
 * first ask, a member it is still detecting as dead at most that long again,
 * and the call gives up on the switch after twice the job's timeout and a
 * second.  A rank that asked and is lost before the answer (a second
 * failure: it had joined the survivors) fails the shrink for good on every
 * survivor (INCMOE_ERR_PEER_FAILED, a reason naming the rank), as does the
 * timeout (INCMOE_ERR_TIMEOUT, naming the ranks that never asked); ranks lost
 * without asking, however many and whenever the switch finds them (ranks that
 * die together are found apart), are simply left out.  A rank lost after the
 * answer fails the new job's join (bounded by the timeout).  A failed shrink
 * leaves comm failed, and
 * incmoe_comm_error then reports the shrink's reason.  Call it once per
 * communicator (a second call: INCMOE_ERR_INVALID_ARG).
 *
 * A lost rank cannot come back: the switch refuses a JOIN to a job it shrank
 * (INCMOE_ERR_JOB, of the last 256 shrunk job ids it remembers), and a SHRINK
 * from anyone but a live member.  The new job's id is the old one mixed with
 * a serial of the switch, drawn again while a live job has it (it never
 * clashes with a live job; a user's own id would have to be the same 64-bit
 * value).  A job that spans a tree of switches (--parent) cannot shrink:
 * INCMOE_ERR_UNSUPPORTED.  The NCCL plugin and the torch.distributed backend
 * do not shrink: a lost rank fails their communicator as before.
 */
incmoe_status_t incmoe_comm_shrink(incmoe_comm_t *comm, incmoe_comm_t **new_comm);

incmoe_status_t incmoe_mem_register(incmoe_comm_t *comm, void *base, size_t length,
                                    incmoe_mr_t **mr_p);
/*
 * A region is in use from the call that posts a collective naming it until
 * that collective completes (incmoe_test/incmoe_wait return INCMOE_OK).  While
 * in use, deregister returns INCMOE_ERR_BUSY and the region stays registered
 * and usable; once its collectives completed, deregister succeeds.  After the
 * communicator failed, collectives in flight never complete: their regions
 * stay busy until incmoe_comm_destroy, which releases every region.
 */
incmoe_status_t incmoe_mem_deregister(incmoe_comm_t *comm, incmoe_mr_t *mr);

/* The window of every block that one collective covers (padded layout). */
typedef struct {
    size_t block_stride; /* bytes from block r to block r+1 */
    size_t offset;       /* window start inside each block */
    size_t length;       /* window length */
    const size_t *valid; /* valid[r]: bytes at the start of block r that hold data;
                            NULL means every block is full (block_stride bytes).
                            Copied at post time. */
} incmoe_layout_t;

/* Bytes rank r owns in the window: clamp(valid[r] - offset, 0, length). */
size_t incmoe_layout_bytes(const incmoe_layout_t *layout, int r);

/*
 * AllGather: this rank sends its part of the window, incmoe_layout_bytes(me),
 * from send_mr at send_offset; rank s's part lands at
 * recv_offset + s * block_stride + offset of recv_mr for every s.  The own part
 * is copied locally unless it is already in place.
 */
incmoe_status_t incmoe_allgather(incmoe_comm_t *comm, incmoe_mr_t *send_mr, size_t send_offset,
                                 incmoe_mr_t *recv_mr, size_t recv_offset,
                                 const incmoe_layout_t *layout, incmoe_req_t *req_p);

/*
 * ReduceScatter: send_mr at send_offset holds an N-block buffer of partial
 * results; the window of block s is this rank's partial for rank s.  The
 * reduction of everyone's partial of this rank's part lands at recv_offset of
 * recv_mr.  recv may alias this rank's own partial (in place).  Lengths must
 * be multiples of the element size.
 */
incmoe_status_t incmoe_reducescatter(incmoe_comm_t *comm, incmoe_mr_t *send_mr, size_t send_offset,
                                     incmoe_mr_t *recv_mr, size_t recv_offset,
                                     const incmoe_layout_t *layout, incmoe_dtype_t dtype,
                                     incmoe_redop_t op, incmoe_req_t *req_p);

/* AllReduce of count elements; recv may equal send (in place). */
incmoe_status_t incmoe_allreduce(incmoe_comm_t *comm, incmoe_mr_t *send_mr, size_t send_offset,
                                 incmoe_mr_t *recv_mr, size_t recv_offset, size_t count,
                                 incmoe_dtype_t dtype, incmoe_redop_t op, incmoe_req_t *req_p);

incmoe_status_t incmoe_barrier(incmoe_comm_t *comm, incmoe_req_t *req_p);

/*
 * Dispatch and combine: routing-aware exchange of rows (an MoE layer's tokens
 * to the ranks holding their experts, and the experts' outputs back).
 *
 * Dispatch.  Rank s gives nrows rows of row_bytes (T_s, 0 allowed) and, per
 * row, a destination set: INCMOE_SET_WORDS(N) uint64_t words, bit r % 64 of
 * word r / 64 naming rank r.  Rank d receives every row whose set holds d,
 * ordered by source rank, then by source row, its own rows whose set holds d
 * included (those are copied locally, never sent).  Rows with an empty set go
 * nowhere.  R, the rows rank d receives, must fit its capacity.  Once done,
 * incmoe_dispatch_result gives R and the source (rank, row) of each received
 * row.
 *
 * Combine, the inverse, names a completed dispatch.  Each rank gives one
 * partial row per row it received, in the received order (its own rows'
 * partials in its own source block).  The owner s of row i receives op over
 * the partials of exactly the ranks in set(i): the others' in ascending rank
 * order, then its own last if s is in set(i) (the ReduceScatter order, so a
 * result is bitwise the same whatever order the data arrived in).  A row with
 * an empty set comes back as zeros.  recv is written only (never an input).
 *
 * The library keeps each dispatch (its sets, plan and source table) until a
 * combine naming it completes, or until incmoe_dispatch_release.  At most
 * INCMOE_STREAM_WINDOW dispatches are kept per communicator: a dispatch
 * beyond that returns INCMOE_ERR_BUSY with nothing posted.
 *
 * Before any row moves, every rank learns how many rows it receives from each
 * rank, and a verdict every rank shares.  So these failures are the same on
 * every rank and end only that collective, never the communicator:
 *   - a rank whose R exceeds its capacity: the dispatch fails on every rank
 *     with INCMOE_ERR_NO_MEMORY and a reason such as "dispatch epoch 7: rank 3
 *     would receive 5000 rows, capacity 4096"; no receive buffer is written.
 *     incmoe_dispatch_result still gives this rank's R, so the ranks can retry
 *     with larger buffers;
 *   - ranks that disagree on row_bytes, or a combine whose row_count, dtype,
 *     op, dispatch or per-rank row counts disagree between ranks or with its
 *     dispatch: INCMOE_ERR_MISMATCH and a reason.  A combine that fails so
 *     keeps its dispatch (it may be combined again).
 * incmoe_test and incmoe_wait return such a request's error, and
 * incmoe_req_error its reason.  A disagreement found only after data moved
 * fails the job as other collectives' mismatches do.  Never a wrong result.
 *
 * An algorithm that has no dispatch and combine yet returns
 * INCMOE_ERR_UNSUPPORTED from both, with nothing posted.  Arguments this rank
 * rejects (NULL pointers, ranges outside registered memory, a set naming a
 * rank >= N, an unknown or busy dispatch) fail the job on every rank with
 * the reason, as for the other collectives.  Buffers and the window are as
 * for the other collectives (see "Buffers", "Window").
 *
 * A refusal.  A caller that finds its own arguments wrong above this API (a
 * binding's checks) still takes part in the collective its peers post, so
 * that they are not left waiting: field_mask INCMOE_DISPATCH_PARAM_REFUSED
 * (INCMOE_COMBINE_PARAM_REFUSED) and refused, its reason, of which the first
 * INCMOE_REFUSAL_MAX - 1 bytes are carried (NULL: none given).  Every other
 * field is then ignored.  The plan's verdict fails the collective on every
 * rank with INCMOE_ERR_INVALID_ARG and a reason such as "dispatch epoch 7:
 * rank 2 refused its dispatch arguments: <its reason>" (the lowest rank that
 * refused), before any row moves: nothing is written, the communicator stays
 * usable, and a refused dispatch is kept as a failed one (release it).
 */
#define INCMOE_SET_WORDS(nranks) (((size_t)(nranks) + 63) / 64)

/* Bytes of a refusal's reason that reach the other ranks, its NUL included. */
#define INCMOE_REFUSAL_MAX 128

/*
 * The low-latency form (decode: a few tokens per rank).  A dispatch posted
 * with INCMOE_DISPATCH_PARAM_LOW_LATENCY sizes its receive range up front
 * from max_tokens, a bound on every rank's nrows that is the same on every
 * rank (DeepEP's num_max_dispatch_tokens_per_rank), so no rank waits for a
 * plan: each rank sends its rows (and sets) in one message, each receiver
 * keeps every source's rows as that source's message arrives, learns how many
 * rows each source sent it (none included), and places them once every
 * source's message is in and the verdict (below) is OK.  Its combine (a combine
 * naming a low-latency dispatch) takes the same form.  Results equal the bulk
 * form's: the same rows, the same reduction order (bitwise, in fp32).
 *
 * Layouts of the receive range (and of the combine's partials, which follow
 * their dispatch's):
 *   - by source (the default): region s holds the rows of source rank s whose
 *     set holds this rank, ascending source row, from row s * max_tokens;
 *     capacity >= N * max_tokens.  R counts the rows of every region; the
 *     source pairs of incmoe_dispatch_result list region 0's rows, then
 *     region 1's, and so on.  Own rows are copied into region `rank`.
 *   - by expert (INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT, vLLM's batched-experts
 *     format): each row names topk experts (ids < num_experts, -1 for none),
 *     expert_rank[e] is the rank holding expert e, the same table on every
 *     rank, and a row's set is the ranks of its experts (sets must be NULL).
 *     This rank's experts, ascending id, are its local experts 0..L-1; region
 *     j holds every received row routed to local expert j, ordered by source
 *     rank then source row, from row j * N * max_tokens; capacity >= L * N *
 *     max_tokens.  A row routed to two local experts is in both regions.  R
 *     counts the rows of every region, the source pairs list them region by
 *     region.  The combine takes one partial per region row, in the same
 *     layout, and first folds the partials of each received row over its
 *     local experts in ascending local expert order (op); then as by source.
 *     An expert a row names twice takes it once.
 * incmoe_dispatch_counts gives each region's rows.  The combine's send range
 * is laid out as the receive range: the partial of region j's row k at row
 * j * (region rows) + k, the range holding every region (N * max_tokens rows
 * by source, L * N * max_tokens by expert); rows past a region's count are
 * not read.
 *
 * A rank whose nrows exceeds max_tokens refuses (see "A refusal"): the
 * dispatch fails on every rank with INCMOE_ERR_NO_MEMORY and a reason such as
 * "dispatch epoch 7: rank 3 has 70 rows, max_tokens 64", nothing written.
 * Ranks that disagree on max_tokens, row_bytes or the layout: on every rank
 * INCMOE_ERR_MISMATCH with a reason, nothing written.  A combine's
 * disagreement fails the combine on every rank with INCMOE_ERR_MISMATCH.  A
 * message of the form larger than the memory a rank is granted per stream
 * (credits x chunk size, toward the switch or toward each peer) is refused the
 * same way with INCMOE_ERR_NO_MEMORY ("dispatch epoch 7: rank 3's message of
 * 40960 bytes exceeds the 8 x 4096 bytes granted per stream"): use the bulk
 * form for such batches.  A failed low-latency dispatch's
 * incmoe_dispatch_result gives, with INCMOE_ERR_NO_MEMORY, the rows its
 * sources announced to this rank.  A refusal of the caller's (below) posted
 * with INCMOE_DISPATCH_PARAM_LOW_LATENCY and max_tokens takes the form, and
 * so does a refused combine whose dispatch field names a kept low-latency
 * dispatch (those fields are read for the form only), so it meets the other
 * ranks' messages.
 */

/* Fields of incmoe_dispatch_params_t that the caller set (the struct may grow). */
enum {
    INCMOE_DISPATCH_PARAM_REFUSED = 1u << 0,       /* refused: see "A refusal" */
    INCMOE_DISPATCH_PARAM_LOW_LATENCY = 1u << 1,   /* max_tokens: the low-latency form */
    INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT = 1u << 2, /* experts, topk, num_experts, expert_rank:
                                                      the low-latency form by expert */
};

typedef struct {
    uint32_t field_mask;  /* INCMOE_DISPATCH_PARAM_* of the optional fields set */
    incmoe_mr_t *send_mr; /* nrows rows of row_bytes, contiguous, at send_offset */
    size_t send_offset;
    size_t nrows;         /* T of this rank, 0 allowed */
    size_t row_bytes;     /* > 0, the same on every rank (else INCMOE_ERR_MISMATCH) */
    const uint64_t *sets; /* host memory, nrows x INCMOE_SET_WORDS(N) words (NULL if
                             nrows is 0); copied at post */
    incmoe_mr_t *recv_mr; /* capacity rows of row_bytes at recv_offset */
    size_t recv_offset;
    size_t capacity; /* rows this rank can receive */
    /* INCMOE_DISPATCH_PARAM_REFUSED: why this rank refuses its arguments */
    const char *refused;
    /* INCMOE_DISPATCH_PARAM_LOW_LATENCY: the bound on every rank's nrows, > 0, the same on
       every rank (see "The low-latency form") */
    size_t max_tokens;
    /* INCMOE_DISPATCH_PARAM_EXPERT_LAYOUT (with LOW_LATENCY): host memory, copied at post */
    const int32_t *experts;     /* nrows x topk expert ids, -1: none */
    int topk;                   /* 1..INCMOE_MAX_TOPK */
    int num_experts;            /* 1..INCMOE_MAX_EXPERTS */
    const int32_t *expert_rank; /* [num_experts], each < N */
} incmoe_dispatch_params_t;

#define INCMOE_MAX_TOPK    64
#define INCMOE_MAX_EXPERTS 65536

incmoe_status_t incmoe_dispatch(incmoe_comm_t *comm, const incmoe_dispatch_params_t *params,
                                incmoe_req_t *req_p);

/*
 * Once the dispatch completed: *nrecv_p = R, and the first min(R, source_rows)
 * (source rank, source row) pairs of the received rows into source_p
 * (2 x source_rows uint32_t; may be NULL).  A dispatch that failed for
 * capacity returns INCMOE_ERR_NO_MEMORY and still sets *nrecv_p (the rows
 * this rank would have received); another failure returns its error and sets
 * nothing.  INCMOE_IN_PROGRESS while it runs; INCMOE_ERR_INVALID_ARG for a
 * request that is not a dispatch kept by the library.
 */
incmoe_status_t incmoe_dispatch_result(incmoe_comm_t *comm, const incmoe_req_t *dispatch,
                                       size_t *nrecv_p, uint32_t *source_p, size_t source_rows);

/*
 * Once the dispatch completed: the rows of each region of its receive range
 * into counts[0 .. ncounts-1]: the bulk form and the low-latency form by
 * source, N regions (the rows from each source rank); by expert, one per
 * local expert.  *nregions_p (may be NULL) gets how many regions there are;
 * counts beyond ncounts are not written.  Errors as incmoe_dispatch_result.
 */
incmoe_status_t incmoe_dispatch_counts(incmoe_comm_t *comm, const incmoe_req_t *dispatch,
                                       uint32_t *counts, size_t ncounts, size_t *nregions_p);

/*
 * Frees what the library keeps of a dispatch (its sets, plan and source
 * table).  A combine naming the dispatch that completes releases it; release
 * one that will never be combined.  INCMOE_ERR_BUSY while the dispatch, or a
 * combine naming it, is in flight; INCMOE_ERR_INVALID_ARG for a request that
 * is not a kept dispatch.
 */
incmoe_status_t incmoe_dispatch_release(incmoe_comm_t *comm, const incmoe_req_t *dispatch);

/* Fields of incmoe_combine_params_t that the caller set (the struct may grow). */
enum {
    INCMOE_COMBINE_PARAM_REFUSED = 1u << 0, /* refused: see "A refusal" */
};

typedef struct {
    uint32_t field_mask;   /* INCMOE_COMBINE_PARAM_* of the optional fields set */
    incmoe_req_t dispatch; /* the completed dispatch this combine inverts */
    incmoe_mr_t *send_mr;  /* R partial rows, in the dispatch's received order (the
                              low-latency form: in its dispatch's layout, region by region) */
    size_t send_offset;
    incmoe_mr_t *recv_mr; /* T result rows, in the dispatch's source row order */
    size_t recv_offset;
    size_t row_count; /* elements per partial row, the same on every rank */
    incmoe_dtype_t dtype;
    incmoe_redop_t op;
    /* INCMOE_COMBINE_PARAM_REFUSED: why this rank refuses its arguments */
    const char *refused;
} incmoe_combine_params_t;

incmoe_status_t incmoe_combine(incmoe_comm_t *comm, const incmoe_combine_params_t *params,
                               incmoe_req_t *req_p);

/* INCMOE_OK when done, INCMOE_IN_PROGRESS when not yet, an error if the communicator failed
   (or, for a dispatch or combine, if that collective failed alone). */
incmoe_status_t incmoe_test(incmoe_comm_t *comm, const incmoe_req_t *req);
/* Blocks (sleeping, not spinning) until done or failed. */
incmoe_status_t incmoe_wait(incmoe_comm_t *comm, const incmoe_req_t *req);
/* The number of collectives of a stream retired so far (the cumulative counter). */
uint64_t incmoe_stream_completed(incmoe_comm_t *comm, incmoe_stream_t stream);
/*
 * Why a completed request failed: its error with the reason in msg, or
 * INCMOE_OK and "" if it succeeded, INCMOE_IN_PROGRESS if it has not
 * completed.  A dispatch or combine that failed alone keeps its reason until
 * INCMOE_STREAM_WINDOW more collectives of its stream were posted (then it
 * reads as succeeded); a failed communicator gives its own error and reason
 * (incmoe_comm_error) for every request it did not complete.
 */
incmoe_status_t incmoe_req_error(incmoe_comm_t *comm, const incmoe_req_t *req, char *msg,
                                 size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
