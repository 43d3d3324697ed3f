/* kernel_sets.c - the kernel sets the kernel-level tests run, and their random stream
 * (kernel_sets.h).
 */
#include "config.h"
#include <stdio.h>

#include "kernel_sets.h"

kset sets[3];
int nsets;

void find_sets(const char *prog)
{
    sets[nsets++] = (kset){ "generic", &fa_cpu_kernels_generic, 1, 0 };
#ifdef FA_HAVE_AVX2
    __builtin_cpu_init();
    sets[nsets++] = (kset){ "avx2", &fa_cpu_kernels_avx2,
                            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), 1 };
#endif
#ifdef FA_HAVE_AVX512
    sets[nsets++] = (kset){ "avx512", &fa_cpu_kernels_avx512,
                            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"), 1 };
#endif
    for (int si = 0; si < nsets; si++)
        if (!sets[si].ok)
            fprintf(stderr, "NOTE: %s: kernel set %s not run: this CPU or OS lacks its ISA\n",
                    prog, sets[si].name);
}

static uint64_t rng_state = 88172645463325252ull;
double unif(void)   /* [0, 1) */
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}
