# incmoe-perf and the testbed: the tools driven as a user runs them.
# Included by tests/Makefile.am inside `if HAVE_GTEST`.
check_PROGRAMS += test_perf_tool test_perf_testbed test_moe_bench

test_perf_tool_SOURCES = test_perf_tool.cc test_perf_run.cc perf_run.h
test_perf_tool_LDADD = libharness.la $(TEST_LIBS)

# incmoe-moe-bench's decode rows and their bound.
test_moe_bench_SOURCES = test_moe_bench.cc test_perf_run.cc perf_run.h
test_moe_bench_LDADD = $(GTEST_LIBS) -lpthread

# tools/mpi_dc, the OpenMPI reference of --op dc, against incmoe-perf's a2a.
if HAVE_MPI
check_PROGRAMS += test_mpi_dc
test_mpi_dc_SOURCES = test_mpi_dc.cc test_perf_run.cc perf_run.h
test_mpi_dc_LDADD = $(GTEST_LIBS) -lpthread
endif

# incmoe-perf --low-latency: the routed ops in the low-latency form.
check_PROGRAMS += test_ll_perf
test_ll_perf_SOURCES = test_ll_perf.cc test_perf_run.cc perf_run.h
test_ll_perf_LDADD = $(GTEST_LIBS) -lpthread

# The routing of incmoe-perf's dispatch, combine and dc (tools/route.h).
check_PROGRAMS += test_route
test_route_SOURCES = test_route.cc
test_route_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
test_route_LDADD = $(top_builddir)/tools/libincmoe_tools.la $(GTEST_LIBS) -lpthread

test_perf_testbed_SOURCES = test_perf_testbed.cc test_perf_run.cc testbed_probe.cc testbed_probe.h
test_perf_testbed_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
if HAVE_MPI
test_perf_testbed_CPPFLAGS += -DPERF_HAVE_MPI=1
endif
test_perf_testbed_LDADD = $(GTEST_LIBS) -lpthread

# tools/faultsoak: a bounded soak and a capture of a keyed job (root only).
check_PROGRAMS += test_faultsoak
test_faultsoak_SOURCES = test_faultsoak.cc test_perf_run.cc testbed_probe.cc testbed_probe.h
test_faultsoak_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_faultsoak_LDADD = $(GTEST_LIBS) -lpthread

# tools/probe-killloop and tools/probe-junk at a small size.
check_PROGRAMS += test_probes
test_probes_SOURCES = test_probes.cc test_perf_run.cc
test_probes_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_probes_LDADD = $(GTEST_LIBS) -lpthread
