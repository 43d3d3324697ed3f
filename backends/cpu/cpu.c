/* cpu.c - the CPU backend's vtable: picks a kernel set once per context from CPUID and
 * XGETBV (capped by FA_CPU_ISA), describes itself, answers queries, and hands the work
 * to the loop nests in forward.c / backward.c. */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backward.h"
#include "decode.h"
#include "forward.h"
#include "kernels.h"
#include "state.h"
#include "threads.h"
#include "tiles.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define FA_X86 1
#endif
#if defined(FA_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static const char *isa_names[] = { "generic", "avx2", "avx512", "amx" };

typedef struct { int avx2, avx512, avx512bf16, amd, amx; const char *why2, *why512, *whyamx; } cpu_caps;

/* Linux hands out the AMX tile data state (8 KiB of XSAVE area) only on request, once per
   process, before the first tile instruction of any thread; otherwise that instruction
   faults (SIGILL). */
#define FA_ARCH_REQ_XCOMP_PERM 0x1023
#define FA_XFEATURE_XTILEDATA 18
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_perm_err = -1;   /* 0: granted, else errno */
static void amx_request(void)
{
#if defined(FA_X86) && defined(__linux__) && defined(SYS_arch_prctl)
    amx_perm_err = syscall(SYS_arch_prctl, FA_ARCH_REQ_XCOMP_PERM, FA_XFEATURE_XTILEDATA) == 0 ? 0 : errno;
#else
    amx_perm_err = ENOSYS;
#endif
}

#ifdef FA_X86
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static cpu_caps detect(void)
{
    cpu_caps c = { 0, 0, 0, 0, 0, "not an x86 CPU", "not an x86 CPU", "not an x86 CPU" };
#ifdef FA_X86
    unsigned a, b, cx, d;
    if (!__get_cpuid(0, &a, &b, &cx, &d)) return c;
    c.amd = b == 0x68747541u && d == 0x69746e65u && cx == 0x444d4163u;   /* AuthenticAMD */
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
    int osxsave = (cx >> 27) & 1, avx = (cx >> 28) & 1, fma = (cx >> 12) & 1, f16c = (cx >> 29) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    unsigned b7 = 0, c7 = 0, d7 = 0, a7 = 0, a71 = 0, b71 = 0, c71 = 0, d71 = 0;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a7, b7, c7, d7);
        if (a7 >= 1) __cpuid_count(7, 1, a71, b71, c71, d71);
    }
    int avx2 = (b7 >> 5) & 1;
    int f = (b7 >> 16) & 1, dq = (b7 >> 17) & 1, bw = (b7 >> 30) & 1, vl = (b7 >> 31) & 1;
    if (!avx || !avx2 || !fma || !f16c) c.why2 = "CPU lacks one of AVX, AVX2, FMA, F16C";
    else if ((xcr0 & 0x6) != 0x6) c.why2 = "OS does not save YMM state (XGETBV)";
    else { c.avx2 = 1; c.why2 = NULL; }
    if (!f || !dq || !bw || !vl) c.why512 = "CPU lacks one of AVX512F/DQ/BW/VL";
    else if (!c.avx2) c.why512 = "AVX2 set unavailable";
    else if ((xcr0 & 0xe6) != 0xe6) c.why512 = "OS does not save ZMM/opmask state (XGETBV)";
    else { c.avx512 = 1; c.why512 = NULL; c.avx512bf16 = (a71 >> 5) & 1; }
    int amxbf16 = (d7 >> 22) & 1, amxtile = (d7 >> 24) & 1;
    if (!amxbf16 || !amxtile) c.whyamx = "CPU lacks AMX-BF16/AMX-TILE";
    else if (!c.avx512 || !c.avx512bf16) c.whyamx = "AVX-512 set or AVX512-BF16 unavailable";
    else if ((xcr0 & 0x60000) != 0x60000) c.whyamx = "OS does not enable tile state (XGETBV XTILECFG/XTILEDATA)";
    else {
        static char why[96];
        pthread_once(&amx_once, amx_request);
        if (amx_perm_err == 0) { c.amx = 1; c.whyamx = NULL; }
        else {
            snprintf(why, sizeof why, "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed: %s",
                     strerror(amx_perm_err));
            c.whyamx = why;
        }
    }
#endif
#ifndef FA_HAVE_AVX2
    c.avx2 = 0; c.why2 = "not compiled in (configure found no AVX2 compiler support)";
#endif
#ifndef FA_HAVE_AVX512
    c.avx512 = 0; c.why512 = "not compiled in (configure found no AVX-512 compiler support)";
#endif
#ifndef FA_HAVE_AMX
    c.amx = 0; c.whyamx = "not compiled in (no AMX compiler support)";
#endif
    return c;
}

static const fa_cpu_kernels *kernels_for(fa_cpu_isa isa)
{
    switch (isa) {
#ifdef FA_HAVE_AVX512
    case FA_CPU_AMX:
    case FA_CPU_AVX512: return &fa_cpu_kernels_avx512;
#endif
#ifdef FA_HAVE_AVX2
    case FA_CPU_AVX2: return &fa_cpu_kernels_avx2;
#endif
    default: return &fa_cpu_kernels_generic;
    }
}

/* The kernel set: the best this CPU runs, capped by FA_CPU_ISA (an error when it names
   an unknown or unavailable set); each set passed over is said under FA_VERBOSE. */
static fa_status choose_isa(fa_context *ctx, const cpu_caps *cp, fa_cpu_isa *out)
{
    const cpu_caps c = *cp;
    int cap = FA_CPU_AMX;
    const char *env = getenv("FA_CPU_ISA");
    if (env && *env) {
        if (!strcmp(env, "generic")) cap = FA_CPU_GENERIC;
        else if (!strcmp(env, "avx2")) cap = FA_CPU_AVX2;
        else if (!strcmp(env, "avx512")) cap = FA_CPU_AVX512;
        else if (!strcmp(env, "amx")) cap = FA_CPU_AMX;
        else
            return fa_set_error(ctx, FA_ERR_INVALID_ARG,
                                "fa_context_create: FA_CPU_ISA='%s' is not generic, avx2, avx512 or amx", env);
        if ((cap == FA_CPU_AMX && !c.amx) || (cap == FA_CPU_AVX512 && !c.avx512) ||
            (cap == FA_CPU_AVX2 && !c.avx2))
            return fa_set_error(ctx, FA_ERR_UNSUPPORTED,
                                "fa_context_create: FA_CPU_ISA=%s is unavailable: %s", env,
                                cap == FA_CPU_AMX ? c.whyamx : cap == FA_CPU_AVX512 ? c.why512 : c.why2);
    }
    fa_cpu_isa isa = FA_CPU_GENERIC;
    if (cap >= FA_CPU_AMX && c.amx) isa = FA_CPU_AMX;
    else if (cap >= FA_CPU_AVX512 && c.avx512) {
        isa = FA_CPU_AVX512;
        fa_verbose(ctx, "cpu: kernel set amx rejected: %s",
                   cap >= FA_CPU_AMX ? c.whyamx : "FA_CPU_ISA caps the ISA");
    } else {
        if (cap >= FA_CPU_AVX512)
            fa_verbose(ctx, "cpu: kernel set avx512 rejected: %s", c.why512);
        else
            fa_verbose(ctx, "cpu: kernel set avx512 rejected: FA_CPU_ISA=%s caps the ISA", env);
        if (cap >= FA_CPU_AVX2 && c.avx2) isa = FA_CPU_AVX2;
        else if (cap >= FA_CPU_AVX2)
            fa_verbose(ctx, "cpu: kernel set avx2 rejected: %s", c.why2);
        else
            fa_verbose(ctx, "cpu: kernel set avx2 rejected: FA_CPU_ISA=%s caps the ISA", env);
    }
    *out = isa;
    return FA_OK;
}

static fa_status cpu_init(fa_context *ctx)
{
    cpu_caps c = detect();
    fa_cpu_isa isa = FA_CPU_GENERIC;
    fa_status err = choose_isa(ctx, &c, &isa);
    if (err != FA_OK) return err;
    fa_cpu_state *st = (fa_cpu_state *)calloc(1, sizeof *st);
    if (!st) return fa_set_error(ctx, FA_ERR_NO_MEMORY, "fa_context_create: cpu backend: out of memory");
    st->isa = isa;
    st->k = kernels_for(isa);
#ifdef FA_HAVE_AMX
    st->amx = isa == FA_CPU_AMX ? &fa_cpu_kernels_amx : NULL;
#else
    st->amx = NULL;
#endif
    /* tests only: the AMX loop nests on the C emulation of the tile kernels, so that a
       machine without AMX still runs them (kernels_amx_emu.c) */
    const char *emu = getenv("FA_CPU_AMX_EMULATE");
    if (!c.amx && emu && emu[0] == '1') {   /* never where the CPU has AMX (even if capped) */
        st->amx = &fa_cpu_kernels_amx_emu;
        fa_verbose(ctx, "cpu: AMX tile kernels emulated in C (FA_CPU_AMX_EMULATE=1; tests only, slow)");
    }
    /* vdpbf16ps pays only where it issues at the FMA rate (AMD Zen 4/5: 2x the fp32
       flops; on a Zen 4 the bf16 forward at B=1 H=16 S=2048 d=128 ran 1.76x faster with
       it than with fp32 FMAs on converted bf16, 2026-12-02). On Intel Xeon (Sapphire/
       Emerald Rapids) it issues at a quarter of the FMA rate, so 64-flop dot products
       give half the fp32 FMA flop rate (82 vs 164 GF/s per core); there fp32 FMAs are
       faster, and a CPU with AMX runs the bf16 forward on tiles anyway. */
    st->bf16dot = isa >= FA_CPU_AVX512 && c.avx512bf16 && c.amd && st->k->gemm_bf16_rowA != NULL;
    if (isa == FA_CPU_AVX512 && !st->bf16dot)
        fa_verbose(ctx, "cpu: bf16 dot-product kernels rejected: %s",
                   st->k->gemm_bf16_rowA == NULL ? "not compiled in" :
                   !c.avx512bf16 ? "CPU lacks AVX512-BF16" :
                   "vdpbf16ps issues at 1/4 of the FMA rate on this (non-AMD) CPU: fp32 FMAs are faster");
    ctx->impl = st;
    fa_verbose(ctx, "cpu: kernel set %s chosen (%s%s), %d threads", isa_names[isa],
               isa == FA_CPU_AMX ? "CPUID+XGETBV+arch_prctl: AMX-BF16/AMX-TILE for bf16, AVX512F/BW/VL/DQ otherwise" :
               isa == FA_CPU_AVX512 ? "CPUID+XGETBV: AVX512F/BW/VL/DQ" :
               isa == FA_CPU_AVX2 ? "CPUID+XGETBV: AVX2/FMA/F16C" : "portable C",
               isa >= FA_CPU_AVX512 && c.avx512bf16 ? ", AVX512-BF16 present" : "",
               fa_cpu_threads(ctx));
    return FA_OK;
}

static void cpu_fini(fa_context *ctx)
{
    fa_cpu_state *st = (fa_cpu_state *)ctx->impl;
    if (st)
        for (int i = 0; i < 3; i++) fa_cpu_kept_end(&st->kept[i], 1);
    free(ctx->impl);
    ctx->impl = NULL;
}

static void cpu_describe(const fa_context *ctx, char *buf, size_t len)
{
    const fa_cpu_state *st = (const fa_cpu_state *)ctx->impl;
    char why[512];
    fa_appendf(buf, len, "cpu backend: kernel set %s (register tile %d x %d)%s, FA_CPU_ISA caps it\n",
               st->k->name, st->k->mr, st->k->nr,
               st->amx == &fa_cpu_kernels_amx_emu
               ? ", bf16 forward and backward by AMX tile kernels emulated in C (FA_CPU_AMX_EMULATE=1, tests only)"
               : st->amx ? ", bf16 forward and backward by AMX tiles (TDPBF16PS, 16x16 fp32 C tiles, 2x2 blocks)"
               : st->bf16dot ? ", bf16 forward by AVX512-BF16 dot products" : "");
    fa_appendf(buf, len, "caches per core: L1d %lld KiB, L2 %lld KiB, L3 %lld KiB shared%s; %d cores\n",
               (long long)(ctx->topo.l1d >> 10), (long long)(ctx->topo.l2 >> 10),
               (long long)(ctx->topo.l3 >> 10), ctx->topo.from_hwloc ? " (hwloc)" : " (guessed)",
               ctx->topo.cores);
    fa_cpu_tiles(ctx, 0, 128, 128, &(int){0}, &(int){0}, why, sizeof why);
    fa_appendf(buf, len, "forward tiles (d=128 example, recomputed per call from dqk, dv): %s\n", why);
    fa_cpu_tiles(ctx, 1, 128, 128, &(int){0}, &(int){0}, why, sizeof why);
    fa_appendf(buf, len, "backward tiles (d=128 example): %s\n", why);
    fa_appendf(buf, len, "threads: %d (%s); forward parallel over (batch, head, Q block[, KV split]),"
               " backward over (batch, KV head, KV chunk); dQ: per-chunk fp32 partials reduced in"
               " fixed order (bitwise reproducible across thread counts)\n",
               fa_cpu_threads(ctx), ctx->threads > 0 ? "fa_context_set_threads" : "the default");
}

/* Kernel names: static strings, [isa][bwd][dtype][variant]; variant bit 0: per-score
   pipeline in scalar C (softcap/ALiBi/bias/negative scale), bit 1: split-KV (forward) */
static char names[4][2][6][4][128];
/* The decode path (decode.c): [isa][dtype][split-kv]; and the forward's names with the
   reason a decode-shaped call stays on the loop nest: [isa][dtype][variant][reason]. */
static char dec_names[4][3][2][128];
static char dec_fallback[4][6][4][FA_CPU_DECODE_NREASONS][224];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;
static void names_init(void)
{
    static const char *ddt[] = { "fp32", "fp16", "bf16" };
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < 3; t++)
            for (int v = 0; v < 2; v++)
                snprintf(dec_names[i][t][v], sizeof dec_names[i][t][v],
                         "cpu/%s %s decode (query heads of a KV group packed, K/V read once"
                         " per pass%s)", isa_names[i], ddt[t], v ? ", split-kv" : "");
    static const char *dt[] = { "fp32", "fp16 (converted, fp32 kernels)",
                                "bf16 (converted, fp32 kernels)", "bf16 (vdpbf16ps dot products)",
                                "bf16 (AMX tiles, fp32 accumulation)",
                                "bf16 (AMX tile kernels emulated in C, FA_CPU_AMX_EMULATE)" };
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 6; t++)
                for (int v = 0; v < 4; v++)
                    snprintf(names[i][b][t][v], sizeof names[i][b][t][v], "cpu/%s %s %s%s%s",
                             isa_names[i], dt[t], b ? "backward" : "forward",
                             v & 2 ? ", split-kv" : "",
                             v & 1 ? ", scalar score pipeline (softcap/alibi/bias; slower)" : "");
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < 6; t++)
            for (int v = 0; v < 4; v++)
                for (int r = FA_CPU_DECODE_BIAS; r < FA_CPU_DECODE_NREASONS; r++)
                    snprintf(dec_fallback[i][t][v][r], sizeof dec_fallback[i][t][v][r],
                             "%s; not the decode path: %s", names[i][0][t][v],
                             fa_cpu_decode_reason(r));
}

static fa_status cpu_query(fa_context *ctx, const fa_problem *p, int backward, const char **name)
{
    const fa_cpu_state *st = (const fa_cpu_state *)ctx->impl;
    pthread_once(&names_once, names_init);
    int v = 0, dec = backward ? FA_CPU_DECODE_SHAPE : fa_cpu_decode_why(p);
    if (dec == FA_CPU_DECODE_OK) {
        int t = p->k.dtype == FA_F16 ? 1 : p->k.dtype == FA_BF16 ? 2 : 0;
        *name = dec_names[st->isa == FA_CPU_AMX ? FA_CPU_AVX512 : st->isa][t]
                         [fa_cpu_decode_splits(p) > 1];
        return FA_OK;
    }
    if (p->softcap > 0.0f || p->alibi || p->has_bias || !(p->scale > 0.0f)) v |= 1;
    if (!backward) {
        int bq, bkv;
        fa_cpu_tiles(ctx, 0, p->dqk, p->dv, &bq, &bkv, NULL, 0);
        if (fa_cpu_fwd_splits(p, bq, bkv, NULL, NULL) > 1) v |= 2;
    }
    int t = p->q.dtype == FA_F16 ? 1 : p->q.dtype == FA_BF16 ? 2 : 0;
    /* the amx set runs the bf16 forward (q, k, v bf16) and backward (dout bf16 too) on
       tiles; other calls name the avx512 kernels */
    int isa = st->isa == FA_CPU_AMX ? FA_CPU_AVX512 : st->isa;
    int amx = fa_cpu_amx_for(st, p, backward) != NULL;
    if (amx && st->amx == &fa_cpu_kernels_amx_emu) {
        t = 5;
    } else if (amx) {
        t = 4;
        isa = FA_CPU_AMX;
    } else if (t == 2 && !backward && st->bf16dot) t = 3;
    *name = dec != FA_CPU_DECODE_SHAPE ? dec_fallback[isa][t][v][dec]
                                       : names[isa][backward ? 1 : 0][t][v];
    return FA_OK;
}

static fa_status cpu_set_threads(fa_context *ctx, int n) { (void)ctx; (void)n; return FA_OK; }

static fa_status cpu_set_tiles(fa_context *ctx, int bq, int bkv)
{
    fa_cpu_state *st = (fa_cpu_state *)ctx->impl;
    st->req_bq = bq;
    st->req_bkv = bkv;
    return FA_OK;
}

const fa_backend_ops fa_cpu_ops = {
    .name = "cpu", .init = cpu_init, .fini = cpu_fini, .describe = cpu_describe,
    .forward = fa_cpu_forward, .backward = fa_cpu_backward, .query = cpu_query,
    .set_threads = cpu_set_threads, .set_tiles = cpu_set_tiles,
    .device_memory = 0,   /* host pointers; kv_append and combine done by the api layer */
};
