# libincmoe_moe: the INC-MoE layer (public header api/incmoe_moe.h, installed
# beside libincmoe's in $(includedir)/incmoe/).  The backend-neutral part (API,
# exchange, plan, autotune, the role loops of roles.h) and the CPU backend in
# cpu/ (threads, OpenBLAS); cuda/ holds the device primitives the role loops
# compile against for the CUDA backend.  The role workers post collectives
# through libincmoe's FIFO; the version script exports the layer's
# incmoe_moe_* API and nothing else (the incmoe_* calls it shares with
# libincmoe come from libincmoe, which it links).
if HAVE_OPENBLAS
lib_LTLIBRARIES = libincmoe_moe.la
pkginclude_HEADERS = api/incmoe_moe.h

libincmoe_moe_la_SOURCES = \
	band.h ctx.h plan.h roles.h backend.h \
	layer.c layer.h \
	exchange.c \
	plan.c \
	autotune.c \
	cpu/cpu.h cpu/prims.h cpu/elem.h \
	cpu/backend.c \
	cpu/pool.c \
	cpu/ffn.c
libincmoe_moe_la_CPPFLAGS = -I$(top_srcdir)/plugin -I$(top_srcdir)/plugin/api \
	-I$(top_builddir)/plugin/api -I$(top_srcdir)/moe $(OPENBLAS_CFLAGS)
libincmoe_moe_la_LIBADD = $(top_builddir)/plugin/libincmoe.la $(top_builddir)/plugin/libincmoe_base.la \
	$(OPENBLAS_LIBS) -lpthread -lm
libincmoe_moe_la_LDFLAGS = -version-info $(LIBINCMOE_MOE_LT_VERSION) \
	-Wl,--version-script=$(srcdir)/libincmoe_moe.map
EXTRA_libincmoe_moe_la_DEPENDENCIES = libincmoe_moe.map
endif
EXTRA_DIST += libincmoe_moe.map cuda/prims.cuh cuda/kernel.cu
