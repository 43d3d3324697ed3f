/* decode.c - flashattn-bench --mode decode: fa_forward_kvcache with one new token per
 * sequence against a long cache (GQA 32:8, d = 128; B = 8 x 8k and B = 1 x 64k; fp32,
 * bf16 and fp16), where the work is reading the cache. Each cell prints the K and V bytes the
 * call must read once per second, a read loop's bytes per second (a vectorized sum over
 * a buffer larger than L3, on the same threads), measured in alternating rounds in this
 * run, and their ratio; medians of the rounds. The output is checked against the oracle
 * (check.c) before anything is timed. The CUDA cells (device-memory caches, contiguous and
 * paged, against a device-to-device copy) are decode_gpu.c's.
 */
#include "config.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "read_loop.h"

typedef struct { int64_t B, S; fa_dtype dt; } decode_cell;

static const decode_cell cells[] = {
    { 8, 8192, FA_F32 }, { 1, 65536, FA_F32 }, { 8, 8192, FA_BF16 }, { 1, 65536, FA_BF16 },
    { 8, 8192, FA_F16 }, { 1, 65536, FA_F16 },
};
#define NCELLS (int)(sizeof cells / sizeof cells[0])

/* One cell on ctx: check, then rounds of (one call, one read pass). Returns 1 when the
   check failed. */
static int run_cell(bench_run *R, fa_context *ctx, const decode_cell *c, const float *buf,
                    size_t nbuf, FILE *f)
{
    bench_shape sh = { c->dt, c->B, 32, 8, 1, c->S, 128, 1, 0, 0 };
    bench_problem p;
    char shape[128];
    snprintf(shape, sizeof shape, "B=%lld x %lldk %s", (long long)c->B, (long long)(c->S / 1024),
             bp_dtype_name(c->dt));
    if (bp_alloc(&p, &sh, 11)) {
        fprintf(f, "  %-18s n/a: no memory for the cache\n", shape);
        bp_free(&p);
        return 0;
    }
    int32_t cs[8];
    for (int64_t b = 0; b < c->B; b++) cs[b] = (int32_t)c->S;
    fa_options opt;
    memset(&opt, 0, sizeof opt);
    opt.causal = FA_CAUSAL_BOTTOM_RIGHT;
    const char *name = "?";
    fa_query(ctx, &name, &p.tout, p.lse, &p.tq, &p.tk, &p.tv, &opt);
    fa_status st = fa_forward_kvcache(ctx, &p.tout, p.lse, &p.tq, &p.tk, &p.tv, NULL, NULL,
                                      cs, NULL, 0, &opt);
    bench_check ck;
    if (st != FA_OK || !check_forward(&p, p.out, c->dt, R->check_rows, &ck)) {
        fprintf(f, "  %-18s FAILED: %s\n", shape,
                st != FA_OK ? fa_last_error(ctx) : "the oracle check (check.c)");
        bp_free(&p);
        return 1;
    }
    int rounds = R->repeats < 3 ? 3 : R->repeats > 9 ? 9 : R->repeats;
    double tk[9], tr[9];
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        fa_forward_kvcache(ctx, &p.tout, p.lse, &p.tq, &p.tk, &p.tv, NULL, NULL, cs, NULL, 0, &opt);
        tk[r] = now_s() - t0;
        tr[r] = read_pass(buf, nbuf, R->threads);
    }
    double kv = 2.0 * (double)(c->B * c->S * 8 * 128) * (double)fa_dtype_size(c->dt);
    double gk = kv / median(tk, rounds) / 1e9, gr = (double)nbuf * 4.0 / median(tr, rounds) / 1e9;
    fprintf(f, "  %-18s KV %7.1f MB  %6.2f GB/s  read loop %6.2f GB/s  ratio %.2f  (%s; check "
            "err %.1e <= %.1e)\n", shape, kv / 1e6, gk, gr, gk / gr, name, ck.err, ck.tol);
    bp_free(&p);
    return 0;
}

int decode_steps(void)
{
    return NCELLS + 1;   /* one per CPU cell, one for the CUDA cells */
}

int decode_bench(bench_run *R, FILE *f)
{
    size_t nbuf = (size_t)512 << 20 >> 2;   /* 512 MiB, or 4 x L3 when that is more */
    if (R->caches.l3 > 0 && (size_t)R->caches.l3 > nbuf) nbuf = (size_t)R->caches.l3;
    float *buf = malloc(nbuf * sizeof(float));
    if (!buf) {
        fprintf(stderr, "flashattn-bench: no memory for the read loop's buffer\n");
        return 1;
    }
    for (size_t i = 0; i < nbuf; i++) buf[i] = (float)(i & 7);
    fprintf(f, "\n== Decode: fa_forward_kvcache, 1 new token, H=32 Hkv=8 d=128, causal; KV bytes "
            "read once per second against a read loop (medians of alternating rounds, %d "
            "threads) ==\n", R->threads);
    int failed = 0;
    fa_context *ctx = NULL;
    if (fa_context_create(&ctx, FA_BACKEND_CPU) != FA_OK) {
        fprintf(f, "cpu: n/a: %s\n", fa_last_error(NULL));
    } else {
        fa_context_set_threads(ctx, R->threads);
        fprintf(f, "cpu:\n");
        for (int i = 0; i < NCELLS; i++) {
            progress(R, "decode: cpu B=%lld x %lldk %s (oracle check, then timing)",
                     (long long)cells[i].B, (long long)(cells[i].S / 1024), bp_dtype_name(cells[i].dt));
            failed |= run_cell(R, ctx, &cells[i], buf, nbuf, f);
        }
        fa_context_destroy(ctx);
    }
    /* The device cells (decode_gpu.c), where a CUDA context exists; else why not. */
    progress(R, "decode: cuda cells");
    if (fa_context_create(&ctx, FA_BACKEND_CUDA) != FA_OK) {
        fprintf(f, "cuda: n/a: %s\n", fa_last_error(NULL));
    } else {
        failed |= decode_gpu_bench(R, ctx, f);
        fa_context_destroy(ctx);
    }
    free(buf);
    return failed;
}
