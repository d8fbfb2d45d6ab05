/* test_nccl_common.cc - see nccl_loader.h. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include <ucp/api/ucp.h>

#include "nccl_loader.h"

#include "base/clock.h"

namespace nccltest
{

const char *const kPluginPath = TOP_BUILDDIR "/plugin/.libs/libnccl-net-incmoe.so";
const int kVersions[3] = {11, 10, 9};

uint64_t ucx_memory_types()
{
    ucp_config_t *cfg;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK)
        return 0;
    ucp_params_t prm = {};
    prm.field_mask = UCP_PARAM_FIELD_FEATURES;
    prm.features = UCP_FEATURE_TAG | UCP_FEATURE_AM;
    ucp_context_h ctx;
    ucs_status_t st = ucp_init(&prm, cfg, &ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        return 0;
    ucp_context_attr_t attr = {};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    uint64_t types = ucp_context_query(ctx, &attr) == UCS_OK ? attr.memory_types : 0;
    ucp_cleanup(ctx);
    return types;
}

/* The client library's proxy thread logs too: guard the text. */
static std::mutex warn_lock;
static std::string warn_lines;

std::string warnings()
{
    std::lock_guard<std::mutex> g(warn_lock);
    return warn_lines;
}

void clear_warnings()
{
    std::lock_guard<std::mutex> g(warn_lock);
    warn_lines.clear();
}

/* NCCL's logger, as the proxy hands it to the plugin. */
static void test_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN) {
        std::lock_guard<std::mutex> g(warn_lock);
        warn_lines += buf;
        warn_lines += "\n";
    }
    if (getenv("NCCL_TEST_VERBOSE") != nullptr)
        fprintf(stderr, "[pid %d] NCCL %s %s\n", (int)getpid(),
                level == NCCL_LOG_WARN ? "WARN" : "INFO", buf);
}

Plugin::~Plugin()
{
    if (lib != nullptr)
        dlclose(lib);
}

std::string Plugin::load(int v)
{
    lib = dlopen(kPluginPath, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr)
        return std::string("dlopen: ") + dlerror();
    std::string n = "ncclNetPlugin_v" + std::to_string(v);
    std::string c = "ncclCollNetPlugin_v" + std::to_string(v);
    net = dlsym(lib, n.c_str());
    coll = dlsym(lib, c.c_str());
    if (net == nullptr || coll == nullptr)
        return "missing " + n + " or " + c;
    version = v;
    return "";
}

std::string Plugin::load_newest()
{
    lib = dlopen(kPluginPath, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr)
        return std::string("dlopen: ") + dlerror();
    /* NCCL tries v11 down to v6 and takes the first it finds. */
    for (int v = 11; v >= 6; v--) {
        net = dlsym(lib, ("ncclNetPlugin_v" + std::to_string(v)).c_str());
        if (net != nullptr) {
            coll = dlsym(lib, ("ncclCollNetPlugin_v" + std::to_string(v)).c_str());
            version = v;
            return coll != nullptr ? "" : "no CollNet beside the net";
        }
    }
    return "no ncclNetPlugin_vN";
}

#define N9  ((ncclNet_v9_t *)net)
#define N10 ((ncclNet_v10_t *)net)
#define N11 ((ncclNet_v11_t *)net)
#define C9  ((ncclCollNet_v9_t *)coll)
#define C11 ((ncclCollNet_v11_t *)coll)
/* Members with the same type in every version. */
#define NET_CALL(m, ...)                                                                           \
    (version == 11 ? N11->m(__VA_ARGS__) : version == 10 ? N10->m(__VA_ARGS__) : N9->m(__VA_ARGS__))
#define COLL_CALL(m, ...) (version == 11 ? C11->m(__VA_ARGS__) : C9->m(__VA_ARGS__))

static void props_from_v9(const ncclNetProperties_v9_t &a, ncclNetProperties_v11_t *p)
{
    memset(p, 0, sizeof(*p));
    memcpy(p, &a, sizeof(a)); /* v9 is the prefix of v11 */
    p->maxMultiRequestSize = -1;
}

ncclResult_t Plugin::net_init(uint64_t comm_id)
{
    if (version == 11) {
        ncclNetCommConfig_t cfg = {-1};
        return N11->init(&net_ctx, comm_id, &cfg, test_logger, nullptr);
    }
    if (version == 10)
        return N10->init(test_logger, nullptr);
    return N9->init(test_logger);
}
ncclResult_t Plugin::net_devices(int *n)
{
    return NET_CALL(devices, n);
}
ncclResult_t Plugin::net_props(int dev, ncclNetProperties_v11_t *p)
{
    if (version == 11)
        return N11->getProperties(dev, p);
    ncclNetProperties_v9_t a;
    ncclResult_t r = version == 10 ? N10->getProperties(dev, &a) : N9->getProperties(dev, &a);
    props_from_v9(a, p);
    return r;
}
ncclResult_t Plugin::net_listen(int dev, void *handle, void **lc)
{
    if (version == 11)
        return N11->listen(net_ctx, dev, handle, lc);
    return version == 10 ? N10->listen(dev, handle, lc) : N9->listen(dev, handle, lc);
}
ncclResult_t Plugin::net_connect(int dev, void *handle, void **sc)
{
    ncclNetDeviceHandle_t *dh = nullptr;
    if (version == 11)
        return N11->connect(net_ctx, dev, handle, sc, &dh);
    if (version == 10) {
        ncclNetCommConfig_t cfg = {-1};
        return N10->connect(dev, &cfg, handle, sc, &dh);
    }
    return N9->connect(dev, handle, sc, &dh);
}
ncclResult_t Plugin::net_accept(void *lc, void **rc)
{
    ncclNetDeviceHandle_t *dh = nullptr;
    return NET_CALL(accept, lc, rc, &dh);
}
ncclResult_t Plugin::net_reg(void *comm, void *data, size_t size, int type, void **mh)
{
    return NET_CALL(regMr, comm, data, size, type, mh);
}
ncclResult_t Plugin::net_dereg(void *comm, void *mh)
{
    return NET_CALL(deregMr, comm, mh);
}
ncclResult_t Plugin::net_isend(void *sc, void *data, size_t size, int tag, void *mh, void **req)
{
    if (version == 11)
        return N11->isend(sc, data, size, tag, mh, nullptr, req);
    if (version == 10)
        return N10->isend(sc, data, size, tag, mh, nullptr, req);
    return N9->isend(sc, data, size, tag, mh, req);
}
ncclResult_t Plugin::net_irecv(void *rc, int n, void **data, size_t *sizes, int *tags, void **mhs,
                               void **req)
{
    void *ph[8] = {};
    if (version == 11)
        return N11->irecv(rc, n, data, sizes, tags, mhs, ph, req);
    if (version == 10)
        return N10->irecv(rc, n, data, sizes, tags, mhs, ph, req);
    return N9->irecv(rc, n, data, sizes, tags, mhs, req);
}
ncclResult_t Plugin::net_iflush(void *rc, int n, void **data, int *sizes, void **mhs, void **req)
{
    return NET_CALL(iflush, rc, n, data, sizes, mhs, req);
}
ncclResult_t Plugin::net_test(void *req, int *done, int *sizes)
{
    return NET_CALL(test, req, done, sizes);
}
ncclResult_t Plugin::net_close_send(void *sc)
{
    return NET_CALL(closeSend, sc);
}
ncclResult_t Plugin::net_close_recv(void *rc)
{
    return NET_CALL(closeRecv, rc);
}
ncclResult_t Plugin::net_close_listen(void *lc)
{
    return NET_CALL(closeListen, lc);
}
ncclResult_t Plugin::net_finalize()
{
    return version == 11 ? N11->finalize(net_ctx) : ncclSuccess;
}

ncclResult_t Plugin::coll_init(uint64_t comm_id)
{
    if (version == 11)
        return C11->init(&coll_ctx, comm_id, test_logger);
    return C9->init(test_logger);
}
ncclResult_t Plugin::coll_devices(int *n)
{
    return COLL_CALL(devices, n);
}
ncclResult_t Plugin::coll_props(int dev, ncclNetProperties_v11_t *p)
{
    if (version == 11)
        return C11->getProperties(dev, p);
    ncclNetProperties_v9_t a;
    ncclResult_t r = C9->getProperties(dev, &a);
    props_from_v9(a, p);
    return r;
}
ncclResult_t Plugin::coll_listen(int dev, void *handle, void **lc)
{
    if (version == 11)
        return C11->listen(coll_ctx, dev, handle, lc);
    return C9->listen(dev, handle, lc);
}
ncclResult_t Plugin::coll_connect(void **handles, int nranks, int rank, void *lc, void **cc)
{
    return COLL_CALL(connect, handles, nranks, rank, lc, cc);
}
ncclResult_t Plugin::coll_reduce_support(ncclDataType_t t, ncclRedOp_t op, int *supported)
{
    return COLL_CALL(reduceSupport, t, op, supported);
}
ncclResult_t Plugin::coll_reg(void *cc, void *data, size_t size, int type, void **mh)
{
    return COLL_CALL(regMr, cc, data, size, type, mh);
}
ncclResult_t Plugin::coll_dereg(void *cc, void *mh)
{
    return COLL_CALL(deregMr, cc, mh);
}
ncclResult_t Plugin::coll_iallreduce(void *cc, void *send, void *recv, size_t count,
                                     ncclDataType_t t, ncclRedOp_t op, void *smh, void *rmh,
                                     void **req)
{
    return COLL_CALL(iallreduce, cc, send, recv, count, t, op, smh, rmh, req);
}
ncclResult_t Plugin::coll_iallgather(void *cc, void *send, int nparts, ncclNetSGE_t *parts,
                                     size_t bpr, size_t woff, size_t wbytes, void *smh, void **req)
{
    return COLL_CALL(iallgather, cc, send, nparts, parts, bpr, woff, wbytes, smh, req);
}
ncclResult_t Plugin::coll_ireducescatter(void *cc, int nparts, ncclNetSGE_t *parts, void *recv,
                                         size_t bpr, size_t woff, size_t wbytes, ncclDataType_t t,
                                         ncclRedOp_t op, void *rmh, void **req)
{
    return COLL_CALL(ireducescatter, cc, nparts, parts, recv, bpr, woff, wbytes, t, op, rmh, req);
}
ncclResult_t Plugin::coll_iflush(void *cc, void *data, int size, void *mh, void **req)
{
    return COLL_CALL(iflush, cc, data, size, mh, req);
}
ncclResult_t Plugin::coll_test(void *req, int *done, int *size)
{
    return COLL_CALL(test, req, done, size);
}
ncclResult_t Plugin::coll_close(void *cc)
{
    return COLL_CALL(closeColl, cc);
}
ncclResult_t Plugin::coll_close_listen(void *lc)
{
    return COLL_CALL(closeListen, lc);
}
ncclResult_t Plugin::coll_finalize()
{
    return version == 11 ? C11->finalize(coll_ctx) : ncclSuccess;
}
ncclResult_t Plugin::coll_make_vdevice(int *d, ncclNetVDeviceProps_t *p)
{
    return COLL_CALL(makeVDevice, d, p);
}

/* ---- exchange --------------------------------------------------------- */

namespace
{
const int kMaxRanks = 16;
struct Slot {
    std::atomic<int> round; /* round + 1 once published */
    int len;
    char data[NCCL_NET_HANDLE_MAXSIZE * 2];
};
struct ExchangeMem {
    Slot slots[2][kMaxRanks]; /* rounds alternate: a rank is at most one round ahead */
};

} // namespace

Exchange *Exchange::create(int nranks)
{
    if (nranks > kMaxRanks)
        return nullptr;
    void *p = mmap(nullptr, sizeof(ExchangeMem), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return nullptr;
    memset(p, 0, sizeof(ExchangeMem));
    return reinterpret_cast<Exchange *>(p);
}

void Exchange::destroy()
{
    munmap(this, sizeof(ExchangeMem));
}

void Exchange::publish(int round, int rank, const void *data, size_t len)
{
    Slot &s = reinterpret_cast<ExchangeMem *>(this)->slots[round % 2][rank];
    s.len = (int)len;
    memcpy(s.data, data, len);
    s.round.store(round + 1, std::memory_order_release);
}

bool Exchange::gather(int round, int nranks, std::vector<std::vector<char>> *out, double timeout_s)
{
    ExchangeMem *m = reinterpret_cast<ExchangeMem *>(this);
    double deadline = inc_now_s() + timeout_s;
    out->assign(nranks, {});
    for (int r = 0; r < nranks; r++) {
        Slot &s = m->slots[round % 2][r];
        while (s.round.load(std::memory_order_acquire) != round + 1) {
            if (inc_now_s() > deadline)
                return false;
            usleep(1000);
        }
        (*out)[r].assign(s.data, s.data + s.len);
    }
    return true;
}

bool Exchange::barrier(int round, int rank, int nranks, double timeout_s)
{
    std::vector<std::vector<char>> ignored;
    char one = 1;
    publish(round, rank, &one, 1);
    return gather(round, nranks, &ignored, timeout_s);
}

} // namespace nccltest
