/* decode_gpu.c - flashattn-bench --mode decode on the CUDA backend: fa_forward_kvcache
 * with 1 or 4 new tokens per sequence against a KV cache in device memory, contiguous and
 * paged (16- and 256-row pages, in a shuffled order), B in {1, 8, 32, 64, 128} x cache
 * {2k, 8k, 32k} tokens; GQA 32:8 at d = 128 (and, one new token on a contiguous cache,
 * the cache stored [B, Hkv, S, d] through its strides, d = 64, and MHA 32:32 up to 1M
 * cached tokens); bf16. "contig" is the library's [B, S, Hkv, d] layout. Each cell prints the K/V bytes the
 * call must read once per second (KV rate), the IO model (q, K/V, out and the block table
 * the call must move), and the KV rate against the device-to-device copy rate measured in
 * the same run ((read + written bytes) per second of a 2 GiB cuMemcpyDtoD): the ceiling.
 * Times: CUDA events around 20 calls, the median of 5 rounds after 3 warm-up calls.
 * q, K and V are random bf16 in [-1, 1] (a 64 MiB random block, uploaded once and doubled
 * by device copies over the buffers): every output is then a convex combination of V rows,
 * so each cell checks that every element was written, is finite and within [-1, 1]; the
 * numerics against the oracle are test_cuda's (tests/cuda/cuda_decode.c). The lines are the input of bench/peers/torch_gpu.py
 * --decode (torch SDPA on the same shapes). Last, chunked prefill: 512 and 2048 new
 * tokens' queries over an 8k cache (B = 4, GQA 32:8, d = 128), contiguous and paged (16,
 * 64, 256), in TFLOP/s of useful work and against the contiguous cache.
 */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "cudrv.h"

typedef struct { int B, S, H, Hkv, d, snew, page; } gcell;   /* page: 0 contiguous, -1 [B, Hkv, S, d] */

#define MAX_TOKENS ((int64_t)128 * 32768)       /* B x S of the largest cell          */
#define MAX_ROWS (MAX_TOKENS * 8 * 128)          /* elements of K (= of V)             */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds per call of fn over rounds of n calls: the median. */
static double time_calls(fa_status (*fn)(void *), void *arg, int n)
{
    double t[5];
    for (int w = 0; w < 3; w++) fn(arg);
    for (int r = 0; r < 5; r++) {
        cudrv_timer_start();
        for (int i = 0; i < n; i++) fn(arg);
        cudrv_timer_stop(&t[r]);
        t[r] /= n;
    }
    qsort(t, 5, sizeof t[0], cmp_d);
    return t[2];
}

typedef struct {
    fa_context *ctx;
    fa_tensor out, q, k, v;
    const int32_t *cs, *bt;
    int64_t maxp;
    fa_options opt;
} kv_call;

static fa_status call_kv(void *a)
{
    kv_call *c = a;
    return fa_forward_kvcache(c->ctx, &c->out, NULL, &c->q, &c->k, &c->v, NULL, NULL, c->cs, c->bt, c->maxp, &c->opt);
}

typedef struct { CUdeviceptr dst, src; size_t bytes; } copy_call;
static fa_status call_copy(void *a)
{
    copy_call *c = a;
    return cudrv_copy(c->dst, c->src, c->bytes) == 0 ? FA_OK : FA_ERR_DEVICE;
}

/* bytes of random bf16 in [-1, 1] at dst: a 64 MiB block uploaded, then doubled by copies */
static CUresult fill_random(CUdeviceptr dst, size_t bytes, uint64_t seed)
{
    const size_t blk = bytes < ((size_t)64 << 20) ? bytes : (size_t)64 << 20;
    uint16_t *h = malloc(blk);
    if (!h) return 2;   /* CUDA_ERROR_OUT_OF_MEMORY */
    for (size_t i = 0; i < blk / 2; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const float x = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        uint32_t u;
        memcpy(&u, &x, 4);
        h[i] = (uint16_t)(u >> 16);   /* bf16 by truncation: still in [-1, 1] */
    }
    CUresult r = cudrv_upload(dst, h, blk);
    free(h);
    for (size_t done = blk; r == 0 && done < bytes; done *= 2)
        r = cudrv_copy(dst + done, dst, bytes - done < done ? bytes - done : done);
    return r;
}

/* The device buffers every cell views: K, V (MAX_ROWS elements each), q and out (room for
   128 x 4 x 32 x 128), cache_seqlens, a block table of 1-row pages. */
typedef struct { CUdeviceptr k, v, q, out, cs, bt; } gbufs;

/* Are the nout bf16 outputs all written (out was filled with NaN), finite and in [-1, 1]? */
static int out_ok(const gbufs *g, size_t nout)
{
    uint16_t *o = malloc(nout * 2);
    int ok = o && cudrv_download(o, g->out, nout * 2) == 0;
    for (size_t i = 0; ok && i < nout; i++) ok = (o[i] & 0x7fff) <= 0x3f80;   /* |x| <= 1, not NaN */
    free(o);
    return ok;
}

/* One cell: its views, the check (every output 1), the timing. Returns 1 on a failure. */
static int run_gcell(fa_context *ctx, const gbufs *g, const gcell *c, double copy_bps, FILE *f)
{
    char shape[96];
    snprintf(shape, sizeof shape, "B=%3d S=%5d H=%d/%d d%d new=%d cache=%s", c->B, c->S, c->H, c->Hkv, c->d, c->snew,
             c->page < 0 ? "bhsd" : c->page == 0 ? "contig" : c->page == 16 ? "page16" : "page256");
    kv_call k;
    memset(&k, 0, sizeof k);
    k.ctx = ctx;
    k.opt.causal = FA_CAUSAL_BOTTOM_RIGHT;
    k.q = fa_tensor_contiguous((void *)(uintptr_t)g->q, FA_BF16, c->B, c->snew, c->H, c->d);
    k.out = fa_tensor_contiguous((void *)(uintptr_t)g->out, FA_BF16, c->B, c->snew, c->H, c->d);
    const int64_t N0 = c->page > 0 ? (int64_t)c->B * c->S / c->page : c->B, S1 = c->page > 0 ? c->page : c->S;
    k.k = fa_tensor_contiguous((void *)(uintptr_t)g->k, FA_BF16, N0, S1, c->Hkv, c->d);
    k.v = fa_tensor_contiguous((void *)(uintptr_t)g->v, FA_BF16, N0, S1, c->Hkv, c->d);
    if (c->page < 0) {   /* [B, Hkv, S, d] storage: each head's keys contiguous */
        k.k.stride[1] = k.v.stride[1] = c->d;
        k.k.stride[2] = k.v.stride[2] = (int64_t)c->S * c->d;
    }
    k.cs = (const int32_t *)(uintptr_t)g->cs;
    int32_t *bt = NULL;
    if (c->page > 0) {   /* pages of sequence b: a shuffled permutation of all of them */
        k.maxp = c->S / c->page;
        const int64_t np = (int64_t)c->B * k.maxp;
        bt = malloc(sizeof(int32_t) * (size_t)np);
        if (!bt) return 1;
        uint64_t s = 0x9e3779b97f4a7c15ULL;
        for (int64_t i = 0; i < np; i++) bt[i] = (int32_t)i;
        for (int64_t i = np - 1; i > 0; i--) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            const int64_t j = (int64_t)((s >> 33) % (uint64_t)(i + 1));
            const int32_t x = bt[i]; bt[i] = bt[j]; bt[j] = x;
        }
        cudrv_upload(g->bt, bt, sizeof(int32_t) * (size_t)np);
        k.bt = (const int32_t *)(uintptr_t)g->bt;
    }
    int32_t cs[128];
    for (int b = 0; b < c->B; b++) cs[b] = c->S;
    cudrv_upload(g->cs, cs, sizeof(int32_t) * (size_t)c->B);
    const size_t nout = (size_t)c->B * c->snew * c->H * c->d;
    cudrv_fill16(g->out, 0xffff, nout);
    const char *name = "?";
    fa_tensor dk = fa_tensor_contiguous(NULL, FA_BF16, c->B, c->S, c->Hkv, c->d);
    fa_query(ctx, &name, &k.out, NULL, &k.q, &dk, &dk, &k.opt);
    fa_status st = call_kv(&k);
    cudrv_sync();
    const int ok = st == FA_OK && out_ok(g, nout);
    if (!ok) {
        fprintf(f, "  %s FAILED: %s\n", shape, st != FA_OK ? fa_last_error(ctx) : "an output unwritten, not finite or outside [-1, 1]");
        free(bt);
        return 1;
    }
    const double kv = 2.0 * c->B * (double)c->S * c->Hkv * c->d * 2.0;
    const double io = kv + 2.0 * nout * 2.0 + 4.0 * c->B + (c->page > 0 ? 4.0 * c->B * (double)k.maxp : 0.0);
    const double t = time_calls(call_kv, &k, 20);
    fprintf(f, "  %s  KV %8.1f MB  %7.1f us  %5.2f TB/s  copy %5.2f TB/s  %4.2f of copy  IO model %8.1f MB  (%s)\n", shape,
            kv / 1e6, t * 1e6, kv / t / 1e12, copy_bps / 1e12, kv / t / copy_bps, io / 1e6, name);
    free(bt);
    return 0;
}

/* Chunked prefill: snew queries per sequence at the end of a cache of S tokens (already
   holding them), bottom-right causal, contiguous or paged; TFLOP/s of the useful work
   (4 d per (query, visible key) pair) and the rate against the contiguous cache's, which
   runs first. Returns 1 on a failure. */
static int run_prefill(fa_context *ctx, const gbufs *g, int snew, int page, double *contig, FILE *f)
{
    const int B = 4, S = 8192, H = 32, Hkv = 8, d = 128;
    kv_call k;
    memset(&k, 0, sizeof k);
    k.ctx = ctx;
    k.opt.causal = FA_CAUSAL_BOTTOM_RIGHT;
    k.q = fa_tensor_contiguous((void *)(uintptr_t)g->q, FA_BF16, B, snew, H, d);
    k.out = fa_tensor_contiguous((void *)(uintptr_t)g->out, FA_BF16, B, snew, H, d);
    const int64_t N0 = page ? (int64_t)B * S / page : B, S1 = page ? page : S;
    k.k = fa_tensor_contiguous((void *)(uintptr_t)g->k, FA_BF16, N0, S1, Hkv, d);
    k.v = fa_tensor_contiguous((void *)(uintptr_t)g->v, FA_BF16, N0, S1, Hkv, d);
    k.cs = (const int32_t *)(uintptr_t)g->cs;
    int32_t cs[4] = { S - snew, S - snew, S - snew, S - snew }, *bt = NULL;
    cudrv_upload(g->cs, cs, sizeof cs);
    if (page) {   /* pages in reverse order */
        k.maxp = S / page;
        bt = malloc(sizeof(int32_t) * (size_t)(B * k.maxp));
        if (!bt) return 1;
        for (int64_t i = 0; i < B * k.maxp; i++) bt[i] = (int32_t)(B * k.maxp - 1 - i);
        cudrv_upload(g->bt, bt, sizeof(int32_t) * (size_t)(B * k.maxp));
        free(bt);
        k.bt = (const int32_t *)(uintptr_t)g->bt;
    }
    char shape[80];
    snprintf(shape, sizeof shape, "prefill B=%d cache=%d new=%4d H=%d/%d d%d %s", B, S, snew, H, Hkv, d,
             page == 0 ? "contig " : page == 16 ? "page16 " : page == 64 ? "page64 " : "page256");
    const size_t nout = (size_t)B * snew * H * d;
    cudrv_fill16(g->out, 0xffff, nout);
    fa_status st = call_kv(&k);
    cudrv_sync();
    const int ok = st == FA_OK && out_ok(g, nout);
    if (!ok) {
        fprintf(f, "  %s FAILED: %s\n", shape, st != FA_OK ? fa_last_error(ctx) : "an output unwritten, not finite or outside [-1, 1]");
        return 1;
    }
    /* query i of the chunk sees S - snew + i + 1 keys */
    const double pairs = (double)snew * (S - snew) + (double)snew * (snew + 1) / 2.0;
    const double t = time_calls(call_kv, &k, 10), tf = 4.0 * d * B * H * pairs / t / 1e12;
    if (!page) *contig = tf;
    fprintf(f, "  %s  %8.1f us  %6.1f TFLOP/s  %4.2f of contiguous\n", shape, t * 1e6, tf, tf / *contig);
    return 0;
}

int decode_gpu_bench(bench_run *R, fa_context *ctx, FILE *f)
{
    char why[256];
    if (cudrv_open(0, why, sizeof why)) {
        fprintf(f, "cuda: n/a: %s\n", why);
        return 0;
    }
    gbufs g;
    memset(&g, 0, sizeof g);
    /* q and out: room for 128 x 4 decode rows, or 4 x 2048 chunked-prefill rows, of 32 x 128 */
    const size_t kvb = (size_t)MAX_ROWS * 2, qb = (size_t)4 * 2048 * 32 * 128 * 2;
    CUresult r = cudrv_alloc(&g.k, kvb);
    if (r == 0) r = cudrv_alloc(&g.v, kvb);
    if (r == 0) r = cudrv_alloc(&g.q, qb);
    if (r == 0) r = cudrv_alloc(&g.out, qb);
    if (r == 0) r = cudrv_alloc(&g.cs, 4 * 128);
    if (r == 0) r = cudrv_alloc(&g.bt, 4 * (size_t)MAX_TOKENS);
    int failed = 0;
    if (r != 0) {
        fprintf(f, "cuda: n/a: no device memory for the caches (%.1f GB): %s\n", 2.0 * kvb / 1e9, cudrv_error(r));
        goto done;
    }
    /* the ceiling: a 2 GiB device-to-device copy, counted as bytes read + written */
    copy_call cc = { g.v, g.k, (size_t)1 << 31 };
    const double tc = time_calls(call_copy, &cc, 10), copy_bps = 2.0 * (double)cc.bytes / tc;
    if ((r = fill_random(g.k, kvb, 1)) == 0 && (r = fill_random(g.v, kvb, 2)) == 0) r = fill_random(g.q, qb, 3);
    cudrv_sync();
    if (r != 0) {
        fprintf(f, "cuda: n/a: filling the caches: %s\n", cudrv_error(r));
        goto done;
    }
    fprintf(f, "cuda: bf16, causal (bottom-right), no lse; KV = the K and V bytes read once; copy = a 2 GiB "
               "device-to-device copy, (read + written) bytes per second: %.2f TB/s\n", copy_bps / 1e12);
    static const int Bs[] = { 1, 8, 32, 64, 128 }, Ss[] = { 2048, 8192, 32768 }, pages[] = { 0, 16, 256 };
    for (int pi = 0; pi < 3; pi++)
        for (int n = 1; n <= 4; n += 3)
            for (int bi = 0; bi < 5; bi++)
                for (int si = 0; si < 3; si++) {
                    if (R->quick && (bi % 2 || si == 1)) continue;
                    gcell c = { Bs[bi], Ss[si], 32, 8, 128, n, pages[pi] };
                    failed |= run_gcell(ctx, &g, &c, copy_bps, f);
                }
    for (int bi = 0; bi < 5; bi++)   /* the cache stored [B, Hkv, S, d] (torch's layout) */
        for (int si = 0; si < 3; si++) {
            if (R->quick && (bi % 2 || si == 1)) continue;
            gcell c = { Bs[bi], Ss[si], 32, 8, 128, 1, -1 };
            failed |= run_gcell(ctx, &g, &c, copy_bps, f);
        }
    for (int x = 0; x < 2; x++)   /* d64 GQA 32:8; MHA 32:32 d128 up to 1M cached tokens */
        for (int bi = 0; bi < 5; bi++)
            for (int si = 0; si < 3; si++) {
                if ((R->quick && (bi % 2 || si == 1)) || (x && (int64_t)Bs[bi] * Ss[si] > ((int64_t)1 << 20))) continue;
                gcell c = { Bs[bi], Ss[si], 32, x ? 32 : 8, x ? 128 : 64, 1, 0 };
                failed |= run_gcell(ctx, &g, &c, copy_bps, f);
            }
    fprintf(f, "cuda: chunked prefill into a KV cache, bf16, causal (bottom-right): the new tokens' "
               "queries over the whole cache\n");
    for (int n = 512; n <= 2048; n *= 4) {
        static const int ppages[] = { 0, 16, 64, 256 };
        double contig = 0.0;
        for (int pi = 0; pi < 4; pi++) failed |= run_prefill(ctx, &g, n, ppages[pi], &contig, f);
    }
done:
    cudrv_free(g.k); cudrv_free(g.v); cudrv_free(g.q); cudrv_free(g.out); cudrv_free(g.cs); cudrv_free(g.bt);
    cudrv_close();
    return failed;
}
