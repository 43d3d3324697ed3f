/* vecops.h - short helpers of the loop nests: a prefetch of a span of bytes, and
 * fixed-order vector helpers (an Inf/NaN test, a dot product, a sum of rows, a
 * transpose). Each sums in an order that depends on the sizes only, so every thread
 * computes the same bits. */
#ifndef FA_CPU_VECOPS_H
#define FA_CPU_VECOPS_H

#include <stdint.h>
#include <string.h>
#include "kernels.h"

/* The cache lines of bytes at a prefetched, for writing or reading, into every level or
   (l2) into L2 and out; the constant arguments fold to one prefetch instruction. */
static inline void fa_cpu_prefetch_span(const void *a, int64_t bytes, int write, int l2)
{
    const char *c = (const char *)a;
    for (int64_t x = 0; x < bytes; x += 64) {
        if (write) {
            if (l2) __builtin_prefetch(c + x, 1, 2);
            else __builtin_prefetch(c + x, 1, 3);
        } else {
            if (l2) __builtin_prefetch(c + x, 0, 2);
            else __builtin_prefetch(c + x, 0, 3);
        }
    }
}

/* 1 when one of the rows x[r*ld + c] (r < rows, c < n) is Inf or NaN. On the bits: the
   exponent field plus one exponent unit reaches bit 31 exactly when the field is all
   ones, so an OR of (u & exp) + unit over the row has bit 31 set iff some element is
   Inf/NaN. Eight lanes of fixed width, which gcc -O2 turns into vector and/add/or at the
   library's baseline ISA (a NaN-aware float compare, x - x == 0, stayed a scalar
   ucomiss/setp/cmov per element, also under omp simd once inlined into the loop nests). */
static inline int fa_cpu_nonfinite(const float *x, int rows, int64_t n, int64_t ld)
{
    uint32_t acc[8] = { 0 }, bad = 0;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + r * ld;
        int64_t c = 0;
        for (; c + 8 <= n; c += 8) {
            uint32_t u[8];
            memcpy(u, xr + c, sizeof u);
            for (int e = 0; e < 8; e++) acc[e] |= (u[e] & 0x7f800000u) + 0x00800000u;
        }
        for (; c < n; c++) {
            uint32_t u;
            memcpy(&u, xr + c, sizeof u);
            bad |= (u & 0x7f800000u) + 0x00800000u;
        }
    }
    for (int e = 0; e < 8; e++) bad |= acc[e];
    return (int)(bad >> 31);
}

/* sum_c a[c] b[c] in a fixed order: eight lanes of fixed width (element c goes to lane
   c % 8 while eight remain), the lanes added pairwise (0+4, 1+5, ... then 0+2, 1+3, then
   0+1), then the tail in order. gcc -O2 keeps the lanes in vector registers at the
   library's baseline ISA; a plain running sum is one dependent add per element. The
   order depends on n only, so the result is the same on every thread. */
static inline float fa_cpu_dot(const float *restrict a, const float *restrict b, int64_t n)
{
    float acc[8] = { 0 };
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int e = 0; e < 8; e++) acc[e] += a[c + e] * b[c + e];
    for (int e = 0; e < 4; e++) acc[e] += acc[e + 4];
    acc[0] += acc[2]; acc[1] += acc[3];
    float s = acc[0] + acc[1];
    for (; c < n; c++) s += a[c] * b[c];
    return s;
}

/* dst[x] = a[x] + b[x], x < n (dst may be a; b never overlaps either). Blocks of eight
   fixed lanes, like fa_cpu_dot: gcc -O2's cost model vectorizes those, not a loop of
   unknown count. */
static inline void fa_cpu_add_f32(float *dst, const float *a, const float *restrict b, int64_t n)
{
    int64_t x = 0;
    for (; x + 8 <= n; x += 8) {
        float t[8];
        for (int e = 0; e < 8; e++) t[e] = a[x + e] + b[x + e];
        for (int e = 0; e < 8; e++) dst[x + e] = t[e];
    }
    for (; x < n; x++) dst[x] = a[x] + b[x];
}

/* dst[c*ldd + r] = src[r*lds + c], r < rows, c < cols: the kernel set's register
   transpose where it has one, else 16 x 16 blocks in C (a row at a time would store each
   element to another cache line). The Q^T blocks of the forward and the backward. */
static inline void fa_cpu_transpose_f32(const fa_cpu_kernels *K, float *dst, int64_t ldd,
                                        const float *src, int64_t lds, int rows, int64_t cols)
{
    if (K->tr32) {
        K->tr32((uint32_t *)dst, ldd, (const uint32_t *)src, lds, rows, (int)cols);
        return;
    }
    for (int r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            int r1 = rows - r0 < 16 ? rows : r0 + 16;
            int64_t c1 = cols - c0 < 16 ? cols : c0 + 16;
            for (int64_t c = c0; c < c1; c++)
                for (int r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}
#endif
