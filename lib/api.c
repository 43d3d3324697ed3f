/* api.c - the public operations: validate once (validate.c), then call the backend.
 *
 * Every entry point has the same shape: NULL context check, build the fa_problem (all
 * argument checks happen there, before anything is written), run the backend slot.
 * Work that is the same on every host backend lives here too: the KV-cache append and
 * fa_combine.
 */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "dtype.h"
#include "topology.h"
#include "validate.h"

#define NEED_CTX(fn) \
    do { if (!ctx) return fa_set_error(NULL, FA_ERR_INVALID_ARG, fn ": ctx is NULL"); } while (0)

/* A backend's own failure (memory, device, UNSUPPORTED) gets the public function's name
   in front, like every validation message, unless the backend already wrote it. */
static fa_status backend_result(fa_context *ctx, const char *fn, fa_status st)
{
    size_t n = strlen(fn);
    if (st != FA_OK && (strncmp(ctx->err, fn, n) != 0 || ctx->err[n] != ':')) {
        char msg[sizeof ctx->err];
        snprintf(msg, sizeof msg, "%s", ctx->err[0] ? ctx->err : fa_status_string(st));
        fa_set_error(ctx, st, "%s: %s", fn, msg);
    }
    return st;
}

static fa_status run_forward(fa_context *ctx, const char *fn, const fa_problem *p)
{
    ctx->err[0] = '\0';
    return backend_result(ctx, fn, ctx->ops->forward(ctx, p));
}

static fa_status run_backward(fa_context *ctx, const char *fn, const fa_problem *p)
{
    ctx->err[0] = '\0';
    return backend_result(ctx, fn, ctx->ops->backward(ctx, p));
}

FA_API fa_status fa_forward(fa_context *ctx, fa_tensor *out, float *lse, const fa_tensor *q,
                            const fa_tensor *k, const fa_tensor *v, const fa_options *opt)
{
    NEED_CTX("fa_forward");
    fa_problem p;
    fa_status st = fa_build_forward(ctx, "fa_forward", &p, out, lse, q, k, v, opt, 1, 0);
    return st != FA_OK ? st : run_forward(ctx, "fa_forward", &p);
}

FA_API fa_status fa_backward(fa_context *ctx, fa_tensor *dq, fa_tensor *dk, fa_tensor *dv,
                             float *dsinks, const fa_tensor *dout, const fa_tensor *q,
                             const fa_tensor *k, const fa_tensor *v, const fa_tensor *out,
                             const float *lse, const fa_options *opt)
{
    NEED_CTX("fa_backward");
    fa_problem p;
    fa_status st = fa_build_backward(ctx, "fa_backward", &p, dq, dk, dv, dsinks, dout, q, k,
                                     v, out, lse, opt, 1, 0);
    return st != FA_OK ? st : run_backward(ctx, "fa_backward", &p);
}

FA_API fa_status fa_forward_varlen(fa_context *ctx, fa_tensor *out, float *lse,
                                   const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                   const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                   int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                   const fa_options *opt)
{
    static const char fn[] = "fa_forward_varlen";
    NEED_CTX("fa_forward_varlen");
    fa_problem p;
    fa_status st = fa_build_forward(ctx, fn, &p, out, lse, q, k, v, opt, 0, 0);
    if (st == FA_OK)
        st = fa_build_varlen(ctx, fn, &p, cu_seqlens_q, cu_seqlens_k, batch, max_seqlen_q,
                             max_seqlen_k);
    return st != FA_OK ? st : run_forward(ctx, fn, &p);
}

FA_API fa_status fa_backward_varlen(fa_context *ctx, fa_tensor *dq, fa_tensor *dk,
                                    fa_tensor *dv, float *dsinks, const fa_tensor *dout,
                                    const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                    const fa_tensor *out, const float *lse,
                                    const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                    int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                    const fa_options *opt)
{
    static const char fn[] = "fa_backward_varlen";
    NEED_CTX("fa_backward_varlen");
    fa_problem p;
    fa_status st = fa_build_backward(ctx, fn, &p, dq, dk, dv, dsinks, dout, q, k, v, out, lse,
                                     opt, 0, 0);
    if (st == FA_OK)
        st = fa_build_varlen(ctx, fn, &p, cu_seqlens_q, cu_seqlens_k, batch, max_seqlen_q,
                             max_seqlen_k);
    return st != FA_OK ? st : run_backward(ctx, fn, &p);
}

/* Copy k_new/v_new rows into the cache at cache_seqlens[b] (host memory). */
static void kv_append(const fa_problem *p, const fa_tensor *k_new, const fa_tensor *v_new)
{
    size_t kbytes = (size_t)p->dqk * fa_dtype_size(p->k.dtype);
    size_t vbytes = (size_t)p->dv * fa_dtype_size(p->v.dtype);
    size_t es = fa_dtype_size(p->k.dtype);
    for (int64_t b = 0; b < p->batch; b++) {
        fa_seq s = fa_problem_seq(p, b);
        for (int64_t t = 0; t < p->s_new; t++) {
            int64_t j = p->cache_seqlens[b] + t;
            for (int64_t h = 0; h < p->hkv; h++) {
                int64_t kn = b * k_new->stride[0] + t * k_new->stride[1] + h * k_new->stride[2];
                int64_t vn = b * v_new->stride[0] + t * v_new->stride[1] + h * v_new->stride[2];
                memcpy((char *)p->k.data + (size_t)fa_krow(p, &p->k, &s, b, j, h) * es,
                       (const char *)k_new->data + (size_t)kn * es, kbytes);
                memcpy((char *)p->v.data + (size_t)fa_krow(p, &p->v, &s, b, j, h) * es,
                       (const char *)v_new->data + (size_t)vn * es, vbytes);
            }
        }
    }
}

FA_API fa_status fa_forward_kvcache(fa_context *ctx, fa_tensor *out, float *lse,
                                    const fa_tensor *q, fa_tensor *k_cache, fa_tensor *v_cache,
                                    const fa_tensor *k_new, const fa_tensor *v_new,
                                    const int32_t *cache_seqlens, const int32_t *block_table,
                                    int64_t max_pages_per_seq, const fa_options *opt)
{
    NEED_CTX("fa_forward_kvcache");
    fa_problem p;
    fa_status st = fa_build_kvcache(ctx, "fa_forward_kvcache", &p, out, lse, q, k_cache,
                                    v_cache, k_new, v_new, cache_seqlens, block_table,
                                    max_pages_per_seq, opt);
    if (st != FA_OK) return st;
    /* The appended rows lie past cache_seqlens: not yet part of any sequence, so writing
       them before the forward cannot corrupt what the caller had. */
    if (p.s_new > 0) {
        if (ctx->ops->kv_append) {
            st = backend_result(ctx, "fa_forward_kvcache",
                                ctx->ops->kv_append(ctx, &p, k_new, v_new));
            if (st != FA_OK) return st;
        } else {
            kv_append(&p, k_new, v_new);
        }
    }
    return run_forward(ctx, "fa_forward_kvcache", &p);
}

/* One row of fa_combine's output (at: its b, s, h; li: its lse index), 256 columns at a
   time: out[.., d] = sum over the parts of w_i part_i[d] in part order, w_i =
   exp(lse_i - m) * inv computed once per part and chunk (a part of weight 0 skipped: an
   empty part's zeros); fp32 parts and outputs read and written in place, other dtypes
   converted element by element. m = -inf: zeros. */
enum { COMBINE_CHUNK = 256 };
static void combine_row(fa_tensor *out, const fa_tensor *parts, const float *const *lse_parts,
                        int n, int64_t li, const int64_t at[3], float m, float inv)
{
    const int64_t D = out->shape[3];
    const int64_t o = at[0] * out->stride[0] + at[1] * out->stride[1] + at[2] * out->stride[2];
    float acc[COMBINE_CHUNK];
    for (int64_t d0 = 0; d0 < D; d0 += COMBINE_CHUNK) {
        const int64_t nd = D - d0 < COMBINE_CHUNK ? D - d0 : COMBINE_CHUNK;
        for (int64_t d = 0; d < nd; d++) acc[d] = 0.0f;
        for (int i = 0; i < n && m != -INFINITY; i++) {
            const fa_tensor *t = &parts[i];
            const float w = expf(lse_parts[i][li] - m) * inv;
            if (w == 0.0f) continue;
            const int64_t x0 = at[0] * t->stride[0] + at[1] * t->stride[1] + at[2] * t->stride[2] + d0;
            if (t->dtype == FA_F32) {
                const float *x = (const float *)t->data + x0;
                for (int64_t d = 0; d < nd; d++) acc[d] += w * x[d];
            } else {
                for (int64_t d = 0; d < nd; d++) acc[d] += w * fa_load(t->data, t->dtype, x0 + d);
            }
        }
        if (out->dtype == FA_F32)
            memcpy((float *)out->data + o + d0, acc, sizeof(float) * (size_t)nd);
        else
            for (int64_t d = 0; d < nd; d++) fa_store(out->data, out->dtype, o + d0 + d, acc[d]);
    }
}

/* out = sum_i exp(lse_i - lse) out_i, lse = log sum_i exp(lse_i), row by row. A row with
   every lse_i = -inf is empty: out 0, lse -inf. NaN in any part propagates to its row. */
FA_API fa_status fa_combine(fa_context *ctx, fa_tensor *out, float *lse,
                            const fa_tensor *out_parts, const float *const *lse_parts, int n)
{
    NEED_CTX("fa_combine");
    fa_status st = fa_check_combine(ctx, "fa_combine", out, out_parts, lse_parts, n);
    if (st != FA_OK) return st;
    ctx->err[0] = '\0';
    if (ctx->ops->combine)
        return backend_result(ctx, "fa_combine",
                              ctx->ops->combine(ctx, out, lse, out_parts, lse_parts, n));
    const int64_t B = out->shape[0], S = out->shape[1], H = out->shape[2], D = out->shape[3];
    const int64_t rows = B * S * H;
    /* the context's threads (fa_context_set_threads), as for its other calls */
    const int nt = ctx->threads > 0 ? ctx->threads : fa_default_threads(NULL, 0);
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * D * n > 262144)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t at[3] = { r / (S * H), (r / H) % S, r % H };   /* b, s, h */
        int64_t li = (at[0] * H + at[2]) * S + at[1];                /* lse layout [B, H, S] */
        float m = -INFINITY;
        for (int i = 0; i < n; i++) {
            float l = lse_parts[i][li];
            if (!(l <= m)) m = l;                     /* NaN wins, so it propagates */
        }
        float total = 0.0f;
        if (m != -INFINITY)
            for (int i = 0; i < n; i++) total += expf(lse_parts[i][li] - m);
        float inv = m == -INFINITY ? 0.0f : 1.0f / total;
        combine_row(out, out_parts, lse_parts, n, li, at, m, inv);
        if (lse) lse[li] = m == -INFINITY ? -INFINITY : m + logf(total);
    }
    return FA_OK;
}

FA_API fa_status fa_query(fa_context *ctx, const char **kernel_name, const fa_tensor *out,
                          const float *lse, const fa_tensor *q, const fa_tensor *k,
                          const fa_tensor *v, const fa_options *opt)
{
    NEED_CTX("fa_query");
    if (!kernel_name) return fa_set_error(ctx, FA_ERR_INVALID_ARG, "fa_query: kernel_name is NULL");
    *kernel_name = NULL;
    fa_problem p;
    fa_status st = fa_build_forward(ctx, "fa_query", &p, out, lse, q, k, v, opt, 1, 1);
    if (st != FA_OK) return st;
    ctx->err[0] = '\0';
    return backend_result(ctx, "fa_query", ctx->ops->query(ctx, &p, 0, kernel_name));
}

FA_API fa_status fa_query_backward(fa_context *ctx, const char **kernel_name,
                                   const fa_tensor *dq, const fa_tensor *dk,
                                   const fa_tensor *dv, const float *dsinks,
                                   const fa_tensor *dout, const fa_tensor *q,
                                   const fa_tensor *k, const fa_tensor *v,
                                   const fa_tensor *out, const float *lse,
                                   const fa_options *opt)
{
    NEED_CTX("fa_query_backward");
    if (!kernel_name)
        return fa_set_error(ctx, FA_ERR_INVALID_ARG, "fa_query_backward: kernel_name is NULL");
    *kernel_name = NULL;
    fa_problem p;
    fa_status st = fa_build_backward(ctx, "fa_query_backward", &p, dq, dk, dv, dsinks, dout,
                                     q, k, v, out, lse, opt, 1, 1);
    if (st != FA_OK) return st;
    ctx->err[0] = '\0';
    return backend_result(ctx, "fa_query_backward", ctx->ops->query(ctx, &p, 1, kernel_name));
}
