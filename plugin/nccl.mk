# libnccl-net-incmoe.so: the NCCL net + CollNet plugin.  NCCL dlopen()s it by
# name (NCCL_NET_PLUGIN=incmoe), so it is a module installed to libdir with no
# version suffix.  It links its own copy of the client library, and the version
# script exports only the plugin structs: NCCL's process sees nothing else of
# ours.  It links no CUDA library: NCCL hands it GPU buffers only where UCX
# moves CUDA memory itself (nccl/ptr_support.h).
lib_LTLIBRARIES += libnccl-net-incmoe.la
libnccl_net_incmoe_la_SOURCES = \
	nccl/abi.h \
	nccl/plugin.h \
	nccl/common.c \
	nccl/window.c nccl/window.h \
	nccl/ptr_support.h nccl/memtypes.c \
	nccl/net.h nccl/net_init.c nccl/net_listen.c nccl/net_handshake.c nccl/net_reg.c nccl/net.c \
	nccl/collnet.c \
	nccl/adapt_v9.c \
	nccl/adapt_v10.c \
	nccl/adapt_v11.c
libnccl_net_incmoe_la_CPPFLAGS = $(INCMOE_CPPFLAGS) $(UCX_CFLAGS)
libnccl_net_incmoe_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
libnccl_net_incmoe_la_LIBADD = libincmoe_client.la $(UCX_LIBS) $(CRYPTO_LIBS) -lpthread -lm -ldl
libnccl_net_incmoe_la_LDFLAGS = -module -avoid-version -shared \
	-Wl,--version-script=$(srcdir)/nccl/exports.map
EXTRA_libnccl_net_incmoe_la_DEPENDENCIES = nccl/exports.map
EXTRA_DIST += nccl/exports.map
