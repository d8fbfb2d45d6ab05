# The INC-MoE layer: the FIFO, band arithmetic, routing's pure functions, the
# layer against an fp64 reference, bad arguments, a randomised stress test,
# the role loops compiled as CUDA device code and the CUDA backend run on a
# device.
MOE_TEST_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/moe
MOE_TEST_LIBS = $(top_builddir)/moe/libincmoe_moe.la libharness.la $(BASE_LIBS) $(TEST_LIBS)

check_PROGRAMS += test_moe_fifo test_moe_band test_moe_routing test_moe_layer test_moe_errors \
	test_moe_stress test_moe_cuda_proto test_moe_ffn test_moe_auto test_moe_decode \
	test_moe_placement test_moe_replicas
test_moe_fifo_SOURCES = test_moe_fifo.cc
test_moe_fifo_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
# The FIFO suite drives the FIFO's internal transport seam, so it links the
# client's objects rather than the library that hides them.
test_moe_fifo_LDADD = libharness.la $(top_builddir)/plugin/libincmoe_client.la $(GTEST_LIBS) -lpthread
test_moe_band_SOURCES = test_moe_band.cc
test_moe_band_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_band_LDADD = $(MOE_TEST_LIBS)
# The routing's and the band model's pure functions, compiled in (the library hides them).
test_moe_routing_SOURCES = test_moe_routing.cc ../moe/routing.c ../moe/bandmodel.c
test_moe_routing_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_routing_LDADD = $(MOE_TEST_LIBS)
# The CPU backend's expert compute, compiled in (the library hides it).
test_moe_ffn_SOURCES = test_moe_ffn.cc ../moe/cpu/ffn.c ../moe/cpu/ffn_plan.c ../moe/cpu/gemm.c ../moe/cpu/gemm_bf16.c \
	../moe/cpu/isa.c ../moe/cpu/swiglu.c
test_moe_ffn_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_ffn_LDADD = $(BASE_LIBS) $(TEST_LIBS) -lm
test_moe_layer_SOURCES = test_moe_layer.cc moe_ref.cc moe_ref.h
test_moe_layer_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_layer_LDADD = $(MOE_TEST_LIBS)
# The path's choice (incmoe_moe_create_ex): what it picks, forcing, measuring again, and
# bad extensions refused on every rank; the bands each routing runs (the band model compiled
# in: the library hides it).
test_moe_auto_SOURCES = test_moe_auto.cc moe_ref.cc moe_ref.h ../moe/routing.c ../moe/bandmodel.c
test_moe_auto_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_auto_LDADD = $(MOE_TEST_LIBS)
# The decode step: the low-latency form's dispatch, experts and combine (incmoe_moe.h, "Decode").
test_moe_decode_SOURCES = test_moe_decode.cc moe_ref.cc moe_ref.h
test_moe_decode_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_decode_LDADD = $(MOE_TEST_LIBS)
# Choosing a placement with replicas: the per-token rule (compiled in: the library hides it),
# the rows, the chooser against EPLB's greedy on incmoe-moe-bench's routing (both tools'
# files compiled in), and incmoe-replica-rows run as a user runs it.
test_moe_placement_SOURCES = test_moe_placement.cc test_perf_run.cc perf_run.h \
	../moe/replica_choice.c ../tools/eplb.c ../tools/moe_bench_data.c
test_moe_placement_CPPFLAGS = $(MOE_TEST_CPPFLAGS) -I$(top_srcdir)/tools
test_moe_placement_LDADD = $(MOE_TEST_LIBS) -lm
# Expert replicas (incmoe_moe.h, "Replicas"): the layer against the reference and the
# unreplicated layer, bad placements, and the choice's balance (its pure functions compiled
# in: the library hides them).
test_moe_replicas_SOURCES = test_moe_replicas.cc moe_ref.cc moe_ref.h ../moe/replica_plan.c \
	../moe/replica_choice.c
test_moe_replicas_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_replicas_LDADD = $(MOE_TEST_LIBS)
test_moe_errors_SOURCES = test_moe_errors.cc moe_ref.cc moe_ref.h
test_moe_errors_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_errors_LDADD = $(MOE_TEST_LIBS)
test_moe_stress_SOURCES = test_moe_stress.cc moe_ref.cc moe_ref.h
test_moe_stress_CPPFLAGS = $(MOE_TEST_CPPFLAGS)
test_moe_stress_LDADD = $(MOE_TEST_LIBS)
# The CUDA backend's FIFO protocol and buffer placement, run on the host.
test_moe_cuda_proto_SOURCES = test_moe_cuda_proto.cc ../moe/cuda/placement.c
test_moe_cuda_proto_CPPFLAGS = $(MOE_TEST_CPPFLAGS) $(UCX_CFLAGS)
test_moe_cuda_proto_LDADD = $(top_builddir)/plugin/libincmoe_client.la $(BASE_LIBS) $(UCX_LIBS) \
	$(GTEST_LIBS) -lpthread
# Only where configure found CUDA (a build without it neither runs nvcc nor
# links cudart): nvcc compiles the role loops as device code, and the CUDA
# backend runs on a device (every test skipped where there is none).
if HAVE_CUDA
check_PROGRAMS += test_moe_cuda_compile test_moe_cuda
test_moe_cuda_compile_SOURCES = test_moe_cuda_compile.cc
test_moe_cuda_compile_CPPFLAGS = $(AM_CPPFLAGS) -DNVCC_PATH='"$(NVCC)"' -DTOP_SRCDIR='"$(abs_top_srcdir)"'
test_moe_cuda_compile_LDADD = $(GTEST_LIBS) -lpthread
test_moe_cuda_SOURCES = test_moe_cuda.cc moe_ref.cc moe_ref.h
test_moe_cuda_CPPFLAGS = $(MOE_TEST_CPPFLAGS) $(CUDA_CFLAGS)
test_moe_cuda_LDADD = $(MOE_TEST_LIBS) $(CUDA_LIBS)
endif
