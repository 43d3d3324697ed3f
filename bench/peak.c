/* peak.c - the ceiling: this machine's fp32 FMA throughput, measured now.
 *
 * One loop of independent fused multiply-adds (16 accumulators, enough to cover the FMA
 * latency on two pipes), compiled three times with function target attributes (AVX-512,
 * AVX2+FMA, plain C) and picked with __builtin_cpu_supports, so the program needs no ISA
 * flags. Run on one thread, then on all threads at once (OpenMP). FLOPs per FMA lane = 2.
 * With AVX-512 BF16 a second loop of vdpbf16ps measures the bf16 dot-product ceiling
 * (32 products + 32 adds per instruction). With AMX (CPUID, XGETBV and Linux's permission
 * for the tile data, as the library asks for it) a third loop of TDPBF16PS on six
 * independent 16 x 16 fp32 tiles measures the ceiling of the bf16 tile kernels
 * (16 x 16 x 32 products and adds per instruction).
 */
#include "config.h"
#include <omp.h>
#include <stdlib.h>
#include "bench.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <cpuid.h>
#define FA_X86 1
#endif
#if defined(__linux__) && defined(__x86_64__) && defined(__GNUC__) && __GNUC__ >= 11
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#define FA_BENCH_AMX 1
#endif

static volatile float sink;

#ifdef FA_X86
__attribute__((target("avx512f"))) static double fma_avx512(long iters)
{
    __m512 a[16], b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    for (int r = 0; r < 16; r++) a[r] = _mm512_set1_ps(0.1f * (float)r);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) a[r] = _mm512_fmadd_ps(a[r], b, c);
    }
    __m512 s = a[0];
    for (int r = 1; r < 16; r++) s = _mm512_add_ps(s, a[r]);
    sink = _mm512_reduce_add_ps(s);
    return (double)iters * 16 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_avx2(long iters)
{
    __m256 a[12], b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    for (int r = 0; r < 12; r++) a[r] = _mm256_set1_ps(0.1f * (float)r);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++) a[r] = _mm256_fmadd_ps(a[r], b, c);
    }
    float out[8];
    __m256 s = a[0];
    for (int r = 1; r < 12; r++) s = _mm256_add_ps(s, a[r]);
    _mm256_storeu_ps(out, s);
    sink = out[0] + out[7];
    return (double)iters * 12 * 8 * 2;
}

__attribute__((target("avx512bf16,avx512f"))) static double dot_bf16(long iters)
{
    __m512 acc[16];
    __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
    __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(3e-3f), _mm512_set1_ps(1e-3f));
    for (int r = 0; r < 16; r++) acc[r] = _mm512_set1_ps(0.0f);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) acc[r] = _mm512_dpbf16_ps(acc[r], x, y);
    }
    __m512 s = acc[0];
    for (int r = 1; r < 16; r++) s = _mm512_add_ps(s, acc[r]);
    sink = _mm512_reduce_add_ps(s);
    return (double)iters * 16 * 32 * 2;
}
#endif

#ifdef FA_BENCH_AMX
/* AMX present and usable by this process: CPUID AMX-BF16 and AMX-TILE, the OS enables the
   tile state (XCR0 bits 17 and 18), and Linux grants the tile data (arch_prctl). */
static int amx_usable(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !((c >> 27) & 1)) return 0;   /* OSXSAVE */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 22) & 1) || !((d >> 24) & 1)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000) != 0x60000) return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

typedef struct __attribute__((packed, aligned(64))) {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} amx_cfg;

__attribute__((target("amx-tile,amx-bf16"))) static double tiles_bf16(long iters)
{
    amx_cfg cfg;   /* per thread: 8 tiles of 16 rows x 64 bytes, as the library's kernels */
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    _tile_loadconfig(&cfg);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 6, 7); _tile_dpbf16ps(1, 6, 7); _tile_dpbf16ps(2, 6, 7);
        _tile_dpbf16ps(3, 6, 7); _tile_dpbf16ps(4, 6, 7); _tile_dpbf16ps(5, 6, 7);
    }
    float out[16 * 16];
    _tile_stored(0, out, 64);
    _tile_release();
    sink = out[0];
    return (double)iters * 6 * 16 * 16 * 32 * 2;
}
#endif

static double fma_scalar(long iters)
{
    float a[16], b = 0.999999f, c = 1e-6f;
    for (int r = 0; r < 16; r++) a[r] = 0.1f * (float)r;
    for (long i = 0; i < iters; i++)
        for (int r = 0; r < 16; r++) a[r] = a[r] * b + c;
    float s = 0;
    for (int r = 0; r < 16; r++) s += a[r];
    sink = s;
    return (double)iters * 16 * 2;
}

typedef double (*loop_fn)(long);

/* GFLOP/s of `fn` on n threads at once: the best of many short bursts (about 10 ms each)
 * filling `seconds`. On a shared, busy machine the best burst is the one that ran
 * uncontended, which is what a ceiling should be. */
static double rate(loop_fn fn, int n, double seconds)
{
    long iters = 1000;
    for (;;) {                                        /* calibrate on one thread */
        double t0 = now_s();
        fn(iters);
        double t = now_s() - t0;
        if (t > 0.002 || iters > (1L << 40)) {
            iters = (long)((double)iters * 0.01 / (t > 1e-9 ? t : 1e-9)) + 1;
            break;
        }
        iters *= 4;
    }
    double best = 0, start = now_s();
    for (int rep = 0; rep < 1000 && (rep < 5 || now_s() - start < seconds); rep++) {
        double flops = 0, t0 = 0, t1 = 0;
#pragma omp parallel num_threads(n) reduction(+ : flops)
        {
#pragma omp barrier
#pragma omp master
            t0 = now_s();
#pragma omp barrier
            flops += fn(iters);
#pragma omp barrier
#pragma omp master
            t1 = now_s();
        }
        double g = flops / (t1 - t0) / 1e9;
        if (g > best) best = g;
    }
    return best;
}

void peak_measure(bench_peak *pk, int threads, double seconds)
{
    loop_fn f = fma_scalar, bf = NULL;
    pk->isa = "scalar";
#ifdef FA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) f = fma_avx512, pk->isa = "avx512";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        f = fma_avx2, pk->isa = "avx2";
#if defined(__GNUC__) && __GNUC__ >= 10
    if (__builtin_cpu_supports("avx512bf16")) bf = dot_bf16;
#endif
#endif
    /* called again at the end of the run: keep the best of both measurements */
    double a = rate(f, 1, seconds), b = threads > 1 ? rate(f, threads, seconds) : a;
    if (a > pk->fp32_1) pk->fp32_1 = a;
    if (b > pk->fp32_all) pk->fp32_all = b;
    if (bf) {
        a = rate(bf, 1, seconds / 2);
        b = threads > 1 ? rate(bf, threads, seconds / 2) : a;
        if (a > pk->bf16_1) pk->bf16_1 = a;
        if (b > pk->bf16_all) pk->bf16_all = b;
    }
#ifdef FA_BENCH_AMX
    static int amx = -1;
    if (amx < 0) amx = amx_usable();
    if (amx) {
        a = rate(tiles_bf16, 1, seconds / 2);
        b = threads > 1 ? rate(tiles_bf16, threads, seconds / 2) : a;
        if (a > pk->amx_1) pk->amx_1 = a;
        if (b > pk->amx_all) pk->amx_all = b;
    }
#endif
    pk->threads = threads;
}

/* The ceiling for a run on `threads` threads: the measured one-thread figure for 1, the
 * all-thread figure for all, linear in between. bf16 storage: the highest of the fp32 FMA,
 * the bf16-dot and the AMX tile ceilings (a kernel may convert to fp32, use the dot
 * products or the tiles). */
double peak_for(const bench_peak *pk, int threads, fa_dtype dt)
{
    double one = pk->fp32_1, all = pk->fp32_all;
    if (dt == FA_BF16 && pk->bf16_1 > one) one = pk->bf16_1;
    if (dt == FA_BF16 && pk->bf16_all > all) all = pk->bf16_all;
    if (dt == FA_BF16 && pk->amx_1 > one) one = pk->amx_1;
    if (dt == FA_BF16 && pk->amx_all > all) all = pk->amx_all;
    if (all < one) all = one;   /* more threads never lower the ceiling (a busy machine can) */
    if (threads <= 1 || pk->threads <= 1) return one;
    if (threads >= pk->threads) return all;
    return one + (all - one) * (threads - 1) / (pk->threads - 1);
}
