/* bootstrap.c - the bootstrap handshake's messages and state machine (no sockets). */
#include "bootstrap.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "ucx_addr.h"
#include "vformat.h"

enum {
    CLIENT_WAIT_CHALLENGE = 1,
    CLIENT_WAIT_WELCOME,
    SERVER_WAIT_HELLO,
    SERVER_WAIT_PROOF,
    BOOT_DONE,
    BOOT_FAILED,
};

/* UCX reads a malformed transport address up to INC_UCX_ADDR_SLACK bytes past its field: what
   follows peer_addr in the machine is that slack, so the address can go to UCX where it lies. */
_Static_assert(sizeof(inc_boot_t) - offsetof(inc_boot_t, peer_addr) - INC_BOOT_MAX_ADDR >=
                   INC_UCX_ADDR_SLACK,
               "inc_boot_t keeps no slack after peer_addr");

static const char label_server[] = "incmoe-boot-1 server";
static const char label_client[] = "incmoe-boot-1 client";

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static unsigned get16(const uint8_t *p)
{
    return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static int proto_error(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int proto_error(char *why, size_t why_len, const char *fmt, ...)
{
    if (why != NULL && why_len > 0)
        INC_VFORMAT(why, why_len, fmt);
    return INCMOE_ERR_PROTOCOL;
}

/* An address field: 16-bit length (1..INC_BOOT_MAX_ADDR), then the bytes, ending the payload. */
static int parse_addr(const uint8_t *p, size_t left, inc_boot_msg_t *msg, char *why, size_t why_len)
{
    if (left < 2)
        return proto_error(why, why_len, "address length missing");
    size_t n = get16(p);
    if (n == 0 || n > INC_BOOT_MAX_ADDR || n != left - 2)
        return proto_error(why, why_len, "address of %zu bytes in a field of %zu (1..%d)", n,
                           left - 2, INC_BOOT_MAX_ADDR);
    msg->addr = p + 2;
    msg->addr_len = n;
    return INCMOE_OK;
}

static int parse_payload(const uint8_t *p, size_t n, inc_boot_msg_t *msg, char *why, size_t why_len)
{
    switch (msg->type) {
    case INC_BOOT_HELLO:
    case INC_BOOT_CHALLENGE: {
        if (n < 1)
            return proto_error(why, why_len, "empty %s",
                               msg->type == INC_BOOT_HELLO ? "HELLO" : "CHALLENGE");
        msg->flags = p[0];
        int keyed = (p[0] & INC_BOOT_FLAG_KEYED) != 0;
        size_t want =
            1 + INC_BOOT_NONCE + (msg->type == INC_BOOT_CHALLENGE && keyed ? INC_BOOT_PROOF : 0);
        if ((p[0] & ~INC_BOOT_FLAG_KEYED) != 0 || n != want)
            return proto_error(why, why_len, "bad %s: flags 0x%x, %zu bytes (want %zu)",
                               msg->type == INC_BOOT_HELLO ? "HELLO" : "CHALLENGE", p[0], n, want);
        msg->nonce = p + 1;
        msg->proof = want > 1 + INC_BOOT_NONCE ? p + 1 + INC_BOOT_NONCE : NULL;
        return INCMOE_OK;
    }
    case INC_BOOT_PROOF_MSG: {
        if (n < 1 || (p[0] & ~INC_BOOT_FLAG_KEYED) != 0)
            return proto_error(why, why_len, "bad PROOF flags");
        msg->flags = p[0];
        size_t pos = 1;
        if (p[0] & INC_BOOT_FLAG_KEYED) {
            if (n < pos + INC_BOOT_PROOF)
                return proto_error(why, why_len, "PROOF truncated");
            msg->proof = p + pos;
            pos += INC_BOOT_PROOF;
        }
        return parse_addr(p + pos, n - pos, msg, why, why_len);
    }
    case INC_BOOT_WELCOME:
        if (n < INC_BOOT_TOKEN)
            return proto_error(why, why_len, "WELCOME truncated");
        msg->token = p;
        return parse_addr(p + INC_BOOT_TOKEN, n - INC_BOOT_TOKEN, msg, why, why_len);
    case INC_BOOT_REJECT:
        if (n < 2 || n > 2 + INC_BOOT_MAX_TEXT)
            return proto_error(why, why_len, "REJECT of %zu bytes (2..%d)", n,
                               2 + INC_BOOT_MAX_TEXT);
        msg->status = (int16_t)get16(p);
        msg->text = (const char *)p + 2;
        msg->text_len = n - 2;
        return INCMOE_OK;
    default:
        return proto_error(why, why_len, "unknown message type %u", msg->type);
    }
}

incmoe_status_t inc_boot_parse(const uint8_t *buf, size_t len, inc_boot_msg_t *msg, size_t *used,
                               char *why, size_t why_len)
{
    /* Check each header field as soon as its bytes are here: junk fails at once. */
    static const uint8_t magic[4] = {INC_BOOT_MAGIC & 0xff, (INC_BOOT_MAGIC >> 8) & 0xff,
                                     (INC_BOOT_MAGIC >> 16) & 0xff, INC_BOOT_MAGIC >> 24};
    for (size_t i = 0; i < 4 && i < len; i++)
        if (buf[i] != magic[i])
            return proto_error(why, why_len, "not an incmoe bootstrap message (bad magic)");
    if (len > 4 && buf[4] != INC_BOOT_VERSION)
        return proto_error(why, why_len, "bootstrap version %u, this side speaks %d", buf[4],
                           INC_BOOT_VERSION);
    if (len > 5 && (buf[5] < INC_BOOT_HELLO || buf[5] > INC_BOOT_REJECT))
        return proto_error(why, why_len, "unknown message type %u", buf[5]);
    if (len < INC_BOOT_HDR)
        return INCMOE_IN_PROGRESS;
    size_t n = get16(buf + 6);
    if (n > INC_BOOT_MAX_PAYLOAD)
        return proto_error(why, why_len, "payload of %zu bytes (at most %d)", n,
                           INC_BOOT_MAX_PAYLOAD);
    if (len < INC_BOOT_HDR + n)
        return INCMOE_IN_PROGRESS;
    memset(msg, 0, sizeof(*msg));
    msg->type = buf[5];
    incmoe_status_t st = parse_payload(buf + INC_BOOT_HDR, n, msg, why, why_len);
    if (st == INCMOE_OK)
        *used = INC_BOOT_HDR + n;
    return st;
}

int inc_boot_proof(const void *key, size_t key_len, inc_boot_role_t prover, const uint8_t *nonce_c,
                   const uint8_t *nonce_s, uint8_t out[INC_BOOT_PROOF])
{
    const char *label = prover == INC_BOOT_SERVER ? label_server : label_client;
    uint8_t data[sizeof(label_server) - 1 + 2 * INC_BOOT_NONCE];
    size_t ll = strlen(label);
    memcpy(data, label, ll);
    memcpy(data + ll, nonce_c, INC_BOOT_NONCE);
    memcpy(data + ll + INC_BOOT_NONCE, nonce_s, INC_BOOT_NONCE);
    unsigned out_len = 0;
    if (HMAC(EVP_sha256(), key, (int)key_len, data, ll + 2 * INC_BOOT_NONCE, out, &out_len) ==
            NULL ||
        out_len != INC_BOOT_PROOF)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* the machine                                                               */

static void pack_header(uint8_t *h, unsigned type, size_t n);

static uint8_t *queue_msg(inc_boot_t *b, unsigned type, size_t n)
{
    uint8_t *h = b->out + b->out_len;
    pack_header(h, type, n);
    b->out_len += INC_BOOT_HDR + n;
    return h + INC_BOOT_HDR;
}

static incmoe_status_t fail(inc_boot_t *b, incmoe_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static incmoe_status_t fail(inc_boot_t *b, incmoe_status_t st, const char *fmt, ...)
{
    INC_VFORMAT(b->why, sizeof(b->why), fmt);
    b->state = BOOT_FAILED;
    b->status = st;
    return st;
}

static void pack_header(uint8_t *h, unsigned type, size_t n)
{
    put16(h, INC_BOOT_MAGIC & 0xffff);
    put16(h + 2, INC_BOOT_MAGIC >> 16);
    h[4] = INC_BOOT_VERSION;
    h[5] = (uint8_t)type;
    put16(h + 6, (unsigned)n);
}

size_t inc_boot_pack_reject(uint8_t *out, incmoe_status_t status, const char *text)
{
    size_t n = strlen(text);
    if (n > INC_BOOT_MAX_TEXT)
        n = INC_BOOT_MAX_TEXT;
    pack_header(out, INC_BOOT_REJECT, 2 + n);
    put16(out + INC_BOOT_HDR, (unsigned)(uint16_t)(int16_t)status);
    memcpy(out + INC_BOOT_HDR + 2, text, n);
    return INC_BOOT_HDR + 2 + n;
}

void inc_boot_reject(inc_boot_t *b, incmoe_status_t status, const char *text)
{
    b->out_pos = 0;
    b->out_len = inc_boot_pack_reject(b->out, status, text);
    fail(b, status, "%.*s", INC_BOOT_MAX_TEXT, text);
}

static void queue_addr(uint8_t *p, const void *addr, size_t n)
{
    put16(p, (unsigned)n);
    memcpy(p + 2, addr, n);
}

incmoe_status_t inc_boot_init(inc_boot_t *b, inc_boot_role_t role, const void *key, size_t key_len,
                              const void *local_addr, size_t local_addr_len)
{
    memset(b, 0, sizeof(*b));
    b->role = role;
    b->local_addr = local_addr;
    b->local_addr_len = local_addr_len;
    b->status = INCMOE_IN_PROGRESS;
    if (key_len > sizeof(b->key) || local_addr_len == 0 || local_addr_len > INC_BOOT_MAX_ADDR)
        return fail(b, INCMOE_ERR_INVALID_ARG, "key of %zu bytes (0..%d), address of %zu (1..%d)",
                    key_len, INCMOE_MAX_SECRET, local_addr_len, INC_BOOT_MAX_ADDR);
    /* The peer's address is checked against this one: it must pass the check itself. */
    char why[200];
    if (inc_ucx_addr_check(local_addr, local_addr_len, NULL, 0, why, sizeof(why)) != INCMOE_OK)
        return fail(b, INCMOE_ERR_INVALID_ARG,
                    "this side's %s (UCX_UNIFIED_MODE=y packs a form incmoe cannot check)", why);
    if (key_len > 0)
        memcpy(b->key, key, key_len);
    b->key_len = key_len;
    uint8_t *mine = role == INC_BOOT_CLIENT ? b->nonce_c : b->nonce_s;
    if (RAND_bytes(mine, INC_BOOT_NONCE) != 1)
        return fail(b, INCMOE_ERR_TRANSPORT, "no random bytes for the handshake nonce");
    if (role == INC_BOOT_SERVER) {
        b->state = SERVER_WAIT_HELLO;
        return INCMOE_IN_PROGRESS;
    }
    uint8_t *p = queue_msg(b, INC_BOOT_HELLO, 1 + INC_BOOT_NONCE);
    p[0] = key_len ? INC_BOOT_FLAG_KEYED : 0;
    memcpy(p + 1, b->nonce_c, INC_BOOT_NONCE);
    b->state = CLIENT_WAIT_CHALLENGE;
    return INCMOE_IN_PROGRESS;
}

void inc_boot_choose_token(inc_boot_t *b, const uint8_t token[INC_BOOT_TOKEN])
{
    memcpy(b->token, token, INC_BOOT_TOKEN);
    b->token_chosen = 1;
}

void inc_boot_clear(inc_boot_t *b)
{
    OPENSSL_cleanse(b->key, sizeof(b->key));
    OPENSSL_cleanse(b->nonce_c, sizeof(b->nonce_c));
    OPENSSL_cleanse(b->nonce_s, sizeof(b->nonce_s));
    b->key_len = 0;
}

static const char *mismatch_text(int peer_keyed)
{
    return peer_keyed ? "key mismatch: the accepting side has no key, the connecting side has one"
                      : "key mismatch: the accepting side requires a key, the connecting side "
                        "has none";
}

static incmoe_status_t server_on_hello(inc_boot_t *b, const inc_boot_msg_t *m)
{
    int peer_keyed = (m->flags & INC_BOOT_FLAG_KEYED) != 0;
    if (peer_keyed != (b->key_len > 0)) {
        inc_boot_reject(b, INCMOE_ERR_AUTH, mismatch_text(peer_keyed));
        return b->status;
    }
    memcpy(b->nonce_c, m->nonce, INC_BOOT_NONCE);
    uint8_t *p = queue_msg(b, INC_BOOT_CHALLENGE, 1 + INC_BOOT_NONCE + (peer_keyed ? 32 : 0));
    p[0] = peer_keyed ? INC_BOOT_FLAG_KEYED : 0;
    memcpy(p + 1, b->nonce_s, INC_BOOT_NONCE);
    if (peer_keyed && inc_boot_proof(b->key, b->key_len, INC_BOOT_SERVER, b->nonce_c, b->nonce_s,
                                     p + 1 + INC_BOOT_NONCE) != 0)
        return fail(b, INCMOE_ERR_TRANSPORT, "HMAC-SHA256 failed");
    b->state = SERVER_WAIT_PROOF;
    return INCMOE_IN_PROGRESS;
}

static incmoe_status_t server_on_proof(inc_boot_t *b, const inc_boot_msg_t *m)
{
    if (b->key_len > 0) {
        uint8_t want[INC_BOOT_PROOF];
        if (m->proof == NULL) {
            inc_boot_reject(b, INCMOE_ERR_AUTH, "PROOF without a proof from a keyed HELLO");
            return b->status;
        }
        if (inc_boot_proof(b->key, b->key_len, INC_BOOT_CLIENT, b->nonce_c, b->nonce_s, want) != 0)
            return fail(b, INCMOE_ERR_TRANSPORT, "HMAC-SHA256 failed");
        if (CRYPTO_memcmp(want, m->proof, INC_BOOT_PROOF) != 0) {
            inc_boot_reject(b, INCMOE_ERR_AUTH, "wrong key: the connecting side's proof failed");
            return b->status;
        }
    } else if (m->proof != NULL) {
        inc_boot_reject(b, INCMOE_ERR_AUTH, mismatch_text(1));
        return b->status;
    }
    /* The reason goes back in REJECT, whose text is at most INC_BOOT_MAX_TEXT. */
    char why[INC_BOOT_MAX_TEXT - 24], text[INC_BOOT_MAX_TEXT];
    if (inc_ucx_addr_check(m->addr, m->addr_len, b->local_addr, b->local_addr_len, why,
                           sizeof(why)) != INCMOE_OK) {
        snprintf(text, sizeof(text), "the connecting side's %s", why);
        inc_boot_reject(b, INCMOE_ERR_PROTOCOL, text);
        return b->status;
    }
    memcpy(b->peer_addr, m->addr, m->addr_len);
    b->peer_addr_len = m->addr_len;
    if (!b->token_chosen && RAND_bytes(b->token, INC_BOOT_TOKEN) != 1)
        return fail(b, INCMOE_ERR_TRANSPORT, "no random bytes for the session token");
    uint8_t *p = queue_msg(b, INC_BOOT_WELCOME, INC_BOOT_TOKEN + 2 + b->local_addr_len);
    memcpy(p, b->token, INC_BOOT_TOKEN);
    queue_addr(p + INC_BOOT_TOKEN, b->local_addr, b->local_addr_len);
    b->state = BOOT_DONE;
    b->status = INCMOE_OK;
    return INCMOE_OK;
}

static incmoe_status_t client_on_challenge(inc_boot_t *b, const inc_boot_msg_t *m)
{
    int peer_keyed = (m->flags & INC_BOOT_FLAG_KEYED) != 0;
    if (peer_keyed != (b->key_len > 0))
        return fail(b, INCMOE_ERR_AUTH, "%s",
                    peer_keyed ? "key mismatch: the accepting side requires a key, this side "
                                 "has none"
                               : "key mismatch: the accepting side has no key, this side has one "
                                 "(it would not be authenticated)");
    memcpy(b->nonce_s, m->nonce, INC_BOOT_NONCE);
    uint8_t *p = queue_msg(b, INC_BOOT_PROOF_MSG,
                           1 + (peer_keyed ? INC_BOOT_PROOF : 0) + 2 + b->local_addr_len);
    p[0] = peer_keyed ? INC_BOOT_FLAG_KEYED : 0;
    size_t pos = 1;
    if (peer_keyed) {
        uint8_t want[INC_BOOT_PROOF];
        if (inc_boot_proof(b->key, b->key_len, INC_BOOT_SERVER, b->nonce_c, b->nonce_s, want) !=
                0 ||
            inc_boot_proof(b->key, b->key_len, INC_BOOT_CLIENT, b->nonce_c, b->nonce_s, p + 1) != 0)
            return fail(b, INCMOE_ERR_TRANSPORT, "HMAC-SHA256 failed");
        if (CRYPTO_memcmp(want, m->proof, INC_BOOT_PROOF) != 0) {
            b->out_len = b->out_pos = 0; /* the proof stays here */
            return fail(b, INCMOE_ERR_AUTH,
                        "wrong key: the accepting side's proof does not match this key");
        }
        pos += INC_BOOT_PROOF;
    }
    queue_addr(p + pos, b->local_addr, b->local_addr_len);
    b->state = CLIENT_WAIT_WELCOME;
    return INCMOE_IN_PROGRESS;
}

static incmoe_status_t client_on_welcome(inc_boot_t *b, const inc_boot_msg_t *m)
{
    char why[200];
    if (inc_ucx_addr_check(m->addr, m->addr_len, b->local_addr, b->local_addr_len, why,
                           sizeof(why)) != INCMOE_OK)
        return fail(b, INCMOE_ERR_PROTOCOL, "the accepting side's %s", why);
    memcpy(b->token, m->token, INC_BOOT_TOKEN);
    memcpy(b->peer_addr, m->addr, m->addr_len);
    b->peer_addr_len = m->addr_len;
    b->state = BOOT_DONE;
    b->status = INCMOE_OK;
    return INCMOE_OK;
}

static incmoe_status_t on_reject(inc_boot_t *b, const inc_boot_msg_t *m)
{
    /* Remote text: printable ASCII only reaches the caller's logs. */
    char text[INC_BOOT_MAX_TEXT + 1];
    size_t n = 0;
    for (size_t i = 0; i < m->text_len; i++)
        text[n++] = (m->text[i] >= 0x20 && m->text[i] < 0x7f) ? m->text[i] : '?';
    text[n] = '\0';
    incmoe_status_t st = m->status == INCMOE_ERR_AUTH       ? INCMOE_ERR_AUTH
                         : m->status == INCMOE_ERR_PROTOCOL ? INCMOE_ERR_PROTOCOL
                                                            : INCMOE_ERR_UNREACHABLE;
    return fail(b, st, "refused by the accepting side: %s", text);
}

static incmoe_status_t on_message(inc_boot_t *b, const inc_boot_msg_t *m)
{
    if (m->type == INC_BOOT_REJECT && b->role == INC_BOOT_CLIENT)
        return on_reject(b, m);
    switch (b->state) {
    case SERVER_WAIT_HELLO:
        if (m->type == INC_BOOT_HELLO)
            return server_on_hello(b, m);
        break;
    case SERVER_WAIT_PROOF:
        if (m->type == INC_BOOT_PROOF_MSG)
            return server_on_proof(b, m);
        break;
    case CLIENT_WAIT_CHALLENGE:
        if (m->type == INC_BOOT_CHALLENGE)
            return client_on_challenge(b, m);
        break;
    case CLIENT_WAIT_WELCOME:
        if (m->type == INC_BOOT_WELCOME)
            return client_on_welcome(b, m);
        break;
    default:
        break;
    }
    if (b->role == INC_BOOT_SERVER) {
        inc_boot_reject(b, INCMOE_ERR_PROTOCOL, "unexpected message in the handshake");
        return b->status;
    }
    return fail(b, INCMOE_ERR_PROTOCOL, "unexpected message type %u in the handshake", m->type);
}

size_t inc_boot_want(const inc_boot_t *b)
{
    if (b->state == BOOT_DONE || b->state == BOOT_FAILED)
        return 0;
    if (b->in_len < INC_BOOT_HDR)
        return INC_BOOT_HDR - b->in_len;
    size_t n = get16(b->in + 6);
    return INC_BOOT_HDR + n - b->in_len;
}

incmoe_status_t inc_boot_feed(inc_boot_t *b, const void *data, size_t len, size_t *used)
{
    const uint8_t *src = data;
    size_t taken = 0;
    while (b->state != BOOT_DONE && b->state != BOOT_FAILED && taken < len) {
        size_t want = inc_boot_want(b);
        size_t n = len - taken < want ? len - taken : want;
        memcpy(b->in + b->in_len, src + taken, n);
        b->in_len += n;
        taken += n;
        inc_boot_msg_t m;
        size_t msg_len = 0;
        char why[160];
        incmoe_status_t st = inc_boot_parse(b->in, b->in_len, &m, &msg_len, why, sizeof(why));
        if (st == INCMOE_IN_PROGRESS)
            continue;
        if (st != INCMOE_OK) {
            if (b->role == INC_BOOT_SERVER)
                inc_boot_reject(b, INCMOE_ERR_PROTOCOL, why);
            else
                fail(b, INCMOE_ERR_PROTOCOL, "bad handshake message: %s", why);
            break;
        }
        on_message(b, &m);
        b->in_len = 0;
    }
    if (used != NULL)
        *used = taken;
    return b->status;
}

size_t inc_boot_output(const inc_boot_t *b, const uint8_t **data)
{
    *data = b->out + b->out_pos;
    return b->out_len - b->out_pos;
}

void inc_boot_sent(inc_boot_t *b, size_t n)
{
    b->out_pos += n;
    if (b->out_pos >= b->out_len)
        b->out_pos = b->out_len = 0;
}
