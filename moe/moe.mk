# libincmoe_moe: the INC-MoE layer (public header include/incmoe/incmoe_moe.h,
# installed by the top-level Makefile.am).  The backend-neutral part (API,
# exchange, plan, autotune, the role loops of roles.h) and the CPU backend in
# cpu/ (threads, its own GEMM kernel: no BLAS); the CUDA backend in cuda/ (one persistent kernel,
# built when configure finds CUDA: nvcc compiles kernel.cu through libtool, one
# -gencode per --with-cuda-arch entry, and the library links cudart).  The role workers post collectives
# through libincmoe's FIFO; the version script exports the layer's
# incmoe_moe_* API and nothing else (the incmoe_* calls it shares with
# libincmoe come from libincmoe, which it links).
lib_LTLIBRARIES = libincmoe_moe.la

libincmoe_moe_la_SOURCES = \
	band.h ctx.h plan.h roles.h backend.h \
	layer.c layer.h \
	ext.c ext.h \
	choose.c choose.h \
	run.c run.h \
	decode.c decode.h \
	lanes.c lanes.h \
	exchange.c \
	plan.c \
	routing.c routing.h \
	replica_choice.c replica_choice.h \
	placement_check.c placement_check.h \
	placement_rows.c placement_rows.h \
	placement_pack.c placement_pack.h \
	placement_choose.c \
	replica_plan.c replica_plan.h \
	replicas.c replicas.h \
	names.c \
	choices.c \
	autotune.c \
	bandmodel.c bandmodel.h \
	calibrate.c \
	wait.c wait.h \
	cpu/cpu.h cpu/prims.h cpu/elem.h \
	cpu/backend.c \
	cpu/decode.c \
	cpu/pool.c \
	cpu/ffn.c cpu/ffn_plan.c cpu/ffn_probe.c \
	cpu/gemm.c cpu/gemm_bf16.c cpu/isa.c cpu/gemm.h \
	cpu/swiglu.c cpu/swiglu.h cpu/swiglu_lanes.h
libincmoe_moe_la_CPPFLAGS = $(INCMOE_CPPFLAGS) -I$(top_srcdir)/moe
libincmoe_moe_la_LIBADD = $(top_builddir)/plugin/libincmoe.la $(top_builddir)/base/libincmoe_base.la \
	-lpthread -lm
libincmoe_moe_la_LDFLAGS = -version-info $(LIBINCMOE_MOE_LT_VERSION) \
	-Wl,--version-script=$(srcdir)/libincmoe_moe.map
EXTRA_libincmoe_moe_la_DEPENDENCIES = libincmoe_moe.map

if HAVE_CUDA
MOE_CU_HDRS = cuda/devfifo.h cuda/state.h cuda/kernel.h cuda/placement.h \
	cuda/prims.cuh cuda/ffn.cuh
libincmoe_moe_la_SOURCES += cuda/backend.c cuda/placement.c $(MOE_CU_HDRS)
libincmoe_moe_la_CPPFLAGS += -DINCMOE_MOE_CUDA=1 -DINCMOE_CUDA_ARCHS='"$(CUDA_ARCHS)"' \
	$(CUDA_CFLAGS) $(UCX_CFLAGS)
libincmoe_moe_la_LIBADD += cuda/kernel.lo $(CUDA_LIBS) $(UCX_LIBS)
EXTRA_libincmoe_moe_la_DEPENDENCIES += cuda/kernel.lo
MOE_NVCC_FLAGS = $(CUDA_GENCODE) -O2 -std=c++17 $(INCMOE_CPPFLAGS) -I$(top_srcdir)/moe
# libtool makes the PIC object and the .lo; nvcc-pic hands libtool's -fPIC to the host compiler.
cuda/kernel.lo: cuda/kernel.cu $(MOE_CU_HDRS) ctx.h plan.h band.h roles.h \
		$(top_srcdir)/include/incmoe/incmoe_fifo.h
	@$(MKDIR_P) cuda
	$(AM_V_GEN)$(LIBTOOL) $(AM_V_lt) --tag=CC --mode=compile $(srcdir)/cuda/nvcc-pic $(NVCC) \
		$(MOE_NVCC_FLAGS) -c $(srcdir)/cuda/kernel.cu -o $@
CLEANFILES += cuda/kernel.lo
clean-local:
	-rm -rf cuda/.libs cuda/*.o
endif
# The CUDA sources ship whether or not this build compiles them.
EXTRA_DIST += libincmoe_moe.map cuda/kernel.cu cuda/nvcc-pic cuda/devfifo.h cuda/state.h \
	cuda/kernel.h cuda/placement.h cuda/prims.cuh cuda/ffn.cuh cuda/backend.c cuda/placement.c
