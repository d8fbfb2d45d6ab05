# libincmoe_moe: the INC-MoE layer (public header api/incmoe_moe.h, installed
# beside libincmoe's in $(includedir)/incmoe/), CPU backend.  Its role workers
# post collectives through libincmoe's device-side FIFO; the version script
# exports the layer's incmoe_moe_* API and nothing else (the incmoe_* calls it
# shares with libincmoe come from libincmoe, which it links).
if HAVE_OPENBLAS
lib_LTLIBRARIES = libincmoe_moe.la
pkginclude_HEADERS = api/incmoe_moe.h

libincmoe_moe_la_SOURCES = \
	band.h \
	sync.c sync.h \
	elem.h \
	layer.c layer.h \
	roles.c \
	config.c \
	ffn_cpu.c \
	cpu_backend.c
libincmoe_moe_la_CPPFLAGS = -I$(top_srcdir)/plugin -I$(top_srcdir)/plugin/api \
	-I$(top_builddir)/plugin/api -I$(top_srcdir)/moe $(OPENBLAS_CFLAGS)
libincmoe_moe_la_LIBADD = $(top_builddir)/plugin/libincmoe.la $(top_builddir)/plugin/libincmoe_base.la \
	$(OPENBLAS_LIBS) -lpthread -lm
libincmoe_moe_la_LDFLAGS = -version-info $(LIBINCMOE_MOE_LT_VERSION) \
	-Wl,--version-script=$(srcdir)/libincmoe_moe.map
EXTRA_libincmoe_moe_la_DEPENDENCIES = libincmoe_moe.map
endif
EXTRA_DIST += libincmoe_moe.map
