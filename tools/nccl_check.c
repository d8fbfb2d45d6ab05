/*
 * nccl_check.c - NCCL with the incmoe plugin on one GPU, every element checked.
 *
 *   incmoe-nccl-check -n RANKS [-d DEVICE] [-s COUNT,COUNT,...]
 *
 * Forks RANKS processes that all use the same GPU.  Each sets its own
 * NCCL_HOSTID before NCCL starts, so NCCL takes every rank for a node of its
 * own: processes on one "node" would talk through shared memory, ranks on
 * different nodes talk through the net plugin and, with
 * NCCL_COLLNET_ENABLE=1 and INCMOE_SWITCH set, through the CollNet.  The
 * caller sets NCCL_NET_PLUGIN, NCCL_COLLNET_ENABLE, INCMOE_SWITCH and the
 * NCCL_DEBUG variables; which algorithm NCCL chose is read from NCCL's log
 * (tools/gpu-check's run script does).
 *
 * Rank 0 makes the ncclUniqueId and hands it to the others through memory
 * shared before the fork; the parent never touches CUDA or NCCL, so nothing
 * of either is inherited across fork().  Every collective runs over several
 * sizes and types, on inputs whose exact results are known (small integers,
 * exact in fp16 and bf16 too), and every output element is compared.
 * Exit status 0 only when every rank checked every element.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#define MAX_RANKS 8
#define MAX_SIZES 8
#define TIMEOUT_S 120

typedef struct {
    volatile int id_ready;
    ncclUniqueId id;
} shared_t;

typedef enum { COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCESCATTER } coll_t;
static const char *coll_name[] = {"AllReduce", "AllGather", "ReduceScatter"};

typedef struct {
    ncclDataType_t nccl;
    const char *name;
    size_t size;
} dtype_t;
static const dtype_t dtypes[] = {
    {ncclFloat32, "float32", 4},
    {ncclFloat16, "float16", 2},
    {ncclBfloat16, "bfloat16", 2},
    {ncclInt32, "int32", 4},
};

/* Small integers only: exact in every type above, and so are their sums. */
static uint16_t half_of(int v)
{
    if (v == 0)
        return 0;
    int e = 0;
    while ((1 << (e + 1)) <= v)
        e++;
    unsigned mant = ((unsigned)v << (10 - e)) & 0x3ff; /* v < 2^11: exact */
    return (uint16_t)(((e + 15) << 10) | mant);
}

static uint16_t bf16_of(int v)
{
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    return (uint16_t)(bits >> 16); /* exact for v < 2^8 */
}

static void put(const dtype_t *t, void *buf, size_t i, int v)
{
    if (t->nccl == ncclFloat32)
        ((float *)buf)[i] = (float)v;
    else if (t->nccl == ncclInt32)
        ((int32_t *)buf)[i] = v;
    else if (t->nccl == ncclFloat16)
        ((uint16_t *)buf)[i] = half_of(v);
    else
        ((uint16_t *)buf)[i] = bf16_of(v);
}

/* Rank r's input element i: 0..7, so a sum over 8 ranks stays below 64. */
static int input(int r, size_t i)
{
    return (int)((i * 7 + (size_t)r * 3) % 8);
}

static int fail(int rank, const char *what, const char *detail)
{
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, detail);
    return 1;
}

#define CUDA_TRY(rank, call)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return fail(rank, #call, cudaGetErrorString(e_));                                      \
    } while (0)
#define NCCL_TRY(rank, call)                                                                       \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return fail(rank, #call, ncclGetErrorString(r_));                                      \
    } while (0)

/* One collective of `count` elements per rank; 0 when every output element is right. */
static int run_one(int rank, int n, ncclComm_t comm, cudaStream_t stream, coll_t c,
                   const dtype_t *t, size_t count)
{
    size_t in_elems = c == COLL_REDUCESCATTER ? count * n : count;
    size_t out_elems = c == COLL_ALLREDUCE ? count : c == COLL_ALLGATHER ? count * n : count;
    char *h_in = malloc(in_elems * t->size), *h_out = malloc(out_elems * t->size);
    char *h_want = malloc(out_elems * t->size);
    void *d_in = NULL, *d_out = NULL;
    int bad = 1;
    if (h_in == NULL || h_out == NULL || h_want == NULL)
        goto out;
    for (size_t i = 0; i < in_elems; i++)
        put(t, h_in, i, input(rank, i));
    for (size_t i = 0; i < out_elems; i++) {
        int v = 0;
        if (c == COLL_ALLGATHER) {
            v = input((int)(i / count), i % count);
        } else {
            size_t src = c == COLL_REDUCESCATTER ? (size_t)rank * count + i : i;
            for (int r = 0; r < n; r++)
                v += input(r, src);
        }
        put(t, h_want, i, v);
    }
    if (cudaMalloc(&d_in, in_elems * t->size) != cudaSuccess ||
        cudaMalloc(&d_out, out_elems * t->size) != cudaSuccess ||
        cudaMemcpy(d_in, h_in, in_elems * t->size, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemset(d_out, 0xEE, out_elems * t->size) != cudaSuccess) {
        fail(rank, "cudaMalloc/cudaMemcpy of the buffers", cudaGetErrorString(cudaGetLastError()));
        goto out;
    }
    ncclResult_t res = c == COLL_ALLREDUCE
                           ? ncclAllReduce(d_in, d_out, count, t->nccl, ncclSum, comm, stream)
                       : c == COLL_ALLGATHER
                           ? ncclAllGather(d_in, d_out, count, t->nccl, comm, stream)
                           : ncclReduceScatter(d_in, d_out, count, t->nccl, ncclSum, comm, stream);
    if (res != ncclSuccess) {
        fail(rank, coll_name[c], ncclGetErrorString(res));
        goto out;
    }
    cudaError_t ce = cudaStreamSynchronize(stream);
    if (ce == cudaSuccess)
        ce = cudaMemcpy(h_out, d_out, out_elems * t->size, cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess) {
        fail(rank, coll_name[c], cudaGetErrorString(ce));
        goto out;
    }
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < out_elems; i++) {
        if (memcmp(h_out + i * t->size, h_want + i * t->size, t->size) != 0 && wrong++ == 0)
            first = i;
    }
    if (wrong > 0)
        fprintf(stderr, "rank %d: %s %s count %zu: %zu of %zu elements wrong (first at %zu)\n",
                rank, coll_name[c], t->name, count, wrong, out_elems, first);
    else if (rank == 0)
        printf("%s %s count %zu: all %zu elements right\n", coll_name[c], t->name, count,
               out_elems);
    bad = wrong > 0;
out:
    cudaFree(d_in);
    cudaFree(d_out);
    free(h_in);
    free(h_out);
    free(h_want);
    return bad;
}

static int wait_for_id(shared_t *sh)
{
    time_t deadline = time(NULL) + TIMEOUT_S;
    while (!__atomic_load_n(&sh->id_ready, __ATOMIC_ACQUIRE)) {
        if (time(NULL) > deadline)
            return -1;
        usleep(1000);
    }
    return 0;
}

static int rank_main(int rank, int n, int device, const size_t *sizes, int nsizes, shared_t *sh)
{
    char hostid[64];
    snprintf(hostid, sizeof(hostid), "incmoe-nccl-check-node%d", rank);
    setenv("NCCL_HOSTID", hostid, 1); /* before NCCL reads it: each rank is a node */
    CUDA_TRY(rank, cudaSetDevice(device));
    if (rank == 0) {
        NCCL_TRY(rank, ncclGetUniqueId(&sh->id));
        __atomic_store_n(&sh->id_ready, 1, __ATOMIC_RELEASE);
    } else if (wait_for_id(sh) != 0) {
        return fail(rank, "ncclUniqueId", "rank 0 did not publish it in time");
    }
    ncclComm_t comm;
    NCCL_TRY(rank, ncclCommInitRank(&comm, n, sh->id, rank));
    cudaStream_t stream;
    CUDA_TRY(rank, cudaStreamCreate(&stream));
    int failures = 0;
    for (int c = COLL_ALLREDUCE; c <= COLL_REDUCESCATTER; c++)
        for (size_t t = 0; t < sizeof(dtypes) / sizeof(dtypes[0]); t++)
            for (int s = 0; s < nsizes; s++)
                failures += run_one(rank, n, comm, stream, (coll_t)c, &dtypes[t], sizes[s]);
    cudaStreamDestroy(stream);
    ncclResult_t r = ncclCommDestroy(comm);
    if (r != ncclSuccess)
        failures += fail(rank, "ncclCommDestroy", ncclGetErrorString(r));
    return failures == 0 ? 0 : 1;
}

static int parse_sizes(const char *text, size_t *sizes)
{
    int n = 0;
    const char *p = text;
    while (*p != '\0' && n < MAX_SIZES) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno != 0 || end == p || v == 0 || v > (1ull << 28) || (*end != ',' && *end != '\0'))
            return -1;
        sizes[n++] = (size_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    return *p == '\0' ? n : -1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: incmoe-nccl-check -n RANKS [-d DEVICE] [-s COUNT,COUNT,...]\n"
            "  -n RANKS  processes, each its own NCCL node, 2..%d\n"
            "  -d DEVICE the GPU all ranks use (default 0)\n"
            "  -s COUNTS elements per rank, up to %d sizes (default 1,1000,65536,1048576)\n",
            MAX_RANKS, MAX_SIZES);
}

int main(int argc, char **argv)
{
    int n = 0, device = 0, nsizes;
    size_t sizes[MAX_SIZES];
    nsizes = parse_sizes("1,1000,65536,1048576", sizes);
    int opt;
    while ((opt = getopt(argc, argv, "n:d:s:h")) != -1) {
        char *end;
        if (opt == 'n') {
            n = (int)strtol(optarg, &end, 10);
            if (*end != '\0' || n < 2 || n > MAX_RANKS) {
                fprintf(stderr, "-n %s: expected 2..%d ranks\n", optarg, MAX_RANKS);
                return 2;
            }
        } else if (opt == 'd') {
            device = (int)strtol(optarg, &end, 10);
            if (*end != '\0' || device < 0) {
                fprintf(stderr, "-d %s: expected a device index >= 0\n", optarg);
                return 2;
            }
        } else if (opt == 's') {
            if ((nsizes = parse_sizes(optarg, sizes)) <= 0) {
                fprintf(stderr, "-s %s: expected 1..%d counts in 1..2^28, comma-separated\n",
                        optarg, MAX_SIZES);
                return 2;
            }
        } else {
            usage();
            return opt == 'h' ? 0 : 2;
        }
    }
    if (n == 0 || optind != argc) {
        usage();
        return 2;
    }
    shared_t *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            perror("fork");
            for (int k = 0; k < r; k++)
                kill(pids[k], SIGKILL);
            return 1;
        }
        if (pids[r] == 0) {
            alarm(TIMEOUT_S * 4); /* no hang: a stuck collective ends the rank */
            _exit(rank_main(r, n, device, sizes, nsizes, sh));
        }
    }
    int failed = 0;
    for (int r = 0; r < n; r++) {
        int status = 0;
        if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d %s %d\n", r,
                    WIFSIGNALED(status) ? "died of signal" : "exited with",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            failed++;
        }
    }
    printf("%s: %d ranks, %d failed\n", failed ? "FAIL" : "PASS", n, failed);
    return failed ? 1 : 0;
}
