/*
 * placement_rows.h - the rows each rank receives when a routing sample runs on
 * a placement with replicas, under the layer's per-token rule
 * (replica_choice.h) or under a static split (incmoe_moe.h, "Choosing a
 * placement"): what incmoe_moe_placement_rows reports and what the chooser
 * minimises.
 */
#ifndef INCMOE_MOE_PLACEMENT_ROWS_H
#define INCMOE_MOE_PLACEMENT_ROWS_H

#include <stdint.h>

#include "incmoe/incmoe_moe.h"

/* rows[N]: the rows each rank receives from the other ranks' tokens (a token counts once on
   each rank it visits other than its own).  s and p checked. */
void placement_rows_per_token(const incmoe_moe_routing_sample_t *s, const incmoe_moe_placement_t *p,
                              int64_t *rows);

/* The same under the static split.  0, or -1 when its per-expert counters (E ints) could not
   be allocated. */
int placement_rows_static(const incmoe_moe_routing_sample_t *s, const incmoe_moe_placement_t *p,
                          int64_t *rows);

#endif
