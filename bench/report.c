/* report.c - the results: progress lines (stderr), the list of results, the summary
 * table (stdout) and results.csv.
 *
 * Every number is either measured in this run or computed from a named model; a figure
 * that could not be obtained is printed as "n/a" or "-" with the reason, never invented.
 * docs/bench.md explains each column.
 */
#include "config.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

void progress(bench_run *R, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%d/%d] ", ++R->step, R->nsteps);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " ...\n");
    va_end(ap);
}

bench_result *results_add(bench_results *r)
{
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        bench_result *v = realloc(r->v, (size_t)cap * sizeof *v);
        if (!v) {
            fprintf(stderr, "flashattn-bench: out of memory\n");
            exit(1);
        }
        r->v = v, r->cap = cap;
    }
    bench_result *x = &r->v[r->n++];
    memset(x, 0, sizeof *x);
    x->rss_delta = x->io_meas = -1;
    return x;
}

void fmt_bytes(double b, char *buf, size_t len)
{
    if (b < 0) snprintf(buf, len, "n/a");
    else if (b < 1024) snprintf(buf, len, "%.0f B", b);
    else if (b < 1048576) snprintf(buf, len, "%.1f KiB", b / 1024);
    else if (b < 1073741824.0) snprintf(buf, len, "%.1f MiB", b / 1048576);
    else snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
}

static const char *status_word(int s)
{
    return s == RES_OK ? "PASS" : s == RES_FAIL ? "FAIL" : s == RES_NA ? "n/a" : "skip";
}

/* seconds as "61.1 ms", "896 ms", "1.18 s" */
static void secs(double t, char *buf, size_t len)
{
    if (t >= 1) snprintf(buf, len, "%.2f s", t);
    else if (t >= 0.1) snprintf(buf, len, "%.0f ms", 1e3 * t);
    else if (t >= 0.001) snprintf(buf, len, "%.3g ms", 1e3 * t);
    else snprintf(buf, len, "%.3g us", 1e6 * t);
}

static void time_str(const bench_result *r, char *buf, size_t len)
{
    char a[24], b[24], c[24];
    if (r->status != RES_OK) {
        snprintf(buf, len, "-");
        return;
    }
    secs(r->t_med, a, sizeof a);
    secs(r->t_min, b, sizeof b);
    secs(r->t_max, c, sizeof c);
    snprintf(buf, len, "%s (%s..%s, %d)", a, b, c, r->runs);
}

static int count(const bench_run *R, const char *section)
{
    int n = 0;
    for (int i = 0; i < R->res.n; i++) n += !strcmp(R->res.v[i].section, section);
    return n;
}

/* A row's reason, shortened when it is the CUDA line of the header (said once there). */
static const char *na_note(const bench_run *R, const bench_result *r, char *buf, size_t len)
{
    if (r->status == RES_NA && R->cuda_why[0] && strstr(r->note, R->cuda_why)) {
        snprintf(buf, len, "%s: not available (the 'CUDA: not available' line above)", r->impl);
        return buf;
    }
    return r->note;
}

static void ladder_rows(const bench_run *R, FILE *f, const char *dir)
{
    char a[32], b[32], c[32], d[32], t[96], why[160];
    for (int i = 0; i < R->res.n; i++) {
        const bench_result *r = &R->res.v[i];
        if (strcmp(r->section, "ladder") || strcmp(r->dir, dir)) continue;
        if (r->status == RES_NA || r->status == RES_SKIP) {
            fprintf(f, "%-13s %-5s %s\n", r->impl, status_word(r->status),
                    na_note(R, r, why, sizeof why));
            continue;
        }
        time_str(r, t, sizeof t);
        fmt_bytes(r->extra_model, a, sizeof a);
        fmt_bytes(r->rss_delta, b, sizeof b);
        fmt_bytes(r->io_model, c, sizeof c);
        fmt_bytes(r->io_meas, d, sizeof d);
        if (r->status == RES_FAIL) {
            fprintf(f, "%-13s %-5s %-9.2g %s\n", r->impl, "FAIL", r->err, r->note);
            continue;
        }
        char pct[16];
        snprintf(pct, sizeof pct, "%6.1f%%", r->pct_peak);
        if (r->device) {                         /* see the footnote below the kernels */
            snprintf(pct, sizeof pct, "%7s", "-");
            if (r->rss_delta >= 0) strncat(b, "*", sizeof b - strlen(b) - 1);
        }
        fprintf(f, "%-13s %-5s %-9.2g %-28s %9.2f %s %11s %11s %11s %11s\n", r->impl,
                "PASS", r->err, t, r->gflops, pct, a, b, c, d);
    }
}

static void ladder(const bench_run *R, FILE *f)
{
    char shape[128];
    bp_shape_str(&R->sh, shape, sizeof shape);
    fprintf(f, "\n== Ladder: %s, %.3g GFLOP per forward (4*B*H*Sq*Sk*d%s), backward 2.5x, "
            "%d threads ==\n", shape, bp_flops(&R->sh, 0) / 1e9,
            !R->sh.causal ? "" : R->sh.Sq == R->sh.Sk ? " / 2" : ", visible pairs only",
            R->threads);
    fprintf(f, "%-13s %-5s %-9s %-28s %9s %7s %11s %11s %11s %11s\n", "rung", "check",
            "max err", "time median (min..max, n)", "GFLOP/s", "%peak", "extra mem",
            "peak RSS +", "DRAM", "DRAM");
    fprintf(f, "%-13s %-5s %-9s %-28s %9s %7s %11s %11s %11s %11s\n", "", "", "", "", "", "",
            "(model)", "(measured)", "(modeled)", "(measured)");
    fprintf(f, "-- forward --\n");
    ladder_rows(R, f, "fwd");
    int nb = 0;
    for (int i = 0; i < R->res.n; i++)
        nb += !strcmp(R->res.v[i].section, "ladder") && !strcmp(R->res.v[i].dir, "bwd");
    if (nb) {
        fprintf(f, "-- backward (dq, dk, dv; out and lse from a forward before the timing) --\n");
        ladder_rows(R, f, "bwd");
    }
    fprintf(f, "kernels:\n");
    for (int i = 0; i < R->res.n; i++) {
        const bench_result *r = &R->res.v[i];
        if (!strcmp(r->section, "ladder") && r->kernel[0])
            fprintf(f, "  %-13s %s %s%s%s\n", r->impl, r->dir, r->kernel,
                    r->threads != R->threads && !r->device ? "  [runs on 1 thread]" : "", "");
    }
    for (int i = 0; i < R->res.n; i++) {
        const bench_result *r = &R->res.v[i];
        if (strcmp(r->section, "ladder") || !r->device || r->status != RES_OK) continue;
        fprintf(f, "%s: %.1f TFLOP/s. %%peak: - (the measured ceiling is the CPU's). "
                "* peak RSS + is device memory still held after the first call "
                "(cuMemGetInfo), not host RSS. DRAM (modeled) is HBM traffic for the "
                "kernel's tiles; (measured): n/a, host counters do not see the GPU.\n",
                r->impl, r->gflops / 1e3);
    }
    if (perf_reason()[0])
        fprintf(f, "DRAM (measured): n/a (perf_event_open: %s)\n", perf_reason());
}

static void tiles(const bench_run *R, FILE *f)
{
    char t[96], tb[32];
    const bench_result *first = NULL;
    for (int i = 0; i < R->res.n && !first; i++)
        if (!strcmp(R->res.v[i].section, "tiles")) first = &R->res.v[i];
    if (!first) return;
    char shape[128], l1[32], l2[32];
    bp_shape_str(&first->sh, shape, sizeof shape);
    fmt_bytes((double)R->caches.l1d, l1, sizeof l1);
    fmt_bytes((double)R->caches.l2, l2, sizeof l2);
    fprintf(f, "\n== Block-size sweep (the cache cliff): %s, %s, block_q %s ==\n", first->impl,
            shape, R->bq > 0 ? "from --tiles" : "automatic");
    fprintf(f, "K+V tile = 2 * block_kv * d * %zu bytes; L1d %s, L2 %s per core (%s)\n",
            fa_dtype_size(first->sh.dtype), l1, l2, R->caches.source);
    fprintf(f, "%8s %11s %-9s %-28s %9s %7s  %s\n", "block_kv", "K+V tile", "fits in",
            "time median (min..max, n)", "GFLOP/s", "%peak", "kernel");
    for (int i = 0; i < R->res.n; i++) {
        const bench_result *r = &R->res.v[i];
        if (strcmp(r->section, "tiles")) continue;
        fmt_bytes(r->tile_bytes, tb, sizeof tb);
        const char *lvl = r->tile_bytes <= R->caches.l1d ? "L1d" : r->tile_bytes <= R->caches.l2
                                                                       ? "L2" : "> L2";
        if (r->status != RES_OK) {
            fprintf(f, "%8d %11s %-9s %s %s\n", r->bkv, tb, lvl, status_word(r->status), r->note);
            continue;
        }
        time_str(r, t, sizeof t);
        fprintf(f, "%8d %11s %-9s %-28s %9.2f %6.1f%%  %s\n", r->bkv, tb, lvl, t, r->gflops,
                r->pct_peak, r->kernel);
    }
}

static void seqlen(const bench_run *R, FILE *f)
{
    char a[32], b[32], c[32], d[32];
    fprintf(f, "\n== Sequence-length sweep: flash vs naive (B=%lld H=%lld d=%lld %s%s) ==\n",
            (long long)R->sh.B, (long long)R->sh.H, (long long)R->sh.d,
            bp_dtype_name(R->sh.dtype), R->sh.causal ? " causal" : "");
    fprintf(f, "%6s | %-12s %9s %7s %11s %11s | %9s %11s %11s\n", "S", "flash", "GFLOP/s",
            "%peak", "extra(model)", "RSS+(meas)", "naive", "extra(model)", "RSS+(meas)");
    for (int i = 0; i < R->res.n; i++) {
        const bench_result *r = &R->res.v[i];
        if (strcmp(r->section, "seqlen")) continue;
        const bench_result *nv = i + 1 < R->res.n && !strcmp(R->res.v[i + 1].section, "naive-seq")
                                     ? &R->res.v[i + 1] : NULL;
        char fl[200], nl[160];
        if (r->status == RES_OK) {
            fmt_bytes(r->extra_model, a, sizeof a);
            fmt_bytes(r->rss_delta, b, sizeof b);
            snprintf(fl, sizeof fl, "%-12s %9.2f %6.1f%% %11s %11s", r->impl, r->gflops,
                     r->pct_peak, a, b);
        } else {
            snprintf(fl, sizeof fl, "%-12s %-9s %7s %11s %11s", r->impl, status_word(r->status),
                     "", "", "");
        }
        if (nv && nv->status == RES_OK) {
            fmt_bytes(nv->extra_model, c, sizeof c);
            fmt_bytes(nv->rss_delta, d, sizeof d);
            snprintf(nl, sizeof nl, "%9.2f %11s %11s", nv->gflops, c, d);
        } else {
            snprintf(nl, sizeof nl, "%9s", nv ? status_word(nv->status) : "-");
        }
        fprintf(f, "%6lld | %s | %s\n", (long long)r->sh.Sq, fl, nl);
        if (r->status != RES_OK) fprintf(f, "       flash: %s\n", r->note);
        if (nv && nv->status != RES_OK) fprintf(f, "       naive: %s\n", nv->note);
    }
    /* where the naive matrix leaves each level: computed, not run */
    double B = (double)R->sh.B, H = (double)R->sh.H;
    int thr = R->threads;
    double heads = B * H < thr ? B * H : thr;
    fmt_bytes((double)R->caches.l2, a, sizeof a);
    fmt_bytes((double)R->caches.l3, b, sizeof b);
    fmt_bytes((double)R->caches.dram, c, sizeof c);
    fprintf(f, "naive S x S fp32 scores (computed from the sizes, not run):\n");
    fprintf(f, "  one head's matrix leaves L2 (%s) above S = %.0f and L3 (%s) above S = %.0f\n",
            a, floor(sqrt((double)R->caches.l2 / 4)), b, floor(sqrt((double)R->caches.l3 / 4)));
    fprintf(f, "  out of memory (%s): bench/naive.c (%.0f matrices at once) above S = %.0f; "
            "a framework holding all B*H = %.0f at once above S = %.0f\n", c, heads,
            floor(sqrt((double)R->caches.dram / (4 * heads))), B * H,
            floor(sqrt((double)R->caches.dram / (4 * B * H))));
    fprintf(f, "  flash keeps O(S) extra memory per head: m and l per row plus per-thread tiles\n");
}

static void full(const bench_run *R, FILE *f, const char *section)
{
    char shape[128], t[96];
    int gpu = !strcmp(section, "gpu");
    fprintf(f, "\n== %s ==\n", gpu ? "GPU sweep: 16k tokens per call (B = 16384/S), H = 2048/d; "
                                     "FLOPs bwd = 2.5 x fwd; time: CUDA events"
                               : !strcmp(section, "full")
                                   ? "CPU sweep: B=1 H=16; FLOPs bwd = 2.5 x fwd"
                                   : "Decode (Sq = 1, GQA 32:8) and the paged KV cache");
    fprintf(f, "%-40s %-4s %4s %-6s %-28s %9s %7s\n", "shape", "dir", gpu ? "" : "thr", "check",
            "time median (min..max, n)", gpu ? "TFLOP/s" : "GFLOP/s", gpu ? "" : "%peak");
    for (int i = 0; i < R->res.n; i++) {
        const bench_result *r = &R->res.v[i];
        if (strcmp(r->section, section)) continue;
        bp_shape_str(&r->sh, shape, sizeof shape);
        char thr[8] = "";
        if (!gpu) snprintf(thr, sizeof thr, "%d", r->threads);
        if (r->status != RES_OK) {
            fprintf(f, "%-40s %-4s %4s %-6s %s\n", shape, r->dir, thr, status_word(r->status),
                    r->note);
            continue;
        }
        time_str(r, t, sizeof t);
        if (gpu) {
            fprintf(f, "%-40s %-4s %4s %-6s %-28s %9.1f\n", shape, r->dir, thr, "PASS", t,
                    r->gflops / 1e3);
            continue;
        }
        fprintf(f, "%-40s %-4s %4s %-6s %-28s %9.2f %6.1f%%\n", shape, r->dir, thr, "PASS", t,
                r->gflops, r->pct_peak);
    }
}

void report_table(const bench_run *R, FILE *f)
{
    if (count(R, "ladder")) ladder(R, f);
    if (count(R, "tiles")) tiles(R, f);
    if (count(R, "seqlen")) seqlen(R, f);
    if (count(R, "full")) full(R, f, "full");
    if (count(R, "decode")) full(R, f, "decode");
    if (count(R, "gpu")) {
        full(R, f, "gpu");
        return;                                /* no CPU ceiling in a GPU sweep */
    }
    fprintf(f, "\n%%peak: against the FMA peak measured above for the rung's thread count%s. "
            "DRAM (modeled): the FlashAttention IO model; (measured): LL misses x 64 B.\n",
            R->peak.amx_1 > 0 && R->sh.dtype == FA_BF16 ? " (bf16: the AMX tile peak)"
            : R->peak.bf16_1 > 0 && R->sh.dtype == FA_BF16 ? " (bf16: the higher of the bf16-dot and fp32 peaks)" : "");
}

/* ------------------------------------------------------------------------ CSV ----- */

static void csv_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, int have, double x)
{
    if (have) fprintf(f, ",%.6g", x);
    else fputs(",", f);
}

int report_csv(const bench_run *R, const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
    if (!f) return -1;
    fprintf(f, "section,impl,kernel,dir,dtype,B,H,Hkv,Sq,Sk,d,causal,paged,threads,block_q,"
               "block_kv,status,check_err,check_tol,time_med_s,time_min_s,time_max_s,runs,"
               "gflops,pct_peak,peak_gflops,extra_model_bytes,rss_delta_bytes,io_model_bytes,"
               "io_measured_bytes,tile_bytes,note\n");
    for (int i = 0; i < R->res.n; i++) {
        const bench_result *r = &R->res.v[i];
        const bench_shape *s = &r->sh;
        int ok = r->status == RES_OK, checked = ok || r->status == RES_FAIL;
        fprintf(f, "%s,", r->section);
        csv_str(f, r->impl);
        fputc(',', f);
        csv_str(f, r->kernel);
        fprintf(f, ",%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%d,%d,%d,%d,%d,%s", r->dir,
                bp_dtype_name(s->dtype), (long long)s->B, (long long)s->H, (long long)s->Hkv,
                (long long)s->Sq, (long long)s->Sk, (long long)s->d, s->causal, s->paged,
                r->threads, r->bq, r->bkv, status_word(r->status));
        csv_num(f, checked, r->err);
        csv_num(f, checked, r->tol);
        csv_num(f, ok, r->t_med);
        csv_num(f, ok, r->t_min);
        csv_num(f, ok, r->t_max);
        csv_num(f, ok, r->runs);
        csv_num(f, ok, r->gflops);
        csv_num(f, ok && !r->device, r->pct_peak);
        csv_num(f, ok && !r->device, peak_for(&R->peak, r->threads, s->dtype));
        csv_num(f, ok, r->extra_model);
        csv_num(f, ok && r->rss_delta >= 0, r->rss_delta);
        csv_num(f, ok, r->io_model);
        csv_num(f, ok && r->io_meas >= 0, r->io_meas);
        csv_num(f, r->tile_bytes > 0, r->tile_bytes);
        fputc(',', f);
        csv_str(f, r->note);
        fputc('\n', f);
    }
    if (f != stdout) return fclose(f) ? -1 : 0;
    fflush(f);
    return 0;
}
