/* naive.c - the two rungs below the library: textbook attention and unfused BLAS, forward
 * and backward.
 *
 * Both are the unfused algorithm of a framework's math path, per (batch, head):
 *   forward   S = scale * Q K^T (the whole Sq x Sk matrix, fp32), P = softmax(S) row by
 *             row in place, O = P V;
 *   backward  S and P again, dV += P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)),
 *             dQ = scale * dS K, dK += scale * dS^T Q (rowsum(P * dP) = rowsum(dO * O), so
 *             neither O nor lse is needed).
 * The "naive" rung does the products with the plain loops of gemm_loops; "unfused blas"
 * with cblas_sgemm. Causal masks use bottom-right alignment (off = Sk - Sq): the products
 * are computed in full and the softmax zeroes the masked entries, as a math path does.
 *
 * Threads: OpenMP over (batch, head) (over (batch, KV head) in the backward, whose dK and
 * dV sum over the query heads of a group), each thread with its own score matrices and
 * single-threaded BLAS calls. With fewer heads than threads the heads run one after
 * another and BLAS threads each product instead. The row softmax uses exp_vec, an exp
 * that the compiler vectorizes (bench_exp below), so the exponentials cost a few percent
 * of the two products instead of dominating them.
 *
 * Inputs are the fp32 copies (the stored values); outputs are fp32 in the layouts of q
 * (out, dq) and k (dk, dv).
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#ifdef FA_HAVE_BLAS
#include <cblas.h>
#endif

/* ------------------------------------------------------------------ the softmax --- */

/* exp(x) for x <= 0 in plain float arithmetic the vectorizer takes: x = n ln2 + r with
 * |r| <= ln2 / 2, e^r by its degree-6 Taylor polynomial (relative error < 1e-7), 2^n put
 * into the exponent bits. Below -87 (e^x under the smallest normal float) it is 0. */
static inline float bench_exp(float x)
{
    const float big = 12582912.0f;                  /* 1.5 * 2^23: rounds to an integer */
    union { int32_t i; float f; } c, s;
    int32_t under = -(int32_t)(x < -87.0f);         /* all ones where e^x is taken as 0 */
    c.f = x;
    s.f = -87.0f;
    c.i = (c.i & ~under) | (s.i & under);           /* x clamped to -87, without a branch */
    float n = (c.f * 1.44269504f + big) - big;
    float r = c.f - n * 0.693145751953125f - n * 1.428606765330187e-6f;
    float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720))))));
    s.i = ((((int32_t)n + 127) << 23) & ~under);    /* 2^n, or 0 */
    return e * s.f;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VEC_CLONES
#endif

/* One row in place: the first `visible` entries soft-maxed, the rest (masked) 0. */
VEC_CLONES
static void softmax_row(float *s, int64_t n, int64_t visible)
{
    float m = -INFINITY, l = 0;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < visible; j++) m = s[j] > m ? s[j] : m;
#pragma omp simd reduction(+ : l)
    for (int64_t j = 0; j < visible; j++) {
        float e = bench_exp(s[j] - m);
        s[j] = e;
        l += e;
    }
    float inv = visible > 0 ? 1.0f / l : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < visible; j++) s[j] *= inv;
    for (int64_t j = visible; j < n; j++) s[j] = 0.0f;
}

/* dS = P * (dP - rowsum(P * dP)), in place in dp, for one row. */
VEC_CLONES
static void softmax_grad_row(const float *pr, float *dp, int64_t n)
{
    float D = 0;
#pragma omp simd reduction(+ : D)
    for (int64_t j = 0; j < n; j++) D += pr[j] * dp[j];
#pragma omp simd
    for (int64_t j = 0; j < n; j++) dp[j] = pr[j] * (dp[j] - D);
}

static int64_t visible(const bench_shape *sh, int64_t i)
{
    int64_t e = sh->causal ? i + (sh->Sk - sh->Sq) + 1 : sh->Sk;
    return e < 0 ? 0 : e > sh->Sk ? sh->Sk : e;
}

/* ------------------------------------------------------------------ the products --- */

/* C = alpha * op(A) op(B) + beta * C, row-major; op(X) = X^T when tX. tb picks the dot
 * form (rows of A against rows of B); otherwise rows of C are sums of rows of B. */
typedef void gemm_fn(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                     float *C, int64_t ldc);

static void gemm_loops(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++) {
        float *c = C + i * ldc;
        for (int64_t j = 0; j < N; j++) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
        if (tb) {                                   /* A [M, K] (ta = 0), B [N, K] */
            for (int64_t j = 0; j < N; j++) {
                float a = 0;
                for (int64_t k = 0; k < K; k++) a += A[i * lda + k] * B[j * ldb + k];
                c[j] += alpha * a;
            }
        } else {                                    /* B [K, N] */
            for (int64_t k = 0; k < K; k++) {
                float a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
                const float *b = B + k * ldb;
                for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
            }
        }
    }
}

#ifdef FA_HAVE_BLAS
static void gemm_blas(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      float *C, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
int blas_available(void) { return 1; }
#else
int blas_available(void) { return 0; }
#endif

/* The product function of a rung and how it threads: `par` = OpenMP threads over heads
 * (BLAS single-threaded), else 1 with BLAS threading each product. */
typedef struct { gemm_fn *gemm; int par; } plan;

static int make_plan(int blas, int threads, int64_t units, plan *pl)
{
    pl->par = threads < 1 ? 1 : threads;
    pl->gemm = gemm_loops;
    if (!blas) return 0;
#ifdef FA_HAVE_BLAS
    pl->gemm = gemm_blas;
    if (units < pl->par) {
        openblas_set_num_threads(pl->par);
        pl->par = 1;
    } else {
        openblas_set_num_threads(1);
    }
    return 0;
#else
    (void)units;
    return -1;
#endif
}

static int64_t par_heads(int par, int64_t units)
{
    return par < units ? par : units < 1 ? 1 : units;
}

size_t naive_extra_bytes(const bench_problem *p, int threads, int backward, int blas)
{
    const bench_shape *sh = &p->sh;
    int64_t units = backward ? sh->B * sh->Hkv : sh->B * sh->H;
    if (blas && units < threads) threads = 1;          /* heads in turn, BLAS threads */
    size_t one = (size_t)sh->Sq * (size_t)sh->Sk * sizeof(float) * (backward ? 2 : 1);
    size_t grads = backward ? sizeof(float) * (size_t)(sh->B * sh->d) *
                                  (size_t)(sh->Sq * sh->H + 2 * sh->Sk * sh->Hkv) : 0;
    return (size_t)par_heads(threads, units) * one + (p->sh.dtype == FA_F32 ? 0 : grads);
}

/* ------------------------------------------------------------------ the forward ---- */

int naive_forward(const bench_problem *p, float *out, int threads, int blas)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv, Sq = sh->Sq, Sk = sh->Sk;
    const int64_t ldq = sh->H * d, ldk = sh->Hkv * d;
    const float scale = (float)bp_scale(sh);
    plan pl;
    if (make_plan(blas, threads, sh->B * sh->H, &pl)) return -1;
    int fail = 0;
#pragma omp parallel num_threads(pl.par)
    {
        float *S = malloc((size_t)Sq * (size_t)Sk * sizeof(float) + 64);
        if (!S) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < sh->B * sh->H; bh++) {
            if (!S) continue;
            int64_t b = bh / sh->H, h = bh % sh->H, hk = h / grp;
            const float *Q = p->qf + (b * Sq * sh->H + h) * d;
            const float *K = p->kf + (b * Sk * sh->Hkv + hk) * d;
            const float *V = p->vf + (b * Sk * sh->Hkv + hk) * d;
            pl.gemm(0, 1, Sq, Sk, d, scale, Q, ldq, K, ldk, 0.0f, S, Sk);
            for (int64_t i = 0; i < Sq; i++) softmax_row(S + i * Sk, Sk, visible(sh, i));
            pl.gemm(0, 0, Sq, d, Sk, 1.0f, S, Sk, V, ldk, 0.0f, out + (b * Sq * sh->H + h) * d,
                    ldq);
        }
        free(S);
    }
    return fail ? -1 : 0;
}

/* ------------------------------------------------------------------ the backward --- */

/* The gradients of the query heads of KV head (b, hk) into dq (its rows) and dk, dv (sums
 * over the group). P and dP: Sq x Sk each. */
static void backward_group(const bench_problem *p, const plan *pl, int64_t b, int64_t hk,
                           float *P, float *dP, float *dq, float *dk, float *dv)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv, Sq = sh->Sq, Sk = sh->Sk;
    const int64_t ldq = sh->H * d, ldk = sh->Hkv * d;
    const float scale = (float)bp_scale(sh);
    const float *K = p->kf + (b * Sk * sh->Hkv + hk) * d;
    const float *V = p->vf + (b * Sk * sh->Hkv + hk) * d;
    float *dK = dk + (b * Sk * sh->Hkv + hk) * d, *dV = dv + (b * Sk * sh->Hkv + hk) * d;
    for (int64_t g = 0; g < grp; g++) {
        int64_t h = hk * grp + g;
        const float *Q = p->qf + (b * Sq * sh->H + h) * d;
        const float *dO = p->doutf + (b * Sq * sh->H + h) * d;
        float beta = g ? 1.0f : 0.0f;
        pl->gemm(0, 1, Sq, Sk, d, scale, Q, ldq, K, ldk, 0.0f, P, Sk);
        for (int64_t i = 0; i < Sq; i++) softmax_row(P + i * Sk, Sk, visible(sh, i));
        pl->gemm(1, 0, Sk, d, Sq, 1.0f, P, Sk, dO, ldq, beta, dV, ldk);
        pl->gemm(0, 1, Sq, Sk, d, 1.0f, dO, ldq, V, ldk, 0.0f, dP, Sk);
        for (int64_t i = 0; i < Sq; i++) softmax_grad_row(P + i * Sk, dP + i * Sk, Sk);
        pl->gemm(0, 0, Sq, d, Sk, scale, dP, Sk, K, ldk, 0.0f, dq + (b * Sq * sh->H + h) * d,
                 ldq);
        pl->gemm(1, 0, Sk, d, Sq, scale, dP, Sk, Q, ldq, beta, dK, ldk);
    }
}

int naive_backward(const bench_problem *p, float *dq, float *dk, float *dv, int threads,
                   int blas)
{
    const bench_shape *sh = &p->sh;
    plan pl;
    if (make_plan(blas, threads, sh->B * sh->Hkv, &pl)) return -1;
    size_t n = (size_t)sh->Sq * (size_t)sh->Sk;
    int fail = 0;
#pragma omp parallel num_threads(pl.par)
    {
        float *P = malloc(2 * n * sizeof(float) + 64);
        if (!P) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t bk = 0; bk < sh->B * sh->Hkv; bk++)
            if (P) backward_group(p, &pl, bk / sh->Hkv, bk % sh->Hkv, P, P + n, dq, dk, dv);
        free(P);
    }
    return fail ? -1 : 0;
}
