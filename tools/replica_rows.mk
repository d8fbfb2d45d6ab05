# incmoe-replica-rows: the busiest rank's rows with replicas, EPLB's placement against
# incmoe_moe_placement_choose's (issue 29).  Included by tools/Makefile.am; a developer tool,
# never installed.
noinst_PROGRAMS += incmoe-replica-rows
incmoe_replica_rows_SOURCES = replica_rows.c eplb.c eplb.h moe_bench_data.c moe_bench.h
incmoe_replica_rows_CPPFLAGS = $(INCMOE_CPPFLAGS)
incmoe_replica_rows_LDADD = libincmoe_tools.la $(top_builddir)/moe/libincmoe_moe.la \
	$(top_builddir)/plugin/libincmoe.la -lm
