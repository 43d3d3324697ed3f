/* kernels_generic.c - the kernel contract (kernels.h) in plain C: the first rung of the
 * ladder, correct on every x86 or non-x86 CPU; the compiler vectorises the inner loops
 * with whatever the baseline ISA offers (SSE2 on x86-64). */
#include "config.h"
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "dtype.h"

static void gemm_rowA(int m, int n, int k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc, int acc)
{
    for (int i = 0; i < m; i++) {
        float *ci = c + (int64_t)i * ldc;
        if (!acc) memset(ci, 0, (size_t)n * sizeof(float));
        for (int p = 0; p < k; p++) {
            float ap = a[(int64_t)i * lda + p];
            const float *bp = b + (int64_t)p * ldb;
            for (int j = 0; j < n; j++) ci[j] += ap * bp[j];
        }
    }
}

static void gemm_colA(int m, int n, int k, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float *c, int64_t ldc, int acc)
{
    for (int i = 0; i < m; i++) {
        float *ci = c + (int64_t)i * ldc;
        if (!acc) memset(ci, 0, (size_t)n * sizeof(float));
        for (int p = 0; p < k; p++) {
            float ap = a[(int64_t)p * lda + i];
            const float *bp = b + (int64_t)p * ldb;
            for (int j = 0; j < n; j++) ci[j] += ap * bp[j];
        }
    }
}

static inline float exp0(float x) { return x < -87.3f ? 0.0f : expf(x); }

static void softmax_fwd(float *s, int nk, int nq, int64_t ld, float scale, float *m,
                        float *l, float *alpha)
{
    for (int i = 0; i < nq; i++) {
        float mx = m[i];
        for (int j = 0; j < nk; j++) {
            float x = s[(int64_t)j * ld + i] * scale;
            if (x > mx || x != x) mx = x;
        }
        float mu = mx == -INFINITY ? 0.0f : mx, sum = 0.0f;
        for (int j = 0; j < nk; j++) {
            float p = exp0(s[(int64_t)j * ld + i] * scale - mu);
            s[(int64_t)j * ld + i] = p;
            sum += p;
        }
        alpha[i] = exp0(m[i] - mu);
        l[i] = l[i] * alpha[i] + sum;
        m[i] = mx;
    }
}

static void exp_sub(float *s, int nk, int nq, int64_t ld, float scale, const float *lse)
{
    for (int j = 0; j < nk; j++)
        for (int i = 0; i < nq; i++)
            s[(int64_t)j * ld + i] = exp0(s[(int64_t)j * ld + i] * scale - lse[i]);
}

static void ds_kernel(float *dp, const float *p, int nk, int nq, int64_t ld, const float *D)
{
    for (int j = 0; j < nk; j++)
        for (int i = 0; i < nq; i++)
            dp[(int64_t)j * ld + i] = p[(int64_t)j * ld + i] * (dp[(int64_t)j * ld + i] - D[i]);
}

static void cvt_in(float *dst, const void *src, int64_t n, fa_dtype t)
{
    if (t == FA_F32) { memcpy(dst, src, (size_t)n * sizeof(float)); return; }
    for (int64_t i = 0; i < n; i++) dst[i] = fa_load(src, t, i);
}

static void cvt_out(void *dst, fa_dtype t, const float *src, int64_t n, float mul)
{
    for (int64_t i = 0; i < n; i++) fa_store(dst, t, i, src[i] * mul);
}

const fa_cpu_kernels fa_cpu_kernels_generic = {
    "generic", 1, 1, gemm_rowA, gemm_colA, softmax_fwd, exp_sub, ds_kernel, cvt_in, cvt_out,
    NULL, NULL, NULL, 0, NULL, NULL
};
