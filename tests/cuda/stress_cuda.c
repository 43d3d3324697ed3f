/* stress_cuda.c - a stress loop for the CUDA backend, and its > 2^31-element mode.
 *
 * Stress mode (the default):  stress_cuda [SECONDS [SEED [ROUNDS]]]   (60 s, seed 1, no limit)
 *   A pool of small cases (forward dense fast and general kernel, split-KV decode, backward
 *   with deterministic=1 or 0, varlen forward and backward, KV cache contiguous and paged
 *   with and without the append, fa_combine) is drawn from SEED. Each case's inputs are
 *   rounded to the storage dtype once; its oracle is the reference backend run once on host
 *   copies with fp32 outputs, under tolerances of its own (out 2 eps max|oracle| + 1e-5,
 *   lse 1e-3 relative, gradients 3x, dsinks 1e-3 of max, KV cache after the append
 *   bytewise), looser than liboracle's rule, which test_cuda applies: this loop is about
 *   concurrency, streams and contexts, not accuracy.
 *   Each round runs up to 4 slots at once: a case on one of 3 contexts (destroyed and
 *   re-created at random) and one of 4 streams (3 created non-blocking, plus the legacy
 *   default stream), set with fa_context_set_stream; the inputs are uploaded, the outputs
 *   poisoned (0xff, plus a 256-byte guard band) and read back with async copies on that
 *   stream, so a call that ran on another stream would race with them. After the round:
 *   every result within tolerance of the oracle, every element written, rows that must
 *   stay untouched untouched, guard bands intact, and bitwise equal to the first result of
 *   the same case (determinism across contexts, streams and concurrent work; backward only
 *   with deterministic=1). Before a slot's good call there may be a failing call on the same
 *   context (bad shapes, host pointers, unsupported head dims (fp32 too), bad counts): it must
 *   return the documented status with a one-line message starting with the function's
 *   name, leave no CUDA error behind, write nothing (its outputs point into a poisoned
 *   buffer that is checked after the round), and the good call after it must be right.
 *   Progress every 10 s; a summary at the end. Exit status: 0 all passed, 1 a failure,
 *   2 a setup error (CUDA runtime), 77 no CUDA context (no GPU or no module).
 *
 * Big mode:  stress_cuda big    (about 26 GB of device memory at the peak; exit status as above)
 *   64-bit offsets, as tests/test_big.c on the CPU, on the device:
 *   K side: k, v [1, 2^25 + 4096, 1, 64] bf16 (2^31 + 262144 elements each), q [1, 3, 2, 64].
 *     (1) bottom-right causal window 300: the queries see only keys past element 2^31;
 *     (2) no mask over every key: k is zero except the last 512 rows, so the zero keys act
 *         as one key carrying mean(v) with logit log(N) (the reference gets that key, a
 *         bias of log N, and the 512 tail keys); a wrapped offset reads the wrong tail rows;
 *     (3) the same memory as a paged cache [131088, 256, 1, 64], the block_table on the
 *         last two pages, a 2-row append landing past 2^31.
 *   Q side: q, out [1, 2^21 + 64, 16, 64] bf16 (2^31 + 65536 elements), k, v [1, 64, 4, 64].
 *     (4) forward: rows 0, 2^21 - 1, 2^21 (it starts at element 2^31) and the last two,
 *         against the reference on those rows (no mask: rows are independent);
 *     (5) backward: dout is zero except on those rows, so dk and dv are those rows'
 *         contributions alone and dq is exactly 0 elsewhere: dq of the rows, dk, dv against
 *         the reference backward on the rows, and dq of a few other rows exactly 0.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "flashattn.h"
#include "dtype.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(2); } } while (0)
#define GUARD 256
/* Big mode's threshold: tensors of 2^FA_BIG_LOG2 + a little elements. 31 is the point of
   the test; a smaller value (e.g. -DFA_BIG_LOG2=22) only checks the harness itself on a
   machine without the memory. */
#ifndef FA_BIG_LOG2
#define FA_BIG_LOG2 31
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng;
static uint64_t rnext(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double frand(void) { return (double)(rnext() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }  /* [-1, 1) */
static int irand(int n) { return (int)(rnext() % (uint64_t)n); }                             /* [0, n) */

static size_t esz(fa_dtype t) { return t == FA_F32 ? 4 : 2; }
static double eps_of(fa_dtype t) { return t == FA_BF16 ? 1.0 / 256 : t == FA_F16 ? 1.0 / 2048 : 1.0 / 65536; }
static const char *dtn(fa_dtype t) { return t == FA_BF16 ? "bf16" : t == FA_F16 ? "fp16" : "fp32"; }

static long fails;
static int printed;
static void failf(const char *fmt, ...)
{
    va_list ap;
    fails++;
    if (printed++ >= 60) { if (printed == 61) printf("(further failures not printed)\n"); return; }
    printf("FAIL ");
    va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------------------------ */
/* Cases                                                                                 */
/* ------------------------------------------------------------------------------------ */

enum { K_FWD, K_BWD, K_VARLEN, K_VARLEN_BWD, K_KVCACHE, K_COMBINE, K_NKINDS };
static const char *kind_name[K_NKINDS] = { "fwd", "bwd", "varlen", "varlen-bwd", "kvcache", "combine" };

/* How an array is checked after a run. */
enum { A_IN, A_OUT, A_LSE, A_GRAD, A_DSINKS, A_CACHE };

#define MAXA 16
typedef struct {
    const char *nm;
    int role;
    fa_dtype t;          /* element type for outputs (A_OUT/A_GRAD); inputs: any      */
    size_t n, es;        /* elements, bytes per element                                */
    void *init;          /* inputs and caches: host bytes, uploaded before each run     */
    float *oracle;       /* outputs: the reference's fp32 values (n)                    */
    void *oracle_bytes;  /* A_CACHE: the reference's cache bytes after the append       */
    unsigned char *live; /* NULL: every element must be written; else 0 = untouched      */
    double tol_mul;      /* A_OUT 1, A_GRAD 3                                            */
} arr;

typedef struct {
    int kind, bitwise;
    char name[200];
    fa_dtype t;
    int B, Sq, Sk, H, Hkv, dqk, dv, det;
    fa_options opt;      /* pointers unset here; alibi/sinks/bias from arrays */
    int alibi, sinks, bias, out_f32;
    int nseq, maxq, maxk, TQ, TK;
    int32_t cq[20], ckk[20];
    int page, snew, maxp, npages, cap;
    int nparts;
    int na;
    arr a[MAXA];
    int ai[32];          /* index of each named array (the X_ enum below), -1 = none */
    size_t bytes;        /* sum of the arrays' device bytes, guards included              */
    unsigned char *first;/* the first run's output bytes (all arrays, guards included)    */
    long runs;
} scase;

/* named array slots */
enum { X_Q, X_K, X_V, X_O, X_L, X_DO, X_DQ, X_DK, X_DV, X_DS, X_AL, X_SK, X_BI, X_CQ, X_CK, X_KN, X_VN, X_CS, X_BT,
       X_P0 /* combine: parts X_P0..X_P0+3, lse parts X_P0+4..X_P0+7 */ };

static void *hmalloc(size_t bytes)   /* pinned host memory (async copies) */
{
    void *p = NULL;
    CK(cudaMallocHost(&p, bytes ? bytes : 16));
    return p;
}

static int add_arr(scase *c, int slot, const char *nm, int role, fa_dtype t, size_t n, size_t es)
{
    arr *a = &c->a[c->na];
    memset(a, 0, sizeof *a);
    a->nm = nm; a->role = role; a->t = t; a->n = n; a->es = es;
    a->tol_mul = role == A_GRAD ? 3.0 : 1.0;
    if (role == A_IN || role == A_CACHE) a->init = hmalloc(n * es);
    if (slot >= 0) c->ai[slot] = c->na;
    return c->na++;
}
static arr *A(scase *c, int slot) { return c->ai[slot] >= 0 ? &c->a[c->ai[slot]] : NULL; }

/* random values rounded to dtype t */
static void fill(arr *a, fa_dtype t, double amp)
{
    for (size_t i = 0; i < a->n; i++) fa_store(a->init, t, (int64_t)i, (float)(amp * frand()));
}

static fa_tensor view(void *data, fa_dtype t, int64_t B, int64_t S, int64_t H, int64_t D)
{
    fa_tensor x = fa_tensor_contiguous(data, t, B, S, H, D);
    if (S == 0) x.stride[0] = H * D;
    return x;
}

/* The call of a case, on ctx. p[i]: the pointer of array i (device, or host for the oracle).
   oracle = 1: outputs are fp32 (the oracle buffers). Returns the status. */
static fa_status call(const scase *c, fa_context *ctx, void **p, int oracle)
{
    const int *x = c->ai;
#define P(s) (x[s] >= 0 ? p[x[s]] : NULL)
    fa_options o = c->opt;
    if (c->alibi) o.alibi_slopes = (const float *)P(X_AL);
    if (c->sinks) o.sinks = (const float *)P(X_SK);
    fa_tensor bt;
    if (c->bias) {
        bt = fa_tensor_contiguous(P(X_BI), FA_BF16, c->B, c->Sq, c->H, c->Sk);
        bt.stride[0] = 0;   /* batch broadcast */
        o.bias = &bt;
    }
    fa_dtype ot = oracle ? FA_F32 : c->out_f32 ? FA_F32 : c->t;
    switch (c->kind) {
    case K_FWD: {
        fa_tensor q = view(P(X_Q), c->t, c->B, c->Sq, c->H, c->dqk), k = view(P(X_K), c->t, c->B, c->Sk, c->Hkv, c->dqk);
        fa_tensor v = view(P(X_V), c->t, c->B, c->Sk, c->Hkv, c->dv), out = view(P(X_O), ot, c->B, c->Sq, c->H, c->dv);
        return fa_forward(ctx, &out, (float *)P(X_L), &q, &k, &v, &o);
    }
    case K_BWD: {
        fa_tensor q = view(P(X_Q), c->t, c->B, c->Sq, c->H, c->dqk), k = view(P(X_K), c->t, c->B, c->Sk, c->Hkv, c->dqk);
        fa_tensor v = view(P(X_V), c->t, c->B, c->Sk, c->Hkv, c->dv), out = view(P(X_O), FA_F32, c->B, c->Sq, c->H, c->dv);
        fa_tensor dout = view(P(X_DO), c->t, c->B, c->Sq, c->H, c->dv);
        fa_tensor dq = view(P(X_DQ), ot, c->B, c->Sq, c->H, c->dqk), dk = view(P(X_DK), ot, c->B, c->Sk, c->Hkv, c->dqk);
        fa_tensor dv = view(P(X_DV), ot, c->B, c->Sk, c->Hkv, c->dv);
        return fa_backward(ctx, &dq, &dk, &dv, (float *)P(X_DS), &dout, &q, &k, &v, &out, (const float *)P(X_L), &o);
    }
    case K_VARLEN: {
        fa_tensor q = view(P(X_Q), c->t, 1, c->TQ, c->H, c->dqk), k = view(P(X_K), c->t, 1, c->TK, c->Hkv, c->dqk);
        fa_tensor v = view(P(X_V), c->t, 1, c->TK, c->Hkv, c->dv), out = view(P(X_O), ot, 1, c->TQ, c->H, c->dv);
        return fa_forward_varlen(ctx, &out, (float *)P(X_L), &q, &k, &v, (const int32_t *)P(X_CQ), (const int32_t *)P(X_CK),
                                 c->nseq, c->maxq, c->maxk, &o);
    }
    case K_VARLEN_BWD: {
        fa_tensor q = view(P(X_Q), c->t, 1, c->TQ, c->H, c->dqk), k = view(P(X_K), c->t, 1, c->TK, c->Hkv, c->dqk);
        fa_tensor v = view(P(X_V), c->t, 1, c->TK, c->Hkv, c->dv), out = view(P(X_O), FA_F32, 1, c->TQ, c->H, c->dv);
        fa_tensor dout = view(P(X_DO), c->t, 1, c->TQ, c->H, c->dv);
        fa_tensor dq = view(P(X_DQ), ot, 1, c->TQ, c->H, c->dqk), dk = view(P(X_DK), ot, 1, c->TK, c->Hkv, c->dqk);
        fa_tensor dv = view(P(X_DV), ot, 1, c->TK, c->Hkv, c->dv);
        return fa_backward_varlen(ctx, &dq, &dk, &dv, NULL, &dout, &q, &k, &v, &out, (const float *)P(X_L),
                                  (const int32_t *)P(X_CQ), (const int32_t *)P(X_CK), c->nseq, c->maxq, c->maxk, &o);
    }
    case K_KVCACHE: {
        int64_t N0 = c->page ? c->npages : c->B, S1 = c->page ? c->page : c->cap;
        fa_tensor q = view(P(X_Q), c->t, c->B, c->Sq, c->H, c->dqk), out = view(P(X_O), ot, c->B, c->Sq, c->H, c->dv);
        fa_tensor kc = view(P(X_K), c->t, N0, S1, c->Hkv, c->dqk), vc = view(P(X_V), c->t, N0, S1, c->Hkv, c->dv);
        fa_tensor kn = view(P(X_KN), c->t, c->B, c->snew, c->Hkv, c->dqk), vn = view(P(X_VN), c->t, c->B, c->snew, c->Hkv, c->dv);
        return fa_forward_kvcache(ctx, &out, (float *)P(X_L), &q, &kc, &vc, c->snew ? &kn : NULL, c->snew ? &vn : NULL,
                                  (const int32_t *)P(X_CS), (const int32_t *)P(X_BT), c->maxp, &o);
    }
    default: {   /* K_COMBINE */
        fa_tensor parts[4];
        const float *lp[4];
        for (int i = 0; i < c->nparts; i++) {
            parts[i] = view(P(X_P0 + i), c->a[x[X_P0 + i]].t, c->B, c->Sq, c->H, c->dv);
            lp[i] = (const float *)P(X_P0 + 4 + i);
        }
        fa_tensor out = view(P(X_O), ot, c->B, c->Sq, c->H, c->dv);
        return fa_combine(ctx, &out, (float *)P(X_L), parts, lp, c->nparts);
    }
    }
#undef P
}

static fa_context *refctx;

/* Outputs of a case: allocate the oracle buffers, run the reference. */
static void make_oracle(scase *c)
{
    void *p[MAXA];
    void *cache_copy[MAXA] = { 0 };
    for (int i = 0; i < c->na; i++) {
        arr *a = &c->a[i];
        if (a->role == A_IN) p[i] = a->init;
        else if (a->role == A_CACHE) {
            a->oracle_bytes = malloc(a->n * a->es + 1);
            memcpy(a->oracle_bytes, a->init, a->n * a->es);
            p[i] = cache_copy[i] = a->oracle_bytes;
        } else {
            a->oracle = malloc(a->n * 4 + 4);
            for (size_t j = 0; j < a->n; j++) a->oracle[j] = NAN;
            p[i] = a->oracle;
        }
    }
    fa_status st = call(c, refctx, p, 1);
    if (st != FA_OK) failf("%s: the reference refused the case: %s", c->name, fa_last_error(refctx));
    /* rows the reference did not write are not live (varlen rows past cu_seqlens) */
    for (int i = 0; i < c->na; i++) {
        arr *a = &c->a[i];
        if (a->role == A_IN || a->role == A_CACHE) continue;
        for (size_t j = 0; j < a->n; j++)
            if (isnan(a->oracle[j])) {
                if (!a->live) { a->live = malloc(a->n); memset(a->live, 1, a->n); }
                a->live[j] = 0;
            }
    }
    c->bytes = 0;
    for (int i = 0; i < c->na; i++) c->bytes += c->a[i].n * c->a[i].es + GUARD;
}

static const int dims[][2] = { {64, 64}, {128, 128}, {256, 256}, {32, 32}, {8, 8}, {96, 96}, {80, 80},
                               {192, 128}, {64, 32}, {160, 160}, {128, 128}, {64, 64} };

static void rand_shape(scase *c, int maxprod)
{
    const int *d = dims[irand(sizeof dims / sizeof dims[0])];
    c->dqk = d[0]; c->dv = d[1];
    c->t = irand(2) ? FA_BF16 : FA_F16;
    static const int hk[][2] = { {1, 1}, {2, 2}, {3, 3}, {4, 2}, {4, 1}, {2, 1}, {4, 4} };
    const int *h = hk[irand(7)];
    c->H = h[0]; c->Hkv = h[1];
    c->B = 1 + irand(3);
    do {
        static const int lens[] = { 0, 1, 2, 5, 17, 64, 65, 100, 128, 129, 200, 255, 256, 300, 400 };
        c->Sq = lens[irand(15)]; c->Sk = lens[irand(15)];
        if (irand(8) == 0) { c->Sq = 1 + irand(4); c->Sk = 256 + irand(500); c->B = 1; }   /* decode: split-KV */
    } while ((long)c->B * c->H * c->Sq * c->Sk * (c->dqk + c->dv) > maxprod);
}

static void rand_opts(scase *c, int general)
{
    memset(&c->opt, 0, sizeof c->opt);
    c->opt.causal = (fa_causal)irand(3);
    if (irand(4) == 0) { c->opt.window = 1; c->opt.window_left = irand(3) ? irand(80) : -1; c->opt.window_right = irand(2) ? irand(30) : -1; }
    c->sinks = irand(5) == 0;
    c->out_f32 = irand(4) == 0;
    if (general) {   /* a feature the fast kernel does not serve */
        switch (irand(4)) {
        case 0: c->alibi = 1; break;
        case 1: c->opt.softcap = 5.0f + 10.0f * (float)irand(2); break;
        case 2: c->opt.dropout_p = 0.15f; c->opt.seed = rnext(); c->opt.offset = rnext() % 1000; break;
        default: c->bias = 1; break;
        }
    }
}

static void add_feature_arrays(scase *c)
{
    if (c->alibi) {
        arr *a = &c->a[add_arr(c, X_AL, "alibi", A_IN, FA_F32, c->H, 4)];
        for (int h = 0; h < c->H; h++) ((float *)a->init)[h] = (float)(0.05 + 0.5 * fabs(frand()));
    }
    if (c->sinks) fill(&c->a[add_arr(c, X_SK, "sinks", A_IN, FA_F32, c->H, 4)], FA_F32, 2.0);
    if (c->bias) fill(&c->a[add_arr(c, X_BI, "bias", A_IN, FA_BF16, (size_t)c->Sq * c->H * c->Sk, 2)], FA_BF16, 1.0);
}

static void varlen_lengths(scase *c, int maxlen)
{
    c->nseq = 1 + irand(8);
    c->cq[0] = c->ckk[0] = 0; c->maxq = c->maxk = 0;
    for (int b = 0; b < c->nseq; b++) {
        int lq = (b % 5 == 4 || b == c->nseq - 1) ? 0 : 1 + irand(maxlen);
        int lk = (b % 5 == 4 || b == c->nseq - 1) ? 0 : 1 + irand(maxlen + 40);
        c->cq[b + 1] = c->cq[b] + lq; c->ckk[b + 1] = c->ckk[b] + lk;
        if (lq > c->maxq) c->maxq = lq;
        if (lk > c->maxk) c->maxk = lk;
    }
    c->TQ = c->cq[c->nseq] + 5; c->TK = c->ckk[c->nseq] + 3;
    arr *a = &c->a[add_arr(c, X_CQ, "cu_seqlens_q", A_IN, FA_F32, c->nseq + 1, 4)];
    memcpy(a->init, c->cq, 4 * (c->nseq + 1));
    a = &c->a[add_arr(c, X_CK, "cu_seqlens_k", A_IN, FA_F32, c->nseq + 1, 4)];
    memcpy(a->init, c->ckk, 4 * (c->nseq + 1));
}

/* The reference forward's fp32 out and lse as inputs of a backward case. */
static void bwd_inputs(scase *c, int varlen)
{
    size_t nq = varlen ? (size_t)c->TQ * c->H : (size_t)c->B * c->Sq * c->H;
    arr *o = &c->a[add_arr(c, X_O, "out", A_IN, FA_F32, nq * c->dv, 4)];
    arr *l = &c->a[add_arr(c, X_L, "lse", A_IN, FA_F32, nq, 4)];
    for (size_t i = 0; i < o->n; i++) ((float *)o->init)[i] = 0;
    for (size_t i = 0; i < l->n; i++) ((float *)l->init)[i] = 0;
    fa_options op = c->opt;
    if (c->alibi) op.alibi_slopes = (const float *)A(c, X_AL)->init;
    if (c->sinks) op.sinks = (const float *)A(c, X_SK)->init;
    fa_tensor bt;
    if (c->bias) { bt = fa_tensor_contiguous(A(c, X_BI)->init, FA_BF16, c->B, c->Sq, c->H, c->Sk); bt.stride[0] = 0; op.bias = &bt; }
    fa_status st;
    if (varlen) {
        fa_tensor q = view(A(c, X_Q)->init, c->t, 1, c->TQ, c->H, c->dqk), k = view(A(c, X_K)->init, c->t, 1, c->TK, c->Hkv, c->dqk);
        fa_tensor v = view(A(c, X_V)->init, c->t, 1, c->TK, c->Hkv, c->dv), out = view(o->init, FA_F32, 1, c->TQ, c->H, c->dv);
        st = fa_forward_varlen(refctx, &out, (float *)l->init, &q, &k, &v, c->cq, c->ckk, c->nseq, c->maxq, c->maxk, &op);
    } else {
        fa_tensor q = view(A(c, X_Q)->init, c->t, c->B, c->Sq, c->H, c->dqk), k = view(A(c, X_K)->init, c->t, c->B, c->Sk, c->Hkv, c->dqk);
        fa_tensor v = view(A(c, X_V)->init, c->t, c->B, c->Sk, c->Hkv, c->dv), out = view(o->init, FA_F32, c->B, c->Sq, c->H, c->dv);
        st = fa_forward(refctx, &out, (float *)l->init, &q, &k, &v, &op);
    }
    if (st != FA_OK) failf("%s: reference forward: %s", c->name, fa_last_error(refctx));
}

static scase *new_case(int id)
{
    scase *c = calloc(1, sizeof *c);
    for (int i = 0; i < 32; i++) c->ai[i] = -1;
    /* weights: fwd 5, bwd 3, varlen 2, varlen-bwd 1, kvcache 3, combine 2 */
    static const int wk[] = { K_FWD, K_FWD, K_FWD, K_FWD, K_FWD, K_BWD, K_BWD, K_BWD, K_VARLEN, K_VARLEN,
                              K_VARLEN_BWD, K_KVCACHE, K_KVCACHE, K_KVCACHE, K_COMBINE, K_COMBINE };
    c->kind = wk[irand(16)];
    c->bitwise = 1;
    const char *extra = "";
    switch (c->kind) {
    case K_FWD:
    case K_BWD: {
        int bwd = c->kind == K_BWD;
        rand_shape(c, bwd ? 1 << 22 : 1 << 24);
        int general = irand(2);
        rand_opts(c, general);
        if (bwd) { c->det = irand(4) != 0; c->opt.deterministic = c->det; c->bitwise = c->det; }
        size_t nq = (size_t)c->B * c->Sq * c->H, nk = (size_t)c->B * c->Sk * c->Hkv;
        fill(&c->a[add_arr(c, X_Q, "q", A_IN, c->t, nq * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_K, "k", A_IN, c->t, nk * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_V, "v", A_IN, c->t, nk * c->dv, 2)], c->t, 1.0);
        add_feature_arrays(c);
        fa_dtype ot = c->out_f32 ? FA_F32 : c->t;
        if (!bwd) {
            add_arr(c, X_O, "out", A_OUT, ot, nq * c->dv, esz(ot));
            if (irand(4)) add_arr(c, X_L, "lse", A_LSE, FA_F32, nq, 4);
            extra = general ? " general" : "";
        } else {
            fill(&c->a[add_arr(c, X_DO, "dout", A_IN, c->t, nq * c->dv, 2)], c->t, 1.0);
            bwd_inputs(c, 0);
            add_arr(c, X_DQ, "dq", A_GRAD, ot, nq * c->dqk, esz(ot));
            add_arr(c, X_DK, "dk", A_GRAD, ot, nk * c->dqk, esz(ot));
            add_arr(c, X_DV, "dv", A_GRAD, ot, nk * c->dv, esz(ot));
            if (c->sinks) add_arr(c, X_DS, "dsinks", A_DSINKS, FA_F32, c->H, 4);
            extra = c->det ? " det" : " nondet";
        }
        snprintf(c->name, sizeof c->name, "#%d %s %s B%d Sq%d Sk%d H%d/%d d%d/%d c%d%s%s%s%s%s%s%s%s%s", id, kind_name[c->kind],
                 dtn(c->t), c->B, c->Sq, c->Sk, c->H, c->Hkv, c->dqk, c->dv, (int)c->opt.causal, extra,
                 c->opt.window ? " window" : "", c->alibi ? " alibi" : "", c->opt.softcap > 0 ? " softcap" : "",
                 c->opt.dropout_p > 0 ? " dropout" : "", c->bias ? " bias" : "", c->sinks ? " sinks" : "",
                 c->out_f32 ? " f32out" : "", c->ai[X_L] < 0 && !bwd ? " nolse" : "");
        break;
    }
    case K_VARLEN:
    case K_VARLEN_BWD: {
        int bwd = c->kind == K_VARLEN_BWD;
        const int *d = dims[irand(10)];
        c->dqk = d[0]; c->dv = d[1];
        c->t = irand(2) ? FA_BF16 : FA_F16;
        c->H = 4; c->Hkv = irand(2) ? 2 : 4;
        memset(&c->opt, 0, sizeof c->opt);
        c->opt.causal = (fa_causal)irand(3);
        if (bwd) { c->det = 1; c->opt.deterministic = 1; }
        c->out_f32 = irand(4) == 0;
        varlen_lengths(c, bwd ? 100 : 160);
        size_t nq = (size_t)c->TQ * c->H, nk = (size_t)c->TK * c->Hkv;
        fill(&c->a[add_arr(c, X_Q, "q", A_IN, c->t, nq * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_K, "k", A_IN, c->t, nk * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_V, "v", A_IN, c->t, nk * c->dv, 2)], c->t, 1.0);
        fa_dtype ot = c->out_f32 ? FA_F32 : c->t;
        if (!bwd) {
            add_arr(c, X_O, "out", A_OUT, ot, nq * c->dv, esz(ot));
            add_arr(c, X_L, "lse", A_LSE, FA_F32, nq, 4);
        } else {
            fill(&c->a[add_arr(c, X_DO, "dout", A_IN, c->t, nq * c->dv, 2)], c->t, 1.0);
            bwd_inputs(c, 1);
            add_arr(c, X_DQ, "dq", A_GRAD, ot, nq * c->dqk, esz(ot));
            add_arr(c, X_DK, "dk", A_GRAD, ot, nk * c->dqk, esz(ot));
            add_arr(c, X_DV, "dv", A_GRAD, ot, nk * c->dv, esz(ot));
        }
        snprintf(c->name, sizeof c->name, "#%d %s %s nseq%d total %d/%d H%d/%d d%d/%d c%d%s", id, kind_name[c->kind], dtn(c->t),
                 c->nseq, c->cq[c->nseq], c->ckk[c->nseq], c->H, c->Hkv, c->dqk, c->dv, (int)c->opt.causal,
                 c->out_f32 ? " f32out" : "");
        break;
    }
    case K_KVCACHE: {
        static const int pages[] = { 0, 0, 1, 7, 16, 64, 256 };
        c->page = pages[irand(7)];
        const int *d = dims[irand(3)];
        c->dqk = d[0]; c->dv = d[1];
        c->t = irand(2) ? FA_BF16 : FA_F16;
        c->B = 1 + irand(3);
        c->H = 4; c->Hkv = irand(2) ? 1 : 2;
        c->Sq = irand(2) ? 1 : 1 + irand(20);
        c->snew = irand(3) ? (irand(2) ? 1 : c->Sq) : 0;
        c->cap = 64 + irand(400);
        c->maxp = c->page ? (c->cap + c->page - 1) / c->page : 0;
        if (c->page) c->cap = c->maxp * c->page;
        c->npages = c->page ? c->B * c->maxp + 3 : 0;
        memset(&c->opt, 0, sizeof c->opt);
        c->opt.causal = irand(2) ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
        size_t ncache = c->page ? (size_t)c->npages * c->page : (size_t)c->B * c->cap;
        fill(&c->a[add_arr(c, X_Q, "q", A_IN, c->t, (size_t)c->B * c->Sq * c->H * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_K, "k_cache", A_CACHE, c->t, ncache * c->Hkv * c->dqk, 2)], c->t, 2.0);
        fill(&c->a[add_arr(c, X_V, "v_cache", A_CACHE, c->t, ncache * c->Hkv * c->dv, 2)], c->t, 1.0);
        if (c->snew) {
            fill(&c->a[add_arr(c, X_KN, "k_new", A_IN, c->t, (size_t)c->B * c->snew * c->Hkv * c->dqk, 2)], c->t, 2.0);
            fill(&c->a[add_arr(c, X_VN, "v_new", A_IN, c->t, (size_t)c->B * c->snew * c->Hkv * c->dv, 2)], c->t, 1.0);
        }
        arr *cs = &c->a[add_arr(c, X_CS, "cache_seqlens", A_IN, FA_F32, c->B, 4)];
        for (int b = 0; b < c->B; b++) ((int32_t *)cs->init)[b] = b == 1 ? 0 : irand(c->cap - c->snew + 1);
        if (c->page) {
            arr *bt = &c->a[add_arr(c, X_BT, "block_table", A_IN, FA_F32, (size_t)c->B * c->maxp, 4)];
            for (int i = 0; i < c->B * c->maxp; i++) ((int32_t *)bt->init)[i] = c->npages - 1 - i;   /* reversed */
        }
        fa_dtype ot = irand(4) == 0 ? FA_F32 : c->t;
        c->out_f32 = ot == FA_F32;
        add_arr(c, X_O, "out", A_OUT, ot, (size_t)c->B * c->Sq * c->H * c->dv, esz(ot));
        add_arr(c, X_L, "lse", A_LSE, FA_F32, (size_t)c->B * c->Sq * c->H, 4);
        snprintf(c->name, sizeof c->name, "#%d kvcache %s B%d Sq%d new%d page%d cap%d H%d/%d d%d c%d%s", id, dtn(c->t), c->B,
                 c->Sq, c->snew, c->page, c->cap, c->H, c->Hkv, c->dqk, (int)c->opt.causal, c->out_f32 ? " f32out" : "");
        break;
    }
    default: {   /* K_COMBINE */
        c->nparts = 1 + irand(4);
        c->B = 1 + irand(2); c->Sq = 1 + irand(150); c->H = 1 + irand(4);
        c->dv = 8 * (1 + irand(32));
        size_t rows = (size_t)c->B * c->Sq * c->H;
        for (int i = 0; i < c->nparts; i++) {
            fa_dtype pt = (fa_dtype)irand(3);
            fill(&c->a[add_arr(c, X_P0 + i, "out_part", A_IN, pt, rows * c->dv, esz(pt))], pt, 1.0);
        }
        for (int i = 0; i < c->nparts; i++) {
            arr *l = &c->a[add_arr(c, X_P0 + 4 + i, "lse_part", A_IN, FA_F32, rows, 4)];
            for (size_t r = 0; r < rows; r++)
                /* rows 3, 10, ...: every part empty (out 0, lse -inf); others: some parts empty */
                ((float *)l->init)[r] = r % 7 == 3 || (r + (size_t)i) % 5 == 0 ? -INFINITY : (float)(3.0 * frand());
        }
        fa_dtype ot = (fa_dtype)irand(3);
        c->t = ot;
        add_arr(c, X_O, "out", A_OUT, ot, rows * c->dv, esz(ot));
        if (irand(4)) add_arr(c, X_L, "lse", A_LSE, FA_F32, rows, 4);
        snprintf(c->name, sizeof c->name, "#%d combine %d parts B%d S%d H%d d%d out %s", id, c->nparts, c->B, c->Sq, c->H, c->dv, dtn(ot));
        break;
    }
    }
    make_oracle(c);
    return c;
}

/* ------------------------------------------------------------------------------------ */
/* Checking one run                                                                      */
/* ------------------------------------------------------------------------------------ */

static size_t out_bytes(const scase *c)   /* what is read back: every array but the inputs */
{
    size_t b = 0;
    for (int i = 0; i < c->na; i++) if (c->a[i].role != A_IN) b += c->a[i].n * c->a[i].es + GUARD;
    return b;
}

static int all_ff(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) if (p[i] != 0xff) return 0;
    return 1;
}

/* got: the arrays that are not inputs, each n*es bytes + GUARD, in order. */
static void check_run(scase *c, const unsigned char *got, const char *where)
{
    const unsigned char *g = got;
    for (int i = 0; i < c->na; i++) {
        const arr *a = &c->a[i];
        if (a->role == A_IN) continue;
        size_t nb = a->n * a->es;
        if (!all_ff(g + nb, GUARD)) failf("%s [%s]: %s: the guard band past the end was written", c->name, where, a->nm);
        if (a->role == A_CACHE) {
            if (memcmp(g, a->oracle_bytes, nb) != 0) failf("%s [%s]: %s after the append differs from the reference's", c->name, where, a->nm);
        } else {
            double mo = 0, err = 0;
            size_t untouched_bad = 0, worst = 0;
            for (size_t j = 0; j < a->n; j++)
                if ((!a->live || a->live[j]) && isfinite(a->oracle[j]) && fabs(a->oracle[j]) > mo) mo = fabs(a->oracle[j]);
            for (size_t j = 0; j < a->n; j++) {
                if (a->live && !a->live[j]) {
                    if (!all_ff(g + j * a->es, a->es)) untouched_bad++;
                    continue;
                }
                float x = a->role == A_LSE || a->role == A_DSINKS ? ((const float *)g)[j] : fa_load(g, a->t, (int64_t)j);
                float o = a->oracle[j];
                double e;   /* lse: relative to 1 + |lse|; NaN (an unwritten poisoned element) is infinite */
                if (a->role == A_LSE && isinf(o) && o < 0) e = isinf(x) && x < 0 ? 0 : INFINITY;
                else if (isnan(x)) e = INFINITY;
                else e = a->role == A_LSE ? fabs(x - o) / (1 + fabs(o)) : fabs(x - o);
                if (e > err) { err = e; worst = j; }
            }
            double tol = a->role == A_LSE ? 1e-3 : a->role == A_DSINKS ? 1e-3 * mo + 1e-4
                       : a->tol_mul * (2 * eps_of(c->t) * mo + 1e-5);
            if (!(err <= tol))
                failf("%s [%s]: %s %serror %.3g over the tolerance %.3g (worst at element %zu: %g, oracle %g; max|oracle| %.3g)",
                      c->name, where, a->nm, a->role == A_LSE ? "relative " : "", err, tol, worst,
                      a->role == A_LSE || a->role == A_DSINKS ? ((const float *)g)[worst] : fa_load(g, a->t, (int64_t)worst),
                      a->oracle[worst], mo);
            if (untouched_bad)
                failf("%s [%s]: %s: %zu elements that must stay untouched were written", c->name, where, a->nm, untouched_bad);
        }
        g += nb + GUARD;
    }
    size_t ob = out_bytes(c);
    if (!c->first) {
        c->first = malloc(ob + 1);
        memcpy(c->first, got, ob);
    } else if (c->bitwise && memcmp(c->first, got, ob) != 0) {
        size_t k = 0;
        while (k < ob && c->first[k] == got[k]) k++;
        const char *nm = "?";
        size_t off = 0;
        for (int i = 0; i < c->na; i++) {
            if (c->a[i].role == A_IN) continue;
            size_t nb = c->a[i].n * c->a[i].es + GUARD;
            if (k < off + nb) { nm = c->a[i].nm; break; }
            off += nb;
        }
        failf("%s [%s]: not bitwise equal to the case's first result (first difference in %s, byte %zu)", c->name, where, nm, k - off);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Failing calls                                                                         */
/* ------------------------------------------------------------------------------------ */

#define JUNK_BYTES (1 << 20)
static void *junk_d, *badout_d, *host_junk;   /* device inputs, device outputs (0xff), pageable host */
static long bad_calls;

static int bad_call(fa_context *ctx, int which, char *desc, size_t dlen)
{
    fa_status want = FA_ERR_INVALID_ARG, st;
    const char *fn = "fa_forward", *sub = NULL;
    void *J = junk_d, *O = badout_d;
    fa_tensor q = fa_tensor_contiguous(J, FA_BF16, 1, 16, 2, 64), k = q, v = q, out = fa_tensor_contiguous(O, FA_BF16, 1, 16, 2, 64);
    float *lse = (float *)((char *)O + 65536);
    fa_options so = {0};
    float *jf = (float *)J;
    switch (which) {
    case 0: snprintf(desc, dlen, "fa_forward with k's head dim 32, q's 64");
        k.shape[3] = 32; k.stride[2] = 32; k.stride[1] = 64; k.stride[0] = 1024;
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 1: snprintf(desc, dlen, "fa_forward with 3 query heads and 2 KV heads");
        q = fa_tensor_contiguous(J, FA_BF16, 1, 16, 3, 64); out = fa_tensor_contiguous(O, FA_BF16, 1, 16, 3, 64);
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 2: snprintf(desc, dlen, "fa_forward with q in host memory");
        q.data = host_junk; sub = "host memory";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 3: snprintf(desc, dlen, "fa_forward with out in host memory");
        out.data = host_junk; sub = "host memory";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 4: snprintf(desc, dlen, "fa_forward with head dim 60");
        q = k = v = fa_tensor_contiguous(J, FA_BF16, 1, 16, 2, 60); out = fa_tensor_contiguous(O, FA_BF16, 1, 16, 2, 60);
        want = FA_ERR_UNSUPPORTED; sub = "head dim";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 5: snprintf(desc, dlen, "fa_forward with head dim 264");
        q = k = v = fa_tensor_contiguous(J, FA_BF16, 1, 16, 2, 264); out = fa_tensor_contiguous(O, FA_BF16, 1, 16, 2, 264);
        want = FA_ERR_UNSUPPORTED; sub = "head dim";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 6: snprintf(desc, dlen, "fa_forward with fp32 q, k, v of head dim 300");   /* fp32 takes any d up to 256 */
        q = k = v = fa_tensor_contiguous(J, FA_F32, 1, 16, 2, 300); out = fa_tensor_contiguous(O, FA_F32, 1, 16, 2, 300);
        want = FA_ERR_UNSUPPORTED; sub = "head dim";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 7: snprintf(desc, dlen, "fa_forward with q 2 bytes off 16-byte alignment");
        q.data = (char *)J + 2; want = FA_ERR_UNSUPPORTED; sub = "aligned";
        st = fa_forward(ctx, &out, lse, &q, &k, &v, NULL); break;
    case 8: case 9: case 10: {
        fa_tensor dq = fa_tensor_contiguous((char *)O + 131072, FA_BF16, 1, 16, 2, 64), dk = dq, dv = dq;
        dk.data = (char *)O + 196608; dv.data = (char *)O + 262144;
        fn = "fa_backward";
        if (which == 8) { snprintf(desc, dlen, "fa_backward with lse NULL"); sub = "lse";
            st = fa_backward(ctx, &dq, &dk, &dv, NULL, &q, &q, &k, &v, &q, NULL, NULL); }
        else if (which == 9) { snprintf(desc, dlen, "fa_backward with dsinks but no sinks"); sub = "dsinks";
            st = fa_backward(ctx, &dq, &dk, &dv, lse, &q, &q, &k, &v, &q, jf, NULL); }
        else { snprintf(desc, dlen, "fa_backward with dq in host memory"); sub = "host memory";
            dq.data = host_junk;
            st = fa_backward(ctx, &dq, &dk, &dv, NULL, &q, &q, &k, &v, &q, jf, NULL); }
        break;
    }
    case 11: case 12: {
        fn = "fa_forward_varlen";
        int32_t *cu = (int32_t *)((char *)J + 8192);   /* junk contents: the call must fail before reading them */
        if (which == 11) { snprintf(desc, dlen, "fa_forward_varlen with cu_seqlens_q in host memory"); sub = "host memory";
            st = fa_forward_varlen(ctx, &out, lse, &q, &k, &v, (const int32_t *)host_junk, cu, 1, 16, 16, NULL); }
        else { snprintf(desc, dlen, "fa_forward_varlen with batch -1"); sub = "batch";
            st = fa_forward_varlen(ctx, &out, lse, &q, &k, &v, cu, cu, -1, 16, 16, NULL); }
        break;
    }
    case 13: case 14: case 15: {
        fn = "fa_forward_kvcache";
        fa_tensor kc = fa_tensor_contiguous((char *)O + 327680, FA_BF16, 1, 64, 2, 64), vc = kc;
        vc.data = (char *)O + 327680 + 16384;
        fa_tensor kn = fa_tensor_contiguous(J, FA_BF16, 1, 2, 2, 64), qq = fa_tensor_contiguous(J, FA_BF16, 1, 2, 2, 64);
        fa_tensor oo = fa_tensor_contiguous(O, FA_BF16, 1, 2, 2, 64);
        int32_t *cs = (int32_t *)((char *)J + 8192);
        if (which == 13) { snprintf(desc, dlen, "fa_forward_kvcache with k_new but no v_new"); sub = "v_new";
            st = fa_forward_kvcache(ctx, &oo, lse, &qq, &kc, &vc, &kn, NULL, cs, NULL, 0, NULL); }
        else if (which == 14) { snprintf(desc, dlen, "fa_forward_kvcache (append) with cache_seqlens in host memory"); sub = "host memory";
            int32_t *hcs = (int32_t *)host_junk;
            st = fa_forward_kvcache(ctx, &oo, lse, &qq, &kc, &vc, &kn, &kn, hcs, NULL, 0, NULL); }
        else { snprintf(desc, dlen, "fa_forward_kvcache (append) with head dim 60"); want = FA_ERR_UNSUPPORTED; sub = "head dim";
            kc = fa_tensor_contiguous((char *)O + 327680, FA_BF16, 1, 64, 2, 60); vc = kc; vc.data = (char *)O + 327680 + 16384;
            kn = qq = fa_tensor_contiguous(J, FA_BF16, 1, 2, 2, 60); oo = fa_tensor_contiguous(O, FA_BF16, 1, 2, 2, 60);
            st = fa_forward_kvcache(ctx, &oo, lse, &qq, &kc, &vc, &kn, &kn, cs, NULL, 0, NULL); }
        break;
    }
    case 16: case 17: {
        fn = "fa_combine";
        fa_tensor parts[33];
        const float *lp[33];
        for (int i = 0; i < 33; i++) { parts[i] = fa_tensor_contiguous(J, FA_F32, 1, 16, 2, 64); lp[i] = jf; }
        fa_tensor oo = fa_tensor_contiguous(O, FA_F32, 1, 16, 2, 64);
        if (which == 16) { snprintf(desc, dlen, "fa_combine with n = 0"); sub = "n=0";
            st = fa_combine(ctx, &oo, lse, parts, lp, 0); }
        else { snprintf(desc, dlen, "fa_combine with 33 parts"); want = FA_ERR_UNSUPPORTED; sub = "33";
            st = fa_combine(ctx, &oo, lse, parts, lp, 33); }
        break;
    }
    default: {
        snprintf(desc, dlen, "fa_backward with head dim 264"); fn = "fa_backward"; want = FA_ERR_UNSUPPORTED; sub = "head dim";
        q = k = v = fa_tensor_contiguous(J, FA_BF16, 1, 16, 2, 264);
        fa_tensor dq = fa_tensor_contiguous((char *)O + 131072, FA_BF16, 1, 16, 2, 264), dk = dq, dv = dq;
        dk.data = (char *)O + 196608; dv.data = (char *)O + 262144;
        so.deterministic = 1;
        st = fa_backward(ctx, &dq, &dk, &dv, NULL, &q, &q, &k, &v, &q, jf, &so);
        break;
    }
    }
    bad_calls++;
    const char *msg = fa_last_error(ctx);
    size_t fl = strlen(fn);
    cudaError_t ce = cudaGetLastError();
    int ok = 1;
    if (st != want) { failf("%s: status %s, want %s (%s)", desc, fa_status_string(st), fa_status_string(want), msg); ok = 0; }
    else if (strncmp(msg, fn, fl) != 0 || msg[fl] != ':' || strchr(msg, '\n') || (sub && !strstr(msg, sub))) {
        failf("%s: message \"%s\" (want one line starting \"%s:\"%s%s%s)", desc, msg, fn, sub ? " mentioning \"" : "", sub ? sub : "", sub ? "\"" : "");
        ok = 0;
    }
    if (ce != cudaSuccess) { failf("%s: left the CUDA error %s behind", desc, cudaGetErrorName(ce)); ok = 0; }
    return ok;
}
#define NBAD 19

/* ------------------------------------------------------------------------------------ */
/* The loop                                                                              */
/* ------------------------------------------------------------------------------------ */

#define NCASES 48
#define NCTX 3
#define NSTREAM 4     /* streams[0] = the legacy default stream (NULL) */
#define NSLOT 4

typedef struct {
    scase *c;
    int ctx, stream, ok;
    char *dev;
    unsigned char *stage;
    size_t stage_cap;
} slot;

static size_t dev_layout(const scase *c, size_t *off)
{
    size_t o = 0;
    for (int i = 0; i < c->na; i++) {
        off[i] = o;
        o += (c->a[i].n * c->a[i].es + GUARD + 255) / 256 * 256;
    }
    return o;
}

static int stress(double seconds, uint64_t seed, long max_rounds)
{
    rng = seed;
    if (max_rounds > 0) printf("stress_cuda: seed %llu, %.0f s, %ld rounds at most\n", (unsigned long long)seed, seconds, max_rounds);
    else printf("stress_cuda: seed %llu, %.0f s\n", (unsigned long long)seed, seconds);
    fa_context *ctx[NCTX];
    cudaStream_t streams[NSTREAM];
    long created = 0;
    for (int i = 0; i < NCTX; i++) {
        if (fa_context_create(&ctx[i], FA_BACKEND_CUDA) != FA_OK) { printf("no cuda context: %s\n", fa_last_error(NULL)); return 77; }
        created++;
    }
    streams[0] = NULL;
    for (int i = 1; i < NSTREAM; i++) CK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    printf("%s", fa_context_describe(ctx[0]));
    CK(cudaMalloc(&junk_d, JUNK_BYTES)); CK(cudaMalloc(&badout_d, JUNK_BYTES));
    CK(cudaMemset(badout_d, 0xff, JUNK_BYTES));
    {
        unsigned short *j = malloc(JUNK_BYTES);
        for (size_t i = 0; i < JUNK_BYTES / 2; i++) j[i] = fa_f32_to_bf16((float)frand());
        CK(cudaMemcpy(junk_d, j, JUNK_BYTES, cudaMemcpyHostToDevice));
        free(j);
    }
    host_junk = malloc(JUNK_BYTES);
    memset(host_junk, 0x5a, JUNK_BYTES);
    unsigned char *chk = malloc(JUNK_BYTES);

    scase *pool[NCASES] = { 0 };
    slot sl[NSLOT];
    memset(sl, 0, sizeof sl);
    long rounds = 0, runs = 0, calls = 0, per_kind[K_NKINDS] = { 0 }, made = 0, bad_by[NBAD] = { 0 };
    double t0 = now(), next = t0 + 10;
    while (now() - t0 < seconds && (max_rounds <= 0 || rounds < max_rounds)) {
        int ns = 1 + irand(NSLOT), any_bad = 0;
        for (int s = 0; s < ns; s++) {
            slot *x = &sl[s];
            int id = irand(NCASES);
            if (!pool[id]) { pool[id] = new_case(id); made++; }
            x->c = pool[id];
            x->ctx = irand(NCTX); x->stream = irand(NSTREAM); x->ok = 1;
            fa_context *cx = ctx[x->ctx];
            cudaStream_t strm = streams[x->stream];
            if (fa_context_set_stream(cx, strm) != FA_OK) failf("fa_context_set_stream: %s", fa_last_error(cx));
            if (irand(5) == 0) {   /* a failing call first, on the same context */
                char desc[160];
                int w = irand(NBAD);
                bad_call(cx, w, desc, sizeof desc);
                bad_by[w]++; any_bad = 1; calls++;
            }
            scase *c = x->c;
            size_t off[MAXA], total = dev_layout(c, off), ob = out_bytes(c);
            if (x->stage_cap < ob) {
                if (x->stage) cudaFreeHost(x->stage);
                x->stage_cap = ob + (1 << 16);
                x->stage = hmalloc(x->stage_cap);
            }
            CK(cudaMallocAsync((void **)&x->dev, total + 256, strm));
            CK(cudaMemsetAsync(x->dev, 0xff, total + 256, strm));
            void *p[MAXA];
            for (int i = 0; i < c->na; i++) {
                p[i] = x->dev + off[i];
                if (c->a[i].init && c->a[i].n)
                    CK(cudaMemcpyAsync(p[i], c->a[i].init, c->a[i].n * c->a[i].es, cudaMemcpyHostToDevice, strm));
            }
            fa_status st = call(c, cx, p, 0);
            calls++; runs++; c->runs++; per_kind[c->kind]++;
            if (st != FA_OK) { failf("%s [ctx %d stream %d]: status %s: %s", c->name, x->ctx, x->stream, fa_status_string(st), fa_last_error(cx)); x->ok = 0; }
            unsigned char *g = x->stage;
            for (int i = 0; i < c->na; i++) {
                if (c->a[i].role == A_IN) continue;
                size_t nb = c->a[i].n * c->a[i].es + GUARD;
                CK(cudaMemcpyAsync(g, p[i], nb, cudaMemcpyDeviceToHost, strm));
                g += nb;
            }
            CK(cudaFreeAsync(x->dev, strm));
        }
        CK(cudaDeviceSynchronize());
        for (int s = 0; s < ns; s++) {
            char where[64];
            snprintf(where, sizeof where, "round %ld ctx %d stream %d", rounds, sl[s].ctx, sl[s].stream);
            if (sl[s].ok) check_run(sl[s].c, sl[s].stage, where);
        }
        if (any_bad) {
            CK(cudaMemcpy(chk, badout_d, JUNK_BYTES, cudaMemcpyDeviceToHost));
            if (!all_ff(chk, JUNK_BYTES)) { failf("round %ld: a failing call wrote into its output memory", rounds); CK(cudaMemset(badout_d, 0xff, JUNK_BYTES)); }
            for (size_t i = 0; i < JUNK_BYTES; i++)
                if (((unsigned char *)host_junk)[i] != 0x5a) { failf("round %ld: a failing call wrote into host memory", rounds); memset(host_junk, 0x5a, JUNK_BYTES); break; }
        }
        if (irand(4) == 0) {   /* churn: destroy a context and create a new one */
            int i = irand(NCTX);
            fa_context_destroy(ctx[i]);
            if (fa_context_create(&ctx[i], FA_BACKEND_CUDA) != FA_OK) { failf("fa_context_create: %s", fa_last_error(NULL)); break; }
            created++;
        }
        rounds++;
        if (now() >= next) {
            printf("[%4.0f s] rounds %ld, cases run %ld (%ld of %d made), calls %ld (%ld failing by design), contexts created %ld, failures %ld\n",
                   now() - t0, rounds, runs, made, NCASES, calls, bad_calls, created, fails);
            fflush(stdout);
            next += 10;
        }
    }
    double el = now() - t0;
    for (int i = 0; i < NCTX; i++) fa_context_destroy(ctx[i]);
    CK(cudaDeviceSynchronize());
    long repeated = 0;
    for (int i = 0; i < NCASES; i++) if (pool[i] && pool[i]->runs > 1 && pool[i]->bitwise) repeated++;
    printf("runs by kind:");
    for (int k = 0; k < K_NKINDS; k++) printf(" %s %ld", kind_name[k], per_kind[k]);
    printf("\nfailing calls by kind (of %d):", NBAD);
    for (int w = 0; w < NBAD; w++) printf(" %ld", bad_by[w]);
    printf("\nSUMMARY stress_cuda: seed %llu, %.1f s, %ld rounds, %ld cases run (%ld distinct, %ld compared bitwise "
           "across runs), %ld calls (%ld failing by design), %ld contexts created, %d streams, failures %ld: %s\n",
           (unsigned long long)seed, el, rounds, runs, made, repeated, calls, bad_calls, created, NSTREAM, fails,
           fails ? "FAIL" : "PASS");
    if (rounds == 0) { printf("FAIL no round ran\n"); return 1; }
    return fails ? 1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* Big mode: > 2^31-element tensors on the device                                        */
/* ------------------------------------------------------------------------------------ */

static double bf(uint16_t x) { return (double)fa_bf16_to_f32(x); }

/* max |got - want|, max |want| over n floats; NaN in got counts as infinite */
static double maxerr(const float *got, const float *want, size_t n, double *mag)
{
    double e = 0;
    *mag = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > *mag) *mag = fabs(want[i]);
    }
    return e;
}
static double lse_err(const float *got, const float *want, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = isinf(want[i]) ? (got[i] == want[i] ? 0 : INFINITY) : fabs((double)got[i] - want[i]) / (1 + fabs(want[i]));
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
    }
    return e;
}
static void big_result(const char *what, int ok, double secs, const char *fmt, ...)
{
    va_list ap;
    printf("%s %-58s %6.2f s  ", ok ? "PASS" : "FAIL", what, secs);
    va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!ok) fails++;
}

/* fill n bf16 elements at dev with blk[x % P] (P elements, uploaded once, doubled on device) */
static void fill_repeat(uint16_t *dev, size_t n, const uint16_t *blk, size_t P)
{
    CK(cudaMemcpy(dev, blk, (P < n ? P : n) * 2, cudaMemcpyHostToDevice));
    for (size_t filled = P; filled < n; ) {
        size_t c = filled < n - filled ? filled : n - filled;
        CK(cudaMemcpy(dev + filled, dev, c * 2, cudaMemcpyDeviceToDevice));
        filled += c;
    }
}

static int big(void)
{
    fa_context *cu;
    if (fa_context_create(&cu, FA_BACKEND_CUDA) != FA_OK) { printf("no cuda context: %s\n", fa_last_error(NULL)); return 77; }
    printf("%s", fa_context_describe(cu));
    double T0 = now(), t;
    rng = 777;
    enum { D = 64, SQ = 3, HQ = 2, TAIL = 512, WL = 300, P = 1048573 };
    const int64_t SK = ((int64_t)1 << (FA_BIG_LOG2 - 6)) + 4096, N = SK - TAIL;
    const size_t n = (size_t)SK * D;
    const double eps = 1.0 / 256;
    printf("big: k, v [1, %lld, 1, %d] bf16: %zu elements each (2^%d + %zu), %.2f GiB each\n", (long long)SK, D, n, FA_BIG_LOG2,
           n - ((size_t)1 << FA_BIG_LOG2), (double)n * 2 / (1 << 30));
    uint16_t *k_d, *v_d, *q_d;
    float *o_d, *l_d;
    CK(cudaMalloc((void **)&k_d, n * 2)); CK(cudaMalloc((void **)&v_d, n * 2));
    CK(cudaMalloc((void **)&q_d, SQ * HQ * D * 2)); CK(cudaMalloc((void **)&o_d, SQ * HQ * D * 4)); CK(cudaMalloc((void **)&l_d, HQ * SQ * 4));
    uint16_t *ktail = malloc((size_t)TAIL * D * 2), *blk = malloc((size_t)P * 2), q[SQ * HQ * D];
    for (int x = 0; x < TAIL * D; x++) ktail[x] = fa_f32_to_bf16((float)(2.0 * frand()));
    for (int x = 0; x < P; x++) blk[x] = fa_f32_to_bf16((float)frand());
    for (int x = 0; x < SQ * HQ * D; x++) q[x] = fa_f32_to_bf16((float)(1.5 * frand()));
    CK(cudaMemset(k_d, 0, n * 2));
    CK(cudaMemcpy(k_d + (size_t)N * D, ktail, (size_t)TAIL * D * 2, cudaMemcpyHostToDevice));
    fill_repeat(v_d, n, blk, P);
    CK(cudaMemcpy(q_d, q, sizeof q, cudaMemcpyHostToDevice));
#define KV(row, c) ((row) >= N ? ktail[((row) - N) * D + (c)] : (uint16_t)0)
#define VV(row, c) blk[((size_t)(row) * D + (size_t)(c)) % P]
    /* mean of v over the zero-key rows */
    double vmean[D] = { 0 };
    {
        double *tb = malloc(sizeof(double) * P);
        for (int x = 0; x < P; x++) tb[x] = bf(blk[x]);
        size_t r = 0;
        for (int64_t j = 0; j < N; j++)
            for (int c = 0; c < D; c++) { vmean[c] += tb[r]; if (++r == P) r = 0; }
        for (int c = 0; c < D; c++) vmean[c] /= (double)N;
        free(tb);
    }
    printf("big: set up in %.1f s\n", now() - T0);
    fa_tensor tq = fa_tensor_contiguous(q_d, FA_BF16, 1, SQ, HQ, D), hq = fa_tensor_contiguous(q, FA_BF16, 1, SQ, HQ, D);
    fa_tensor tk = fa_tensor_contiguous(k_d, FA_BF16, 1, SK, 1, D), tv = fa_tensor_contiguous(v_d, FA_BF16, 1, SK, 1, D);
    fa_tensor to = fa_tensor_contiguous(o_d, FA_F32, 1, SQ, HQ, D);
    float out[SQ * HQ * D], lse[HQ * SQ], ro[SQ * HQ * D], rl[HQ * SQ];
    fa_tensor ho = fa_tensor_contiguous(ro, FA_F32, 1, SQ, HQ, D);
    double mag, err, lerr;
    fa_status st, rs;

    /* 1. window: keys past element 2^31 only */
    {
        fa_options op = {0};
        op.causal = FA_CAUSAL_BOTTOM_RIGHT; op.window = 1; op.window_left = WL; op.window_right = -1;
        t = now();
        CK(cudaMemset(o_d, 0xff, sizeof out));
        st = fa_forward(cu, &to, l_d, &tq, &tk, &tv, &op);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(out, o_d, sizeof out, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(lse, l_d, sizeof lse, cudaMemcpyDeviceToHost));
        const int64_t nw = SQ + WL, j0 = SK - nw;
        uint16_t *kw = malloc(nw * D * 2), *vw = malloc(nw * D * 2);
        for (int64_t j = 0; j < nw; j++) for (int c = 0; c < D; c++) { kw[j * D + c] = KV(j0 + j, c); vw[j * D + c] = VV(j0 + j, c); }
        fa_tensor hk = fa_tensor_contiguous(kw, FA_BF16, 1, nw, 1, D), hv = fa_tensor_contiguous(vw, FA_BF16, 1, nw, 1, D);
        rs = fa_forward(refctx, &ho, rl, &hq, &hk, &hv, &op);
        free(kw); free(vw);
        err = maxerr(out, ro, SQ * HQ * D, &mag); lerr = lse_err(lse, rl, HQ * SQ);
        big_result("k/v side: causal window 300, keys past element 2^31", st == FA_OK && rs == FA_OK && err <= 2 * eps * mag + 1e-5 && lerr <= 1e-3,
                   now() - t, "max|out-ref| %.2e (tol %.2e), lse rel %.2e%s%s", err, 2 * eps * mag + 1e-5, lerr,
                   st == FA_OK ? "" : " cuda: ", st == FA_OK ? "" : fa_last_error(cu));
    }
    /* 2. full: every key; the zero keys compressed into one key with logit log N */
    {
        float *qf = malloc(sizeof(float) * SQ * HQ * D);
        const int64_t nf = 1 + TAIL;
        float *kf = calloc((size_t)nf * D, 4), *vf = malloc((size_t)nf * D * 4), *bias = calloc((size_t)SQ * HQ * nf, 4);
        for (int x = 0; x < SQ * HQ * D; x++) qf[x] = (float)bf(q[x]);
        for (int c = 0; c < D; c++) vf[c] = (float)vmean[c];
        for (int64_t j = 1; j < nf; j++)
            for (int c = 0; c < D; c++) { kf[j * D + c] = (float)bf(KV(N + j - 1, c)); vf[j * D + c] = (float)bf(VV(N + j - 1, c)); }
        for (int i = 0; i < SQ; i++) for (int h = 0; h < HQ; h++) bias[(i * HQ + h) * nf] = (float)log((double)N);
        double dmax = 0;
        for (int i = 0; i < SQ * HQ; i++)
            for (int64_t j = 1; j < nf; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++) dot += (double)qf[i * D + c] * kf[j * D + c];
                if (dot > dmax) dmax = dot;
            }
        fa_options op = {0};
        op.scale = (float)((log((double)N) + 2.0) / dmax);   /* the tail and the zero keys both carry weight */
        t = now();
        CK(cudaMemset(o_d, 0xff, sizeof out));
        st = fa_forward(cu, &to, l_d, &tq, &tk, &tv, &op);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(out, o_d, sizeof out, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(lse, l_d, sizeof lse, cudaMemcpyDeviceToHost));
        fa_tensor fq = fa_tensor_contiguous(qf, FA_F32, 1, SQ, HQ, D), fk = fa_tensor_contiguous(kf, FA_F32, 1, nf, 1, D);
        fa_tensor fv = fa_tensor_contiguous(vf, FA_F32, 1, nf, 1, D), fb = fa_tensor_contiguous(bias, FA_F32, 1, SQ, HQ, nf);
        fa_options ro_op = op;
        ro_op.bias = &fb;
        rs = fa_forward(refctx, &ho, rl, &fq, &fk, &fv, &ro_op);
        err = maxerr(out, ro, SQ * HQ * D, &mag); lerr = lse_err(lse, rl, HQ * SQ);
        /* fp32 sums over 2^25 keys: a few bf16 ulps of max|out| (test_big's bound); a wrapped
           offset moves the result by O(max|out|) */
        big_result("k/v side: no mask, all 2^25 + 4096 keys", st == FA_OK && rs == FA_OK && err <= 4 * eps * mag && lerr <= 1e-3,
                   now() - t, "max|out-ref| %.2e (max|ref| %.2f, tol %.2e), lse rel %.2e", err, mag, 4 * eps * mag, lerr);
        free(qf); free(kf); free(vf); free(bias);
    }
    /* 3. paged cache over the same memory: the last two pages, a 2-row append past 2^31 */
    {
        const int64_t PS = 256, NP = SK / PS;
        fa_tensor pk = fa_tensor_contiguous(k_d, FA_BF16, NP, PS, 1, D), pv = fa_tensor_contiguous(v_d, FA_BF16, NP, PS, 1, D);
        uint16_t kn[2 * D], vn[2 * D];
        for (int x = 0; x < 2 * D; x++) { kn[x] = fa_f32_to_bf16((float)frand()); vn[x] = fa_f32_to_bf16((float)frand()); }
        int32_t hcs[1] = { 300 }, hbt[2] = { (int32_t)(NP - 2), (int32_t)(NP - 1) }, *dcs, *dbt;
        uint16_t *kn_d, *vn_d;
        CK(cudaMalloc((void **)&dcs, 4)); CK(cudaMalloc((void **)&dbt, 8));
        CK(cudaMalloc((void **)&kn_d, sizeof kn)); CK(cudaMalloc((void **)&vn_d, sizeof vn));
        CK(cudaMemcpy(dcs, hcs, 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dbt, hbt, 8, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(kn_d, kn, sizeof kn, cudaMemcpyHostToDevice)); CK(cudaMemcpy(vn_d, vn, sizeof vn, cudaMemcpyHostToDevice));
        fa_tensor tkn = fa_tensor_contiguous(kn_d, FA_BF16, 1, 2, 1, D), tvn = fa_tensor_contiguous(vn_d, FA_BF16, 1, 2, 1, D);
        fa_options op = {0};
        op.causal = FA_CAUSAL_BOTTOM_RIGHT;
        t = now();
        CK(cudaMemset(o_d, 0xff, sizeof out));
        st = fa_forward_kvcache(cu, &to, l_d, &tq, &pk, &pv, &tkn, &tvn, dcs, dbt, 2, &op);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(out, o_d, sizeof out, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(lse, l_d, sizeof lse, cudaMemcpyDeviceToHost));
        uint16_t back[4 * D];
        const size_t row0 = (size_t)((NP - 1) * PS + 44);   /* cache positions 300, 301 */
        CK(cudaMemcpy(back, k_d + row0 * D, 2 * D * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(back + 2 * D, v_d + row0 * D, 2 * D * 2, cudaMemcpyDeviceToHost));
        int landed = !memcmp(back, kn, sizeof kn) && !memcmp(back + 2 * D, vn, sizeof vn);
        const int64_t nk = 302, first = (NP - 2) * PS;   /* the two pages are consecutive rows */
        uint16_t *kc = malloc(nk * D * 2), *vc = malloc(nk * D * 2);
        for (int64_t j = 0; j < nk; j++)
            for (int c = 0; c < D; c++) {
                kc[j * D + c] = j < 300 ? KV(first + j, c) : kn[(j - 300) * D + c];
                vc[j * D + c] = j < 300 ? VV(first + j, c) : vn[(j - 300) * D + c];
            }
        fa_tensor hk = fa_tensor_contiguous(kc, FA_BF16, 1, nk, 1, D), hv = fa_tensor_contiguous(vc, FA_BF16, 1, nk, 1, D);
        rs = fa_forward(refctx, &ho, rl, &hq, &hk, &hv, &op);
        err = maxerr(out, ro, SQ * HQ * D, &mag); lerr = lse_err(lse, rl, HQ * SQ);
        big_result("k/v side: paged cache, last 2 pages, append past 2^31", st == FA_OK && rs == FA_OK && landed &&
                   err <= 2 * eps * mag + 1e-5 && lerr <= 1e-3, now() - t, "appended rows %s, max|out-ref| %.2e (tol %.2e), lse rel %.2e",
                   landed ? "in place" : "NOT in place", err, 2 * eps * mag + 1e-5, lerr);
        free(kc); free(vc);
        cudaFree(dcs); cudaFree(dbt); cudaFree(kn_d); cudaFree(vn_d);
    }
    CK(cudaFree(k_d)); CK(cudaFree(v_d));
#undef KV
#undef VV

    /* 4, 5. q side: q, out, dout, dq of 2^31 + 65536 elements */
    {
        enum { HB = 16, HKB = 4, SKB = 64, NR = 5, NZ = 4, P2 = 1048571 };
        const int64_t SQB = ((int64_t)1 << (FA_BIG_LOG2 - 10)) + 64;
        const size_t nq = (size_t)SQB * HB * D, row_el = (size_t)HB * D;
        const int64_t rows[NR] = { 0, ((int64_t)1 << (FA_BIG_LOG2 - 10)) - 1, (int64_t)1 << (FA_BIG_LOG2 - 10), SQB - 2, SQB - 1 };
        const int64_t zrows[NZ] = { 1, (int64_t)1 << (FA_BIG_LOG2 - 11), ((int64_t)1 << (FA_BIG_LOG2 - 10)) + 1, SQB - 3 };
        printf("big: q, out, dout, dq [1, %lld, %d, %d] bf16: %zu elements each (2^%d + %zu)\n", (long long)SQB, HB, D, nq, FA_BIG_LOG2,
               nq - ((size_t)1 << FA_BIG_LOG2));
        uint16_t *qb_d, *ob_d, *do_d, *dq_d, *kb_d, *vb_d;
        float *lb_d, *dk_d, *dv_d;
        CK(cudaMalloc((void **)&qb_d, nq * 2)); CK(cudaMalloc((void **)&ob_d, nq * 2));
        CK(cudaMalloc((void **)&lb_d, (size_t)HB * SQB * 4));
        CK(cudaMalloc((void **)&kb_d, SKB * HKB * D * 2)); CK(cudaMalloc((void **)&vb_d, SKB * HKB * D * 2));
        uint16_t *blk2 = malloc((size_t)P2 * 2), kb[SKB * HKB * D], vb[SKB * HKB * D];
        for (int x = 0; x < P2; x++) blk2[x] = fa_f32_to_bf16((float)(1.5 * frand()));
        for (int x = 0; x < SKB * HKB * D; x++) { kb[x] = fa_f32_to_bf16((float)(2 * frand())); vb[x] = fa_f32_to_bf16((float)frand()); }
        fill_repeat(qb_d, nq, blk2, P2);
        CK(cudaMemcpy(kb_d, kb, sizeof kb, cudaMemcpyHostToDevice)); CK(cudaMemcpy(vb_d, vb, sizeof vb, cudaMemcpyHostToDevice));
        CK(cudaMemset(ob_d, 0xff, nq * 2)); CK(cudaMemset(lb_d, 0xff, (size_t)HB * SQB * 4));
        uint16_t *qr = malloc(NR * row_el * 2), *orr = malloc(NR * row_el * 2), *dor = malloc(NR * row_el * 2);
        for (int i = 0; i < NR; i++)
            for (size_t e = 0; e < row_el; e++) qr[i * row_el + e] = blk2[((size_t)rows[i] * row_el + e) % P2];
        fa_tensor bq = fa_tensor_contiguous(qb_d, FA_BF16, 1, SQB, HB, D), bo = fa_tensor_contiguous(ob_d, FA_BF16, 1, SQB, HB, D);
        fa_tensor bk = fa_tensor_contiguous(kb_d, FA_BF16, 1, SKB, HKB, D), bv = fa_tensor_contiguous(vb_d, FA_BF16, 1, SKB, HKB, D);
        t = now();
        st = fa_forward(cu, &bo, lb_d, &bq, &bk, &bv, NULL);
        CK(cudaDeviceSynchronize());
        double tf = now() - t;
        float got[NR * HB * D], lgot[HB * NR], ref[NR * HB * D], lref[HB * NR];
        for (int i = 0; i < NR; i++) {
            CK(cudaMemcpy(orr + i * row_el, ob_d + (size_t)rows[i] * row_el, row_el * 2, cudaMemcpyDeviceToHost));
            for (int h = 0; h < HB; h++) CK(cudaMemcpy(&lgot[h * NR + i], lb_d + (size_t)h * SQB + rows[i], 4, cudaMemcpyDeviceToHost));
        }
        for (size_t e = 0; e < NR * row_el; e++) got[e] = fa_bf16_to_f32(orr[e]);
        fa_tensor rq = fa_tensor_contiguous(qr, FA_BF16, 1, NR, HB, D), rk = fa_tensor_contiguous(kb, FA_BF16, 1, SKB, HKB, D);
        fa_tensor rv = fa_tensor_contiguous(vb, FA_BF16, 1, SKB, HKB, D), rof = fa_tensor_contiguous(ref, FA_F32, 1, NR, HB, D);
        rs = fa_forward(refctx, &rof, lref, &rq, &rk, &rv, NULL);
        err = maxerr(got, ref, NR * row_el, &mag); lerr = lse_err(lgot, lref, HB * NR);
        big_result("q side: forward, rows 0, 2^21-1, 2^21 (element 2^31), last two", st == FA_OK && rs == FA_OK &&
                   err <= 2 * eps * mag + 1e-5 && lerr <= 1e-3, tf, "max|out-ref| %.2e (tol %.2e), lse rel %.2e%s%s", err,
                   2 * eps * mag + 1e-5, lerr, st == FA_OK ? "" : " cuda: ", st == FA_OK ? "" : fa_last_error(cu));

        /* 5. backward with dout zero except on the checked rows */
        CK(cudaMalloc((void **)&do_d, nq * 2)); CK(cudaMalloc((void **)&dq_d, nq * 2));
        CK(cudaMalloc((void **)&dk_d, SKB * HKB * D * 4)); CK(cudaMalloc((void **)&dv_d, SKB * HKB * D * 4));
        CK(cudaMemset(do_d, 0, nq * 2)); CK(cudaMemset(dq_d, 0xff, nq * 2));
        CK(cudaMemset(dk_d, 0xff, SKB * HKB * D * 4)); CK(cudaMemset(dv_d, 0xff, SKB * HKB * D * 4));
        for (size_t e = 0; e < NR * row_el; e++) dor[e] = fa_f32_to_bf16((float)frand());
        for (int i = 0; i < NR; i++) CK(cudaMemcpy(do_d + (size_t)rows[i] * row_el, dor + i * row_el, row_el * 2, cudaMemcpyHostToDevice));
        fa_tensor bdo = fa_tensor_contiguous(do_d, FA_BF16, 1, SQB, HB, D), bdq = fa_tensor_contiguous(dq_d, FA_BF16, 1, SQB, HB, D);
        fa_tensor bdk = fa_tensor_contiguous(dk_d, FA_F32, 1, SKB, HKB, D), bdv = fa_tensor_contiguous(dv_d, FA_F32, 1, SKB, HKB, D);
        t = now();
        st = fa_backward(cu, &bdq, &bdk, &bdv, NULL, &bdo, &bq, &bk, &bv, &bo, lb_d, NULL);
        CK(cudaDeviceSynchronize());
        double tb = now() - t;
        float gdq[NR * HB * D], gdk[SKB * HKB * D], gdv[SKB * HKB * D], rdq[NR * HB * D], rdk[SKB * HKB * D], rdv[SKB * HKB * D];
        uint16_t tmp[HB * D];
        int zeros_ok = 1;
        for (int i = 0; i < NR; i++) {
            CK(cudaMemcpy(tmp, dq_d + (size_t)rows[i] * row_el, row_el * 2, cudaMemcpyDeviceToHost));
            for (size_t e = 0; e < row_el; e++) gdq[i * row_el + e] = fa_bf16_to_f32(tmp[e]);
        }
        for (int i = 0; i < NZ; i++) {
            CK(cudaMemcpy(tmp, dq_d + (size_t)zrows[i] * row_el, row_el * 2, cudaMemcpyDeviceToHost));
            for (size_t e = 0; e < row_el; e++) if (fa_bf16_to_f32(tmp[e]) != 0.0f) zeros_ok = 0;
        }
        CK(cudaMemcpy(gdk, dk_d, sizeof gdk, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(gdv, dv_d, sizeof gdv, cudaMemcpyDeviceToHost));
        /* the reference backward on the rows, with the out and lse the device forward gave */
        fa_tensor ro2 = fa_tensor_contiguous(orr, FA_BF16, 1, NR, HB, D), rdo = fa_tensor_contiguous(dor, FA_BF16, 1, NR, HB, D);
        fa_tensor tdq = fa_tensor_contiguous(rdq, FA_F32, 1, NR, HB, D), tdk = fa_tensor_contiguous(rdk, FA_F32, 1, SKB, HKB, D);
        fa_tensor tdv = fa_tensor_contiguous(rdv, FA_F32, 1, SKB, HKB, D);
        rs = fa_backward(refctx, &tdq, &tdk, &tdv, NULL, &rdo, &rq, &rk, &rv, &ro2, lgot, NULL);
        double mq, mk, mv, eq = maxerr(gdq, rdq, NR * row_el, &mq), ek = maxerr(gdk, rdk, SKB * HKB * D, &mk);
        double ev = maxerr(gdv, rdv, SKB * HKB * D, &mv);
        double tq3 = 3 * (2 * eps * mq + 1e-5), tk3 = 3 * (2 * eps * mk + 1e-5), tv3 = 3 * (2 * eps * mv + 1e-5);
        big_result("q side: backward, dout zero but on those rows", st == FA_OK && rs == FA_OK && zeros_ok && eq <= tq3 &&
                   ek <= tk3 && ev <= tv3, tb, "dq %.2e (tol %.2e), dk %.2e (tol %.2e), dv %.2e (tol %.2e), other dq rows %s%s%s",
                   eq, tq3, ek, tk3, ev, tv3, zeros_ok ? "0" : "NOT 0", st == FA_OK ? "" : " cuda: ",
                   st == FA_OK ? "" : fa_last_error(cu));
        free(blk2); free(qr); free(orr); free(dor);
        cudaFree(qb_d); cudaFree(ob_d); cudaFree(lb_d); cudaFree(kb_d); cudaFree(vb_d);
        cudaFree(do_d); cudaFree(dq_d); cudaFree(dk_d); cudaFree(dv_d);
    }
    free(ktail); free(blk);
    cudaFree(q_d); cudaFree(o_d); cudaFree(l_d);
    fa_context_destroy(cu);
    printf("SUMMARY stress_cuda big: %ld failed, %.1f s in all: %s\n", fails, now() - T0, fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (fa_context_create(&refctx, FA_BACKEND_REFERENCE) != FA_OK) { printf("no reference context: %s\n", fa_last_error(NULL)); return 2; }
    if (argc > 1 && !strcmp(argv[1], "big")) return big();
    double secs = argc > 1 ? atof(argv[1]) : 60;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    long max_rounds = argc > 3 ? atol(argv[3]) : 0;
    if (!(secs > 0) || argc > 4) {
        printf("usage: stress_cuda [SECONDS [SEED [ROUNDS]]] | stress_cuda big\n");
        return 2;
    }
    return stress(secs, seed, max_rounds);
}
