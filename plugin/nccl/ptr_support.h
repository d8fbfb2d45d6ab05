/*
 * ptr_support.h - which memory NCCL may hand the plugin (ptrSupport).
 *
 * NCCL_PTR_CUDA tells NCCL to place its network buffers in GPU memory and
 * hand the plugin device pointers (GPUDirect); without it NCCL allocates them
 * in pinned host memory that its kernels reach through the mapping, and the
 * plugin only ever sees host pointers.  So the plugin claims NCCL_PTR_CUDA
 * only where the bytes are moved by UCX alone and UCX itself can move CUDA
 * memory (UCX built with CUDA transports): a copy of our own on NCCL's proxy
 * thread would be the slowest way to move them.
 */
#ifndef INCMOE_NCCL_PTR_SUPPORT_H
#define INCMOE_NCCL_PTR_SUPPORT_H

#include <stdint.h>

#include <ucs/memory/memory_type.h>

#include "abi.h"

/*
 * ucx_memory_types: ucp_context_attr_t.memory_types (bit i = ucs_memory_type_t i).
 * cpu_touches_data: the component reads or writes the buffers with the CPU
 * (the CollNet client adds the root's own partial and copies eager payloads),
 * so device memory can never be handed to it, whatever UCX moves.
 */
static inline int plugin_ptr_support_of(uint64_t ucx_memory_types, int cpu_touches_data)
{
    int cuda = (ucx_memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    return NCCL_PTR_HOST | (cuda && !cpu_touches_data ? NCCL_PTR_CUDA : 0);
}

#endif
