/* main.c - flashattn-bench: options, the plan of the run, and where the results go.
 *
 * Default run (no arguments, about two minutes on a 2-core laptop):
 *   1. the memory hierarchy and the tiles as the library sees them (fa_context_describe;
 *      on a GPU also the driver's attributes and the tiles fa_query names),
 *   2. this machine's FMA peak, measured now (peak.c): the ceiling for every GFLOP/s,
 *   3. the ladder on one problem, forward then backward: naive, unfused BLAS, reference,
 *      cpu generic/avx2/avx512 (amx where present), cuda; each checked against a
 *      double-precision oracle first, then timed,
 *   4. the block-size sweep (the cache cliff) and the sequence-length sweep (flash vs
 *      naive, with where the naive S x S matrix leaves L2, L3 and memory),
 *   5. a summary table on stdout, results.csv and bench.svg (+ bench.png with gnuplot).
 * --backend cuda --mode sweep runs the GPU sweep (gpu.c) instead of 2.-4.
 * Progress goes to stderr, one line per step. Exit status: 0, 1 when a rung failed its
 * oracle check, 2 for bad options, 3 when the GPU sweep finds no usable CUDA backend.
 */
#include "config.h"
#include <errno.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "bench.h"
#include "cudrv.h"

static int mkdir_p(const char *dir)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

/* 1. The machine as the library sees it: the CPU context's description (the reference
 * backend's when no CPU kernel set is usable), then CUDA's or the one line why not. Returns
 * 1 when a CUDA context could be created. */
static int describe_machine(bench_run *R, FILE *info)
{
    char desc[4096];
    rung_describe(R->isa, desc, sizeof desc);
    fprintf(info, "flashattn-bench, flashattn %s\n\n", fa_version_string());
    fprintf(info, "== The machine as the library sees it (fa_context_describe, CPU backend) ==\n");
    if (!strncmp(desc, "cpu: not available", 18)) {
        fputs(desc, info);
        fa_context *ref = NULL;
        if (fa_context_create(&ref, FA_BACKEND_REFERENCE) == FA_OK) {
            snprintf(desc, sizeof desc, "%s", fa_context_describe(ref));
            fprintf(info, "-- reference backend instead --\n");
            fa_context_destroy(ref);
        }
    }
    fputs(desc, info);
    if (desc[0] && desc[strlen(desc) - 1] != '\n') fputc('\n', info);
    caches_from_describe(desc, &R->caches);
    fa_context *cuda = NULL;
    int have_cuda = fa_context_create(&cuda, FA_BACKEND_CUDA) == FA_OK;
    if (have_cuda) {
        fprintf(info, "-- cuda --\n%s", fa_context_describe(cuda));
        gpu_describe(R, info, cuda);
        fa_context_destroy(cuda);
    } else {
        snprintf(R->cuda_why, sizeof R->cuda_why, "%s", fa_last_error(NULL));
        fprintf(info, "CUDA: not available: %s\n", R->cuda_why);
    }
    if (perf_reason()[0] && !R->gpu_sweep)
        fprintf(info, "cache-miss counters: n/a (perf_event_open: %s)\n", perf_reason());
    return have_cuda;
}

/* 2. The ceiling: the FMA peak, 1 thread and all. */
static void measure_peak(bench_run *R, FILE *info)
{
    progress(R, "peak: FMA throughput loop, 1 and %d threads", R->nthreads_all);
    peak_measure(&R->peak, R->nthreads_all, R->quick ? 0.15 : 0.3);
    fprintf(info, "\n== Ceiling: fp32 FMA peak measured now (%s loop, 16 independent accumulators) ==\n",
            R->peak.isa);
    fprintf(info, "  1 thread: %.1f GFLOP/s   %d threads: %.1f GFLOP/s\n", R->peak.fp32_1,
            R->nthreads_all, R->peak.fp32_all);
    if (R->peak.bf16_1 > 0)
        fprintf(info, "  bf16 dot products (vdpbf16ps): 1 thread %.1f, %d threads %.1f GFLOP/s "
                "(--dtype bf16: the highest of these is the ceiling)\n", R->peak.bf16_1,
                R->nthreads_all, R->peak.bf16_all);
    if (R->peak.amx_1 > 0)
        fprintf(info, "  bf16 AMX tiles (TDPBF16PS): 1 thread %.1f, %d threads %.1f GFLOP/s "
                "(--dtype bf16: the highest of these is the ceiling)\n", R->peak.amx_1,
                R->nthreads_all, R->peak.amx_all);
    fflush(info);
}

/* The ceiling again after the measurements: on a shared machine the best of two
 * measurements is the better estimate; every %peak is recomputed against it. */
static void remeasure_peak(bench_run *R, FILE *info)
{
    double p1 = R->peak.fp32_1, pa = R->peak.fp32_all, x1 = R->peak.amx_1, xa = R->peak.amx_all;
    progress(R, "peak: FMA throughput loop again (best of start and end is the ceiling)");
    peak_measure(&R->peak, R->nthreads_all, R->quick ? 0.15 : 0.3);
    for (int i = 0; i < R->res.n; i++) {
        bench_result *r = &R->res.v[i];
        double pk = peak_for(&R->peak, r->threads, r->sh.dtype);
        if (r->status == RES_OK && pk > 0 && !r->device) r->pct_peak = 100.0 * r->gflops / pk;
    }
    fprintf(info, "\n== Ceiling used for %%peak: best of the start and end measurements ==\n"
            "  fp32 FMA: 1 thread %.1f GFLOP/s (start %.1f), %d threads %.1f GFLOP/s (start %.1f)\n",
            R->peak.fp32_1, p1, R->nthreads_all, R->peak.fp32_all, pa);
    if (R->peak.amx_1 > 0)
        fprintf(info, "  bf16 AMX tiles: 1 thread %.1f GFLOP/s (start %.1f), %d threads %.1f GFLOP/s "
                "(start %.1f)\n", R->peak.amx_1, x1, R->nthreads_all, R->peak.amx_all, xa);
    if (R->nthreads_all > 1 && R->peak.fp32_all < 1.2 * R->peak.fp32_1)
        fprintf(info, "  note: %d threads measured barely faster than one (or slower): other "
                "processes are using the cores; all-thread figures are unreliable in this run\n",
                R->nthreads_all);
}

/* 5. The table (or CSV) on stdout, the CSV and the plots in --out, the CSV to --csv. */
static void write_results(bench_run *R, FILE *info)
{
    char path[1100], png[1100] = "";
    progress(R, "writing the table, CSV and plots");
    if (R->csv_stdout) report_csv(R, "-");
    else report_table(R, stdout);
    fputc('\n', info);
    if (R->csv_path) {
        if (report_csv(R, R->csv_path) == 0) fprintf(info, "wrote %s\n", R->csv_path);
        else fprintf(stderr, "flashattn-bench: cannot write %s\n", R->csv_path);
    }
    if (mkdir_p(R->out_dir)) {
        fprintf(stderr, "flashattn-bench: cannot create %s: %s\n", R->out_dir, strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/results.csv", R->out_dir);
    if (report_csv(R, path) == 0) fprintf(info, "wrote %s\n", path);
    else fprintf(stderr, "flashattn-bench: cannot write %s\n", path);
    if (R->gpu_sweep) return;                    /* the plots are of the CPU sections */
    snprintf(path, sizeof path, "%s/bench.svg", R->out_dir);
    if (plot_svg(R, path) == 0) fprintf(info, "wrote %s\n", path);
    else fprintf(stderr, "flashattn-bench: cannot write %s\n", path);
    int g = plot_gnuplot(R, R->out_dir, png, sizeof png);
    if (g == 0) fprintf(info, "wrote %s (gnuplot)\n", png);
    else if (g == 1 && !strcmp(png, "(no measured points)"))
        fprintf(info, "no PNG: nothing measured to plot\n");
    else if (g == 1) fprintf(info, "no PNG: gnuplot is not on PATH (the SVG has the same plots)\n");
    else fprintf(info, "no PNG: gnuplot failed (see %s)\n", png);
}

int main(int argc, char **argv)
{
    bench_run R;
    memset(&R, 0, sizeof R);
    R.sh = (bench_shape){ FA_F32, 1, 8, 8, 1024, 1024, 64, 0, 0, 0 };
    R.repeats = 15;
    R.out_dir = "flashattn-bench-out";
    R.check_rows = 64;
    R.mem_cap_mib = 1024;
    R.ladder_bwd = 1;
    int rc = bench_parse_args(&R, argc, argv);
    if (rc) return rc;

    perf_init();                     /* before any OpenMP thread exists (counter inherit) */
    double t_start = now_s();
    R.nthreads_all = omp_get_max_threads();
    if (R.threads <= 0) R.threads = R.nthreads_all;
    FILE *info = R.csv_stdout ? stderr : stdout;

    /* plan: the number of progress steps */
    rung_spec rs[16];
    int nr = R.mode_ladder && !R.gpu_sweep ? rung_list(&R, rs, 16) : 0;
    R.nsteps = 1 + (R.mode_decode ? decode_steps() : R.gpu_sweep ? sweep_count_gpu(&R) + 1 :
                    2 + nr * (R.ladder_bwd ? 2 : 1) +
                    (R.mode_tiles ? sweep_count_tiles(&R) : 0) +
                    (R.mode_seqlen ? sweep_count_seqlen(&R) : 0) +
                    (R.mode_sweep ? sweep_count_full(&R) : 0) + 1);

    progress(&R, "machine: memory hierarchy and tiles (fa_context_describe)");
    int have_cuda = describe_machine(&R, info);
    if (R.mode_decode) {
        int failed = decode_bench(&R, info);
        fprintf(info, "total run time %.1f s\n", now_s() - t_start);
        return failed;
    }
    if (R.gpu_sweep && !have_cuda) {
        fprintf(stderr, "flashattn-bench: the GPU sweep needs the CUDA backend (exit status 3)\n");
        return 3;
    }
    if (R.gpu_sweep) {
        sweep_gpu(&R);
    } else {
        measure_peak(&R, info);
        if (R.mode_ladder) sweep_ladder(&R);
        if (R.mode_tiles) sweep_tiles(&R);
        if (R.mode_seqlen) sweep_seqlen(&R);
        if (R.mode_sweep) sweep_full(&R);
        remeasure_peak(&R, info);
    }
    write_results(&R, info);
    int failed = 0;
    for (int i = 0; i < R.res.n; i++) failed |= R.res.v[i].status == RES_FAIL;
    fprintf(info, "total run time %.1f s%s\n", now_s() - t_start,
            failed ? "; at least one rung FAILED its oracle check (exit status 1)" : "");
    free(R.res.v);
    return failed ? 1 : 0;
}
