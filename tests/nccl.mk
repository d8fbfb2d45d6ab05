# NCCL plugin suites.  The net and CollNet suites dlopen() the built
# plugin from plugin/.libs exactly as NCCL does; window is a unit test of the
# window arithmetic.  The shared part asks UCX what memory it moves, which is
# what the plugin's ptrSupport must report.
check_PROGRAMS += test_nccl_window test_nccl_exports test_nccl_net test_nccl_collnet
NCCL_TEST_COMMON = test_nccl_common.cc nccl_loader.h
NCCL_TEST_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_nccl_window_SOURCES = test_nccl_window.cc ../plugin/nccl/window.c
test_nccl_window_CPPFLAGS = $(AM_CPPFLAGS)
test_nccl_window_LDADD = $(TEST_LIBS)
test_nccl_exports_SOURCES = test_nccl_exports.cc $(NCCL_TEST_COMMON)
test_nccl_exports_CPPFLAGS = $(NCCL_TEST_CPPFLAGS)
test_nccl_exports_LDADD = $(TEST_LIBS) $(UCX_LIBS) -ldl
test_nccl_net_SOURCES = test_nccl_net.cc $(NCCL_TEST_COMMON)
test_nccl_net_CPPFLAGS = $(NCCL_TEST_CPPFLAGS)
test_nccl_net_LDADD = libharness.la $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS) -ldl
test_nccl_collnet_SOURCES = test_nccl_collnet.cc $(NCCL_TEST_COMMON)
test_nccl_collnet_CPPFLAGS = $(NCCL_TEST_CPPFLAGS)
test_nccl_collnet_LDADD = libharness.la $(BASE_LIBS) $(TEST_LIBS) $(UCX_LIBS) -ldl
