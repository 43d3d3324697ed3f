/* decode_kernels.h - the decode path's ISA kernels (decode_avx512.c, built with the
 * AVX-512 flags; decode.c calls them only on a context whose kernel set is avx512). */
#ifndef FA_CPU_DECODE_KERNELS_H
#define FA_CPU_DECODE_KERNELS_H

#include <stdint.h>

/* K^T from 16-bit rows: dst[c*ldd + j] = src[j*lds + c] as fp32 (f16: fp16, else bf16;
   exact), j < nk, c < d. Whole 16 x 16 register transposes: columns j up to
   round_up(nk, 16) of dst are written (0 past nk), so ldd >= round_up(nk, 16). */
void fa_cpu_decode_kt16_avx512(float *dst, int64_t ldd, const uint16_t *src, int64_t lds,
                               int nk, int64_t d, int f16);

/* Cache element types of the row kernels below. A bf16 row's 32-element chunk is read as
   its even elements, then its odd ones: q rows and O rows against a bf16 cache are kept in
   that paired order (fa_cpu_decode_pair_avx512 / unpair); fp32 and fp16 in natural order.
   BF16DOT (scores only, built with AVX512-BF16): q rows are bf16 rows, natural order, in
   the first half of each fp32 row, and the products are vdpbf16ps dot products (exact
   products, fp32 sums; bf16 denormals read as 0). */
enum { FA_CPU_DEC_F32, FA_CPU_DEC_BF16, FA_CPU_DEC_F16, FA_CPU_DEC_BF16DOT };

/* Scores from cache rows: s[j*lds + r] = sum_c q[r*ldq + c] k_j[c] for j < nk and r below
   nr rounded up to a power of two (at most 16; then per 16), where k_j = rows[j] + off
   bytes, d elements of type dt; d a multiple of 32. The q rows past nr up to that bound
   must be readable (zeros give finite padding scores). pf (NULL: none): the rows of the
   next block, npf <= nk of them; pf[j] + off is prefetched into L2 as k_j is read, so
   that the memory system works through the whole pass instead of in bursts. */
void fa_cpu_decode_qk_avx512(float *s, int64_t lds, const float *q, int64_t ldq, int nr,
                             const char *const *rows, const char *const *pf, int npf,
                             int64_t off, int nk, int64_t d, int dt);

/* Rows r0 .. r0+nr-1 of O [r][ldo]: o = alpha[r] o + sum_{ka <= j < ke} s[j*lds + r] v_j,
   v_j = rows[j] + off bytes, dv elements of type dt (a multiple of 32). pf, npf: as for
   the scores (pf[j] + off prefetched as v_j is read, for ka <= j < npf). */
void fa_cpu_decode_pv_avx512(float *o, int64_t ldo, const float *alpha, const float *s,
                             int64_t lds, int r0, int nr, const char *const *rows,
                             const char *const *pf, int npf, int64_t off, int ka, int ke,
                             int64_t dv, int dt);

/* mx[c] = max over v < nv of s[16 v + c] * sc, c < 16 (vmaxps: a NaN score may or may not
   win, as in softmax_fwd). */
void fa_cpu_decode_colmax_avx512(const float *s, int nv, float sc, float *mx);

/* rows x d (a multiple of 32) fp32, ld apart: natural order -> paired order, and back. */
void fa_cpu_decode_pair_avx512(float *x, int64_t ld, int rows, int64_t d);
void fa_cpu_decode_unpair_avx512(float *x, int64_t ld, int rows, int64_t d);

#endif
