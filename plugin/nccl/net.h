/*
 * net.h - what the NCCL net's files share; nothing here leaves the plugin.
 *
 *   net_listen.c     listen(), closeListen(): the bootstrap socket
 *   net_handshake.c  connect() and accept(): bootstrap, endpoint, HELLO/ACK
 *   net.c            the data path: isend, irecv, test, flush, the slots the
 *                    handshake's messages use too, and the comm's end
 *   net_reg.c        regMr / deregMr
 *   net_init.c       the process-wide UCX context and worker, its progress, ids, the key
 *
 * Each file calls only those below it in this list (tools/check-layers --calls).
 *
 * Every entry point takes net_proc.lock before anything else: NCCL calls from
 * several proxy threads and the worker is UCS_THREAD_MODE_SERIALIZED.  The
 * functions declared here expect it held.
 */
#ifndef INCMOE_NCCL_NET_H
#define INCMOE_NCCL_NET_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include "plugin.h"

#include "base/bootstrap.h"
#include "base/ucx_util.h"

/*
 * A tag: bit 63 set for the handshake's messages, clear for data.  Handshake:
 * bits 32..62 the id of the side that receives (a listen id, or a connector's
 * own id for the ACK), bits 0..31 the message kind.  Data: bits 32..62 the
 * connection's data id, bits 0..31 NCCL's tag.  A data id is 31 bits of the
 * session token accept()'s bootstrap chose (unique among the connections its
 * process receives on) and sent in WELCOME: only the two ends of the keyed
 * handshake learn it.  A process that knows a worker's address and a listen
 * id (NCCL's handle carries both, and ids count up) can still send to the
 * worker, but its data reaches a live receive only by guessing 31 random bits
 * per message and receiving connection; the handshake's own messages each
 * carry the token and are checked.
 */
#define NET_TAG_CTRL (1ull << 63)
#define NET_ID_LIMIT 0x7fffffffu

/* "ICN2": the handle of a net whose data tags come from the bootstrap's token; an older
   plugin's ("INCN") is refused as foreign rather than left to mismatch every tag. */
#define NET_HANDLE_MAGIC 0x324e4349u

/* Lives in NCCL's handle: listen() writes it, connect() reads it; `stage` keeps connect()'s
   handshake between calls. */
typedef struct {
    uint32_t magic;
    uint32_t listen_id;
    uint16_t family;
    uint16_t port; /* network order */
    uint8_t ip[16];
    struct net_connect *stage;
} net_handle_t;
_Static_assert(sizeof(net_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle exceeds NCCL's 128 bytes");

/* ---- net_init.c ---------------------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    int refs;
    inc_ucx_node_t node; /* tags, no wakeup: NCCL polls */
    uint32_t next_id;
    struct sockaddr_storage addr;
    unsigned addr_len;
    int timeout_ms;
    ucp_address_t *worker_addr; /* handed to peers by the bootstrap */
    size_t worker_addr_len;
    char key[INCMOE_MAX_SECRET];
    size_t key_len;     /* 0: keyless */
    uint32_t *data_ids; /* reserved by accept() for its connections (net_token_reserve) */
    size_t ndata_ids, data_ids_cap;
} net_proc_t;
extern net_proc_t net_proc;

/* 0 (logged with what) before net_init or after the last finalize. */
int net_ready(const char *what);
/* A process-unique id, 1..NET_ID_LIMIT. */
uint32_t net_new_id(void);
/* A connection's data id (net.h's tags): 31 bits of its bootstrap token, 1..NET_ID_LIMIT. */
uint32_t net_data_id(const uint8_t token[INC_BOOT_TOKEN]);
/* accept(): random token bytes whose data id no connection of this process receives on,
   reserved until net_data_id_release.  -1: no randomness or no memory. */
int net_token_reserve(uint8_t token[INC_BOOT_TOKEN]);
void net_data_id_release(uint32_t id);
/* Progress the worker while it has work, a bounded number of rounds. */
void net_progress(void);

/* ---- net_listen.c -------------------------------------------------------- */

/* listen()'s comm: the bootstrap socket and accept()'s handshake over it. */
typedef struct {
    uint32_t id; /* HELLO's tag, and the upper half of every data tag of the comm it makes */
    int fd;      /* the bootstrap listener; closed once its one connection is made */
    struct net_accept *accept; /* net_handshake.c's */
} net_listen_t;

/* ---- net_handshake.c ------------------------------------------------------ */

/* accept()'s handshake for a new listen comm; NULL when out of memory. */
struct net_accept *net_accept_new(void);
/* Ends it, whatever its state: its connections are closed, its comm if any destroyed. */
void net_accept_free(struct net_accept *a);

/* ---- net.c ---------------------------------------------------------------- */

/* One UCX operation; completed by a callback or at once. */
typedef struct {
    int posted, done;
    ucs_status_t status;
    size_t length;
    void *ucx;
    ucp_tag_recv_info_t info;
} net_slot_t;

/* A connection, made by the handshake and then NCCL's until it closes it. */
typedef struct net_comm {
    int is_send;
    uint32_t data_id; /* net_data_id of the bootstrap's token: upper half of every data tag;
                         reserved while a receiving comm lives */
    ucp_ep_h ep;
    int failed; /* set by the endpoint error callback */
    ucs_status_t fail_status;
    int fail_reported;
    int outstanding;      /* requests handed to NCCL and not yet completed */
    struct net_req *reqs; /* ... listed, so that closing the comm releases them */
} net_comm_t;

/* Post a tagged send on ep / a receive on the worker; s says when it is done and how. */
void net_slot_send(ucp_ep_h ep, uint64_t tag, const void *buf, size_t len, net_slot_t *s);
void net_slot_recv(uint64_t tag, void *buf, size_t len, net_slot_t *s);
void net_slot_cancel(net_slot_t *s);
/* Close the endpoint (force: at once, no flush) and release the comm with its requests. */
void net_comm_destroy(net_comm_t *c, int force);

/* ---- net_reg.c ------------------------------------------------------------ */

/* Is [data, +size) inside the registration mhandle (NULL: unregistered, allowed)?  0: logged. */
int net_mr_covers(const void *mhandle, const void *data, size_t size, const char *what);

#endif
