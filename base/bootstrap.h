/*
 * bootstrap.h - the authenticated bootstrap handshake over plain TCP, the only
 * thing a public port of incmoe speaks before UCX is involved.
 *
 * The connecting side ("client": a rank, or NCCL's connect()) and the accepting
 * side ("server": the switch, or NCCL's accept()) each prove that they hold the
 * shared key without sending it, then swap their UCX worker addresses:
 *
 *   client -> server  HELLO    flags (keyed or not), nonce_c (32 random bytes)
 *   server -> client  CHALLENGE flags, nonce_s, proof_s (keyed only)
 *   client -> server  PROOF    proof_c (keyed only), the client's worker address
 *   server -> client  WELCOME  a fresh 16-byte session token, the server's address
 *   server -> client  REJECT   instead of CHALLENGE or WELCOME: status + reason
 *
 * proof_s = HMAC-SHA256(key, "incmoe-boot-1 server" || nonce_c || nonce_s) and
 * proof_c = HMAC-SHA256(key, "incmoe-boot-1 client" || nonce_c || nonce_s).  The
 * client checks proof_s before it sends anything but its nonce, so it knows it
 * reached a holder of the key; the server checks proof_c before it uses the
 * client's address or sends its own.  Each proof covers the other side's fresh
 * nonce, so nothing captured can be replayed, and the labels keep a proof from
 * being reflected back to its sender.  Keyless mode: a side without a key
 * sends no proof (flags say so); a keyed side talking to a keyless one fails
 * with INCMOE_ERR_AUTH naming the mismatch, on both ends.
 *
 * A key proves who sent an address, not that UCX can take it: each side holds
 * the other's worker address to inc_ucx_addr_check() (base/ucx_addr.h), with
 * its own as the reference, before the handshake succeeds.  The server
 * REJECTs a bad one (INCMOE_ERR_PROTOCOL, naming what is wrong) instead of
 * sending WELCOME; the client fails on a bad WELCOME.  So whatever a
 * handshake hands its caller UCX can unpack.
 *
 * Every message: an 8-byte header (magic "INCB", version, type, 16-bit
 * payload length) and at most INC_BOOT_MAX_PAYLOAD bytes; each type's payload
 * length is checked exactly.  The machine is pure (no sockets): feed it the
 * bytes it asks for, send the bytes it gives; inc_boot_io() drives it over a
 * non-blocking socket.
 */
#ifndef INC_BOOTSTRAP_H
#define INC_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "incmoe/incmoe.h"

#define INC_BOOT_MAGIC       0x42434e49u /* "INCB" little-endian */
#define INC_BOOT_VERSION     1
#define INC_BOOT_HDR         8
#define INC_BOOT_NONCE       32
#define INC_BOOT_PROOF       32
#define INC_BOOT_TOKEN       16
#define INC_BOOT_MAX_ADDR    4096 /* bytes of a UCX worker address */
#define INC_BOOT_MAX_TEXT    200  /* bytes of a REJECT reason */
#define INC_BOOT_MAX_PAYLOAD (INC_BOOT_TOKEN + 2 + INC_BOOT_MAX_ADDR)

typedef enum {
    INC_BOOT_HELLO = 1,
    INC_BOOT_CHALLENGE,
    INC_BOOT_PROOF_MSG,
    INC_BOOT_WELCOME,
    INC_BOOT_REJECT,
} inc_boot_msg_type_t;

typedef enum { INC_BOOT_CLIENT, INC_BOOT_SERVER } inc_boot_role_t;

/* One parsed message; pointers alias the parsed buffer. */
typedef struct {
    unsigned type;
    unsigned flags; /* HELLO, CHALLENGE: INC_BOOT_FLAG_KEYED */
    const uint8_t *nonce, *proof, *token, *addr;
    size_t addr_len;
    int status; /* REJECT: incmoe_status_t */
    const char *text;
    size_t text_len;
} inc_boot_msg_t;

#define INC_BOOT_FLAG_KEYED 1u

/*
 * Parse one message from buf.  INCMOE_OK: *msg filled, *used = its bytes;
 * INCMOE_IN_PROGRESS: buf holds only a prefix of a well-formed message so
 * far; INCMOE_ERR_PROTOCOL: malformed (why says how).
 */
incmoe_status_t inc_boot_parse(const uint8_t *buf, size_t len, inc_boot_msg_t *msg, size_t *used,
                               char *why, size_t why_len);

typedef struct {
    inc_boot_role_t role;
    int state;
    uint8_t key[INCMOE_MAX_SECRET];
    size_t key_len; /* 0: keyless */
    uint8_t nonce_c[INC_BOOT_NONCE], nonce_s[INC_BOOT_NONCE];
    const void *local_addr; /* the caller's, alive until done */
    size_t local_addr_len;
    /* The message being received, and the bytes waiting to go out. */
    uint8_t in[INC_BOOT_HDR + INC_BOOT_MAX_PAYLOAD];
    size_t in_len;
    uint8_t out[2 * (INC_BOOT_HDR + INC_BOOT_MAX_PAYLOAD)]; /* a pipelined peer: two replies */
    size_t out_len, out_pos;
    int token_chosen; /* server: inc_boot_choose_token set token, WELCOME sends it */
    /* Results, once done. */
    uint8_t token[INC_BOOT_TOKEN];
    uint8_t peer_addr[INC_BOOT_MAX_ADDR]; /* the fields after it: UCX's read slack (bootstrap.c) */
    size_t peer_addr_len;
    incmoe_status_t status; /* INCMOE_IN_PROGRESS, INCMOE_OK or the error */
    char why[INC_BOOT_MAX_TEXT + 64];
} inc_boot_t;

/* key_len 0: keyless.  local_addr: this side's worker address (1..INC_BOOT_MAX_ADDR bytes,
   passing inc_ucx_addr_check, else INCMOE_ERR_INVALID_ARG).
   A client queues its HELLO at once; INCMOE_ERR_* if the randomness source fails. */
incmoe_status_t inc_boot_init(inc_boot_t *b, inc_boot_role_t role, const void *key, size_t key_len,
                              const void *local_addr, size_t local_addr_len);
/* Wipe the key and nonces. */
void inc_boot_clear(inc_boot_t *b);
/* Server, before the handshake is done: WELCOME sends this session token (the caller's own
   random bytes, chosen under a constraint of its own) instead of a fresh one. */
void inc_boot_choose_token(inc_boot_t *b, const uint8_t token[INC_BOOT_TOKEN]);
/* How many more bytes the machine wants before it can act (0 when done or failed). */
size_t inc_boot_want(const inc_boot_t *b);
/* Feed up to len bytes (at most inc_boot_want() are taken); returns the status. */
incmoe_status_t inc_boot_feed(inc_boot_t *b, const void *data, size_t len, size_t *used);
/* Bytes waiting to be sent; mark n of them sent with inc_boot_sent. */
size_t inc_boot_output(const inc_boot_t *b, const uint8_t **data);
void inc_boot_sent(inc_boot_t *b, size_t n);
/* Server: refuse the peer (queues a REJECT, the machine fails with status/text). */
void inc_boot_reject(inc_boot_t *b, incmoe_status_t status, const char *text);

/* A REJECT message into out (INC_BOOT_HDR + 2 + INC_BOOT_MAX_TEXT bytes); its length. */
size_t inc_boot_pack_reject(uint8_t *out, incmoe_status_t status, const char *text);

/* HMAC-SHA256(key, label || nonce_c || nonce_s), the proof either side sends. */
int inc_boot_proof(const void *key, size_t key_len, inc_boot_role_t prover, const uint8_t *nonce_c,
                   const uint8_t *nonce_s, uint8_t out[INC_BOOT_PROOF]);

/*
 * One non-blocking round over fd: send what is queued, read what is wanted,
 * feed it.  Returns INCMOE_IN_PROGRESS (*events: POLLIN/POLLOUT to wait for),
 * INCMOE_OK (done, and everything sent) or the error (b->why says why).
 */
incmoe_status_t inc_boot_io(inc_boot_t *b, int fd, short *events);

/* A non-blocking TCP connect to addr; the fd (connect in progress) or -1 with why. */
int inc_boot_connect_start(const struct sockaddr *addr, socklen_t addr_len, char *why,
                           size_t why_len);

/* Has the connect on fd finished?  0 connected, 1 still going, -1 failed (why says why). */
int inc_boot_connect_done(int fd, char *why, size_t why_len);

/*
 * Blocking client handshake with a deadline: connect to addr, run the exchange,
 * close.  On INCMOE_OK b holds the token and the server's address.  Unreachable:
 * INCMOE_ERR_UNREACHABLE; no answer in time: INCMOE_ERR_TIMEOUT; key trouble:
 * INCMOE_ERR_AUTH.  why names what went wrong.
 */
incmoe_status_t inc_boot_run_client(inc_boot_t *b, const struct sockaddr *addr, socklen_t addr_len,
                                    int timeout_ms);

#endif
