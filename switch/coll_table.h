/*
 * coll_table.h - the collectives of a job as the switch keeps them, one
 * table for every form a collective can take (coll_form.h): the chunked one
 * (chunked.c), the small one (small.c), dispatch and combine (dc_form.c).
 * The forms use this table and never each other.
 */
#ifndef INCMOE_SWITCH_COLL_TABLE_H
#define INCMOE_SWITCH_COLL_TABLE_H

#include "coll_form.h"
#include "membership.h"

/*
 * What a stream kind does, whatever the form: one row per stream in
 * coll_streams.  A new kind of stream is a new row (with its functions), and
 * in each form what it builds differently; the table itself is the same for
 * every stream.  Dispatch and combine, whose destinations differ row by row
 * (the sets travel with the rows), are planned: their messages go to dc_form.c,
 * which reads who contributes and who receives from the chunks themselves.
 */
typedef struct {
    int data;    /* carries data: DATA or SMALL, credits, a form (the barrier carries none) */
    int planned; /* POST carries a plan and PLAN answers it: dc_form.c's */
    /* Does rank r send data toward root's window? */
    int (*contributes)(int r, int root, int nranks);
    /* Does rank r get the result of root's window? */
    int (*receives)(int r, int root, int nranks);
    int reduces;       /* the result reduces the contributions (else it is the root's data) */
    int shared_window; /* one window, the same size on every rank (root 0), else one per root */
} coll_stream_t;

extern const coll_stream_t coll_streams[INC_STREAM_COUNT];

typedef struct coll {
    struct coll *next;
    int stream;
    uint64_t epoch;
    uint64_t sig;
    int dtype, redop;
    int has_desc;     /* sig/dtype/redop set by the first POST, DATA or SMALL */
    uint8_t *posted;  /* [nranks] */
    uint8_t *relayed; /* [nranks] by port key: TREE_POST sent toward it (tree.c); NULL if no
                         tree */
    uint64_t *bytes;  /* [nranks] announced by each rank's POST or SMALL */
    int nposted;
    /* It may be done once remaining is 0.  Chunked: set when everyone has posted and the
       items complete by then are forwarded (one completing later forwards at once); small:
       when every SMALL_FWD completed; barrier: at the last POST. */
    int armed;
    uint64_t remaining; /* bytes still to forward once armed */
    int done;
    double opened;           /* when its first message opened it (progress timeout) */
    const coll_form_t *form; /* NULL until a message of a data stream sets it */
    void *state;             /* the form's: chunked.c's list of chunks, small.c's small_t,
                                dc_form.c's dc_coll_t */
} coll_t;

/* The collective (stream, epoch) of the job, opened if it is new and within the epoch
   window; NULL (the job failed) if it cannot be.  conn: the rank whose message names it. */
coll_t *coll_get(membership_t *m, job_t *job, conn_t *conn, int stream, uint64_t epoch);
/* Start a message about collective c: its stream and epoch, and what its first message
   described it with (signature, dtype, op), which a switch port checks as a rank's message and
   a rank checks against what it posted. */
void coll_hdr_init(struct inc_wire_hdr *h, inc_wire_msg_t msg, const job_t *job, const coll_t *c);
/* The first message describes the collective (signature, dtype, op); every later one must
   agree.  0: it does not, and the job failed. */
int coll_describe(membership_t *m, job_t *job, conn_t *conn, coll_t *c,
                  const struct inc_wire_hdr *h);
/* The first message of a data stream sets the form; 0: another form was set (the job
   failed). */
int coll_set_form(membership_t *m, job_t *job, conn_t *conn, coll_t *c, const coll_form_t *form);
/* 0 (the job failed) if rank me has posted c already; verb says how ("posted", "sent"). */
int coll_unposted(membership_t *m, job_t *job, coll_t *c, int me, const char *verb);
/* Rank me posts c, announcing total bytes; 1 if it was the last of the N. */
int coll_post(job_t *job, coll_t *c, int me, uint64_t total);
/* May rank me hold one more message on stream?  0: it has used every credit (the job
   failed). */
int coll_credit_left(membership_t *m, job_t *job, int me, int stream);
/* Mark c done if it is (armed, nothing left to forward) and retire the stream's done
   collectives in epoch order; c may be freed. */
void coll_check_done(job_t *job, coll_t *c);
/* The job is retiring: every collective goes. */
void coll_drop_job(job_t *job);
/* A collective others have started that rank r has not posted, or NULL. */
const coll_t *coll_owed(const job_t *job, int r);
/* The job's progress timeout (none if 0) over its streams at time now. */
void coll_check_progress(membership_t *m, job_t *job, double now);

#endif
