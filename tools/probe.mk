# The reliability probes (RELIABILITY.md): source-tree tools, shipped in the
# tarball, never installed.  probe-killloop runs probe-rank from the build tree.
# Included by tools/Makefile.am.

EXTRA_DIST += probe-junk probe-killloop
noinst_PROGRAMS += probe-rank
probe_rank_SOURCES = probe_rank.c
probe_rank_CPPFLAGS = $(INCMOE_CPPFLAGS)
probe_rank_LDADD = $(top_builddir)/plugin/libincmoe.la
# probe-addr: UCX itself on mutated worker addresses, with and without inc_ucx_addr_check.
noinst_PROGRAMS += probe-addr
probe_addr_SOURCES = probe_addr.c
probe_addr_CPPFLAGS = $(INCMOE_CPPFLAGS) $(UCX_CFLAGS)
probe_addr_LDADD = $(top_builddir)/base/libincmoe_base.la $(UCX_LIBS)
