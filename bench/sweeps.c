/* sweeps.c - what the bench runs on the CPU: the ladder (forward and backward), the tile
 * sweep, the sequence-length sweep and the CPU sweep (--mode sweep, --full).
 *
 * A point whose estimated time (from the rate of the previous point of its series) would
 * not fit the per-measurement budget is recorded as skipped with the estimate; nothing is
 * ever extrapolated into a result.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

static const int tiles_full[] = { 16, 32, 64, 128, 256, 512, 1024 };
static const int tiles_quick[] = { 16, 64, 256, 1024 };
static const int64_t seq_full[] = { 256, 512, 1024, 2048, 4096, 8192, 16384 };
static const int64_t seq_quick[] = { 256, 512, 1024, 2048, 4096 };

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The rung the sweeps use: the best CPU kernel set that passed the ladder, else the one
 * --isa names (or the library's choice), else the reference backend. */
static rung_spec sweep_rung(const bench_run *R, char *label, size_t len)
{
    static char isa_buf[16];
    rung_spec rs = { IMPL_FA, FA_BACKEND_CPU, NULL, label };
    if (R->best_isa[0]) {
        snprintf(isa_buf, sizeof isa_buf, "%s", R->best_isa);
        rs.isa = isa_buf;
    } else if (R->isa) {
        rs.isa = R->isa;
    }
    const char *old = getenv("FA_CPU_ISA");
    char *saved = old ? strdup(old) : NULL;
    if (rs.isa) setenv("FA_CPU_ISA", rs.isa, 1);
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, FA_BACKEND_CPU);
    if (rs.isa) {
        if (saved) setenv("FA_CPU_ISA", saved, 1);
        else unsetenv("FA_CPU_ISA");
    }
    free(saved);
    fa_context_destroy(ctx);
    if (st != FA_OK || (R->backend && !strcmp(R->backend, "reference"))) {
        rs.backend = FA_BACKEND_REFERENCE;
        rs.isa = NULL;
        snprintf(label, len, "reference");
    } else {
        snprintf(label, len, "cpu %s", rs.isa ? rs.isa : "auto");
    }
    return rs;
}

static int cpu_wanted(const bench_run *R)
{
    return !R->backend || !strcmp(R->backend, "all") || !strcmp(R->backend, "cpu") ||
           !strcmp(R->backend, "reference");
}

/* ------------------------------------------------------------------- ladder ----- */

/* One ladder rung on p (the CUDA rung of an f32 problem on the same inputs in bf16). */
static void ladder_rung(bench_run *R, const rung_spec *rs, bench_problem *p, int backward,
                        bench_result *r)
{
    snprintf(r->section, sizeof r->section, "ladder");
    if (rs->backend == FA_BACKEND_CUDA && p->sh.dtype == FA_F32) {
        rung_spec cu = *rs;
        cu.label = "cuda (bf16)";
        bench_problem pb;
        if (bp_alloc_converted(&pb, p, FA_BF16)) {
            snprintf(r->impl, sizeof r->impl, "%s", cu.label);
            snprintf(r->dir, sizeof r->dir, "%s", backward ? "bwd" : "fwd");
            r->sh = pb.sh;
            r->status = RES_NA;
            snprintf(r->note, sizeof r->note, "cuda: cannot allocate the bf16 inputs");
        } else {
            rung_measure(R, &cu, &pb, backward, R->threads, R->bq, R->bkv, r);
        }
        bp_free(&pb);
    } else {
        rung_measure(R, rs, p, backward, R->threads, R->bq, R->bkv, r);
    }
    if (r->status == RES_FAIL) fprintf(stderr, "        %s\n", r->note);
}

/* The forward rungs, then the backward ones on the same problem. A backward rung whose
 * call would take (from its forward time, x 2.5) more than the per-measurement budget
 * allows is recorded as skipped, with the estimate. */
void sweep_ladder(bench_run *R)
{
    rung_spec rs[16];
    double t_fwd[16];
    int na[16];                        /* the index of a forward row that was n/a, or -1 */
    int n = rung_list(R, rs, 16);
    bench_problem p;
    char shape[128];
    bp_shape_str(&R->sh, shape, sizeof shape);
    if (bp_alloc(&p, &R->sh, 1) || (R->ladder_bwd && bp_alloc_backward(&p, 6))) {
        fprintf(stderr, "flashattn-bench: cannot allocate the ladder problem (%s)\n", shape);
        bp_free(&p);
        return;
    }
    for (int i = 0; i < n; i++) {
        progress(R, "ladder: %s forward (%s)", rs[i].label, shape);
        bench_result *r = results_add(&R->res);
        ladder_rung(R, &rs[i], &p, 0, r);
        t_fwd[i] = r->status == RES_OK ? r->t_med : 0;
        na[i] = r->status == RES_NA ? R->res.n - 1 : -1;
        if (r->status == RES_OK && rs[i].backend == FA_BACKEND_CPU && rs[i].isa)
            snprintf(R->best_isa, sizeof R->best_isa, "%s", rs[i].isa);
    }
    for (int i = 0; i < n && R->ladder_bwd; i++) {
        progress(R, "ladder: %s backward (%s)", rs[i].label, shape);
        bench_result *r = results_add(&R->res);
        double est = 2.5 * t_fwd[i];
        if (na[i] >= 0) {                       /* not available: as the forward */
            *r = R->res.v[na[i]];
            snprintf(r->dir, sizeof r->dir, "bwd");
            continue;
        }
        if (est * 4 > 3 * R->budget) {
            snprintf(r->section, sizeof r->section, "ladder");
            snprintf(r->impl, sizeof r->impl, "%s", rs[i].label);
            snprintf(r->dir, sizeof r->dir, "bwd");
            r->sh = p.sh;
            r->threads = R->threads;
            r->status = RES_SKIP;
            snprintf(r->note, sizeof r->note, "skipped: a call would take about %.1f s "
                     "(2.5 x its forward); budget %.3g s per measurement (--budget)", est,
                     R->budget);
            continue;
        }
        ladder_rung(R, &rs[i], &p, 1, r);
    }
    bp_free(&p);
}

/* ------------------------------------------------------------------- tiles ------ */

int sweep_count_tiles(const bench_run *R)
{
    return R->quick ? NELEM(tiles_quick) : NELEM(tiles_full);
}

void sweep_tiles(bench_run *R)
{
    char label[32];
    rung_spec rs = sweep_rung(R, label, sizeof label);
    bench_shape sh = R->sh;
    if (rs.backend == FA_BACKEND_REFERENCE) {        /* keep the slow rung's sweep short */
        if (sh.H > 2) sh.H = sh.Hkv = 2;
        if (sh.Sq > 512) sh.Sq = sh.Sk = 512;
    }
    const int *bc = R->quick ? tiles_quick : tiles_full;
    int n = sweep_count_tiles(R);
    bench_problem p;
    char shape[128];
    bp_shape_str(&sh, shape, sizeof shape);
    if (bp_alloc(&p, &sh, 2)) {
        fprintf(stderr, "flashattn-bench: cannot allocate the tile-sweep problem\n");
        bp_free(&p);
        return;
    }
    for (int i = 0; i < n; i++) {
        progress(R, "tiles: %s block_kv=%d (%s)", label, bc[i], shape);
        bench_result *r = results_add(&R->res);
        snprintf(r->section, sizeof r->section, "tiles");
        rung_measure(R, &rs, &p, 0, R->threads, R->bq, bc[i], r);
        r->tile_bytes = 2.0 * bc[i] * (double)sh.d * (double)fa_dtype_size(sh.dtype);
        if (r->status != RES_OK) fprintf(stderr, "        %s\n", r->note);
    }
    bp_free(&p);
}

/* ------------------------------------------------------------------- seqlen ----- */

int sweep_count_seqlen(const bench_run *R)
{
    return 2 * (R->quick ? NELEM(seq_quick) : NELEM(seq_full));
}

static void skip(bench_result *r, const char *section, const char *impl, const bench_shape *sh,
                 int threads, const char *fmt, double a, double b)
{
    snprintf(r->section, sizeof r->section, "%s", section);
    snprintf(r->impl, sizeof r->impl, "%s", impl);
    snprintf(r->dir, sizeof r->dir, "fwd");
    r->sh = *sh;
    r->threads = threads;
    r->status = RES_SKIP;
    r->rss_delta = r->io_meas = -1;
    snprintf(r->note, sizeof r->note, fmt, a, b);
}

/* Skip when the check and three timed runs would take more than three budgets. */
static int too_slow(const bench_run *R, double flops, double rate, double *est)
{
    *est = rate > 0 ? flops / (rate * 1e9) : 0;
    return rate > 0 && *est * 4 > 3 * R->budget;
}

void sweep_seqlen(bench_run *R)
{
    char label[32];
    rung_spec flash = sweep_rung(R, label, sizeof label);
    rung_spec naive = { IMPL_NAIVE, FA_BACKEND_AUTO, NULL, "naive" };
    const int64_t *S = R->quick ? seq_quick : seq_full;
    int n = R->quick ? NELEM(seq_quick) : NELEM(seq_full);
    double rate_f = 0, rate_n = 0;
    int flash_done = 0, naive_done = 0;
    for (int i = 0; i < n; i++) {
        bench_shape sh = R->sh;
        sh.Sq = sh.Sk = S[i];
        double flops = bp_flops(&sh, 0), est;
        bench_problem p;
        int have = bp_alloc(&p, &sh, 3) == 0;
        char shape[128];
        bp_shape_str(&sh, shape, sizeof shape);

        progress(R, "seqlen: %s S=%lld", label, (long long)S[i]);
        bench_result *r = results_add(&R->res);
        if (!have)
            skip(r, "seqlen", label, &sh, R->threads, "inputs do not fit in memory (%.0f, %.0f)", 0, 0);
        else if (too_slow(R, flops, rate_f, &est) || flash_done) {
            skip(r, "seqlen", label, &sh, R->threads,
                 "skipped: a call would take about %.1f s at the last rate; budget %.3g s "
                 "per point (--budget, --full)", est, R->budget);
            flash_done = 1;
        } else {
            snprintf(r->section, sizeof r->section, "seqlen");
            rung_measure(R, &flash, &p, 0, R->threads, R->bq, R->bkv, r);
            if (r->status == RES_OK) rate_f = r->gflops;
            if (r->status != RES_OK) fprintf(stderr, "        %s\n", r->note);
        }

        progress(R, "seqlen: naive S=%lld", (long long)S[i]);
        r = results_add(&R->res);
        double need = (double)naive_extra_bytes(&p, R->threads, 0, 0);
        if (!have) need = 4.0 * (double)S[i] * (double)S[i];
        if (need > (double)R->mem_cap_mib * 1048576.0)
            skip(r, "naive-seq", "naive", &sh, R->threads,
                 "not run: the S x S matrices need %.0f MiB > the %.0f MiB cap (--mem-cap)",
                 need / 1048576.0, (double)R->mem_cap_mib);
        else if (!have)
            skip(r, "naive-seq", "naive", &sh, R->threads, "inputs do not fit (%.0f, %.0f)", 0, 0);
        else if (too_slow(R, flops, rate_n, &est) || naive_done) {
            skip(r, "naive-seq", "naive", &sh, R->threads,
                 "skipped: a call would take about %.1f s at the last rate; budget %.3g s "
                 "per point", est, R->budget);
            naive_done = 1;
        } else {
            snprintf(r->section, sizeof r->section, "naive-seq");
            rung_measure(R, &naive, &p, 0, R->threads, 0, 0, r);
            if (r->status == RES_OK) rate_n = r->gflops;
        }
        bp_free(&p);
    }
}

/* ------------------------------------------------------------------- --full ----- */

static const int64_t full_S[] = { 512, 1024, 2048, 4096, 8192 };
static const int64_t full_d[] = { 64, 128 };
static const fa_dtype full_dt[] = { FA_F32, FA_BF16 };

/* Thread counts of the CPU sweep: 1 and --threads (default all cores); directions: 2, or 1
   with --forward-only. */
static int full_nthr(const bench_run *R) { return R->threads > 1 ? 2 : 1; }
static int full_ndir(const bench_run *R) { return R->ladder_bwd ? 2 : 1; }

int sweep_count_full(const bench_run *R)
{
    const int n = full_nthr(R) * full_ndir(R);
    if (R->sweep_only) return n;
    return NELEM(full_S) * NELEM(full_d) * NELEM(full_dt) * 2 * n + 3;
}

static void full_point(bench_run *R, const rung_spec *rs, const char *label,
                       const bench_shape *sh, int backward, int threads, double *rate,
                       const char *section)
{
    double flops = bp_flops(sh, backward), est;
    char shape[128];
    bp_shape_str(sh, shape, sizeof shape);
    progress(R, "%s: %s %s %s %d thr", section, label, backward ? "bwd" : "fwd", shape, threads);
    bench_result *r = results_add(&R->res);
    if (too_slow(R, flops, *rate, &est)) {
        skip(r, section, label, sh, threads, "skipped: a call would take about %.1f s; "
             "budget %.3g s per point (--budget)", est, R->budget);
        snprintf(r->dir, sizeof r->dir, "%s", backward ? "bwd" : "fwd");
        return;
    }
    bench_problem p;
    if (bp_alloc(&p, sh, 4) || (backward && bp_alloc_backward(&p, 5))) {
        skip(r, section, label, sh, threads, "cannot allocate the problem (%.0f %.0f)", 0, 0);
        bp_free(&p);
        return;
    }
    snprintf(r->section, sizeof r->section, "%s", section);
    rung_measure(R, rs, &p, backward, threads, R->bq, R->bkv, r);
    if (r->status == RES_OK) *rate = r->gflops;
    else fprintf(stderr, "        %s\n", r->note);
    bp_free(&p);
}

void sweep_full(bench_run *R)
{
    char label[32];
    rung_spec rs = sweep_rung(R, label, sizeof label);
    if (!cpu_wanted(R)) return;
    const int thr[2] = { 1, R->threads }, nthr = full_nthr(R), ndir = full_ndir(R);
    if (R->sweep_only) {   /* the one problem of the command line, fwd (and bwd) */
        for (int t = 0; t < nthr; t++)
            for (int bw = 0; bw < ndir; bw++) {
                double rate = 0;
                full_point(R, &rs, label, &R->sh, bw, thr[t], &rate, "full");
            }
        return;
    }
    for (int a = 0; a < NELEM(full_dt); a++)
        for (int b = 0; b < NELEM(full_d); b++)
            for (int c = 0; c < 2; c++)
                for (int t = 0; t < nthr; t++)
                    for (int bw = 0; bw < ndir; bw++) {
                        double rate = 0;
                        for (int s = 0; s < NELEM(full_S); s++) {
                            bench_shape sh = { full_dt[a], 1, 16, 16, full_S[s], full_S[s],
                                               full_d[b], c, 0, 0 };
                            full_point(R, &rs, label, &sh, bw, thr[t], &rate, "full");
                        }
                    }
    /* decode: one query token against a long cache, GQA 32:8 */
    double rate = 0;
    for (int s = 0; s < 2; s++) {
        bench_shape sh = { FA_F32, 1, 32, 8, 1, s ? 16384 : 4096, 128, 0, 0, 0 };
        full_point(R, &rs, label, &sh, 0, R->nthreads_all, &rate, "decode");
    }
    /* the same through a paged KV cache (16-token pages, shuffled block table), 4 sequences */
    bench_shape sh = { FA_F32, 4, 32, 8, 1, 4096, 128, 0, 1, 16 };
    rate = 0;
    full_point(R, &rs, label, &sh, 0, R->nthreads_all, &rate, "decode");
}
