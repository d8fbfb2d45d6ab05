/* dc_columns.c - the column heads of a dispatch/combine table (dc_columns.h). */
#include "dc_columns.h"

#include <stdio.h>

void dc_print_columns(double link_mbps)
{
    if (link_mbps > 0)
        printf("# link %.0f Mbit/s per direction; bound = the busiest rank and direction's bytes "
               "/ link rate\n",
               link_mbps);
    printf("#\n#%11s %12s %8s %6s %11s %8s %8s %8s %10s %10s %12s %12s", "size", "count", "type",
           "redop", "time", "algbw", "busbw", "#wrong", "rows-out", "rows-in", "up", "down");
    if (link_mbps > 0)
        printf(" %11s %7s", "bound", "t/bound");
    printf("\n#%11s %12s %8s %6s %11s %8s %8s %8s %10s %10s %12s %12s", "(B)", "(elements)", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(max)", "(max)", "(B, max)", "(B, max)");
    if (link_mbps > 0)
        printf(" %11s %7s", "(us)", "");
    printf("\n");
}

void dc_print_bound(double link_mbps, double busiest_bytes, double t_us)
{
    if (link_mbps <= 0)
        return;
    double bound_us = busiest_bytes * 8.0 / link_mbps; /* Mbit/s is bits per us */
    printf(" %11.1f", bound_us);
    if (bound_us > 0)
        printf(" %7.3f", t_us / bound_us);
    else
        printf(" %7s", "N/A");
}
