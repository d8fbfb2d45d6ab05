/*
 * nccl_loader.h - loads the built NCCL plugin the way NCCL does (dlopen,
 * dlsym of the versioned structs) and presents each version through one set
 * of calls, so a test body runs unchanged against v9, v10 and v11.  Also the
 * handle exchange between forked ranks (NCCL's bootstrap allgather).
 */
#ifndef INCMOE_TEST_NCCL_LOADER_H
#define INCMOE_TEST_NCCL_LOADER_H

extern "C" {
#include "plugin/nccl/abi.h"
}

#include <string>
#include <vector>

namespace nccltest
{

extern const char *const kPluginPath;
/* ucp_context_attr_t.memory_types of a UCX context made here: what UCX can move. */
uint64_t ucx_memory_types();
/* Versions the plugin exports, newest first (NCCL's lookup order). */
extern const int kVersions[3];

/* WARN lines NCCL's logger received in this process (since the last clear). */
std::string warnings();
void clear_warnings();

/* One loaded version of the plugin. */
struct Plugin {
    void *lib = nullptr;
    int version = 0;
    void *net = nullptr;  /* ncclNet_vN_t* */
    void *coll = nullptr; /* ncclCollNet_vN_t* */
    void *net_ctx = nullptr, *coll_ctx = nullptr;

    Plugin() = default;
    Plugin(const Plugin &) = delete;
    Plugin &operator=(const Plugin &) = delete;
    /* dlclose(), as NCCL unloads its net plugin when the last communicator goes. */
    ~Plugin();

    /* dlopen + dlsym "ncclNetPlugin_v<version>" / "ncclCollNetPlugin_v<version>". */
    std::string load(int version);
    /* dlsym newest first, as NCCL does; the version found goes to `version`. */
    std::string load_newest();

    /* Point-to-point net. */
    ncclResult_t net_init(uint64_t comm_id);
    ncclResult_t net_devices(int *n);
    ncclResult_t net_props(int dev, ncclNetProperties_v11_t *p);
    ncclResult_t net_listen(int dev, void *handle, void **lc);
    ncclResult_t net_connect(int dev, void *handle, void **sc);
    ncclResult_t net_accept(void *lc, void **rc);
    ncclResult_t net_reg(void *comm, void *data, size_t size, int type, void **mh);
    ncclResult_t net_dereg(void *comm, void *mh);
    ncclResult_t net_isend(void *sc, void *data, size_t size, int tag, void *mh, void **req);
    ncclResult_t net_irecv(void *rc, int n, void **data, size_t *sizes, int *tags, void **mhs,
                           void **req);
    ncclResult_t net_iflush(void *rc, int n, void **data, int *sizes, void **mhs, void **req);
    ncclResult_t net_test(void *req, int *done, int *sizes);
    ncclResult_t net_close_send(void *sc);
    ncclResult_t net_close_recv(void *rc);
    ncclResult_t net_close_listen(void *lc);
    ncclResult_t net_finalize();

    /* CollNet. */
    ncclResult_t coll_init(uint64_t comm_id);
    ncclResult_t coll_devices(int *n);
    ncclResult_t coll_props(int dev, ncclNetProperties_v11_t *p);
    ncclResult_t coll_listen(int dev, void *handle, void **lc);
    ncclResult_t coll_connect(void **handles, int nranks, int rank, void *lc, void **cc);
    ncclResult_t coll_reduce_support(ncclDataType_t t, ncclRedOp_t op, int *supported);
    ncclResult_t coll_reg(void *cc, void *data, size_t size, int type, void **mh);
    ncclResult_t coll_dereg(void *cc, void *mh);
    ncclResult_t coll_iallreduce(void *cc, void *send, void *recv, size_t count, ncclDataType_t t,
                                 ncclRedOp_t op, void *smh, void *rmh, void **req);
    ncclResult_t coll_iallgather(void *cc, void *send, int nparts, ncclNetSGE_t *parts, size_t bpr,
                                 size_t woff, size_t wbytes, void *smh, void **req);
    ncclResult_t coll_ireducescatter(void *cc, int nparts, ncclNetSGE_t *parts, void *recv,
                                     size_t bpr, size_t woff, size_t wbytes, ncclDataType_t t,
                                     ncclRedOp_t op, void *rmh, void **req);
    ncclResult_t coll_iflush(void *cc, void *data, int size, void *mh, void **req);
    ncclResult_t coll_test(void *req, int *done, int *size);
    ncclResult_t coll_close(void *cc);
    ncclResult_t coll_close_listen(void *lc);
    ncclResult_t coll_finalize();
    ncclResult_t coll_make_vdevice(int *d, ncclNetVDeviceProps_t *p);
};

/*
 * Handle exchange between forked ranks: a MAP_SHARED region made before the
 * fork.  publish() writes this rank's slot; gather() waits (sleeping,
 * bounded) for all slots of one round.
 */
struct Exchange {
    static Exchange *create(int nranks); /* call before fork */
    void destroy();
    void publish(int round, int rank, const void *data, size_t len);
    /* false when a slot did not arrive within timeout_s */
    bool gather(int round, int nranks, std::vector<std::vector<char>> *out, double timeout_s);
    /* all ranks reach it (bounded) */
    bool barrier(int round, int rank, int nranks, double timeout_s);
};

} // namespace nccltest

/* In a rank's body (which returns "" or what went wrong): return the line and the condition
   that failed, with what the arguments add. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return std::string("line ") + std::to_string(__LINE__) + ": " #cond " " +              \
                   std::string(__VA_ARGS__);                                                       \
    } while (0)

#endif
