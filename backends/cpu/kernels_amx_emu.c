/* kernels_amx_emu.c - the AMX kernel contract (kernels.h, fa_cpu_amx_kernels) in plain C,
 * element by element: the same layouts, the same whole-tile reads and writes (16-row,
 * 16-column C tiles, k in steps of 32), bf16 inputs with denormals read as 0 and fp32
 * accumulation. It exists so that the AMX loop nests (forward.c, backward.c: packing,
 * padding, the partial-tile paths) are tested on machines without AMX: cpu.c installs it
 * only when FA_CPU_AMX_EMULATE=1 and the CPU or OS has no AMX (an AMX CPU capped by
 * FA_CPU_ISA keeps the avx512 kernels). Slow; never chosen otherwise. */
#include "config.h"
#include <string.h>
#include "kernels.h"
#include "dtype.h"

static float bf(uint16_t h)
{
    return (h & 0x7f80u) == 0 ? 0.0f * fa_bf16_to_f32(h) : fa_bf16_to_f32(h);   /* DAZ */
}

static void emu_gemm(int m, int n, int k32, const uint16_t *a, int64_t lda, const uint32_t *b,
                     int64_t ldb, float *c, int64_t ldc, int acc)
{
    if (m <= 0 || n <= 0) return;
    int mend = (m + 15) / 16 * 16, nend = (n + 15) / 16 * 16;
    for (int i = 0; i < mend; i++)
        for (int j = 0; j < nend; j++) {
            float s = acc ? c[(int64_t)i * ldc + j] : 0.0f;
            for (int kp = 0; kp < 16 * k32; kp++) {
                uint32_t w = b[(int64_t)kp * ldb + j];
                const uint16_t *ai = a + (int64_t)i * lda + 2 * kp;
                s += bf(ai[0]) * bf((uint16_t)(w & 0xffffu)) + bf(ai[1]) * bf((uint16_t)(w >> 16));
            }
            c[(int64_t)i * ldc + j] = s;
        }
}

/* vcvtne2ps2bf16: round to nearest even, denormal inputs read as (signed) 0 */
static uint32_t cvt_daz(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) return (u >> 16) & 0x8000u;
    return fa_f32_to_bf16(f);
}

static void emu_to_pairs(uint32_t *dst, int64_t ldd, const float *src, int64_t lds, int nk, int nn)
{
    int kend = (nk + 31) / 32 * 32, nend = (nn + 15) / 16 * 16;
    for (int k = 0; k < kend; k += 2)
        for (int j = 0; j < nend; j++) {
            uint32_t lo = k < nk ? cvt_daz(src[(int64_t)k * lds + j]) : 0;
            uint32_t hi = k + 1 < nk ? cvt_daz(src[(int64_t)(k + 1) * lds + j]) : 0;
            dst[(int64_t)(k / 2) * ldd + j] = lo | hi << 16;
        }
}

static void emu_scale_cols(float *o, int64_t ld, int rows, int n, const float *alpha)
{
    int nend = (n + 15) / 16 * 16;
    for (int r0 = 0; r0 < nend; r0 += 16) {
        int one = 1;
        for (int r = r0; r < r0 + 16 && r < n; r++)
            if (alpha[r] != 1.0f) one = 0;
        if (one) continue;
        for (int c = 0; c < rows; c++)
            for (int r = r0; r < r0 + 16; r++) o[(int64_t)c * ld + r] *= alpha[r];
    }
}

static void emu_tr32(uint32_t *dst, int64_t ldd, const uint32_t *src, int64_t lds, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(int64_t)c * ldd + r] = src[(int64_t)r * lds + c];
}

static int emu_pair_rows(uint32_t *dst, int64_t ldd, const uint16_t *const *rows, int nrows, int ncols)
{
    int bad = 0, np = (nrows + 1) / 2, npad = (nrows + 31) / 32 * 16;
    for (int jp = 0; jp < npad; jp++)
        for (int c = 0; c < ncols; c++) {
            uint32_t lo = jp < np ? rows[2 * jp][c] : 0;
            uint32_t hi = jp < np && 2 * jp + 1 < nrows ? rows[2 * jp + 1][c] : 0;
            if ((lo & 0x7f80u) == 0x7f80u || (hi & 0x7f80u) == 0x7f80u) bad = 1;
            dst[(int64_t)jp * ldd + c] = lo | hi << 16;
        }
    return bad;
}

static void emu_to_rows(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int rows, int cols)
{
    int cend = (cols + 31) / 32 * 32, rend = (rows + 15) / 16 * 16;
    for (int r = 0; r < rend; r++)
        for (int c = 0; c < cend; c++)
            dst[(int64_t)r * ldd + c] = r < rows && c < cols ? fa_f32_to_bf16(src[(int64_t)r * lds + c]) : 0;
}

const fa_cpu_amx_kernels fa_cpu_kernels_amx_emu = { "amx-emulated", emu_gemm, emu_to_pairs,
                                                     emu_scale_cols, emu_tr32, emu_pair_rows,
                                                     emu_to_rows };
