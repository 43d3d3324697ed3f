/* scratch.h - the loop nests' scratch: padded leading dimensions, 64-byte aligned
 * allocation, and size arithmetic that reports overflow instead of wrapping. */
#ifndef FA_CPU_SCRATCH_H
#define FA_CPU_SCRATCH_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"

/* Round up to a multiple of FA_CPU_PAD. */
static inline int64_t fa_cpu_pad(int64_t n) { return (n + FA_CPU_PAD - 1) / FA_CPU_PAD * FA_CPU_PAD; }
/* Leading dimension of a scratch tile of n columns: fa_cpu_pad(n), plus FA_CPU_PAD when
   that is an even number of 64-byte lines. A power-of-two row stride puts a tile's
   column panel (the NR columns a gemm keeps in L1 while A streams past) in a few L1
   sets only, so the panel is re-read from L2; an odd number of
   lines spreads consecutive rows over every set. n <= INT64_MAX - 2 * FA_CPU_PAD. */
static inline int64_t fa_cpu_ld(int64_t n)
{
    int64_t p = fa_cpu_pad(n);
    return (p / FA_CPU_PAD) % 2 == 0 ? p + FA_CPU_PAD : p;
}

/* 64-byte aligned, zeroed; NULL on failure or overflow. */
static inline float *fa_cpu_alloc(int64_t nfloats)
{
    if (nfloats < 1) nfloats = 1;
    size_t bytes = ((size_t)nfloats * sizeof(float) + 63) / 64 * 64;
    if ((uint64_t)nfloats > SIZE_MAX / 8) return NULL;
    void *ptr = NULL;
    if (posix_memalign(&ptr, 64, bytes)) return NULL;
    memset(ptr, 0, bytes);
    return (float *)ptr;
}

/* 64-byte aligned, NOT zeroed (callers zero it where needed, e.g. in parallel so each
   thread first-touches its own slice); NULL on failure or overflow. */
static inline float *fa_cpu_alloc_raw(int64_t nfloats)
{
    if (nfloats < 1) nfloats = 1;
    if ((uint64_t)nfloats > SIZE_MAX / 8) return NULL;
    size_t bytes = ((size_t)nfloats * sizeof(float) + 63) / 64 * 64;
    void *ptr = NULL;
    if (posix_memalign(&ptr, 64, bytes)) return NULL;
    return (float *)ptr;
}

/* A scratch buffer the context keeps from one call to the next (fa_cpu_state.kept): a call
   of the same shape reuses the pages instead of mapping fresh ones, so each call no longer
   pays the kernel's page faults and zeroing of tens of MB and the unmap's TLB shootdowns on
   every thread (16 threads, B=1 H=16 S=1k: ~3 MB a thread). Contents are not kept:
   callers zero what they read, as they did on fresh memory. */
typedef struct {
    float *p;
    int64_t n;   /* floats held */
} fa_cpu_kept;

#define FA_CPU_KEPT_MAX ((int64_t)256 << 20)   /* bytes; a larger buffer is released */

/* k's buffer of at least nfloats, 64-byte aligned, contents undefined; NULL on failure
   (k then holds nothing). */
static inline float *fa_cpu_kept_get(fa_cpu_kept *k, int64_t nfloats)
{
    if (nfloats < 1) nfloats = 1;
    if (k->p && k->n >= nfloats) return k->p;
    free(k->p);
    k->p = fa_cpu_alloc_raw(nfloats);
    k->n = k->p ? nfloats : 0;
    return k->p;
}

/* After a call: a buffer past FA_CPU_KEPT_MAX is released (a context that once ran a long
   sequence does not hold its scratch for life); release = 1 frees it whatever its size. */
static inline void fa_cpu_kept_end(fa_cpu_kept *k, int release)
{
    if (release || k->n > FA_CPU_KEPT_MAX / (int64_t)sizeof(float)) {
        free(k->p);
        k->p = NULL;
        k->n = 0;
    }
}

/* Scratch sizes (elements) from the call's dimensions, which validation bounds only by
   the tensors' element counts (an input may be a stride-0 view of a few bytes): products
   and sums of non-negative sizes that set *ovf instead of wrapping when the result does
   not fit int64. A set *ovf means the scratch cannot exist: FA_ERR_NO_MEMORY. */
static inline int64_t fa_sz_mul(int64_t a, int64_t b, int *ovf)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) { *ovf = 1; return 0; }
    return r;
}
static inline int64_t fa_sz_add(int64_t a, int64_t b, int *ovf)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) { *ovf = 1; return 0; }
    return r;
}
static inline int64_t fa_sz_pad(int64_t n, int *ovf)
{
    if (n > INT64_MAX - FA_CPU_PAD) { *ovf = 1; return 0; }
    return fa_cpu_pad(n);
}
static inline int64_t fa_sz_ld(int64_t n, int *ovf)
{
    if (n > INT64_MAX - 2 * FA_CPU_PAD) { *ovf = 1; return 0; }
    return fa_cpu_ld(n);
}
/* ceil(n / d) for n >= 0, d > 0, without forming n + d - 1. */
static inline int64_t fa_sz_ceil_div(int64_t n, int64_t d)
{
    return n / d + (n % d != 0);
}

#endif
