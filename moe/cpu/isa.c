/*
 * isa.c - which kernels this process runs: the best this CPU has, read once with cpuid.  A
 * test program may lower it (cpu_isa_test_cap) to run, on a CPU with AVX-512, the paths a
 * CPU without it takes; the library never defines that hook.
 */
#include "cpu/gemm.h"

/* Defined only by a test program: the highest level to run (read at every call, so a test
   sets it before it packs weights and keeps it until it is done with them). */
extern cpu_isa_t cpu_isa_test_cap(void) __attribute__((weak));

static cpu_isa_t isa_detect(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c"))
        return CPU_ISA_PORTABLE;
    if (!__builtin_cpu_supports("avx512f"))
        return CPU_ISA_AVX2;
    if (!__builtin_cpu_supports("avx512bf16"))
        return CPU_ISA_AVX512;
    return CPU_ISA_AVX512_BF16;
}

cpu_isa_t cpu_isa(void)
{
    static int detected = -1;
    int d = __atomic_load_n(&detected, __ATOMIC_RELAXED);
    if (d < 0) {
        d = (int)isa_detect();
        __atomic_store_n(&detected, d, __ATOMIC_RELAXED);
    }
    if (cpu_isa_test_cap != NULL && (int)cpu_isa_test_cap() < d)
        return cpu_isa_test_cap();
    return (cpu_isa_t)d;
}
