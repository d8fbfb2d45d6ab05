# incmoe-moe-bench, the MoE layer benchmark.  Included by tools/Makefile.am.
bin_PROGRAMS += incmoe-moe-bench
# --extra-slots: the layer's per-token replica rule (moe/replica_choice.c, internal to
# libincmoe_moe) compiled in, as tests/moe.mk takes it, for the decode rows and k-bar.
incmoe_moe_bench_SOURCES = moe_bench.c moe_bench.h moe_bench_rank.c moe_bench_table.c moe_bench_ref.c \
	moe_bench_data.c moe_bench_args.c moe_bench_decode.c moe_bench_placement.c \
	../moe/replica_choice.c
incmoe_moe_bench_CPPFLAGS = $(INCMOE_CPPFLAGS) -I$(top_srcdir)/moe
incmoe_moe_bench_LDADD = libincmoe_tools.la $(top_builddir)/moe/libincmoe_moe.la \
	$(top_builddir)/plugin/libincmoe.la -lm -lpthread
if HAVE_CUDA
# --backend cuda: inputs staged in device memory through the CUDA runtime.
incmoe_moe_bench_CPPFLAGS += -DINCMOE_MOE_CUDA=1 $(CUDA_CFLAGS)
incmoe_moe_bench_LDADD += $(CUDA_LIBS)
endif
