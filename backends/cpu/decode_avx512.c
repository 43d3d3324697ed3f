/* decode_avx512.c - the decode path's AVX-512 kernel (decode_kernels.h): bf16/fp16 K
 * rows converted and transposed in registers, one pass from the cache into K^T. */
#include "config.h"
#include <immintrin.h>
#include <stdint.h>
#include "decode_kernels.h"
#include "kernels_shared512.h"

/* 16 16-bit elements (m: the lanes to read) -> fp32, exactly. */
static inline __m512i load16(const uint16_t *p, __mmask16 m, int f16)
{
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (f16) return _mm512_castps_si512(_mm512_cvtph_ps(h));
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

void fa_cpu_decode_kt16_avx512(float *dst, int64_t ldd, const uint16_t *src, int64_t lds,
                               int nk, int64_t d, int f16)
{
    for (int j0 = 0; j0 < nk; j0 += 16) {
        int rows = nk - j0 < 16 ? nk - j0 : 16;
        for (int64_t c0 = 0; c0 < d; c0 += 16) {
            int cols = d - c0 < 16 ? (int)(d - c0) : 16;
            __mmask16 m = (__mmask16)((1u << cols) - 1u);
            __m512i v[16];
            for (int i = 0; i < 16; i++)
                v[i] = i < rows ? load16(src + (int64_t)(j0 + i) * lds + c0, m, f16)
                                : _mm512_setzero_si512();
            tr16x16(v);
            for (int i = 0; i < cols; i++) _mm512_storeu_si512(dst + (c0 + i) * ldd + j0, v[i]);
        }
    }
}
