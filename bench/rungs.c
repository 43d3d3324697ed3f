/* rungs.c - one measurement of one rung: set up, check against the oracle, then time.
 *
 * Check first, then time (llm.c's benchmark_kernel): the first call poisons the outputs,
 * runs once, and compares a subset of rows with the double-precision oracle; a rung that
 * fails is reported FAIL and not timed. That first call is also the warm-up and the one
 * whose peak-RSS growth is recorded (scratch is allocated there). Timed runs follow:
 * at least 3, at most --repeats, fewer when the per-measurement time budget is short;
 * the median is reported with the min and max.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "cudrv.h"

static int amx_present(void);

/* The ladder's rungs as --backend and --isa leave them. The AMX kernel set is a rung where
 * the machine has it (or --isa amx asks for it: then a machine without it shows why). */
int rung_list(const bench_run *R, rung_spec *out, int max)
{
    static const char *isas[] = { "generic", "avx2", "avx512", "amx" };
    static const char *labels[] = { "cpu generic", "cpu avx2", "cpu avx512", "cpu amx" };
    const char *b = R->backend ? R->backend : "all";
    int all = !strcmp(b, "all"), n = 0;
    if ((all || !strcmp(b, "naive")) && n < max)
        out[n++] = (rung_spec){ IMPL_NAIVE, FA_BACKEND_AUTO, NULL, "naive" };
    if ((all || !strcmp(b, "blas")) && n < max)
        out[n++] = (rung_spec){ IMPL_BLAS, FA_BACKEND_AUTO, NULL, "unfused blas" };
    if ((all || !strcmp(b, "reference")) && n < max)
        out[n++] = (rung_spec){ IMPL_FA, FA_BACKEND_REFERENCE, NULL, "reference" };
    if (all || !strcmp(b, "cpu"))
        for (int i = 0; i < 4 && n < max; i++) {
            if (R->isa ? strcmp(R->isa, isas[i]) != 0 : (i == 3 && !amx_present())) continue;
            out[n++] = (rung_spec){ IMPL_FA, FA_BACKEND_CPU, isas[i], labels[i] };
        }
    if ((all || !strcmp(b, "cuda")) && n < max)
        out[n++] = (rung_spec){ IMPL_FA, FA_BACKEND_CUDA, NULL, "cuda" };
    return n;
}

/* FA_CPU_ISA for the duration of one context creation (the library reads it there). */
static char *env_push(const char *isa)
{
    const char *old = getenv("FA_CPU_ISA");
    char *saved = old ? strdup(old) : NULL;
    if (isa) setenv("FA_CPU_ISA", isa, 1);
    return saved;
}

static void env_pop(const char *isa, char *saved)
{
    if (isa) {
        if (saved) setenv("FA_CPU_ISA", saved, 1);
        else unsetenv("FA_CPU_ISA");
    }
    free(saved);
}

/* Whether a CPU context can be created with FA_CPU_ISA=amx (the library checks the CPU
 * and the kernel's permission for the AMX state there). */
static int amx_present(void)
{
    static int known = -1;
    if (known < 0) {
        fa_context *ctx = NULL;
        char *saved = env_push("amx");
        known = fa_context_create(&ctx, FA_BACKEND_CPU) == FA_OK;
        env_pop("amx", saved);
        fa_context_destroy(ctx);
    }
    return known;
}

void rung_describe(const char *isa, char *buf, size_t len)
{
    fa_context *ctx = NULL;
    char *saved = env_push(isa);
    fa_status st = fa_context_create(&ctx, FA_BACKEND_CPU);
    env_pop(isa, saved);
    if (st != FA_OK) {
        snprintf(buf, len, "cpu: not available: %s\n", fa_last_error(NULL));
        return;
    }
    snprintf(buf, len, "%s", fa_context_describe(ctx));
    fa_context_destroy(ctx);
}

/* Tile rows the call uses, as the library reports them: "64x128 tiles" in the kernel name
 * (per call; the CUDA kernels name them as a bare "128x64" word), else "Br x Bc = 128 x 192"
 * in describe (the second such line is the backward's), else "block_q=64" / "block_kv=64"
 * in describe. 0 when nothing says. */
static const char *parse_tiles(const char *desc, const char *kernel, int backward, int *bq,
                               int *bkv)
{
    *bq = *bkv = 0;
    const char *t = kernel ? strstr(kernel, " tiles") : NULL;
    if (t) {
        const char *s = t;
        while (s > kernel && s[-1] != ' ') s--;
        if (sscanf(s, "%dx%d", bq, bkv) == 2) return "kernel name";
    }
    for (const char *w = kernel; w && *w; w = strchr(w, ' ') ? strchr(w, ' ') + 1 : "") {
        int n = 0;
        if (sscanf(w, "%dx%d%n", bq, bkv, &n) == 2 && (w[n] == ' ' || !w[n]) && *bq > 0)
            return "kernel name";
        *bq = *bkv = 0;
    }
    const char *e = desc ? strstr(desc, "Br x Bc = ") : NULL;
    if (e && backward) e = strstr(e + 1, "Br x Bc = ");
    if (e && sscanf(e, "Br x Bc = %d x %d", bq, bkv) == 2) {
        const char *ex = strstr(desc, " example");
        return ex && ex < e ? "describe (its example shape)" : "describe";
    }
    e = desc ? strstr(desc, "block_q=") : NULL;
    if (e) sscanf(e, "block_q=%d", bq);
    e = desc ? strstr(desc, "block_kv=") : NULL;
    if (e) sscanf(e, "block_kv=%d", bkv);
    return *bq > 0 ? "describe" : "";
}

static void poison(void *data, fa_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++) bp_store(data, t, i, NAN);
}

typedef struct {
    const rung_spec *rs;
    fa_context *ctx;
    bench_problem *p;
    float *outf;
    int threads, backward;
    fa_options opt;
    /* the tensors the library gets: p's (host), or dev's (device) */
    fa_tensor *tq, *tk, *tv, *tout, *tdout, *tdq, *tdk, *tdv;
    float *lse;
    int device;                     /* a CUDA context: dev holds the problem, cudrv is open */
    bench_dev dev;
    CUresult cu_err;                /* the first device error seen by run_once            */
    int events;                     /* time each device call with CUDA events: t_dev       */
    double t_dev;
} call_env;

static void env_tensors_host(call_env *e)
{
    bench_problem *p = e->p;
    e->tq = &p->tq, e->tk = &p->tk, e->tv = &p->tv, e->tout = &p->tout, e->lse = p->lse;
    e->tdout = &p->tdout, e->tdq = &p->tdq, e->tdk = &p->tdk, e->tdv = &p->tdv;
}

static void env_tensors_dev(call_env *e)
{
    bench_dev *d = &e->dev;
    e->tq = &d->tq, e->tk = &d->tk, e->tv = &d->tv, e->tout = &d->tout, e->lse = d->lse_ptr;
    e->tdout = &d->tdout, e->tdq = &d->tdq, e->tdk = &d->tdk, e->tdv = &d->tdv;
}

/* The naive or unfused-BLAS rung. Its backward writes fp32 gradients: straight into
 * p->dq, dk, dv for an f32 problem, else into outf, then rounded to the storage dtype. */
static int run_unfused(call_env *e)
{
    bench_problem *p = e->p;
    const bench_shape *sh = &p->sh;
    int blas = e->rs->kind == IMPL_BLAS;
    if (!e->backward) return naive_forward(p, e->outf, e->threads, blas);
    size_t nq = (size_t)(sh->B * sh->Sq * sh->H * sh->d);
    size_t nk = (size_t)(sh->B * sh->Sk * sh->Hkv * sh->d);
    if (sh->dtype == FA_F32)
        return naive_backward(p, p->dq, p->dk, p->dv, e->threads, blas);
    float *dq = e->outf, *dk = dq + nq, *dv = dk + nk;
    if (naive_backward(p, dq, dk, dv, e->threads, blas)) return -1;
    for (size_t i = 0; i < nq; i++) bp_store(p->dq, sh->dtype, i, dq[i]);
    for (size_t i = 0; i < nk; i++) bp_store(p->dk, sh->dtype, i, dk[i]);
    for (size_t i = 0; i < nk; i++) bp_store(p->dv, sh->dtype, i, dv[i]);
    return 0;
}

/* One call. On a device the call is queued: run_once waits for it (cuCtxSynchronize, or
 * the second of two CUDA events around it when e->events), so that a timing around
 * run_once covers the work and an error of the kernels shows here. */
static int run_once(call_env *e)
{
    bench_problem *p = e->p;
    if (e->rs->kind != IMPL_FA) return run_unfused(e);
    fa_status st;
    if (e->device && e->events && !e->cu_err) {
        CUresult r = cudrv_timer_start();
        if (r != 0) e->cu_err = r;
    }
    if (e->backward)
        st = fa_backward(e->ctx, e->tdq, e->tdk, e->tdv, NULL, e->tdout, e->tq, e->tk, e->tv,
                         e->tout, e->lse, &e->opt);
    else if (p->sh.paged)
        st = fa_forward_kvcache(e->ctx, e->tout, e->lse, e->tq, &p->tkp, &p->tvp, NULL, NULL,
                                p->cache_seqlens, p->block_table, p->pages_per_seq, &e->opt);
    else
        st = fa_forward(e->ctx, e->tout, e->lse, e->tq, e->tk, e->tv, &e->opt);
    if (st == FA_OK && e->device) {
        CUresult r = e->events ? cudrv_timer_stop(&e->t_dev) : cudrv_sync();
        if (r != 0) {
            if (!e->cu_err) e->cu_err = r;
            return -1;
        }
    }
    return st == FA_OK ? 0 : -1;
}

/* The device of a CUDA context, from its description ("gpu: NAME (device N), ..."). */
static int describe_device(const char *desc)
{
    const char *s = desc ? strstr(desc, "(device ") : NULL;
    int dev = 0;
    if (s) sscanf(s, "(device %d)", &dev);
    return dev;
}

/* Open the driver on the context's device and put the problem there; the rung's reason
 * in res->note when that cannot be done. */
static int device_setup(call_env *e, bench_result *res)
{
    const bench_shape *sh = &e->p->sh;
    char why[240];
    if (sh->paged) {
        snprintf(res->note, sizeof res->note, "%s: the paged KV cache has no device path in "
                 "this bench", e->rs->label);
        return -1;
    }
    if (cudrv_open(describe_device(fa_context_describe(e->ctx)), why, sizeof why)) {
        snprintf(res->note, sizeof res->note, "%s: a context was created, but %s",
                 e->rs->label, why);
        return -1;
    }
    e->device = 1;
    if (dev_alloc(&e->dev, e->p, e->backward, 1, why, sizeof why)) {
        snprintf(res->note, sizeof res->note, "%s: %s", e->rs->label, why);
        return -1;
    }
    env_tensors_dev(e);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Backward IO model (FlashAttention-2 order: KV blocks outer, Q blocks inner): K, V read
 * and dK, dV written once; per block of bc keys, Q, dO, dQ (read + write) streamed again. */
static double io_model_flash_bwd(const bench_shape *sh, long bc)
{
    double es = (double)fa_dtype_size(sh->dtype), d = (double)sh->d;
    double pairs = bp_flops(sh, 0) / (4.0 * (double)sh->B * (double)sh->H * d);
    if (bc < 1) bc = 1;
    double q = 4.0 * d * pairs / (double)bc;
    if (q < 4.0 * d * (double)sh->Sq) q = 4.0 * d * (double)sh->Sq;
    return es * (4.0 * d * (double)sh->Sk + q) * (double)sh->B * (double)sh->H;
}

int rung_measure(bench_run *R, const rung_spec *rs, bench_problem *p, int backward,
                 int threads, int bq, int bkv, bench_result *res)
{
    const bench_shape *sh = &p->sh;
    call_env e = { .rs = rs, .p = p, .threads = threads, .backward = backward };
    env_tensors_host(&e);
    e.opt.causal = sh->causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
    snprintf(res->impl, sizeof res->impl, "%s", rs->label);
    snprintf(res->dir, sizeof res->dir, "%s", backward ? "bwd" : "fwd");
    res->sh = *sh;
    res->threads = threads;
    res->bq = bq, res->bkv = bkv;
    res->rss_delta = res->io_meas = -1;
    int used = threads;
    long br_model = bq, bc_model = bkv, before = -1;
    int reset = 0;
    const char *br_src = bq > 0 ? "--tiles" : "";

    if (rs->kind != IMPL_FA) {
        if (rs->kind == IMPL_BLAS && !blas_available()) {
            res->status = RES_NA;
            snprintf(res->note, sizeof res->note,
                     "unfused blas: not in this build (no CBLAS when it was built)");
            return RES_NA;
        }
        size_t n = (size_t)(sh->B * sh->Sq * sh->H * sh->d);
        if (backward) n = sh->dtype == FA_F32 ? 1 : n + 2 * (size_t)(sh->B * sh->Sk * sh->Hkv * sh->d);
        e.outf = malloc(n * sizeof(float) + 64);
        if (!e.outf) {
            res->status = RES_NA;
            snprintf(res->note, sizeof res->note, "%s: cannot allocate the output", rs->label);
            return RES_NA;
        }
        memset(e.outf, 0, n * sizeof(float));
        snprintf(res->kernel, sizeof res->kernel, "bench/naive.c: %s, %s",
                 backward ? "S, P, dV, dP, dS, dQ, dK (2 S x S fp32)"
                          : "S=QK^T, softmax, PV (S x S fp32)",
                 rs->kind == IMPL_NAIVE ? "loops" : "cblas_sgemm");
        res->extra_model = (double)naive_extra_bytes(p, threads, backward, rs->kind == IMPL_BLAS);
        res->io_model = backward ? io_model_standard_bwd(sh) : io_model_standard(sh);
    } else {
        reset = rss_reset_peak();               /* the context's own allocations count */
        before = reset ? rss_now_kib() : rss_peak_kib();
        char *saved = env_push(rs->isa);
        fa_status st = fa_context_create(&e.ctx, rs->backend);
        env_pop(rs->isa, saved);
        if (st != FA_OK) {
            res->status = RES_NA;
            snprintf(res->note, sizeof res->note, "%s: not available: %s", rs->label,
                     fa_last_error(NULL));
            return RES_NA;
        }
        if (rs->backend == FA_BACKEND_CUDA) {
            res->device = 1;
            if (device_setup(&e, res)) {
                res->status = RES_NA;
                goto done;
            }
        } else if (fa_context_set_threads(e.ctx, threads) != FA_OK) {
            used = 1;                       /* the reference backend runs on one thread */
            fa_context_set_threads(e.ctx, 0);
        }
        if ((bq > 0 || bkv > 0) && fa_context_set_tiles(e.ctx, bq, bkv) != FA_OK) {
            res->status = RES_NA;
            snprintf(res->note, sizeof res->note, "%s: set_tiles(%d, %d): %s", rs->label, bq,
                     bkv, fa_last_error(e.ctx));
            goto done;
        }
        const char *kname = NULL;
        if (backward)
            st = fa_query_backward(e.ctx, &kname, e.tdq, e.tdk, e.tdv, NULL, e.tdout, e.tq,
                                   e.tk, e.tv, e.tout, e.lse, &e.opt);
        else
            st = fa_query(e.ctx, &kname, e.tout, e.lse, e.tq, e.tk, e.tv, &e.opt);
        if (st != FA_OK) {
            res->status = RES_NA;
            snprintf(res->note, sizeof res->note, "%s: not available for this call: %s",
                     rs->label, fa_last_error(e.ctx));
            goto done;
        }
        snprintf(res->kernel, sizeof res->kernel, "%s%s", sh->paged ? "kvcache paged; " : "",
                 kname ? kname : "?");
        int dq = 0, dk = 0;
        const char *src = parse_tiles(fa_context_describe(e.ctx), kname, backward, &dq, &dk);
        if (br_model <= 0 && dq > 0) br_model = dq, br_src = src;
        if (bc_model <= 0 && dk > 0) bc_model = dk;
        if (br_model <= 0) {    /* the paper's Br = min(M/(4d), d), M = L1d in elements */
            br_model = R->caches.l1d / (long)fa_dtype_size(sh->dtype) / (4 * sh->d);
            if (br_model > sh->d) br_model = sh->d;
            br_src = "the paper's Br = min(M/4d, d), M = L1d";
        }
        if (bc_model <= 0) bc_model = br_model;
        if (br_model > sh->Sq) br_model = sh->Sq;      /* tiles are clamped to the problem */
        if (bc_model > sh->Sk) bc_model = sh->Sk;
        /* m, l per row; per thread one Q tile, K and V tiles, the S tile, the O accumulator
           (fp32); the backward adds fp32 dQ and D per row. */
        double tiles = 4.0 * (2.0 * br_model * sh->d + 2.0 * bc_model * sh->d +
                              (double)br_model * bc_model + 2.0 * br_model);
        res->extra_model = 8.0 * sh->B * sh->H * sh->Sq + used * tiles;
        if (e.device) {   /* m, l and the tiles live in registers and shared memory; split-kv
                             keeps a partial O and lse per split, fp32, in device memory */
            const char *sp = kname ? strstr(kname, "split-kv ") : NULL;
            int splits = 0;
            if (sp) sscanf(sp, "split-kv %d", &splits);
            res->extra_model = splits > 1 ? 4.0 * splits * sh->B * sh->H * sh->Sq * (sh->d + 1) : 0;
        }
        if (backward) res->extra_model += 4.0 * sh->B * sh->H * sh->Sq * (sh->d + 1);
        res->io_model = backward ? io_model_flash_bwd(sh, bc_model) : io_model_flash(sh, br_model);
        if (backward) {                        /* out and lse from a forward first */
            if (fa_forward(e.ctx, e.tout, e.lse, e.tq, e.tk, e.tv, &e.opt) != FA_OK) {
                res->status = RES_FAIL;
                snprintf(res->note, sizeof res->note, "forward before backward: %s",
                         fa_last_error(e.ctx));
                goto done;
            }
        }
    }
    res->threads = used;

    /* ---- 1. check (and warm up, and record the peak RSS growth) ---- */
    size_t nq = (size_t)(sh->B * sh->Sq * sh->H * sh->d);
    size_t nk = (size_t)(sh->B * sh->Sk * sh->Hkv * sh->d);
    size_t dev_free0 = 0, dev_free1 = 0;
    int dev_mem = 0;
    if (e.device) {
        CUresult r = dev_poison(&e.dev, p);
        if (r != 0) {
            res->status = RES_FAIL;
            snprintf(res->note, sizeof res->note, "%s: upload: %s", rs->label, cudrv_error(r));
            goto done;
        }
        dev_mem = cudrv_sync() == 0 && cudrv_mem_free(&dev_free0) == 0;
    } else if (backward) {
        poison(p->dq, sh->dtype, nq);
        poison(p->dk, sh->dtype, nk);
        poison(p->dv, sh->dtype, nk);
    } else if (rs->kind == IMPL_FA) {
        bp_poison_out(p);
    } else {
        poison(e.outf, FA_F32, nq);
    }
    if (rs->kind != IMPL_FA) {
        reset = rss_reset_peak();
        before = reset ? rss_now_kib() : rss_peak_kib();
    }
    double t0 = now_s();
    int rc = run_once(&e);
    double t_first = now_s() - t0;
    long after = rss_peak_kib();
    if (before >= 0 && after >= 0) res->rss_delta = 1024.0 * (double)(after > before ? after - before : 0);
    if (e.device) {        /* device memory still held after the call, not host RSS */
        res->rss_delta = -1;
        if (dev_mem && cudrv_mem_free(&dev_free1) == 0)
            res->rss_delta = dev_free1 < dev_free0 ? (double)(dev_free0 - dev_free1) : 0;
    }
    if (rc != 0) {
        res->status = RES_FAIL;
        snprintf(res->note, sizeof res->note, "%s: call failed: %s", rs->label,
                 e.cu_err ? cudrv_error(e.cu_err) : e.ctx ? fa_last_error(e.ctx) : "out of memory");
        goto done;
    }
    if (e.device) {
        CUresult r = dev_download(&e.dev, p);
        if (r != 0) {
            res->status = RES_FAIL;
            snprintf(res->note, sizeof res->note, "%s: download: %s", rs->label, cudrv_error(r));
            goto done;
        }
    }
    bench_check c;
    int ok = backward ? check_backward(p, R->check_rows, &c)
                      : check_forward(p, rs->kind == IMPL_FA ? p->out : e.outf,
                                      rs->kind == IMPL_FA ? sh->dtype : FA_F32, R->check_rows, &c);
    res->err = c.err;
    res->tol = c.tol;
    if (!ok) {
        res->status = RES_FAIL;
        snprintf(res->note, sizeof res->note, "oracle check FAILED on %d rows: max err %.3g > "
                 "tol %.3g%s; not timed", c.rows, c.err, c.tol, c.nan ? " (NaN in output)" : "");
        goto done;
    }

    /* ---- 2. time ---- */
    if (t_first < 0.05) {                     /* short calls: a few more warm-up runs */
        for (int i = 0; i < 3; i++) run_once(&e);
    }
    for (double w0 = now_s(); now_s() - w0 < R->warmup_s;) run_once(&e);
    R->warmup_s = 0;                          /* a one-time warm-up (the GPU's clocks) */
    int n = (int)(R->budget / (t_first > 1e-6 ? t_first : 1e-6));
    if (n > R->repeats) n = R->repeats;
    if (n < 3) n = 3;
    double *t = malloc((size_t)n * sizeof(double));
    if (!t) {
        res->status = RES_FAIL;
        snprintf(res->note, sizeof res->note, "out of memory");
        goto done;
    }
    if (!e.device) perf_start();         /* host cache misses say nothing about a GPU */
    for (int i = 0; i < n; i++) {
        double s0 = now_s();
        e.events = e.device;
        run_once(&e);
        t[i] = e.device ? e.t_dev : now_s() - s0;
    }
    double bytes = e.device ? -1 : perf_stop_bytes();
    if (e.cu_err) {
        free(t);
        res->status = RES_FAIL;
        snprintf(res->note, sizeof res->note, "%s: device error while timing: %s", rs->label,
                 cudrv_error(e.cu_err));
        goto done;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    res->runs = n;
    res->t_min = t[0];
    res->t_max = t[n - 1];
    res->t_med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    res->io_meas = bytes >= 0 ? bytes / n : -1;
    res->gflops = bp_flops(sh, backward) / res->t_med / 1e9;
    double pk = e.device ? 0 : peak_for(&R->peak, used, sh->dtype);
    res->pct_peak = pk > 0 ? 100.0 * res->gflops / pk : 0;
    res->status = RES_OK;
    snprintf(res->note, sizeof res->note, "check %.2g <= tol %.2g (%d rows)%s%s%s", c.err,
             c.tol, c.rows, rs->kind == IMPL_FA ? "; IO model Br from " : "",
             rs->kind == IMPL_FA ? br_src : "", used != threads ? "; 1 thread (reference)" : "");
    if (e.device) {
        char name[128], io[32];
        cudrv_name(name, sizeof name);
        fmt_bytes((double)e.dev.bytes, io, sizeof io);
        size_t l = strlen(res->note);
        snprintf(res->note + l, sizeof res->note - l, "; %s; time: CUDA events around each "
                 "call; rss_delta = device memory held after the first "
                 "call (cuMemGetInfo), beyond the %s of inputs and outputs", name, io);
    }
done:
    free(e.outf);
    if (e.device) {
        dev_free(&e.dev);
        cudrv_close();
    }
    fa_context_destroy(e.ctx);
    return res->status;
}
