# Core suites: pure functions, the in-network collectives, bad input, and
# what the libraries export.
check_PROGRAMS += test_reduce test_wire test_collectives test_errors

test_reduce_SOURCES = test_reduce.cc
test_reduce_LDADD = $(BASE_LIBS) $(TEST_LIBS)

test_wire_SOURCES = test_wire.cc
test_wire_LDADD = $(BASE_LIBS) $(TEST_LIBS)

test_collectives_SOURCES = test_collectives.cc
test_collectives_LDADD = libharness.la $(TEST_LIBS)

# Jobs across a tree of switches (--parent): every collective and dispatch/combine against the
# tree's reduction order, and the faults of a leaf, the root, the link between them and a switch
# port that breaks the protocol (a fake child switch, raw_client).
check_PROGRAMS += test_tree
test_tree_SOURCES = test_tree.cc raw_client.cc raw_client.h
test_tree_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_tree_LDADD = libharness.la $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS)

# A peer's UCX worker address, checked before UCX sees it (base/ucx_addr.c).
check_PROGRAMS += test_ucx_addr
test_ucx_addr_SOURCES = test_ucx_addr.cc
test_ucx_addr_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_ucx_addr_LDADD = $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS)

# Dispatch and combine: the plan's verdict, and the collectives on every algorithm.
check_PROGRAMS += test_dispatch
test_dispatch_SOURCES = test_dispatch.cc raw_client.cc raw_client.h
test_dispatch_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_dispatch_LDADD = libharness.la $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS)

test_errors_SOURCES = test_errors.cc raw_client.cc raw_client.h
test_errors_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_errors_LDADD = libharness.la $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS)

# What the installed libraries export, against their public headers.
check_PROGRAMS += test_exports
test_exports_SOURCES = test_exports.cc
test_exports_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"' -DHAVE_MOE_LIB=1
test_exports_LDADD = $(TEST_LIBS)

# No #include crosses a layer and no directory's files call each other in a cycle
# (tools/check-layers, README's "Architecture").
check_PROGRAMS += test_layers
test_layers_SOURCES = test_layers.cc test_perf_run.cc perf_run.h
test_layers_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_layers_LDADD = $(GTEST_LIBS) -lpthread

# No function of the product or its tools is over 80 lines (tools/check-length).
check_PROGRAMS += test_length
test_length_SOURCES = test_length.cc test_perf_run.cc perf_run.h
test_length_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_length_LDADD = $(GTEST_LIBS) -lpthread
