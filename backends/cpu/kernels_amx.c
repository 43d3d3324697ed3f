/* kernels_amx.c - Intel AMX bf16 kernels (TDPBF16PS tiles, fp32 accumulation) for the
 * bf16 forward and backward (kernels.h, fa_cpu_amx_kernels). Built as its own convenience library with
 * -mamx-tile -mamx-bf16 plus the AVX-512 (+BF16) flags; cpu.c calls it only after CPUID
 * (AMX-BF16, AMX-TILE, AVX512-BF16), XGETBV (XTILECFG/XTILEDATA) and the Linux
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) permission request all agree.
 *
 * One tile configuration, loaded at the start of every gemm call (the configuration is per
 * thread and other code in the thread may change it; ldtilecfg costs ~1% of a call):
 * all 8 tiles 16 rows x 64 bytes. Register use of the 2 x 2 block (32 x 32 of C):
 *
 *        tmm6   tmm7        B: 16 k-pairs x 16 columns (bf16 pairs, "VNNI" layout)
 *   tmm4 tmm0   tmm1        A: 16 rows x 32 k (bf16 row-major)
 *   tmm5 tmm2   tmm3        C: 16 x 16 fp32
 */
#include "config.h"
#include <immintrin.h>
#include <string.h>
#include "kernels.h"
#include "kernels_shared512.h"

typedef struct __attribute__((packed, aligned(64))) {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static void load_cfg(void)
{
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    _tile_loadconfig(&cfg);
}

/* One block of MT x NT C tiles (MT, NT in {1, 2}, compile-time), k32 steps of 32 k. */
static inline __attribute__((always_inline)) void
amx_block(const int MT, const int NT, int k32, const uint16_t *a, int64_t lda,
          const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int acc)
{
    const int64_t sa = lda * 2, sb = ldb * 4, sc = ldc * 4;
    if (acc) {
        _tile_loadd(0, c, sc);
        if (NT > 1) _tile_loadd(1, c + 16, sc);
        if (MT > 1) _tile_loadd(2, c + 16 * ldc, sc);
        if (MT > 1 && NT > 1) _tile_loadd(3, c + 16 * ldc + 16, sc);
    } else {
        _tile_zero(0);
        if (NT > 1) _tile_zero(1);
        if (MT > 1) _tile_zero(2);
        if (MT > 1 && NT > 1) _tile_zero(3);
    }
    for (int p = 0; p < k32; p++) {
        const uint16_t *ap = a + 32 * p;
        const uint32_t *bp = b + 16 * p * ldb;
        _tile_loadd(6, bp, sb);
        _tile_loadd(4, ap, sa);
        _tile_dpbf16ps(0, 4, 6);
        if (NT > 1) {
            _tile_loadd(7, bp + 16, sb);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (MT > 1) {
            _tile_loadd(5, ap + 16 * lda, sa);
            _tile_dpbf16ps(2, 5, 6);
            if (NT > 1) _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, sc);
    if (NT > 1) _tile_stored(1, c + 16, sc);
    if (MT > 1) _tile_stored(2, c + 16 * ldc, sc);
    if (MT > 1 && NT > 1) _tile_stored(3, c + 16 * ldc + 16, sc);
}

/* C[m][n] (+)= A[m][k] B[k][n], see kernels.h for the layouts and padding rules. */
static void amx_gemm(int m, int n, int k32, const uint16_t *a, int64_t lda, const uint32_t *b,
                     int64_t ldb, float *c, int64_t ldc, int acc)
{
    if (m <= 0 || n <= 0) return;
    load_cfg();
    int mt = (m + 15) / 16, nt = (n + 15) / 16;
    /* column pairs outer (B panel of 2 x k32 tiles stays in L1), row pairs inner */
    for (int j = 0; j < nt; j += 2) {
        const uint32_t *bj = b + 16 * j;
        int two_n = j + 1 < nt;
        for (int i = 0; i < mt; i += 2) {
            const uint16_t *ai = a + 16 * i * lda;
            float *cij = c + 16 * i * ldc + 16 * j;
            int two_m = i + 1 < mt;
            if (two_m && two_n) amx_block(2, 2, k32, ai, lda, bj, ldb, cij, ldc, acc);
            else if (two_m) amx_block(2, 1, k32, ai, lda, bj, ldb, cij, ldc, acc);
            else if (two_n) amx_block(1, 2, k32, ai, lda, bj, ldb, cij, ldc, acc);
            else amx_block(1, 1, k32, ai, lda, bj, ldb, cij, ldc, acc);
        }
    }
}

/* fp32 rows src[k*lds + n] (k < nk) -> bf16 pairs dst[(k/2)*ldd + n] (32-bit words), round
   to nearest even; pair rows up to round_up(nk, 32)/2 written (zero past nk); columns
   up to round_up(nn, 16) written (the caller's padding columns, any finite or not). */
static void amx_to_pairs(uint32_t *dst, int64_t ldd, const float *src, int64_t lds, int nk, int nn)
{
    static const uint16_t idx[32] = { 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31 };
    const __m512i vidx = _mm512_loadu_si512(idx);
    int kend = (nk + 31) / 32 * 32, nend = (nn + 15) / 16 * 16;
    for (int k = 0; k < kend; k += 2) {
        uint32_t *d = dst + (int64_t)(k / 2) * ldd;
        if (k >= nk) {
            memset(d, 0, sizeof(uint32_t) * (size_t)nend);
            continue;
        }
        const float *r0 = src + (int64_t)k * lds;
        const float *r1 = k + 1 < nk ? r0 + lds : NULL;
        for (int n0 = 0; n0 < nend; n0 += 16) {
            __m512 x0 = _mm512_loadu_ps(r0 + n0);
            __m512 x1 = r1 ? _mm512_loadu_ps(r1 + n0) : _mm512_setzero_ps();
            __m512i pr = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
            _mm512_storeu_si512(d + n0, _mm512_permutexvar_epi16(vidx, pr));
        }
    }
}

/* fp32 src[r*lds + c] -> bf16 dst[r*ldd + c] (round to nearest even, NaN kept NaN) for
   r < rows, c < cols; columns cols .. round_up(cols, 32) and rows rows .. round_up(rows, 16)
   (up to the 32-column bound) written as 0: an A operand of amx_gemm with k = cols. */
static void amx_to_rows(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int rows, int cols)
{
    int cend = (cols + 31) / 32 * 32, rend = (rows + 15) / 16 * 16;
    for (int r = 0; r < rend; r++) {
        uint16_t *d = dst + (int64_t)r * ldd;
        if (r >= rows) {
            memset(d, 0, sizeof(uint16_t) * (size_t)cend);
            continue;
        }
        const float *x = src + (int64_t)r * lds;
        for (int c0 = 0; c0 < cend; c0 += 16) {
            int n = cols - c0;
            __mmask16 mk = n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
            _mm256_storeu_si256((__m256i *)(d + c0), fa_bf16_rne_512(_mm512_maskz_loadu_ps(mk, x + c0)));
        }
    }
}

/* o[c*ld + r] *= alpha[r] for c < rows, r < round_up(n, 16); 16-column groups whose alpha
   are all 1 are skipped (the running max did not move for those queries). */
static void amx_scale_cols(float *o, int64_t ld, int rows, int n, const float *alpha)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int r0 = 0; r0 < n; r0 += 16) {
        __m512 a = _mm512_loadu_ps(alpha + r0);
        __mmask16 mk = n - r0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - r0)) - 1u);
        if (_mm512_mask_cmp_ps_mask(mk, a, one, _CMP_NEQ_UQ) == 0) continue;
        float *p = o + r0;
        for (int c = 0; c < rows; c++, p += ld)
            _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), a));
    }
}

/* dst[jp*ldd + c] = rows[2jp][c] | rows[2jp+1][c] << 16 for c < ncols (bf16 rows; row
   nrows, when nrows is odd, reads as 0), pair rows jp < round_up(nrows, 32)/2 (zeros past
   nrows). Returns 1 when some element is Inf or NaN. */
static int amx_pair_rows(uint32_t *dst, int64_t ldd, const uint16_t *const *rows, int nrows, int ncols)
{
    const __m256i e = _mm256_set1_epi16(0x7f80);
    __mmask16 bad = 0;
    int np = (nrows + 1) / 2, npad = (nrows + 31) / 32 * 16;
    for (int jp = 0; jp < np; jp++) {
        const uint16_t *a = rows[2 * jp], *b = 2 * jp + 1 < nrows ? rows[2 * jp + 1] : NULL;
        uint32_t *d = dst + (int64_t)jp * ldd;
        for (int c0 = 0; c0 < ncols; c0 += 16) {
            __mmask16 mk = ncols - c0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ncols - c0)) - 1u);
            __m256i x = _mm256_maskz_loadu_epi16(mk, a + c0);
            __m256i y = b ? _mm256_maskz_loadu_epi16(mk, b + c0) : _mm256_setzero_si256();
            bad |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(x, e), e);
            bad |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(y, e), e);
            __m512i w = _mm512_or_si512(_mm512_cvtepu16_epi32(x),
                                        _mm512_slli_epi32(_mm512_cvtepu16_epi32(y), 16));
            _mm512_mask_storeu_epi32(d + c0, mk, w);
        }
    }
    for (int jp = np; jp < npad; jp++) memset(dst + (int64_t)jp * ldd, 0, sizeof(uint32_t) * (size_t)ncols);
    return bad != 0;
}

const fa_cpu_amx_kernels fa_cpu_kernels_amx = { "amx", amx_gemm, amx_to_pairs, amx_scale_cols,
                                                 fa_tr32_512, amx_pair_rows, amx_to_rows };
