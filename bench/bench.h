/* bench.h - flashattn-bench: shared types of the benchmark program.
 *
 * The program is a teaching ladder: the same attention problem computed by a naive
 * implementation that materializes the S x S score matrix, an unfused BLAS one, the
 * library's reference backend, each CPU kernel set and (when present) CUDA. Every rung is
 * checked against a double-precision oracle before it is timed, and every figure printed
 * is either measured in this run or computed from a stated model (and labelled so).
 *
 * Files: main.c (the plan of a run), options.c (the command line), data.c (buffers,
 * dtypes), check.c (the check column, through liboracle), naive.c (naive and unfused BLAS rungs, forward and backward), peak.c (FMA-throughput
 * ceiling), measure.c (clocks, RSS, perf counters, IO model), rungs.c (one measurement:
 * create, check, time), sweeps.c (the CPU sections: ladder, tiles, seqlen, CPU sweep),
 * gpu.c (the device's description and the GPU sweep), decode.c (--mode decode; decode_gpu.c its CUDA cells), report.c (progress, results, table
 * and CSV), plot.c (SVG and gnuplot), cudrv.c (the CUDA driver API through dlopen, and the
 * problem in device memory).
 *
 * Only the public API of flashattn is used: #include <flashattn.h>. The CUDA rung also
 * needs device memory, which it gets from the CUDA driver, loaded at run time (cudrv.c):
 * nothing of CUDA is needed to build the bench.
 */
#ifndef FA_BENCH_H
#define FA_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <flashattn.h>

/* ------------------------------------------------------------------ the problem --- */

typedef struct {
    fa_dtype dtype;
    int64_t  B, H, Hkv, Sq, Sk, d;   /* q [B, Sq, H, d], k/v [B, Sk, Hkv, d]           */
    int      causal;                 /* bottom-right alignment (= top-left when Sq = Sk) */
    int      paged;                  /* forward through fa_forward_kvcache, paged cache */
    int      page_size;
} bench_shape;

typedef struct {
    bench_shape sh;
    void  *q, *k, *v, *out;          /* storage dtype, contiguous [B, S, H, d]          */
    float *qf, *kf, *vf;             /* fp32 copies of the stored values (naive, oracle) */
    float *lse;                      /* [B, H, Sq]                                      */
    fa_tensor tq, tk, tv, tout;
    /* backward (allocated by bp_alloc_backward) */
    void  *dout, *dq, *dk, *dv;
    float *doutf;
    fa_tensor tdout, tdq, tdk, tdv;
    /* paged KV cache (sh.paged) */
    void  *kpages, *vpages;
    int32_t *block_table, *cache_seqlens;
    int64_t pages_per_seq;
    fa_tensor tkp, tvp;
} bench_problem;

int    bp_alloc(bench_problem *p, const bench_shape *sh, uint64_t seed);
int    bp_alloc_backward(bench_problem *p, uint64_t seed);
void   bp_free(bench_problem *p);
void   bp_poison_out(bench_problem *p);              /* NaN pattern in the outputs   */
float  bp_load(const void *data, fa_dtype t, size_t i);
void   bp_store(void *data, fa_dtype t, size_t i, float x);
const char *bp_dtype_name(fa_dtype t);
int    bp_parse_dtype(const char *s, fa_dtype *t);
double bp_flops(const bench_shape *sh, int backward); /* useful FLOPs: see data.c     */
double bp_scale(const bench_shape *sh);
size_t bp_io_bytes(const bench_shape *sh);            /* q, k, v, out in storage dtype */
void   bp_shape_str(const bench_shape *sh, char *buf, size_t len);

/* check.c: a forward output (storage dtype `odt` at `out`, layout of p->out) on nrows
 * query rows, checked with liboracle (tests/oracle/oracle.h), the oracle and tolerance
 * rule of the test suites: err is max|ours - oracle|, tol its bound, nan a non-finite
 * error (of the tensor worst against its bound). Returns 1 on pass. */
typedef struct { double err, tol, ref_max; int rows; int nan; } bench_check;
int    check_forward(const bench_problem *p, const void *out, fa_dtype odt, int nrows,
                     bench_check *c);
/* Backward check: dq, dk, dv of the first and last KV heads (nrows unused). Returns 1
 * on pass. */
int    check_backward(const bench_problem *p, int nrows, bench_check *c);

/* The same inputs (and dout, when src has one) stored in dtype `t`: each value of src
 * rounded to t, the fp32 copies holding the rounded values. Not for a paged problem.
 * Returns 0, or -1 (no memory). */
int    bp_alloc_converted(bench_problem *dst, const bench_problem *src, fa_dtype t);

/* ------------------------------------------------------------------ rungs ---------- */

typedef enum { IMPL_NAIVE, IMPL_BLAS, IMPL_FA } impl_kind;

typedef struct {
    impl_kind   kind;
    fa_backend  backend;             /* IMPL_FA                                          */
    const char *isa;                 /* FA_CPU_ISA value, or NULL                        */
    const char *label;               /* "naive", "cpu avx2", ...                          */
} rung_spec;

/* naive.c: the unfused algorithm (naive: plain loops; blas: cblas_sgemm) from the fp32
 * copies. out, dq: fp32 in the layout of q; dk, dv: fp32 in the layout of k. Returns 0, or
 * -1 (no memory, or no BLAS in this build). */
int    naive_forward(const bench_problem *p, float *out, int threads, int blas);
int    naive_backward(const bench_problem *p, float *dq, float *dk, float *dv, int threads,
                      int blas);
size_t naive_extra_bytes(const bench_problem *p, int threads, int backward, int blas);
int    blas_available(void);

/* ------------------------------------------------------------------ measurement ---- */

double now_s(void);
int    perf_init(void);                    /* call before the first OpenMP region      */
const char *perf_reason(void);             /* why counters are n/a ("" if available)    */
void   perf_start(void);
double perf_stop_bytes(void);              /* bytes (misses * 64), or -1               */
int    rss_reset_peak(void);               /* 1 when /proc/self/clear_refs reset VmHWM   */
long   rss_peak_kib(void);                 /* getrusage ru_maxrss                       */
long   rss_now_kib(void);

typedef struct {
    long  l1d, l2, l3, l3_per_core;        /* bytes                                     */
    int   cores, pus;
    long long dram;                        /* bytes                                     */
    char  source[64];                      /* "fa_context_describe" or "sysconf"         */
} bench_caches;
void   caches_from_describe(const char *desc, bench_caches *c);

/* IO model of the FlashAttention paper, in bytes (elements * storage size). */
double io_model_standard(const bench_shape *sh);
double io_model_standard_bwd(const bench_shape *sh);
double io_model_flash(const bench_shape *sh, long br);

typedef struct {
    double fp32_1, fp32_all;               /* GFLOP/s, one thread, all threads         */
    double bf16_1, bf16_all;               /* 0 when no AVX-512 BF16                     */
    double amx_1, amx_all;                 /* AMX TDPBF16PS tiles; 0 when no AMX          */
    int    threads;
    const char *isa;                       /* "avx512", "avx2", "scalar"                 */
} bench_peak;
void   peak_measure(bench_peak *pk, int threads, double seconds);
double peak_for(const bench_peak *pk, int threads, fa_dtype dt);

/* ------------------------------------------------------------------ results -------- */

enum { RES_OK = 0, RES_FAIL, RES_NA, RES_SKIP };

typedef struct {
    char   section[12];                   /* ladder tiles seqlen naive-seq full decode gpu */
    char   impl[32];
    char   kernel[96];
    char   dir[4];                        /* fwd / bwd                                  */
    bench_shape sh;
    int    threads, bq, bkv;
    int    status;
    char   note[320];
    double err, tol;
    double t_med, t_min, t_max;           /* seconds                                    */
    int    runs;
    double gflops, pct_peak;
    double extra_model, rss_delta;        /* bytes; rss_delta < 0 = not measured        */
    double io_model, io_meas;             /* bytes; io_meas < 0 = n/a                   */
    double tile_bytes;                    /* tiles sweep: K+V tile bytes                 */
    int    device;                        /* a GPU rung: no %peak (the ceiling is the
                                             CPU's); rss_delta is device memory          */
} bench_result;

typedef struct {
    bench_result *v;
    int n, cap;
} bench_results;

/* ------------------------------------------------------------------ the run -------- */

typedef struct {
    const char *backend;                   /* --backend: all|naive|blas|reference|cpu|cuda */
    const char *isa;                       /* --isa: generic|avx2|avx512|amx, NULL = each   */
    bench_shape sh;
    int    threads;                        /* 0 = all                                   */
    int    bq, bkv;                        /* --tiles                                   */
    int    repeats;                        /* most timed runs per measurement           */
    double budget;                         /* seconds per measurement                   */
    int    quick, full;
    int    sweep_only;                     /* --sweep-only: the sweep runs only R->sh   */
    int    mode_ladder, mode_tiles, mode_seqlen, mode_sweep;
    int    mode_decode;                    /* --mode decode: decode.c only              */
    int    csv_stdout;
    const char *out_dir;
    int    check_rows;
    int    ladder_bwd;                     /* the ladder's backward rungs (default on)    */
    int    gpu_sweep;                      /* --backend cuda --mode sweep                 */
    int    set_dtype, set_d, set_s;        /* given on the command line (GPU sweep filter) */
    double warmup_s;                       /* seconds of calls before the next timing     */
    const char *csv_path;                  /* --csv FILE                                  */
    char   cuda_why[512];                  /* why no CUDA context, "" when there is one   */
    long   mem_cap_mib;                    /* naive S x S cap                            */
    /* filled while running */
    int    nthreads_all;
    bench_peak peak;
    bench_caches caches;
    int    step, nsteps;
    bench_results res;
    char   best_isa[16];                   /* best CPU kernel set that passed            */
} bench_run;

/* report.c: "[step/steps] what ..." on stderr */
void progress(bench_run *R, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* options.c: 0, or the exit status (2) after a one-line error; exits 0 for --help and
 * --version */
int    bench_parse_args(bench_run *R, int argc, char **argv);

/* rungs.c */
int    rung_list(const bench_run *R, rung_spec *out, int max);
int    rung_measure(bench_run *R, const rung_spec *rs, bench_problem *p, int backward,
                    int threads, int bq, int bkv, bench_result *res);
void   rung_describe(const char *isa, char *buf, size_t len);

/* sweeps.c */
int    sweep_count_tiles(const bench_run *R);
int    sweep_count_seqlen(const bench_run *R);
int    sweep_count_full(const bench_run *R);
void   sweep_ladder(bench_run *R);
void   sweep_tiles(bench_run *R);
void   sweep_seqlen(bench_run *R);
void   sweep_full(bench_run *R);

/* decode.c: the decode cells on stdout (f); 1 when a check failed */
int    decode_bench(bench_run *R, FILE *f);
int    decode_steps(void);                    /* progress steps of decode_bench */
/* decode_gpu.c: the CUDA backend's decode cells (ctx: a CUDA context); 1 when one failed */
int    decode_gpu_bench(bench_run *R, fa_context *ctx, FILE *f);

/* gpu.c */
int    sweep_count_gpu(const bench_run *R);
void   sweep_gpu(bench_run *R);
void   gpu_describe(const bench_run *R, FILE *f, fa_context *ctx);

/* report.c */
bench_result *results_add(bench_results *r);
void   report_table(const bench_run *R, FILE *f);
int    report_csv(const bench_run *R, const char *path);
void   fmt_bytes(double b, char *buf, size_t len);

/* plot.c */
int    plot_svg(const bench_run *R, const char *path);
int    plot_gnuplot(const bench_run *R, const char *dir, char *png, size_t len);

#endif /* FA_BENCH_H */
