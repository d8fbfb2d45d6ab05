/*
 * placement_text.h - a placement with replicas (incmoe_moe_placement_t's
 * arrays) as incmoe-perf and incmoe-moe-bench print it in their headers.
 */
#ifndef INCMOE_TOOLS_PLACEMENT_TEXT_H
#define INCMOE_TOOLS_PLACEMENT_TEXT_H

/* Prints " e:r0,r1,..." on stdout for each of the E experts on two ranks or more (offsets[E + 1],
   ranks as the placement's), or " none" when there is no such expert, then a newline. */
void inc_print_replicas(int E, const int *offsets, const int *ranks);

#endif
