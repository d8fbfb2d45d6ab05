# Core suites: pure functions, the in-network collectives, bad input, and
# what the libraries export.
check_PROGRAMS += test_reduce test_wire test_collectives

test_reduce_SOURCES = test_reduce.cc ref_half.h ref_op.h
test_reduce_LDADD = $(BASE_LIBS) $(TEST_LIBS)

test_wire_SOURCES = test_wire.cc
test_wire_LDADD = $(BASE_LIBS) $(TEST_LIBS)

# The low-latency form's payloads (base/ll_wire.h): layout, parser, verdict.
check_PROGRAMS += test_wire_ll
test_wire_ll_SOURCES = test_wire_ll.cc
test_wire_ll_LDADD = $(BASE_LIBS) $(TEST_LIBS)

test_collectives_SOURCES = test_collectives.cc
test_collectives_LDADD = libharness.la $(BASE_LIBS) $(TEST_LIBS)

# Jobs across a tree of switches (--parent): every collective and dispatch/combine against the
# tree's reduction order, and the faults of a leaf, the root, the link between them and a switch
# port that breaks the protocol (a fake child switch, raw_client).
check_PROGRAMS += test_tree
test_tree_SOURCES = test_tree.cc raw_client.cc raw_client.h ref_half.h ref_op.h
test_tree_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_tree_LDADD = libharness.la $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS)

# A peer's UCX worker address, checked before UCX sees it (base/ucx_addr.c).
check_PROGRAMS += test_ucx_addr
test_ucx_addr_SOURCES = test_ucx_addr.cc
test_ucx_addr_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_ucx_addr_LDADD = $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS)

# Dispatch and combine: the plan's verdict, and the collectives on every algorithm; a raw rank
# that breaks a dispatch is the error suites' (errors_common).
check_PROGRAMS += test_dispatch
test_dispatch_SOURCES = test_dispatch.cc exact_int.h dc_ref.h
test_dispatch_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_dispatch_LDADD = $(ERRORS_LIBS)

# The low-latency form of dispatch and combine on every algorithm, by source and by expert.
check_PROGRAMS += test_ll
test_ll_SOURCES = test_ll.cc exact_int.h dc_ref.h
test_ll_CPPFLAGS = $(AM_CPPFLAGS)
test_ll_LDADD = $(ERRORS_LIBS)

# Shrink: the survivors of lost ranks go on in a new job, on every algorithm.
check_PROGRAMS += test_shrink
test_shrink_SOURCES = test_shrink.cc
test_shrink_CPPFLAGS = $(AM_CPPFLAGS)
test_shrink_LDADD = $(ERRORS_LIBS)

# Every failure the switch and the client must survive, one suite per subsystem; what they
# share (the Errors fixture, a communicator on it, raw messages that break a job) is built once.
ERRORS_SUITES = test_errors_auth test_errors_protocol test_errors_admission \
	test_errors_liveness test_errors_lifecycle test_errors_settings
check_PROGRAMS += $(ERRORS_SUITES)
noinst_LTLIBRARIES += liberrors_common.la
liberrors_common_la_SOURCES = errors_common.cc errors_common.h raw_client.cc raw_client.h
liberrors_common_la_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
ERRORS_LIBS = liberrors_common.la libharness.la $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS)
test_errors_auth_SOURCES = test_errors_auth.cc
test_errors_auth_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_errors_auth_LDADD = $(ERRORS_LIBS)
test_errors_protocol_SOURCES = test_errors_protocol.cc
test_errors_protocol_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_errors_protocol_LDADD = $(ERRORS_LIBS)
test_errors_admission_SOURCES = test_errors_admission.cc
test_errors_admission_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_errors_admission_LDADD = $(ERRORS_LIBS)
test_errors_liveness_SOURCES = test_errors_liveness.cc
test_errors_liveness_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_errors_liveness_LDADD = $(ERRORS_LIBS)
test_errors_lifecycle_SOURCES = test_errors_lifecycle.cc
test_errors_lifecycle_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_errors_lifecycle_LDADD = $(ERRORS_LIBS)
test_errors_settings_SOURCES = test_errors_settings.cc
test_errors_settings_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_errors_settings_LDADD = $(ERRORS_LIBS)

# What the installed libraries export, against their public headers.
check_PROGRAMS += test_exports
test_exports_SOURCES = test_exports.cc
test_exports_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"' -DHAVE_MOE_LIB=1
test_exports_LDADD = $(TEST_LIBS)

# No #include crosses a layer and no directory's files call each other in a cycle
# (tools/check-layers, README's "Architecture").
check_PROGRAMS += test_layers
test_layers_SOURCES = test_layers.cc test_perf_run.cc perf_run.h text_file.h
test_layers_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_layers_LDADD = $(GTEST_LIBS) -lpthread

# No function of the product or its tools is over 80 lines (tools/check-length).
check_PROGRAMS += test_length
test_length_SOURCES = test_length.cc test_perf_run.cc perf_run.h text_file.h
test_length_CPPFLAGS = $(AM_CPPFLAGS) -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_length_LDADD = $(GTEST_LIBS) -lpthread

# The switch's low-latency form of dispatch and combine, spoken raw to a real switch: forwarding,
# reduction against a reference, verdicts, credits, malformed LLs, failures, trees, trips.
check_PROGRAMS += test_switch_ll
test_switch_ll_SOURCES = test_switch_ll.cc exact_int.h
test_switch_ll_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_switch_ll_LDADD = $(ERRORS_LIBS)
