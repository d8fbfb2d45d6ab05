# incmoe-ffn-bench, the CPU backend's expert compute alone against one large OpenBLAS sgemm
# (a developer benchmark: it compiles moe/cpu's FFN in, so it is built, never installed).
# Included by tools/Makefile.am.
if HAVE_OPENBLAS
noinst_PROGRAMS += incmoe-ffn-bench
incmoe_ffn_bench_SOURCES = ffn_bench.c ../moe/cpu/ffn.c ../moe/cpu/ffn_plan.c \
	../moe/cpu/gemm.c ../moe/cpu/gemm_bf16.c ../moe/cpu/isa.c ../moe/cpu/swiglu.c
incmoe_ffn_bench_CPPFLAGS = $(INCMOE_CPPFLAGS) -I$(top_srcdir)/moe $(OPENBLAS_CFLAGS)
incmoe_ffn_bench_LDADD = $(top_builddir)/base/libincmoe_base.la \
	$(top_builddir)/plugin/libincmoe.la $(OPENBLAS_LIBS) -lm -lpthread
endif
