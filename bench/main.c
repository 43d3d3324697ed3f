/* main.c - flashattn-bench: options, the plan of the run, and where the results go.
 *
 * Default run (no arguments, about a minute on a 2-core laptop):
 *   1. the memory hierarchy and the tiles as the library sees them (fa_context_describe;
 *      on a GPU also the driver's attributes and the tiles fa_query names),
 *   2. this machine's FMA peak, measured now (peak.c): the ceiling for every GFLOP/s,
 *   3. the ladder on one problem: naive, unfused BLAS, reference, cpu generic/avx2/avx512,
 *      cuda; each checked against a double-precision oracle first, then timed,
 *   4. the block-size sweep (the cache cliff) and the sequence-length sweep (flash vs
 *      naive, with where the naive S x S matrix leaves L2, L3 and memory),
 *   5. a summary table on stdout, results.csv and bench.svg (+ bench.png with gnuplot).
 * Progress goes to stderr, one line per step. Exit status: 0, 1 when a rung failed its
 * oracle check, 2 for bad options.
 */
#include "config.h"
#include <errno.h>
#include <getopt.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "bench.h"
#include "cudrv.h"

static void usage(FILE *f)
{
    fprintf(f,
"Usage: flashattn-bench [OPTION]...\n"
"Benchmark flashattn's attention kernels as a ladder (naive -> unfused BLAS -> reference\n"
"-> cpu generic -> avx2 -> avx512 -> cuda), each checked against a double-precision\n"
"oracle before it is timed, with GFLOP/s against this machine's measured FMA peak.\n"
"\n"
"Problem:\n"
"  --dtype f32|f16|bf16   storage type of q, k, v, out (default f32)\n"
"  --batch N              batch size B (default 1)\n"
"  --heads H[:HKV]        query heads, optionally KV heads for GQA (default 8)\n"
"  --seqlen S[:SK]        query length, optionally a different key length (default 1024)\n"
"  --headdim D            head dimension d (default 64)\n"
"  --causal               causal mask (bottom-right aligned); FLOPs are halved\n"
"\n"
"What runs:\n"
"  --backend NAME         all (default), naive, blas, reference, cpu or cuda\n"
"                         cuda: inputs copied to device memory through the CUDA driver\n"
"                         (libcuda.so.1, loaded at run time); the kernels take fp16/bf16,\n"
"                         so with --dtype f32 the rung runs the same inputs rounded to\n"
"                         bf16 ('cuda (bf16)'); without a driver, device or CUDA module\n"
"                         it is an n/a row with the reason (not a failure)\n"
"  --isa NAME             generic, avx2 or avx512: only this CPU kernel set (FA_CPU_ISA)\n"
"  --mode MODE            ladder, tiles (block-size sweep), seqlen (sequence sweep),\n"
"                         sweep (the CPU sweep of PERFORMANCE.md) or all (default:\n"
"                         ladder, tiles and seqlen; with --full also sweep); with\n"
"                         --backend cuda, sweep is the command-line problem forward\n"
"                         and backward on the GPU\n"
"  --threads N            threads for every rung (default 0 = all cores)\n"
"  --tiles BQxBKV         fa_context_set_tiles(block_q, block_kv); 0 = automatic\n"
"  --repeats N            most timed runs per measurement (default 15; at least 3 run)\n"
"  --budget SEC           time budget per measurement in seconds (default 3; --quick 1;\n"
"                         --full 30); points that would not fit are reported as skipped\n"
"  --mem-cap MIB          largest S x S score memory the naive rung may allocate\n"
"                         (default 1024)\n"
"  --check-rows N         rows checked against the oracle per measurement (default 64)\n"
"  --quick                smaller problem (H=4, S=512), fewer sweep points, short budget\n"
"  --full                 all sweep points, the PERFORMANCE.md CPU sweep (B=1 H=16,\n"
"                         S 512..8k, d 64/128, f32 and bf16, causal and not, forward and\n"
"                         backward, 1 thread and all), decode (Sq=1, Sk 4k/16k, GQA 32:8)\n"
"                         and a paged KV cache; takes long\n"
"  --sweep-only           with --mode sweep: only the problem given by --dtype, --heads,\n"
"                         --seqlen, --headdim and --causal, forward and backward, 1 thread\n"
"                         and all (for side-by-side runs with bench/peers/torch_sdpa.py)\n"
"\n"
"Output:\n"
"  --format table|csv     stdout: a summary table (default) or the CSV only\n"
"  --out DIR              directory for results.csv, bench.svg and bench.png\n"
"                         (default flashattn-bench-out)\n"
"  --help                 this text\n"
"\n"
"Environment: FA_BENCH_NO_PERF=1 skips the hardware cache-miss counters; FA_VERBOSE=1\n"
"makes the library print its dispatch decisions; FA_CUDA_MODULE=PATH loads the CUDA module\n"
"from PATH. Exit status: 0 success (n/a and skipped rows included), 1 a rung failed its\n"
"oracle check, 2 bad options. docs/bench.md explains every column.\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "flashattn-bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'flashattn-bench --help'.\n");
    return 2;
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

/* "A" or "A:B" (or "AxB" when sep is 'x'), each in [lo, hi]. */
static int parse_pair(const char *s, char sep, long lo, long hi, long *a, long *b, int need_b)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    char *p = strchr(buf, sep);
    if (!p && need_b) return -1;
    if (p) *p = '\0';
    if (parse_long(buf, lo, hi, a)) return -1;
    if (p) return parse_long(p + 1, lo, hi, b);
    *b = *a;
    return 0;
}

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

/* "NxM" as a word of a kernel name ("cuda/sm80 fwd bf16 d64 fast 128x64 4 warps"). */
static int name_tiles(const char *name, int *br, int *bc)
{
    for (const char *w = name; w && *w; w = strchr(w, ' ') ? strchr(w, ' ') + 1 : "") {
        int n = 0;
        if (sscanf(w, "%dx%d%n", br, bc, &n) == 2 && (w[n] == ' ' || !w[n]) && *br > 0) return 1;
    }
    *br = *bc = 0;
    return 0;
}

/* The GPU's hierarchy from the driver's attributes, and the tiles the CUDA backend picks
 * for this run's problem (fa_query on device buffers of its shape). */
static void cuda_hierarchy(const bench_run *R, FILE *f, fa_context *ctx)
{
    char why[240], name[128], a[32], b[32], c[32];
    const char *desc = fa_context_describe(ctx), *s = strstr(desc, "(device ");
    int dev = 0;
    if (s) sscanf(s, "(device %d)", &dev);
    if (cudrv_open(dev, why, sizeof why)) {
        fprintf(f, "-- cuda: device attributes n/a: %s --\n", why);
        return;
    }
    cudrv_name(name, sizeof name);
    int sms = cudrv_attr(CUDRV_ATTR_SM_COUNT), clk = cudrv_attr(CUDRV_ATTR_CLOCK_RATE);
    int smem_sm = cudrv_attr(CUDRV_ATTR_MAX_SHARED_PER_SM);
    int smem_blk = cudrv_attr(CUDRV_ATTR_MAX_SHARED_PER_BLOCK);
    int smem_opt = cudrv_attr(CUDRV_ATTR_MAX_SHARED_PER_BLOCK_OPTIN);
    int l2 = cudrv_attr(CUDRV_ATTR_L2_SIZE), mclk = cudrv_attr(CUDRV_ATTR_MEMORY_CLOCK_RATE);
    int bus = cudrv_attr(CUDRV_ATTR_MEMORY_BUS_WIDTH);
    fprintf(f, "-- cuda: the device as the driver reports it (cuDeviceGetAttribute) --\n");
    fprintf(f, "device %d: %s, compute capability %d.%d, %d SMs", dev, name,
            cudrv_attr(CUDRV_ATTR_CC_MAJOR), cudrv_attr(CUDRV_ATTR_CC_MINOR), sms);
    if (clk > 0) fprintf(f, " at up to %.0f MHz", clk / 1e3);
    fprintf(f, "\n");
    fmt_bytes(smem_sm, a, sizeof a);
    fmt_bytes(smem_blk, b, sizeof b);
    fmt_bytes(smem_opt, c, sizeof c);
    fprintf(f, "shared memory: %s per SM, %s per block (%s opt-in)\n", a, b, c);
    fmt_bytes(l2, a, sizeof a);
    fmt_bytes((double)cudrv_total_mem(), b, sizeof b);
    fprintf(f, "L2: %s; device memory (HBM): %s", a, b);
    if (mclk > 0 && bus > 0)
        fprintf(f, ", %d-bit bus at %.0f MHz: %.2f TB/s peak (computed: 2 x clock x bus width)",
                bus, mclk / 1e3, 2.0 * mclk * 1e3 * bus / 8 / 1e12);
    fprintf(f, "\n");

    bench_problem p;
    bench_dev d;
    memset(&p, 0, sizeof p);
    p.sh = R->sh;
    p.sh.paged = 0;
    if (p.sh.dtype == FA_F32) p.sh.dtype = FA_BF16;   /* as the ladder's cuda rung */
    char shape[128];
    bp_shape_str(&p.sh, shape, sizeof shape);
    if (dev_alloc(&d, &p, 1, 0, why, sizeof why)) {
        fprintf(f, "tiles: n/a (%s)\n", why);
        cudrv_close();
        return;
    }
    fa_options o = { 0 };
    o.causal = p.sh.causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
    for (int bw = 0; bw < 2; bw++) {
        const char *kn = NULL;
        fa_status st = bw ? fa_query_backward(ctx, &kn, &d.tdq, &d.tdk, &d.tdv, NULL, &d.tdout,
                                              &d.tq, &d.tk, &d.tv, &d.tout, d.lse_ptr, &o)
                          : fa_query(ctx, &kn, &d.tout, d.lse_ptr, &d.tq, &d.tk, &d.tv, &o);
        int br, bc;
        if (st != FA_OK) {
            fprintf(f, "tiles, %s, %s: n/a: %s\n", bw ? "backward" : "forward", shape,
                    fa_last_error(ctx));
        } else if (name_tiles(kn, &br, &bc)) {
            double es = (double)fa_dtype_size(p.sh.dtype), d_ = (double)p.sh.d;
            fmt_bytes((br + 2.0 * bc) * d_ * es, a, sizeof a);
            fmt_bytes(smem_opt, b, sizeof b);
            fprintf(f, "tiles, %s, %s: Br x Bc = %d x %d (fa_query: %s); one Q tile and one K "
                    "and V tile = %s of the %s of shared memory a block may use (modeled)\n",
                    bw ? "backward" : "forward", shape, br, bc, kn, a, b);
        } else {
            fprintf(f, "tiles, %s, %s: fa_query: %s (no tile size in the name)\n",
                    bw ? "backward" : "forward", shape, kn ? kn : "?");
        }
    }
    dev_free(&d);
    cudrv_close();
}

static int parse_args(bench_run *R, int argc, char **argv)
{
    enum { O_BACKEND = 256, O_ISA, O_DTYPE, O_BATCH, O_HEADS, O_SEQLEN, O_HEADDIM, O_CAUSAL,
           O_THREADS, O_TILES, O_REPEATS, O_QUICK, O_FULL, O_MODE, O_FORMAT, O_OUT, O_BUDGET,
           O_MEMCAP, O_CHECK, O_SWEEP_ONLY, O_HELP };
    static const struct option opts[] = {
        { "backend", 1, 0, O_BACKEND }, { "isa", 1, 0, O_ISA }, { "dtype", 1, 0, O_DTYPE },
        { "batch", 1, 0, O_BATCH }, { "heads", 1, 0, O_HEADS }, { "seqlen", 1, 0, O_SEQLEN },
        { "headdim", 1, 0, O_HEADDIM }, { "causal", 0, 0, O_CAUSAL },
        { "threads", 1, 0, O_THREADS }, { "tiles", 1, 0, O_TILES },
        { "repeats", 1, 0, O_REPEATS }, { "quick", 0, 0, O_QUICK }, { "full", 0, 0, O_FULL },
        { "mode", 1, 0, O_MODE }, { "format", 1, 0, O_FORMAT }, { "out", 1, 0, O_OUT },
        { "budget", 1, 0, O_BUDGET }, { "mem-cap", 1, 0, O_MEMCAP },
        { "check-rows", 1, 0, O_CHECK }, { "sweep-only", 0, 0, O_SWEEP_ONLY },
        { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 } };
    long a, b;
    int set_h = 0, set_s = 0, set_budget = 0;
    const char *mode = "all";
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":", opts, NULL);
        if (c == -1) break;
        const char *v = optarg;
        switch (c) {
        case O_BACKEND:
            if (strcmp(v, "all") && strcmp(v, "naive") && strcmp(v, "blas") &&
                strcmp(v, "reference") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                return bad("--backend '%s': expected all, naive, blas, reference, cpu or cuda", v);
            R->backend = v;
            break;
        case O_ISA:
            if (strcmp(v, "generic") && strcmp(v, "avx2") && strcmp(v, "avx512"))
                return bad("--isa '%s': expected generic, avx2 or avx512", v);
            R->isa = v;
            break;
        case O_DTYPE:
            if (bp_parse_dtype(v, &R->sh.dtype)) return bad("--dtype '%s': expected f32, f16 or bf16", v);
            break;
        case O_BATCH:
            if (parse_long(v, 1, 1 << 20, &a)) return bad("--batch '%s': expected an integer >= 1", v);
            R->sh.B = a;
            break;
        case O_HEADS:
            if (parse_pair(v, ':', 1, 1 << 16, &a, &b, 0) || a % b)
                return bad("--heads '%s': expected H or H:HKV with HKV dividing H", v);
            R->sh.H = a, R->sh.Hkv = b, set_h = 1;
            break;
        case O_SEQLEN:
            if (parse_pair(v, ':', 1, 1L << 30, &a, &b, 0))
                return bad("--seqlen '%s': expected S or SQ:SK, integers >= 1", v);
            R->sh.Sq = a, R->sh.Sk = b, set_s = 1;
            break;
        case O_HEADDIM:
            if (parse_long(v, 1, 4096, &a)) return bad("--headdim '%s': expected 1..4096", v);
            R->sh.d = a;
            break;
        case O_CAUSAL: R->sh.causal = 1; break;
        case O_THREADS:
            if (parse_long(v, 0, 4096, &a)) return bad("--threads '%s': expected an integer >= 0", v);
            R->threads = (int)a;
            break;
        case O_TILES:
            if (parse_pair(v, 'x', 0, 1 << 16, &a, &b, 1))
                return bad("--tiles '%s': expected BQxBKV, e.g. 64x128 (0 = automatic)", v);
            R->bq = (int)a, R->bkv = (int)b;
            break;
        case O_REPEATS:
            if (parse_long(v, 3, 100000, &a)) return bad("--repeats '%s': expected an integer >= 3", v);
            R->repeats = (int)a;
            break;
        case O_QUICK: R->quick = 1; break;
        case O_FULL: R->full = 1; break;
        case O_SWEEP_ONLY: R->sweep_only = 1; break;
        case O_MODE:
            if (strcmp(v, "ladder") && strcmp(v, "tiles") && strcmp(v, "seqlen") &&
                strcmp(v, "sweep") && strcmp(v, "all"))
                return bad("--mode '%s': expected ladder, tiles, seqlen, sweep or all", v);
            mode = v;
            break;
        case O_FORMAT:
            if (strcmp(v, "table") && strcmp(v, "csv")) return bad("--format '%s': expected table or csv", v);
            R->csv_stdout = !strcmp(v, "csv");
            break;
        case O_OUT: R->out_dir = v; break;
        case O_BUDGET: {
            char *end;
            double x = strtod(v, &end);
            if (end == v || *end || !(x > 0) || x > 86400) return bad("--budget '%s': expected seconds > 0", v);
            R->budget = x, set_budget = 1;
            break;
        }
        case O_MEMCAP:
            if (parse_long(v, 1, 1L << 30, &a)) return bad("--mem-cap '%s': expected MiB >= 1", v);
            R->mem_cap_mib = a;
            break;
        case O_CHECK:
            if (parse_long(v, 1, 1 << 20, &a)) return bad("--check-rows '%s': expected an integer >= 1", v);
            R->check_rows = (int)a;
            break;
        case O_HELP: usage(stdout); exit(0);
        case ':': return bad("option '%s' needs an argument", argv[optind - 1]);
        default: return bad("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);
    if (R->quick && R->full) return bad("%s", "--quick and --full cannot be combined");
    if (R->quick && !set_h) R->sh.H = R->sh.Hkv = 4;
    if (R->quick && !set_s) R->sh.Sq = R->sh.Sk = 512;
    if (!set_budget) R->budget = R->quick ? 1.0 : R->full ? 30.0 : 3.0;
    int all = !strcmp(mode, "all");
    R->mode_ladder = all || !strcmp(mode, "ladder");
    R->mode_tiles = all || !strcmp(mode, "tiles");
    R->mode_seqlen = all || !strcmp(mode, "seqlen");
    R->mode_sweep = (all && R->full) || !strcmp(mode, "sweep");
    return 0;
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
    int rc = parse_args(&R, argc, argv);
    if (rc) return rc;

    perf_init();                     /* before any OpenMP thread exists (counter inherit) */
    double t_start = now_s();
    R.nthreads_all = omp_get_max_threads();
    if (R.threads <= 0) R.threads = R.nthreads_all;
    FILE *info = R.csv_stdout ? stderr : stdout;

    /* plan: the number of progress steps */
    rung_spec rs[16];
    R.nsteps = 2 + (R.mode_ladder ? rung_list(&R, rs, 16) : 0) +
               (R.mode_tiles ? sweep_count_tiles(&R) : 0) +
               (R.mode_seqlen ? sweep_count_seqlen(&R) : 0) +
               (R.mode_sweep ? sweep_count_full(&R) : 0) + 2;

    /* 1. what the library sees */
    progress(&R, "machine: memory hierarchy and tiles (fa_context_describe)");
    char desc[4096];
    rung_describe(R.isa, desc, sizeof desc);
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
    caches_from_describe(desc, &R.caches);
    fa_context *cuda = NULL;
    if (fa_context_create(&cuda, FA_BACKEND_CUDA) == FA_OK) {
        fprintf(info, "-- cuda --\n%s", fa_context_describe(cuda));
        cuda_hierarchy(&R, info, cuda);
        fa_context_destroy(cuda);
    } else {
        fprintf(info, "CUDA: not available: %s\n", fa_last_error(NULL));
    }
    if (perf_reason()[0])
        fprintf(info, "cache-miss counters: n/a (perf_event_open: %s)\n", perf_reason());

    /* 2. the ceiling */
    progress(&R, "peak: FMA throughput loop, 1 and %d threads", R.nthreads_all);
    peak_measure(&R.peak, R.nthreads_all, R.quick ? 0.15 : 0.3);
    fprintf(info, "\n== Ceiling: fp32 FMA peak measured now (%s loop, 16 independent accumulators) ==\n",
            R.peak.isa);
    fprintf(info, "  1 thread: %.1f GFLOP/s   %d threads: %.1f GFLOP/s\n", R.peak.fp32_1,
            R.nthreads_all, R.peak.fp32_all);
    if (R.peak.bf16_1 > 0)
        fprintf(info, "  bf16 dot products (vdpbf16ps): 1 thread %.1f, %d threads %.1f GFLOP/s "
                "(--dtype bf16: the highest of these is the ceiling)\n", R.peak.bf16_1,
                R.nthreads_all, R.peak.bf16_all);
    if (R.peak.amx_1 > 0)
        fprintf(info, "  bf16 AMX tiles (TDPBF16PS): 1 thread %.1f, %d threads %.1f GFLOP/s "
                "(--dtype bf16: the highest of these is the ceiling)\n", R.peak.amx_1,
                R.nthreads_all, R.peak.amx_all);
    fflush(info);

    /* 3., 4. the measurements */
    if (R.mode_ladder) sweep_ladder(&R);
    if (R.mode_tiles) sweep_tiles(&R);
    if (R.mode_seqlen) sweep_seqlen(&R);
    if (R.mode_sweep) sweep_full(&R);

    /* the ceiling again: on a shared machine the best of two measurements is the better
       estimate; every %peak is recomputed against it */
    double p1 = R.peak.fp32_1, pa = R.peak.fp32_all, x1 = R.peak.amx_1, xa = R.peak.amx_all;
    progress(&R, "peak: FMA throughput loop again (best of start and end is the ceiling)");
    peak_measure(&R.peak, R.nthreads_all, R.quick ? 0.15 : 0.3);
    for (int i = 0; i < R.res.n; i++) {
        bench_result *r = &R.res.v[i];
        double pk = peak_for(&R.peak, r->threads, r->sh.dtype);
        if (r->status == RES_OK && pk > 0 && !r->device) r->pct_peak = 100.0 * r->gflops / pk;
    }

    /* 5. results */
    progress(&R, "writing the table, CSV and plots");
    fprintf(info, "\n== Ceiling used for %%peak: best of the start and end measurements ==\n"
            "  fp32 FMA: 1 thread %.1f GFLOP/s (start %.1f), %d threads %.1f GFLOP/s (start %.1f)\n",
            R.peak.fp32_1, p1, R.nthreads_all, R.peak.fp32_all, pa);
    if (R.peak.amx_1 > 0)
        fprintf(info, "  bf16 AMX tiles: 1 thread %.1f GFLOP/s (start %.1f), %d threads %.1f GFLOP/s "
                "(start %.1f)\n", R.peak.amx_1, x1, R.nthreads_all, R.peak.amx_all, xa);
    if (R.nthreads_all > 1 && R.peak.fp32_all < 1.2 * R.peak.fp32_1)
        fprintf(info, "  note: %d threads measured barely faster than one (or slower): other "
                "processes are using the cores; all-thread figures are unreliable in this run\n",
                R.nthreads_all);
    if (R.csv_stdout) {
        report_csv(&R, "-");
    } else {
        report_table(&R, stdout);
    }
    char path[1100], png[1100] = "";
    if (mkdir_p(R.out_dir)) {
        fprintf(stderr, "flashattn-bench: cannot create %s: %s\n", R.out_dir, strerror(errno));
    } else {
        snprintf(path, sizeof path, "%s/results.csv", R.out_dir);
        if (report_csv(&R, path) == 0) fprintf(info, "\nwrote %s\n", path);
        else fprintf(stderr, "flashattn-bench: cannot write %s\n", path);
        snprintf(path, sizeof path, "%s/bench.svg", R.out_dir);
        if (plot_svg(&R, path) == 0) fprintf(info, "wrote %s\n", path);
        else fprintf(stderr, "flashattn-bench: cannot write %s\n", path);
        int g = plot_gnuplot(&R, R.out_dir, png, sizeof png);
        if (g == 0) fprintf(info, "wrote %s (gnuplot)\n", png);
        else if (g == 1 && !strcmp(png, "(no measured points)"))
            fprintf(info, "no PNG: nothing measured to plot\n");
        else if (g == 1) fprintf(info, "no PNG: gnuplot is not on PATH (the SVG has the same plots)\n");
        else fprintf(info, "no PNG: gnuplot failed (see %s)\n", png);
    }
    int failed = 0;
    for (int i = 0; i < R.res.n; i++) failed |= R.res.v[i].status == RES_FAIL;
    fprintf(info, "total run time %.1f s%s\n", now_s() - t_start,
            failed ? "; at least one rung FAILED its oracle check (exit status 1)" : "");
    free(R.res.v);
    return failed ? 1 : 0;
}
