/* kernels_shared512.h - AVX-512 pieces shared by the avx512 and amx kernel sets: 32-bit
 * word transposes in registers and the fp32 -> bf16 rounding of 16 lanes (each file
 * compiled with its own ISA flags includes it; nowhere else). */
#ifndef FA_CPU_KERNELS_SHARED512_H
#define FA_CPU_KERNELS_SHARED512_H
#include <immintrin.h>
#include <stdint.h>

/* 16 fp32 lanes -> bf16, round to nearest even; NaN stays a (quiet) NaN, as dtype.h. */
static inline __attribute__((always_inline)) __m256i fa_bf16_rne_512(__m512 x)
{
    const __m512i one = _mm512_set1_epi32(1), r7 = _mm512_set1_epi32(0x7fff);
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    __m512i u = _mm512_castps_si512(x);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absm), inf);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, r7), _mm512_and_si512(_mm512_srli_epi32(u, 16), one));
    r = _mm512_srli_epi32(r, 16);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

/* In-register transpose of 16 x 16 32-bit words (unpack 32, unpack 64, 128-bit lanes x 2). */
static inline __attribute__((always_inline)) void tr16x16(__m512i *v)
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(v[i], v[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(v[i], v[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(v[i + 8], v[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(v[i + 8], v[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        v[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        v[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        v[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* dst[c*ldd + r] = src[r*lds + c] (32-bit words), r < rows, c < cols. */
static inline void fa_tr32_512(uint32_t *dst, int64_t ldd, const uint32_t *src, int64_t lds, int rows, int cols)
{
    int r0 = 0;
    for (; r0 + 16 <= rows; r0 += 16) {
        int c0 = 0;
        for (; c0 + 16 <= cols; c0 += 16) {
            __m512i v[16];
            for (int i = 0; i < 16; i++) v[i] = _mm512_loadu_si512(src + (int64_t)(r0 + i) * lds + c0);
            tr16x16(v);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512(dst + (int64_t)(c0 + i) * ldd + r0, v[i]);
        }
        for (; c0 < cols; c0++)
            for (int i = 0; i < 16; i++) dst[(int64_t)c0 * ldd + r0 + i] = src[(int64_t)(r0 + i) * lds + c0];
    }
    for (; r0 < rows; r0++)
        for (int c = 0; c < cols; c++) dst[(int64_t)c * ldd + r0] = src[(int64_t)r0 * lds + c];
}

#endif
