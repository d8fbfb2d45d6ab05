/*
 * devfifo.h - the FIFO across PCIe: a GPU thread block posts a descriptor
 * into the shared block of plugin/fifo.c (host-mapped pinned memory) and the
 * FIFO's host proxy drains it, as MSCCL++'s FIFO does.
 *
 * Device atomics on host-mapped memory are not atomic with respect to the
 * host, so no word is read-modify-written by both sides.  Producers reserve
 * positions with an atomic on device memory, write the descriptor with plain
 * stores, fence at system scope and hand the slot over with one store; they
 * only read what the host owns.
 *
 * Who may read-modify-write which word:
 *   device memory (devfifo_words_t, one per FIFO):
 *     reserve        device RMW (fetch-add by a posting thread); the host never touches it
 *     pushed[s]      device RMW (fetch-add: tickets of stream s); the host never touches it
 *   host-mapped memory (the FIFO's shared block, incmoe_fifo_device_t):
 *     slots[i].trigger  plain stores by the device while it owns the slot; read by the host
 *     slots[i].seq      plain stores only, by the side that owns the slot: the device
 *                       stores pos + 1 (after the trigger and a system fence), the host
 *                       proxy stores pos + capacity once it copied the trigger; nobody
 *                       read-modify-writes it, so no atomicity across PCIe is needed
 *     completed[s]   host RMW (incmoe_counter_publish); the device only loads (acquire)
 *     error          host RMW (the proxy's first failure); the device only loads
 *     tail, pushed[] of the shared block, doorbell, bell
 *                    host producers and host waiters only; the device never touches them
 *                    (it cannot wake a futex: the proxy polls every idle_us instead)
 *
 * The slot protocol is plugin/fifo.c's sequence-number scheme (slot of
 * position p free when seq == p, full when seq == p + 1); the proxy is the
 * same code for host and device producers.  A position, once reserved, is
 * published unless the forward aborts (the layer is then unusable and the
 * proxy, which stops at the unpublished slot, is only destroyed).
 *
 * The header is host and device code: the device side uses libcu++ atomics
 * (device scope for the device words, system scope for the shared block),
 * the host side GCC builtins with the same orders, so the host tests run the
 * protocol the kernel runs.
 */
#ifndef INCMOE_MOE_CUDA_DEVFIFO_H
#define INCMOE_MOE_CUDA_DEVFIFO_H

#include <stdint.h>

#include "incmoe/incmoe_fifo.h"

#if defined(__CUDACC__)
#define DEVFIFO_FN static inline __host__ __device__
#else
#define DEVFIFO_FN static inline
#endif

/* The words producers share among themselves (device memory for a GPU). */
typedef struct {
    uint64_t reserve;
    uint64_t pushed[INCMOE_FIFO_MAX_STREAMS];
} devfifo_words_t;

/* What a kernel takes by value: the FIFO's shared block and the producers' words. */
typedef struct {
    incmoe_fifo_device_t fifo; /* pointers valid on the producer's side */
    devfifo_words_t *words;
} devfifo_t;

#if defined(__CUDACC__) && defined(__CUDA_ARCH__)
DEVFIFO_FN uint64_t devfifo_fetch_add(uint64_t *p)
{
    return cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(*p).fetch_add(
        1, cuda::memory_order_relaxed);
}
DEVFIFO_FN void devfifo_fence_system(void)
{
    __threadfence_system();
}
#else
DEVFIFO_FN uint64_t devfifo_fetch_add(uint64_t *p)
{
    return __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
}
DEVFIFO_FN void devfifo_fence_system(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#endif

/* Step 1: claims the next position (relaxed: a position publishes nothing). */
DEVFIFO_FN uint64_t devfifo_reserve(const devfifo_t *f)
{
    return devfifo_fetch_add(&f->words->reserve);
}

/*
 * Step 2, polled: INCMOE_OK once position pos's slot is free (the proxy took
 * what it held one lap ago), INCMOE_IN_PROGRESS while it is not, the proxy's
 * error once it failed.
 */
DEVFIFO_FN incmoe_status_t devfifo_slot_free(const devfifo_t *f, uint64_t pos)
{
    int32_t err = incmoe_atomic_load_acquire32(f->fifo.error);
    if (err != 0)
        return (incmoe_status_t)err;
    const incmoe_fifo_slot_t *slot = &f->fifo.slots[pos & (f->fifo.capacity - 1)];
    /* acquire: pairs with the proxy's release when it handed the slot back */
    return incmoe_atomic_load_acquire64(&slot->seq) == pos ? INCMOE_OK : INCMOE_IN_PROGRESS;
}

/*
 * Step 3: writes the trigger into the free slot of position pos and hands it
 * to the proxy; returns the ticket (collectives of the stream pushed so far,
 * this one included).  The caller serialises pushes of one stream and has
 * made the data the collective sends visible at system scope before (the
 * fence here covers it as well).
 */
DEVFIFO_FN uint64_t devfifo_publish(const devfifo_t *f, uint64_t pos,
                                    const incmoe_fifo_trigger_t *trigger)
{
    incmoe_fifo_slot_t *slot = &f->fifo.slots[pos & (f->fifo.capacity - 1)];
    int s = incmoe_fifo_dev_stream(trigger->desc.op);
    slot->trigger = *trigger; /* plain stores: the slot is ours until seq says otherwise */
    uint64_t t = devfifo_fetch_add(&f->words->pushed[s]);
    /* The trigger (and every earlier write of this thread) reaches the host before seq. */
    devfifo_fence_system();
    incmoe_atomic_store_release64(&slot->seq, pos + 1);
    return t + 1;
}

/* Collectives of a stream the proxy completed (acquire: their data is visible). */
DEVFIFO_FN uint64_t devfifo_completed(const devfifo_t *f, int stream)
{
    return incmoe_fifo_dev_completed(&f->fifo, stream);
}

#endif
