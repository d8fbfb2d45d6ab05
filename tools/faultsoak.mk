# Fault injection on the testbed: tools/faultsoak (a source-tree tool, shipped,
# never installed: it drives the build tree's incmoe-soak-rank and sources
# tools/testbed) and its rank program.
EXTRA_DIST += faultsoak
noinst_PROGRAMS += incmoe-soak-rank
incmoe_soak_rank_SOURCES = soak_rank.c
incmoe_soak_rank_CPPFLAGS = $(INCMOE_CPPFLAGS)
incmoe_soak_rank_LDADD = libincmoe_tools.la $(top_builddir)/plugin/libincmoe.la
