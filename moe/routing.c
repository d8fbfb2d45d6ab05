/*
 * routing.c - full or masked routing (routing.h).
 */
#include "routing.h"

#include <string.h>

#include "plan.h"

#include "base/config.h"
#include "base/log.h"
#include "base/text.h"

int routing_parse(const char *text, incmoe_moe_routing_t *out)
{
    static const incmoe_moe_routing_t all[] = {INCMOE_MOE_ROUTING_FULL, INCMOE_MOE_ROUTING_MASKED,
                                               INCMOE_MOE_ROUTING_AUTO};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (strcmp(text, incmoe_moe_routing_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return -1;
}

incmoe_moe_routing_t routing_setting(void)
{
    const char *v = inc_config_get_str("INCMOE_MOE_ROUTING");
    incmoe_moe_routing_t r = INCMOE_MOE_ROUTING_FULL;
    if (v != NULL && routing_parse(v, &r) != 0) {
        char shown[64];
        log_warn("moe", "INCMOE_MOE_ROUTING=%s is not full, masked or auto; full is used",
                 inc_text_sanitize(shown, sizeof(shown), v, strlen(v)));
        r = INCMOE_MOE_ROUTING_FULL;
    }
    return r;
}

void routing_count(const int32_t *owner, int N, int rank, const int32_t *ids, int k, size_t T,
                   uint64_t *pairs_p, uint64_t *routed_p)
{
    uint64_t set[INCMOE_SET_WORDS(INCMOE_MAX_RANKS)];
    const size_t words = INCMOE_SET_WORDS(N);
    uint64_t pairs = 0, routed = 0;
    for (size_t t = 0; t < T; t++) {
        plan_token_set(owner, ids + t * (size_t)k, k, set, words);
        set[rank / 64] &= ~((uint64_t)1 << (rank % 64));
        uint64_t others = 0;
        for (size_t w = 0; w < words; w++)
            others += (uint64_t)__builtin_popcountll(set[w]);
        pairs += others;
        routed += others > 0;
    }
    *pairs_p = pairs;
    *routed_p = routed;
}

void routing_bytes(const routing_load_t *l, double *full_p, double *masked_p)
{
    const double n = l->N, g = (double)l->grow, z = (double)l->zrow;
    const double T = (double)l->tokens, P = (double)l->pairs, U = (double)l->routed;
    const double bitmap = 8.0 * (double)INCMOE_SET_WORDS(l->N);
    /* Full: each rank sends its rows once and its partials of every other rank's rows;
       receives every other rank's rows and its own results. */
    double full_up = T * g + (n - 1) * T * z, full_down = (n - 1) * T * g + T * z;
    /* Masked: each row that another rank needs goes up once with its bitmap (and the bitmap
       again with the combine); each (token, other rank) pair comes down as a row and goes
       back up as a partial; the sums come down once. */
    double masked_up = U * (g + 2 * bitmap) + P * z, masked_down = P * g + U * z;
    *full_p = (full_up > full_down ? full_up : full_down) / n;
    *masked_p = (masked_up > masked_down ? masked_up : masked_down) / n;
}

incmoe_moe_routing_t routing_choose(const routing_load_t *load)
{
    if (load->N <= 1 || load->tokens == 0)
        return INCMOE_MOE_ROUTING_FULL;
    double full, masked;
    routing_bytes(load, &full, &masked);
    return masked <= ROUTING_AUTO_SHARE * full ? INCMOE_MOE_ROUTING_MASKED
                                               : INCMOE_MOE_ROUTING_FULL;
}
