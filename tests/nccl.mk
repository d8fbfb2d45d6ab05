# NCCL plugin suites.  The net and CollNet suites dlopen() the built
# plugin from plugin/.libs exactly as NCCL does; window is a unit test of the
# window arithmetic; the fake CUDA runtime lets the GPU-staging path run on
# machines without a GPU.
check_PROGRAMS += test_nccl_window test_nccl_exports test_nccl_net test_nccl_collnet
noinst_LTLIBRARIES += test_nccl_fake_cudart.la
test_nccl_fake_cudart_la_SOURCES = test_nccl_fake_cudart.cc
test_nccl_fake_cudart_la_LDFLAGS = -module -avoid-version -shared -rpath $(abs_builddir)
if HAVE_CUDA
NCCL_TEST_CUDA = -DINCMOE_NCCL_CUDA=1
else
NCCL_TEST_CUDA =
endif
NCCL_TEST_COMMON = test_nccl_common.cc nccl_loader.h
test_nccl_window_SOURCES = test_nccl_window.cc ../plugin/nccl/window.c
test_nccl_window_CPPFLAGS = $(AM_CPPFLAGS)
test_nccl_window_LDADD = $(TEST_LIBS)
test_nccl_exports_SOURCES = test_nccl_exports.cc $(NCCL_TEST_COMMON)
test_nccl_exports_LDADD = $(TEST_LIBS) -ldl
test_nccl_net_SOURCES = test_nccl_net.cc $(NCCL_TEST_COMMON)
test_nccl_net_CPPFLAGS = $(AM_CPPFLAGS) $(NCCL_TEST_CUDA)
test_nccl_net_LDADD = libharness.la $(TEST_LIBS) -ldl
test_nccl_collnet_SOURCES = test_nccl_collnet.cc $(NCCL_TEST_COMMON)
test_nccl_collnet_CPPFLAGS = $(AM_CPPFLAGS) $(NCCL_TEST_CUDA)
test_nccl_collnet_LDADD = libharness.la $(TEST_LIBS) -ldl
