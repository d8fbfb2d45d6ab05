/*
 * fuzz_bootstrap.c - libFuzzer target for the bootstrap handshake: arbitrary
 * bytes go to the message parser, then, split by the first byte into chunks,
 * to a keyed and a keyless server state machine exactly as the switch's
 * listener feeds a connection (at most inc_boot_want() bytes at a time).  The
 * machines must never read or write out of bounds, never accept a proof they
 * did not check, and always end in a defined state.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/bootstrap.h"

static void drive(const uint8_t *data, size_t size, const char *key, size_t key_len)
{
    /* A packed UCX worker address without transports: the peer's is checked against it. */
    static const uint8_t worker[] = {0x01, 0x02, 'f', 'u', 'z', 'z', 'w', 'o', 'r', 'k', 0xff};
    inc_boot_t *b = malloc(sizeof(*b));
    if (b == NULL)
        return;
    inc_boot_init(b, INC_BOOT_SERVER, key, key_len, worker, sizeof(worker));
    size_t chunk = size > 0 ? (size_t)data[0] % 64 + 1 : 1;
    size_t pos = size > 0 ? 1 : 0;
    while (pos < size && b->status == INCMOE_IN_PROGRESS) {
        size_t want = inc_boot_want(b);
        size_t n = size - pos < chunk ? size - pos : chunk;
        if (n > want)
            n = want;
        size_t used = 0;
        inc_boot_feed(b, data + pos, n, &used);
        if (used == 0 && b->status == INCMOE_IN_PROGRESS)
            abort(); /* a machine that takes nothing while waiting would spin its caller */
        pos += used;
        const uint8_t *out;
        size_t len = inc_boot_output(b, &out);
        inc_boot_sent(b, len);
    }
    /* Random bytes cannot forge the client's proof: a keyed machine never completes. */
    if (key_len > 0 && b->status == INCMOE_OK)
        abort();
    inc_boot_clear(b);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    inc_boot_msg_t msg;
    size_t used = 0;
    char why[160];
    if (inc_boot_parse(data, size, &msg, &used, why, sizeof(why)) == INCMOE_OK && used > size)
        abort();
    drive(data, size, "fuzz-key", 8);
    drive(data, size, NULL, 0);
    return 0;
}
