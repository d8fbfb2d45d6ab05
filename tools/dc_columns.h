/*
 * dc_columns.h - the column heads of a dispatch/combine table, as incmoe-perf
 * prints them (tools/perf_dc.c) and mpi_dc, its OpenMPI reference, prints
 * them too, so that one reader (tools/incmoe-model, BENCHMARKS) takes both.
 */
#ifndef INCMOE_TOOLS_DC_COLUMNS_H
#define INCMOE_TOOLS_DC_COLUMNS_H

/* The link line (when link_mbps > 0) and the two heading lines, bound and t/bound among them
   when link_mbps > 0. */
void dc_print_columns(double link_mbps);

/* A row's bound and t/bound columns (when link_mbps > 0): busiest_bytes, the busiest rank and
   direction's, at the link rate, and t_us against it. */
void dc_print_bound(double link_mbps, double busiest_bytes, double t_us);

#endif
