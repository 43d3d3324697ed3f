/* options.c - flashattn-bench's command line: the help text and the parser.
 *
 * A bad option or value exits with status 2 and one line on stderr (plus a pointer to
 * --help); -h/--help prints the help on stdout and --version the version, both exit 0.
 */
#include "config.h"
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

static void usage(FILE *f)
{
    fprintf(f,
"Usage: flashattn-bench [OPTION]...\n"
"Benchmark flashattn's attention kernels as a ladder (naive -> unfused BLAS -> reference\n"
"-> cpu generic -> avx2 -> avx512 -> cuda), forward and backward, each checked against a\n"
"double-precision oracle before it is timed, with GFLOP/s against this machine's measured\n"
"FMA peak; or the CPU or GPU sweep of the performance targets.\n"
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
"                         (libcuda.so.1, loaded at run time); the ladder runs an f32\n"
"                         problem's CUDA rung on the same inputs rounded to bf16\n"
"                         ('cuda (bf16)'); without a driver, device or CUDA module it is\n"
"                         an n/a row with the reason (not a failure)\n"
"  --isa NAME             generic, avx2, avx512 or amx: only this CPU kernel set (the\n"
"                         values of FA_CPU_ISA)\n"
"  --mode MODE            ladder, tiles (block-size sweep), seqlen (sequence sweep),\n"
"                         sweep, decode or all (default: ladder, tiles and seqlen; with\n"
"                         --full also sweep). sweep is the CPU sweep (B=1 H=16, S 512..8k,\n"
"                         d 64 and 128, f32 and bf16, causal and not, 1 thread and all,\n"
"                         decode and a paged KV cache); with --backend cuda it is the GPU sweep\n"
"                         (bf16 and fp16, d 64/128/256, S 512..16k, causal and not, 16k\n"
"                         tokens per call, H = 2048/d), in which --dtype, --headdim,\n"
"                         --seqlen and --causal, when given, pick the cells. decode:\n"
"                         fa_forward_kvcache, 1 new token, GQA 32:8, d 128, B=8 x 8k and\n"
"                         B=1 x 64k, f32, bf16 and f16: KV bytes read per second against\n"
"                         a read loop in the same run; with a CUDA device also the GPU\n"
"                         decode cells (docs/bench.md); not part of all. The shapes are\n"
"                         fixed: the problem options do not apply; the CPU cells take\n"
"                         --threads, --repeats (3 to 9 rounds) and --check-rows. Its\n"
"                         lines are its output: no table, CSV or plot\n"
"  --forward-only         no backward rungs or cells\n"
"  --threads N            threads for every rung (default 0 = all cores)\n"
"  --tiles BQxBKV         fa_context_set_tiles(block_q, block_kv); 0 = automatic\n"
"  --repeats N            most timed runs per measurement (default 15; at least 3 run)\n"
"  --budget SEC           time budget per measurement in seconds (default 3; --quick 1;\n"
"                         --full 30); points that would not fit are reported as skipped\n"
"  --mem-cap MIB          largest S x S score memory the naive rung may allocate\n"
"                         (default 1024)\n"
"  --check-rows N         rows checked against the oracle per measurement (default 64)\n"
"  --quick                smaller problem (H=4, S=512), fewer sweep points, short budget\n"
"  --full                 all sweep points and the CPU sweep; takes long\n"
"  --sweep-only           with --mode sweep on the CPU: only the problem given by --dtype,\n"
"                         --heads, --seqlen, --headdim and --causal, forward and backward\n"
"                         (--forward-only: forward), 1 thread and --threads (default all)\n"
"\n"
"Output:\n"
"  --format table|csv     stdout: a summary table (default) or the CSV only\n"
"  --csv FILE             also write the CSV to FILE\n"
"  --out DIR              directory for results.csv, bench.svg and bench.png\n"
"                         (default flashattn-bench-out)\n"
"  -h, --help             this text\n"
"  --version              the version of flashattn-bench and of the library\n"
"\n"
"Environment: FA_BENCH_NO_PERF=1 skips the hardware cache-miss counters; FA_VERBOSE=1\n"
"makes the library print its dispatch decisions; FA_CUDA_MODULE=PATH loads the CUDA module\n"
"from PATH. Exit status: 0 success (n/a and skipped rows included), 1 a rung failed its\n"
"oracle check, 2 bad options, 3 the GPU sweep found no usable CUDA backend.\n"
"docs/bench.md explains every column.\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "flashattn-bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (try 'flashattn-bench --help')\n");
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

static int one_of(const char *v, const char *const *words)
{
    for (; *words; words++)
        if (!strcmp(v, *words)) return 1;
    return 0;
}

enum { O_BACKEND = 256, O_ISA, O_DTYPE, O_BATCH, O_HEADS, O_SEQLEN, O_HEADDIM, O_CAUSAL,
       O_THREADS, O_TILES, O_REPEATS, O_QUICK, O_FULL, O_MODE, O_FORMAT, O_OUT, O_BUDGET,
       O_MEMCAP, O_CHECK, O_SWEEP_ONLY, O_FWD_ONLY, O_CSV, O_VERSION };

static const struct option opts[] = {
    { "backend", 1, 0, O_BACKEND }, { "isa", 1, 0, O_ISA }, { "dtype", 1, 0, O_DTYPE },
    { "batch", 1, 0, O_BATCH }, { "heads", 1, 0, O_HEADS }, { "seqlen", 1, 0, O_SEQLEN },
    { "headdim", 1, 0, O_HEADDIM }, { "causal", 0, 0, O_CAUSAL },
    { "threads", 1, 0, O_THREADS }, { "tiles", 1, 0, O_TILES },
    { "repeats", 1, 0, O_REPEATS }, { "quick", 0, 0, O_QUICK }, { "full", 0, 0, O_FULL },
    { "mode", 1, 0, O_MODE }, { "format", 1, 0, O_FORMAT }, { "out", 1, 0, O_OUT },
    { "budget", 1, 0, O_BUDGET }, { "mem-cap", 1, 0, O_MEMCAP },
    { "check-rows", 1, 0, O_CHECK }, { "sweep-only", 0, 0, O_SWEEP_ONLY },
    { "forward-only", 0, 0, O_FWD_ONLY }, { "csv", 1, 0, O_CSV },
    { "help", 0, 0, 'h' }, { "version", 0, 0, O_VERSION }, { 0, 0, 0, 0 } };

/* One option with its value; 0, or 2 after the error line. */
static int parse_one(bench_run *R, int c, const char *v, const char **mode, int *set_h,
                     int *set_budget)
{
    static const char *const backends[] = { "all", "naive", "blas", "reference", "cpu", "cuda", 0 };
    static const char *const isas[] = { "generic", "avx2", "avx512", "amx", 0 };
    static const char *const modes[] = { "ladder", "tiles", "seqlen", "sweep", "decode", "all", 0 };
    long a, b;
    switch (c) {
    case O_BACKEND:
        if (!one_of(v, backends))
            return bad("--backend '%s': expected all, naive, blas, reference, cpu or cuda", v);
        R->backend = v;
        return 0;
    case O_ISA:
        if (!one_of(v, isas)) return bad("--isa '%s': expected generic, avx2, avx512 or amx", v);
        R->isa = v;
        return 0;
    case O_DTYPE:
        if (bp_parse_dtype(v, &R->sh.dtype)) return bad("--dtype '%s': expected f32, f16 or bf16", v);
        R->set_dtype = 1;
        return 0;
    case O_BATCH:
        if (parse_long(v, 1, 1 << 20, &a)) return bad("--batch '%s': expected an integer >= 1", v);
        R->sh.B = a;
        return 0;
    case O_HEADS:
        if (parse_pair(v, ':', 1, 1 << 16, &a, &b, 0) || a % b)
            return bad("--heads '%s': expected H or H:HKV with HKV dividing H", v);
        R->sh.H = a, R->sh.Hkv = b, *set_h = 1;
        return 0;
    case O_SEQLEN:
        if (parse_pair(v, ':', 1, 1L << 30, &a, &b, 0))
            return bad("--seqlen '%s': expected S or SQ:SK, integers >= 1", v);
        R->sh.Sq = a, R->sh.Sk = b, R->set_s = 1;
        return 0;
    case O_HEADDIM:
        if (parse_long(v, 1, 4096, &a)) return bad("--headdim '%s': expected 1..4096", v);
        R->sh.d = a, R->set_d = 1;
        return 0;
    case O_THREADS:
        if (parse_long(v, 0, 4096, &a)) return bad("--threads '%s': expected an integer >= 0", v);
        R->threads = (int)a;
        return 0;
    case O_TILES:
        if (parse_pair(v, 'x', 0, 1 << 16, &a, &b, 1))
            return bad("--tiles '%s': expected BQxBKV, e.g. 64x128 (0 = automatic)", v);
        R->bq = (int)a, R->bkv = (int)b;
        return 0;
    case O_REPEATS:
        if (parse_long(v, 3, 100000, &a)) return bad("--repeats '%s': expected an integer >= 3", v);
        R->repeats = (int)a;
        return 0;
    case O_MODE:
        if (!one_of(v, modes))
            return bad("--mode '%s': expected ladder, tiles, seqlen, sweep, decode or all", v);
        *mode = v;
        return 0;
    case O_FORMAT:
        if (strcmp(v, "table") && strcmp(v, "csv")) return bad("--format '%s': expected table or csv", v);
        R->csv_stdout = !strcmp(v, "csv");
        return 0;
    case O_BUDGET: {
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end || !(x > 0) || x > 86400) return bad("--budget '%s': expected seconds > 0", v);
        R->budget = x, *set_budget = 1;
        return 0;
    }
    case O_MEMCAP:
        if (parse_long(v, 1, 1L << 30, &a)) return bad("--mem-cap '%s': expected MiB >= 1", v);
        R->mem_cap_mib = a;
        return 0;
    case O_CHECK:
        if (parse_long(v, 1, 1 << 20, &a)) return bad("--check-rows '%s': expected an integer >= 1", v);
        R->check_rows = (int)a;
        return 0;
    case O_OUT: R->out_dir = v; return 0;
    case O_CSV: R->csv_path = v; return 0;
    case O_CAUSAL: R->sh.causal = 1; return 0;
    case O_QUICK: R->quick = 1; return 0;
    case O_FULL: R->full = 1; return 0;
    case O_SWEEP_ONLY: R->sweep_only = 1; return 0;
    case O_FWD_ONLY: R->ladder_bwd = 0; return 0;
    }
    return bad("%s", "internal error: unhandled option");
}

int bench_parse_args(bench_run *R, int argc, char **argv)
{
    int set_h = 0, set_budget = 0;
    const char *mode = "all";
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":h", opts, NULL);
        if (c == -1) break;
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        if (c == O_VERSION) {
            printf("flashattn-bench (%s) %s\n", PACKAGE_NAME, PACKAGE_VERSION);
            printf("libflashattn %s\n", fa_version_string());
            exit(0);
        }
        if (c == ':') return bad("option '%s' needs an argument", argv[optind - 1]);
        if (c == '?') return bad("unknown option '%s'", argv[optind - 1]);
        int rc = parse_one(R, c, optarg, &mode, &set_h, &set_budget);
        if (rc) return rc;
    }
    if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);
    if (R->quick && R->full) return bad("%s", "--quick and --full cannot be combined");
    int all = !strcmp(mode, "all"), cuda = R->backend && !strcmp(R->backend, "cuda");
    R->gpu_sweep = cuda && !strcmp(mode, "sweep");
    if (R->quick && !set_h && !R->gpu_sweep) R->sh.H = R->sh.Hkv = 4;
    if (R->quick && !R->set_s && !R->gpu_sweep) R->sh.Sq = R->sh.Sk = 512;
    if (!set_budget) R->budget = R->quick ? 1.0 : R->full ? 30.0 : 3.0;
    R->mode_ladder = all || !strcmp(mode, "ladder");
    R->mode_tiles = all || !strcmp(mode, "tiles");
    R->mode_seqlen = all || !strcmp(mode, "seqlen");
    R->mode_sweep = ((all && R->full) || !strcmp(mode, "sweep")) && !R->gpu_sweep;
    R->mode_decode = !strcmp(mode, "decode");
    if (R->gpu_sweep && sweep_count_gpu(R) == 0)
        return bad("%s", "no cell of the GPU sweep has the --dtype, --headdim, --seqlen and "
                   "--causal given (d 64/128/256, S 512..16384)");
    return 0;
}
