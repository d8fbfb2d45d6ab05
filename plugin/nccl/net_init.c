/*
 * net_init.c - the NCCL net's process-wide state: one UCX context and worker
 * (separate from the client library's) shared by every comm, the key both
 * ends of a connection prove, process-unique ids and the worker's progress.
 * UCX opens a TCP port of its own for worker-address connections, on the
 * interface of the net's address (INCMOE_NCCL_ADDR, else the one toward
 * INCMOE_SWITCH) unless UCX_NET_DEVICES says otherwise.  The bottom of the
 * net: every other file calls it, it calls none of them.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "net.h"

#include "base/config.h"
#include "base/keyfile.h"

net_proc_t net_proc = {.lock = PTHREAD_MUTEX_INITIALIZER};

uint32_t net_new_id(void)
{
    net_proc.next_id = net_proc.next_id % NET_ID_LIMIT + 1;
    return net_proc.next_id;
}

uint32_t net_data_id(const uint8_t token[INC_BOOT_TOKEN])
{
    uint32_t id = ((uint32_t)token[0] | (uint32_t)token[1] << 8 | (uint32_t)token[2] << 16 |
                   (uint32_t)token[3] << 24) &
                  NET_ID_LIMIT;
    return id != 0 ? id : 1;
}

static int data_id_reserved(uint32_t id)
{
    for (size_t i = 0; i < net_proc.ndata_ids; i++)
        if (net_proc.data_ids[i] == id)
            return 1;
    return 0;
}

int net_token_reserve(uint8_t token[INC_BOOT_TOKEN])
{
    if (net_proc.ndata_ids == net_proc.data_ids_cap) {
        size_t cap = net_proc.data_ids_cap ? 2 * net_proc.data_ids_cap : 16;
        uint32_t *ids = realloc(net_proc.data_ids, cap * sizeof(*ids));
        if (ids == NULL)
            return -1;
        net_proc.data_ids = ids;
        net_proc.data_ids_cap = cap;
    }
    do {
        if (RAND_bytes(token, INC_BOOT_TOKEN) != 1)
            return -1;
    } while (data_id_reserved(net_data_id(token)));
    net_proc.data_ids[net_proc.ndata_ids++] = net_data_id(token);
    return 0;
}

void net_data_id_release(uint32_t id)
{
    for (size_t i = 0; i < net_proc.ndata_ids; i++)
        if (net_proc.data_ids[i] == id) {
            net_proc.data_ids[i] = net_proc.data_ids[--net_proc.ndata_ids];
            return;
        }
}

void net_progress(void)
{
    for (int i = 0; i < 64 && ucp_worker_progress(net_proc.node.worker) != 0; i++)
        ;
}

/* ---- init ------------------------------------------------------------- */

/* The key both ends of a connection prove: INCMOE_AUTH_KEY, else INCMOE_AUTH_KEY_FILE's. */
static int net_read_key(void)
{
    const char *key = inc_config_get_str("INCMOE_AUTH_KEY");
    const char *file = inc_config_get_str("INCMOE_AUTH_KEY_FILE");
    net_proc.key_len = 0;
    if (key != NULL) {
        if (strlen(key) > INCMOE_MAX_SECRET) {
            PWARN("INCMOE_AUTH_KEY is %zu bytes: it must be 1..%d bytes", strlen(key),
                  INCMOE_MAX_SECRET);
            return -1;
        }
        net_proc.key_len = strlen(key);
        memcpy(net_proc.key, key, net_proc.key_len);
    } else if (file != NULL) {
        char why[256];
        if (inc_keyfile_read(file, net_proc.key, &net_proc.key_len, why, sizeof(why)) !=
            INCMOE_OK) {
            PWARN("INCMOE_AUTH_KEY_FILE: %s", why);
            return -1;
        }
    }
    return 0;
}

ncclResult_t net_init(void)
{
    pthread_mutex_lock(&net_proc.lock);
    ncclResult_t res = ncclSuccess;
    if (net_proc.refs > 0) {
        net_proc.refs++;
        goto out;
    }
    long long timeout_ms;
    if (inc_config_get_int("INCMOE_TIMEOUT_MS", &timeout_ms) != INCMOE_OK) {
        res = ncclInvalidArgument;
        goto out;
    }
    net_proc.timeout_ms = (int)timeout_ms;
    if (net_read_key() != 0) {
        res = ncclInvalidArgument;
        goto out;
    }
    if (plugin_local_addr(&net_proc.addr, &net_proc.addr_len) != 0) {
        res = ncclInvalidArgument;
        goto out;
    }
    /* Serialized by net_proc.lock: NCCL calls from more than one proxy thread. */
    /* UCX's own TCP port on the interface the bootstrap socket serves, as listen() does. */
    if (inc_ucx_node_open_with(&net_proc.node, UCP_FEATURE_TAG, UCS_THREAD_MODE_SERIALIZED,
                               (struct sockaddr *)&net_proc.addr) != INCMOE_OK) {
        res = ncclSystemError;
        goto out;
    }
    ucs_status_t st = ucp_worker_get_address(net_proc.node.worker, &net_proc.worker_addr,
                                             &net_proc.worker_addr_len);
    if (st != UCS_OK || net_proc.worker_addr_len > INC_BOOT_MAX_ADDR) {
        PWARN("the worker's UCX address: %s (%zu bytes, at most %d)", ucs_status_string(st),
              st == UCS_OK ? net_proc.worker_addr_len : 0, INC_BOOT_MAX_ADDR);
        if (st == UCS_OK)
            ucp_worker_release_address(net_proc.node.worker, net_proc.worker_addr);
        inc_ucx_node_close(&net_proc.node);
        res = ncclSystemError;
        goto out;
    }
    char addr[96];
    inc_ucx_format_sockaddr((struct sockaddr *)&net_proc.addr, addr, sizeof(addr));
    PINFO("point-to-point net over UCX, bootstrapping on %s (%s)", addr,
          net_proc.key_len ? "keyed" : "no key: anyone reaching the port can connect");
    net_proc.refs = 1;
out:
    pthread_mutex_unlock(&net_proc.lock);
    return res;
}

static void net_release_locked(void)
{
    free(net_proc.data_ids);
    net_proc.data_ids = NULL;
    net_proc.ndata_ids = net_proc.data_ids_cap = 0;
    ucp_worker_release_address(net_proc.node.worker, net_proc.worker_addr);
    net_proc.worker_addr = NULL;
    OPENSSL_cleanse(net_proc.key, sizeof(net_proc.key));
    inc_ucx_node_close(&net_proc.node); /* closes the endpoints NCCL never closed */
    net_proc.refs = 0;
}

ncclResult_t net_finalize(void)
{
    pthread_mutex_lock(&net_proc.lock);
    if (net_proc.refs > 0 && --net_proc.refs == 0)
        net_release_locked();
    pthread_mutex_unlock(&net_proc.lock);
    return ncclSuccess;
}

/*
 * The v9 and v10 net ABIs have no finalize, so NCCL never says when it is done
 * with the net_proc.  Release UCX when the plugin is unloaded (NCCL dlclose()s it
 * after closing every communicator) or the process exits.  A net call racing
 * with exit() from another thread is not supported.
 */
__attribute__((destructor)) static void net_unload(void)
{
    pthread_mutex_lock(&net_proc.lock);
    if (net_proc.refs > 0)
        net_release_locked();
    pthread_mutex_unlock(&net_proc.lock);
}

ncclResult_t net_devices(int *ndev)
{
    if (ndev == NULL)
        return ncclInvalidArgument;
    *ndev = 1;
    return ncclSuccess;
}

int net_ready(const char *what)
{
    if (net_proc.refs == 0) {
        PWARN("%s called before init", what);
        return 0;
    }
    return 1;
}
