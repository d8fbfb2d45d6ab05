# incmoe-nccl-check: NCCL with the plugin on one GPU, each rank its own node
# (tools/gpu-check runs it).  Built only where the CUDA toolkit and NCCL were
# found; the CUDA runtime is linked statically so that the GPU machine needs
# only its driver and NCCL.  Included by tools/Makefile.am.
if HAVE_CUDA
if HAVE_NCCL_H
noinst_PROGRAMS += incmoe-nccl-check
incmoe_nccl_check_SOURCES = nccl_check.c
incmoe_nccl_check_CPPFLAGS = -I$(CUDA_HOME)/include
incmoe_nccl_check_LDADD = -L$(CUDA_HOME)/lib64 -lnccl -lcudart_static -lrt -ldl -lpthread
endif
endif
