/* naive.c - the two rungs below the library: textbook attention and unfused BLAS.
 *
 * naive_forward: for each (b, h), S = scale * Q K^T is written out in full (Sq x Sk fp32),
 * then each row is soft-maxed in place, then O = P V. Three passes over an S x S matrix:
 * the memory traffic that FlashAttention removes. One (b, h) per thread at a time, so the
 * extra memory is threads * Sq * Sk * 4 bytes.
 *
 * blas_forward: the same three steps with cblas_sgemm for the two products (the "unfused"
 * attention of frameworks that call a GEMM library); OpenBLAS threads each GEMM itself,
 * so heads run one after another and there is one score matrix.
 *
 * Both read the fp32 copies of the inputs (the stored values) and write fp32 out in the
 * layout of q, [B, Sq, H, d]. Causal masks use bottom-right alignment, off = Sk - Sq.
 */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#ifdef FA_HAVE_BLAS
#include <cblas.h>
#endif

static void softmax_row(float *s, int64_t n, int64_t visible)
{
    float m = -INFINITY, l = 0;
    for (int64_t j = 0; j < visible; j++) m = s[j] > m ? s[j] : m;
    for (int64_t j = 0; j < visible; j++) l += (s[j] = expf(s[j] - m));
    float inv = visible > 0 ? 1.0f / l : 0.0f;
    for (int64_t j = 0; j < visible; j++) s[j] *= inv;
    for (int64_t j = visible; j < n; j++) s[j] = 0.0f;       /* masked: probability 0 */
}

static int64_t visible(const bench_shape *sh, int64_t i)
{
    int64_t e = sh->causal ? i + (sh->Sk - sh->Sq) + 1 : sh->Sk;
    return e < 0 ? 0 : e > sh->Sk ? sh->Sk : e;
}

size_t naive_extra_bytes(const bench_problem *p, int threads)
{
    int64_t heads = p->sh.B * p->sh.H;
    int64_t t = threads < heads ? threads : heads;
    return (size_t)(t < 1 ? 1 : t) * (size_t)p->sh.Sq * (size_t)p->sh.Sk * sizeof(float);
}

int naive_forward(const bench_problem *p, float *out, int threads)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv, Sq = sh->Sq, Sk = sh->Sk;
    const float scale = (float)bp_scale(sh);
    int fail = 0;
#pragma omp parallel num_threads(threads)
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
            /* 1. S = scale * Q K^T, the whole matrix */
            for (int64_t i = 0; i < Sq; i++) {
                const float *q = p->qf + ((b * Sq + i) * sh->H + h) * d;
                int64_t e = visible(sh, i);
                for (int64_t j = 0; j < e; j++) {
                    const float *k = p->kf + ((b * Sk + j) * sh->Hkv + hk) * d;
                    float a = 0;
                    for (int64_t x = 0; x < d; x++) a += q[x] * k[x];
                    S[i * Sk + j] = scale * a;
                }
            }
            /* 2. P = softmax(S), row by row, in place */
            for (int64_t i = 0; i < Sq; i++) softmax_row(S + i * Sk, Sk, visible(sh, i));
            /* 3. O = P V */
            for (int64_t i = 0; i < Sq; i++) {
                float *o = out + ((b * Sq + i) * sh->H + h) * d;
                for (int64_t x = 0; x < d; x++) o[x] = 0;
                int64_t e = visible(sh, i);
                for (int64_t j = 0; j < e; j++) {
                    const float *v = p->vf + ((b * Sk + j) * sh->Hkv + hk) * d;
                    float pij = S[i * Sk + j];
                    for (int64_t x = 0; x < d; x++) o[x] += pij * v[x];
                }
            }
        }
        free(S);
    }
    return fail ? -1 : 0;
}

#ifdef FA_HAVE_BLAS
int blas_available(void) { return 1; }

size_t blas_extra_bytes(const bench_problem *p, int threads)
{
    (void)threads;
    return (size_t)p->sh.Sq * (size_t)p->sh.Sk * sizeof(float);
}

int blas_forward(const bench_problem *p, float *out, int threads)
{
    const bench_shape *sh = &p->sh;
    const int64_t d = sh->d, grp = sh->H / sh->Hkv, Sq = sh->Sq, Sk = sh->Sk;
    float *S = malloc((size_t)Sq * (size_t)Sk * sizeof(float) + 64);
    if (!S) return -1;
    openblas_set_num_threads(threads);
    for (int64_t b = 0; b < sh->B; b++)
        for (int64_t h = 0; h < sh->H; h++) {
            int64_t hk = h / grp;
            const float *Q = p->qf + (b * Sq * sh->H + h) * d;       /* row stride H*d   */
            const float *K = p->kf + (b * Sk * sh->Hkv + hk) * d;    /* row stride Hkv*d */
            const float *V = p->vf + (b * Sk * sh->Hkv + hk) * d;
            float *O = out + (b * Sq * sh->H + h) * d;
            /* S = scale * Q K^T  [Sq, Sk] (causal: computed in full, then masked) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Sq, (int)Sk, (int)d,
                        (float)bp_scale(sh), Q, (int)(sh->H * d), K, (int)(sh->Hkv * d),
                        0.0f, S, (int)Sk);
            for (int64_t i = 0; i < Sq; i++) softmax_row(S + i * Sk, Sk, visible(sh, i));
            /* O = P V  [Sq, d] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Sq, (int)d, (int)Sk,
                        1.0f, S, (int)Sk, V, (int)(sh->Hkv * d), 0.0f, O, (int)(sh->H * d));
        }
    free(S);
    return 0;
}
#else
int blas_available(void) { return 0; }
size_t blas_extra_bytes(const bench_problem *p, int threads)
{
    (void)p; (void)threads;
    return 0;
}
int blas_forward(const bench_problem *p, float *out, int threads)
{
    (void)p; (void)out; (void)threads;
    return -1;
}
#endif
