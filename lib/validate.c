/* validate.c - every argument checked once, with a message naming it.
 *
 * Order of checks: pointers, then each tensor on its own (dtype, sizes, strides, 64-bit
 * extent), then tensors against each other (batch, lengths, heads, head dims, dtypes),
 * then options, then index array contents. The first failure is reported.
 */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "validate.h"

#define BAD(...) return fa_set_error(ctx, FA_ERR_INVALID_ARG, __VA_ARGS__)
#define TRY(x) do { fa_status st_ = (x); if (st_ != FA_OK) return st_; } while (0)

typedef long long ll;

static int fa_dtype_ok(fa_dtype t) { return t == FA_F32 || t == FA_F16 || t == FA_BF16; }

/* One tensor on its own. `output`: it is written, so a dimension of extent > 1 may not
   have stride 0 (two elements would alias). `need_data`: the call reads or writes the
   elements, so a non-empty view needs a data pointer (0 for fa_query and
   fa_query_backward, which describe a call without touching its data). */
static fa_status chk_tensor(fa_context *ctx, const char *fn, const char *name,
                            const fa_tensor *t, int output, int need_data)
{
    if (!t) BAD("%s: %s is NULL", fn, name);
    if (!fa_dtype_ok(t->dtype)) BAD("%s: %s.dtype=%d is not an fa_dtype", fn, name, (int)t->dtype);
    int64_t numel = 1, span = 0;
    for (int d = 0; d < 4; d++) {
        if (t->shape[d] < 0) BAD("%s: %s.shape[%d]=%lld is negative", fn, name, d, (ll)t->shape[d]);
        if (t->stride[d] < 0)
            BAD("%s: %s.stride[%d]=%lld is negative (strides must be >= 0)", fn, name, d,
                (ll)t->stride[d]);
    }
    if (t->stride[3] != 1) BAD("%s: %s.stride[3]=%lld must be 1", fn, name, (ll)t->stride[3]);
    for (int d = 0; d < 4; d++) {
        int64_t ext;
        if (__builtin_mul_overflow(numel, t->shape[d], &numel))
            BAD("%s: %s has more elements than fit in 64 bits", fn, name);
        if (t->shape[d] == 0) continue;
        if (__builtin_mul_overflow(t->shape[d] - 1, t->stride[d], &ext) ||
            __builtin_add_overflow(span, ext, &span))
            BAD("%s: %s spans more elements than fit in 64 bits (shape x stride)", fn, name);
    }
    /* An empty tensor has nothing to alias. */
    for (int d = 0; d < 4 && output && numel > 0; d++)
        if (t->shape[d] > 1 && t->stride[d] == 0)
            BAD("%s: %s.stride[%d]=0 with shape[%d]=%lld: output elements would alias", fn,
                name, d, d, (ll)t->shape[d]);
    if (numel > 0) {
        int64_t bytes, count;
        if (__builtin_add_overflow(span, 1, &count) ||
            __builtin_mul_overflow(count, (int64_t)fa_dtype_size(t->dtype), &bytes))
            BAD("%s: %s spans more bytes than fit in 64 bits", fn, name);
        if (!t->data && need_data) BAD("%s: %s.data is NULL", fn, name);
    }
    return FA_OK;
}

/* a.shape[i] must equal b.shape[j]. */
static fa_status chk_dim(fa_context *ctx, const char *fn, const char *an, const fa_tensor *a,
                         int i, const char *bn, const fa_tensor *b, int j)
{
    if (a->shape[i] != b->shape[j])
        BAD("%s: %s.shape[%d]=%lld does not match %s.shape[%d]=%lld", fn, an, i,
            (ll)a->shape[i], bn, j, (ll)b->shape[j]);
    return FA_OK;
}

/* The enumerator of a valid dtype, for messages. */
static const char *dt_name(fa_dtype d)
{
    return d == FA_F32 ? "FA_F32" : d == FA_F16 ? "FA_F16" : d == FA_BF16 ? "FA_BF16" : "?";
}

/* Outputs may be in the input dtype or F32. */
static fa_status chk_out_dtype(fa_context *ctx, const char *fn, const char *name,
                               const fa_tensor *t, fa_dtype in)
{
    if (t->dtype != in && t->dtype != FA_F32)
        BAD("%s: %s.dtype=%s must be the dtype of q (%s) or FA_F32", fn, name, dt_name(t->dtype),
            dt_name(in));
    return FA_OK;
}

static fa_status chk_same_dtype(fa_context *ctx, const char *fn, const char *name,
                                const fa_tensor *t, fa_dtype in)
{
    if (t->dtype != in)
        BAD("%s: %s.dtype=%s differs from q.dtype=%s", fn, name, dt_name(t->dtype), dt_name(in));
    return FA_OK;
}

/* q, k, v against each other: heads, head dims, dtypes. Batch/length checks differ by
   layout and are done by the callers. */
static fa_status chk_qkv(fa_context *ctx, const char *fn, const fa_tensor *q,
                         const fa_tensor *k, const fa_tensor *v, const char *kn,
                         const char *vn)
{
    TRY(chk_same_dtype(ctx, fn, kn, k, q->dtype));
    TRY(chk_same_dtype(ctx, fn, vn, v, q->dtype));
    if (q->shape[3] < 1) BAD("%s: q.shape[3]=%lld: the head dim must be >= 1", fn, (ll)q->shape[3]);
    if (v->shape[3] < 1) BAD("%s: %s.shape[3]=%lld: the head dim must be >= 1", fn, vn, (ll)v->shape[3]);
    TRY(chk_dim(ctx, fn, kn, k, 3, "q", q, 3));
    if (k->shape[2] == 0 && q->shape[2] > 0)
        BAD("%s: %s.shape[2]=0 KV heads for q.shape[2]=%lld query heads", fn, kn, (ll)q->shape[2]);
    if (k->shape[2] > 0 && q->shape[2] % k->shape[2] != 0)
        BAD("%s: %s.shape[2]=%lld does not divide q.shape[2]=%lld", fn, kn, (ll)k->shape[2],
            (ll)q->shape[2]);
    TRY(chk_dim(ctx, fn, vn, v, 2, kn, k, 2));
    return FA_OK;
}

/* out [.., Sq, H, d_v] against q and v. */
static fa_status chk_out_like(fa_context *ctx, const char *fn, const char *name,
                              const fa_tensor *o, const fa_tensor *q, const fa_tensor *v,
                              const char *vn)
{
    TRY(chk_dim(ctx, fn, name, o, 0, "q", q, 0));
    TRY(chk_dim(ctx, fn, name, o, 1, "q", q, 1));
    TRY(chk_dim(ctx, fn, name, o, 2, "q", q, 2));
    TRY(chk_dim(ctx, fn, name, o, 3, vn, v, 3));
    return FA_OK;
}

static fa_status chk_same_shape(fa_context *ctx, const char *fn, const char *an,
                                const fa_tensor *a, const char *bn, const fa_tensor *b)
{
    for (int d = 0; d < 4; d++) TRY(chk_dim(ctx, fn, an, a, d, bn, b, d));
    return FA_OK;
}

/* Options into p. bias_ok: the call takes a bias (fa_forward / fa_backward). */
static fa_status chk_options(fa_context *ctx, const char *fn, fa_problem *p,
                             const fa_options *opt, int bias_ok, int need_data)
{
    static const fa_options defaults;
    if (!opt) opt = &defaults;
    for (size_t i = 0; i < sizeof opt->reserved / sizeof opt->reserved[0]; i++)
        if (opt->reserved[i])
            BAD("%s: opt->reserved[%zu] is not 0: start fa_options from zero "
                "(fa_options o = {0};)", fn, i);
    if (!isfinite(opt->scale)) BAD("%s: opt->scale=%g is not finite", fn, (double)opt->scale);
    p->scale = opt->scale != 0.0f ? opt->scale : 1.0f / sqrtf((float)p->dqk);
    if ((int)opt->causal < FA_CAUSAL_NONE || (int)opt->causal > FA_CAUSAL_TOP_LEFT)
        BAD("%s: opt->causal=%d is not an fa_causal value", fn, (int)opt->causal);
    p->causal = opt->causal;
    if (opt->window != 0 && opt->window != 1)
        BAD("%s: opt->window=%d must be 0 or 1", fn, opt->window);
    p->window_left = p->window_right = -1;
    if (opt->window) {
        if (opt->window_left < -1)
            BAD("%s: opt->window_left=%lld must be -1 (unbounded) or >= 0", fn,
                (ll)opt->window_left);
        if (opt->window_right < -1)
            BAD("%s: opt->window_right=%lld must be -1 (unbounded) or >= 0", fn,
                (ll)opt->window_right);
        p->window_left = opt->window_left;
        p->window_right = opt->window_right;
    }
    /* A bound of 2^62 or more reaches past any sequence that can exist: it is the same as
       unbounded, and making it -1 keeps every backend's pos +- window inside int64. */
    if (p->window_left >= ((int64_t)1 << 62)) p->window_left = -1;
    if (p->window_right >= ((int64_t)1 << 62)) p->window_right = -1;
    if (opt->causal != FA_CAUSAL_NONE) p->window_right = 0;
    if (!(opt->softcap >= 0.0f) || !isfinite(opt->softcap))
        BAD("%s: opt->softcap=%g must be finite and >= 0", fn, (double)opt->softcap);
    p->softcap = opt->softcap;
    p->alibi = opt->alibi_slopes;
    p->sinks = opt->sinks;
    if (!(opt->dropout_p >= 0.0f && opt->dropout_p < 1.0f))
        BAD("%s: opt->dropout_p=%g is outside [0, 1)", fn, (double)opt->dropout_p);
    p->dropout_p = opt->dropout_p;
    if (p->dropout_p > 0.0f) p->drop = fa_dropout_make_key(opt->seed, opt->offset, p->dropout_p);
    p->deterministic = opt->deterministic != 0;
    p->has_bias = 0;
    if (opt->bias) {
        const fa_tensor *b = opt->bias;
        if (!bias_ok)
            BAD("%s: opt->bias is only supported by fa_forward and fa_backward", fn);
        TRY(chk_tensor(ctx, fn, "opt->bias", b, 0, need_data));
        int64_t B = p->q.shape[0], H = p->hq, Sq = p->q.shape[1], Sk = p->k.shape[1];
        if (b->shape[0] != B && b->shape[0] != 1)
            BAD("%s: opt->bias.shape[0]=%lld must be q.shape[0]=%lld or 1", fn,
                (ll)b->shape[0], (ll)B);
        if (b->shape[1] != Sq)
            BAD("%s: opt->bias.shape[1]=%lld must be q.shape[1]=%lld", fn, (ll)b->shape[1], (ll)Sq);
        if (b->shape[2] != H && b->shape[2] != 1)
            BAD("%s: opt->bias.shape[2]=%lld must be q.shape[2]=%lld or 1", fn,
                (ll)b->shape[2], (ll)H);
        if (b->shape[3] != Sk)
            BAD("%s: opt->bias.shape[3]=%lld must be k.shape[1]=%lld", fn, (ll)b->shape[3], (ll)Sk);
        p->has_bias = 1;
        p->bias = *b;
        for (int d = 0; d < 3; d++)
            if (b->shape[d] == 1) p->bias.stride[d] = 0;   /* broadcast */
    }
    return FA_OK;
}

static void fill_sizes(fa_problem *p, const fa_tensor *q, const fa_tensor *k,
                       const fa_tensor *v)
{
    p->q = *q; p->k = *k; p->v = *v;
    p->batch = q->shape[0];
    p->hq = q->shape[2];
    p->hkv = k->shape[2];
    /* 0 when hq = 0 < hkv: a valid empty problem (no query head reads any KV head) */
    p->group = p->hkv > 0 ? p->hq / p->hkv : 1;
    p->dqk = q->shape[3];
    p->dv = v->shape[3];
    p->max_sq = q->shape[1];
    p->max_sk = k->shape[1];
}

/* The dense checks of fa_forward (also the first half of fa_forward_varlen). */
fa_status fa_build_forward(fa_context *ctx, const char *fn, fa_problem *p,
                           const fa_tensor *out, const float *lse, const fa_tensor *q,
                           const fa_tensor *k, const fa_tensor *v, const fa_options *opt,
                           int bias_ok, int describe_only)
{
    const int nd = !describe_only;
    memset(p, 0, sizeof *p);
    TRY(chk_tensor(ctx, fn, "out", out, 1, nd));
    TRY(chk_tensor(ctx, fn, "q", q, 0, nd));
    TRY(chk_tensor(ctx, fn, "k", k, 0, nd));
    TRY(chk_tensor(ctx, fn, "v", v, 0, nd));
    TRY(chk_qkv(ctx, fn, q, k, v, "k", "v"));
    TRY(chk_dim(ctx, fn, "k", k, 0, "q", q, 0));
    TRY(chk_dim(ctx, fn, "v", v, 0, "q", q, 0));
    TRY(chk_dim(ctx, fn, "v", v, 1, "k", k, 1));
    TRY(chk_out_like(ctx, fn, "out", out, q, v, "v"));
    TRY(chk_out_dtype(ctx, fn, "out", out, q->dtype));
    fill_sizes(p, q, k, v);
    p->out = *out;
    p->lse = (float *)lse;
    return chk_options(ctx, fn, p, opt, bias_ok, nd);
}

fa_status fa_build_backward(fa_context *ctx, const char *fn, fa_problem *p,
                            const fa_tensor *dq, const fa_tensor *dk, const fa_tensor *dv,
                            const float *dsinks, const fa_tensor *dout, const fa_tensor *q,
                            const fa_tensor *k, const fa_tensor *v, const fa_tensor *out,
                            const float *lse, const fa_options *opt, int bias_ok,
                            int describe_only)
{
    const int nd = !describe_only;
    TRY(fa_build_forward(ctx, fn, p, out, lse, q, k, v, opt, bias_ok, describe_only));
    /* out is an input here: it was checked as an output above, which is stricter only in
       forbidding stride 0, harmless for a tensor the forward wrote. */
    TRY(chk_tensor(ctx, fn, "dq", dq, 1, nd));
    TRY(chk_tensor(ctx, fn, "dk", dk, 1, nd));
    TRY(chk_tensor(ctx, fn, "dv", dv, 1, nd));
    TRY(chk_tensor(ctx, fn, "dout", dout, 0, nd));
    TRY(chk_same_shape(ctx, fn, "dq", dq, "q", q));
    TRY(chk_same_shape(ctx, fn, "dk", dk, "k", k));
    TRY(chk_same_shape(ctx, fn, "dv", dv, "v", v));
    TRY(chk_same_shape(ctx, fn, "dout", dout, "out", out));
    TRY(chk_out_dtype(ctx, fn, "dq", dq, q->dtype));
    TRY(chk_out_dtype(ctx, fn, "dk", dk, q->dtype));
    TRY(chk_out_dtype(ctx, fn, "dv", dv, q->dtype));
    TRY(chk_same_dtype(ctx, fn, "dout", dout, q->dtype));
    if (!lse) BAD("%s: lse is NULL (the backward needs the lse the forward returned)", fn);
    if (dsinks && !p->sinks) BAD("%s: dsinks is given but opt->sinks is NULL", fn);
    p->grad_q = *dq; p->grad_k = *dk; p->grad_v = *dv; p->dout = *dout;
    p->lse = NULL;
    p->lse_in = lse;
    p->dsinks = (float *)dsinks;
    return FA_OK;
}

/* cu_seqlens: starts at 0, non-decreasing, last entry within `total`, lengths <= max. */
static fa_status chk_cu(fa_context *ctx, const char *fn, const char *name,
                        const int32_t *cu, int64_t batch, int64_t total, const char *maxname,
                        int64_t maxlen)
{
    if (!cu) BAD("%s: %s is NULL", fn, name);
    if (ctx->ops->device_memory) return FA_OK;   /* device memory: the backend checks */
    if (cu[0] != 0) BAD("%s: %s[0]=%d must be 0", fn, name, (int)cu[0]);
    for (int64_t b = 0; b < batch; b++) {
        int64_t len = (int64_t)cu[b + 1] - cu[b];
        if (len < 0)
            BAD("%s: %s[%lld]=%d < %s[%lld]=%d: not non-decreasing", fn, name, (ll)(b + 1),
                (int)cu[b + 1], name, (ll)b, (int)cu[b]);
        if (len > maxlen)
            BAD("%s: sequence %lld has length %lld > %s=%lld (%s)", fn, (ll)b, (ll)len, maxname,
                (ll)maxlen, name);
    }
    if (cu[batch] > total)
        BAD("%s: %s[%lld]=%d exceeds the %lld rows of the tensor", fn, name, (ll)batch,
            (int)cu[batch], (ll)total);
    return FA_OK;
}

fa_status fa_build_varlen(fa_context *ctx, const char *fn, fa_problem *p,
                          const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                          int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k)
{
    if (p->q.shape[0] != 1)
        BAD("%s: q.shape[0]=%lld must be 1 for packed sequences", fn, (ll)p->q.shape[0]);
    if (batch < 0) BAD("%s: batch=%lld is negative", fn, (ll)batch);
    if (batch > INT32_MAX) BAD("%s: batch=%lld is larger than int32 allows", fn, (ll)batch);
    if (max_seqlen_q < 0) BAD("%s: max_seqlen_q=%lld is negative", fn, (ll)max_seqlen_q);
    if (max_seqlen_k < 0) BAD("%s: max_seqlen_k=%lld is negative", fn, (ll)max_seqlen_k);
    TRY(chk_cu(ctx, fn, "cu_seqlens_q", cu_seqlens_q, batch, p->q.shape[1], "max_seqlen_q",
               max_seqlen_q));
    TRY(chk_cu(ctx, fn, "cu_seqlens_k", cu_seqlens_k, batch, p->k.shape[1], "max_seqlen_k",
               max_seqlen_k));
    p->layout = FA_LAYOUT_VARLEN;
    p->batch = batch;
    p->cu_q = cu_seqlens_q;
    p->cu_k = cu_seqlens_k;
    p->max_sq = max_seqlen_q;
    p->max_sk = max_seqlen_k;
    return FA_OK;
}

fa_status fa_build_kvcache(fa_context *ctx, const char *fn, fa_problem *p,
                           const fa_tensor *out, const float *lse, const fa_tensor *q,
                           const fa_tensor *k_cache, const fa_tensor *v_cache,
                           const fa_tensor *k_new, const fa_tensor *v_new,
                           const int32_t *cache_seqlens, const int32_t *block_table,
                           int64_t max_pages_per_seq, const fa_options *opt)
{
    memset(p, 0, sizeof *p);
    int append = k_new || v_new;
    TRY(chk_tensor(ctx, fn, "out", out, 1, 1));
    TRY(chk_tensor(ctx, fn, "q", q, 0, 1));
    TRY(chk_tensor(ctx, fn, "k_cache", k_cache, append, 1));
    TRY(chk_tensor(ctx, fn, "v_cache", v_cache, append, 1));
    TRY(chk_qkv(ctx, fn, q, k_cache, v_cache, "k_cache", "v_cache"));
    TRY(chk_dim(ctx, fn, "v_cache", v_cache, 0, "k_cache", k_cache, 0));
    TRY(chk_dim(ctx, fn, "v_cache", v_cache, 1, "k_cache", k_cache, 1));
    TRY(chk_out_like(ctx, fn, "out", out, q, v_cache, "v_cache"));
    TRY(chk_out_dtype(ctx, fn, "out", out, q->dtype));
    int64_t B = q->shape[0];
    if (k_new && !v_new) BAD("%s: k_new is given but v_new is NULL", fn);
    if (v_new && !k_new) BAD("%s: v_new is given but k_new is NULL", fn);
    int64_t s_new = 0;
    if (append) {
        TRY(chk_tensor(ctx, fn, "k_new", k_new, 0, 1));
        TRY(chk_tensor(ctx, fn, "v_new", v_new, 0, 1));
        TRY(chk_same_dtype(ctx, fn, "k_new", k_new, q->dtype));
        TRY(chk_same_dtype(ctx, fn, "v_new", v_new, q->dtype));
        TRY(chk_dim(ctx, fn, "k_new", k_new, 0, "q", q, 0));
        TRY(chk_dim(ctx, fn, "v_new", v_new, 0, "q", q, 0));
        TRY(chk_dim(ctx, fn, "v_new", v_new, 1, "k_new", k_new, 1));
        TRY(chk_dim(ctx, fn, "k_new", k_new, 2, "k_cache", k_cache, 2));
        TRY(chk_dim(ctx, fn, "v_new", v_new, 2, "v_cache", v_cache, 2));
        TRY(chk_dim(ctx, fn, "k_new", k_new, 3, "k_cache", k_cache, 3));
        TRY(chk_dim(ctx, fn, "v_new", v_new, 3, "v_cache", v_cache, 3));
        s_new = k_new->shape[1];
    }
    if (B > 0 && !cache_seqlens) BAD("%s: cache_seqlens is NULL", fn);
    int64_t capacity, num_pages = 0, page_size = 0;
    if (block_table) {
        num_pages = k_cache->shape[0];
        page_size = k_cache->shape[1];
        if (page_size < 1) BAD("%s: k_cache.shape[1]=%lld: page_size must be >= 1", fn, (ll)page_size);
        if (max_pages_per_seq < 1)
            BAD("%s: max_pages_per_seq=%lld must be >= 1 with a block_table", fn,
                (ll)max_pages_per_seq);
        if (__builtin_mul_overflow(max_pages_per_seq, page_size, &capacity))
            BAD("%s: max_pages_per_seq=%lld x page_size=%lld overflows", fn,
                (ll)max_pages_per_seq, (ll)page_size);
    } else {
        TRY(chk_dim(ctx, fn, "k_cache", k_cache, 0, "q", q, 0));
        capacity = k_cache->shape[1];
    }
    /* From the shapes alone, on every backend (device memory too): the new rows must fit. */
    if (s_new > capacity)
        BAD("%s: k_new.shape[1]=%lld (S_new) exceeds the cache capacity %lld", fn, (ll)s_new,
            (ll)capacity);
    /* Contents of device arrays are checked by the backend (FA_DEBUG=1). On the host the
       longest sequence, not the capacity, bounds the keys (a paged cache's capacity may be
       far beyond anything stored, e.g. a stride-0 page of 2^62 rows). */
    int64_t longest = 0;
    for (int64_t b = 0; b < (ctx->ops->device_memory ? 0 : B); b++) {
        int64_t len = cache_seqlens[b];
        if (len < 0) BAD("%s: cache_seqlens[%lld]=%lld is negative", fn, (ll)b, (ll)len);
        if (len > capacity - s_new)   /* len + s_new > capacity */
            BAD("%s: cache_seqlens[%lld]=%lld + S_new=%lld exceeds the cache capacity %lld",
                fn, (ll)b, (ll)len, (ll)s_new, (ll)capacity);
        int64_t total = len + s_new;                        /* <= capacity: no overflow */
        if (total > longest) longest = total;
        if (!block_table) continue;
        int64_t used = total / page_size + (total % page_size != 0);
        for (int64_t g = 0; g < used; g++) {
            int64_t e = block_table[b * max_pages_per_seq + g];
            if (e < 0 || e >= num_pages)
                BAD("%s: block_table[%lld][%lld]=%lld is not a page of k_cache (0..%lld)", fn,
                    (ll)b, (ll)g, (ll)e, (ll)num_pages - 1);
        }
    }
    fill_sizes(p, q, k_cache, v_cache);
    p->layout = FA_LAYOUT_KVCACHE;
    p->out = *out;
    p->lse = (float *)lse;
    p->cache_seqlens = cache_seqlens;
    p->s_new = s_new;
    p->block_table = block_table;
    p->max_pages = block_table ? max_pages_per_seq : 0;
    p->page_size = page_size;
    p->max_sk = ctx->ops->device_memory ? capacity : longest;
    return chk_options(ctx, fn, p, opt, 0, 1);
}

fa_status fa_check_combine(fa_context *ctx, const char *fn, const fa_tensor *out,
                           const fa_tensor *out_parts, const float *const *lse_parts, int n)
{
    TRY(chk_tensor(ctx, fn, "out", out, 1, 1));
    if (n < 1) BAD("%s: n=%d must be >= 1", fn, n);
    if (!out_parts) BAD("%s: out_parts is NULL", fn);
    if (!lse_parts) BAD("%s: lse_parts is NULL", fn);
    int64_t rows = out->shape[0] * out->shape[1] * out->shape[2];
    for (int i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof name, "out_parts[%d]", i);
        TRY(chk_tensor(ctx, fn, name, &out_parts[i], 0, 1));
        TRY(chk_same_shape(ctx, fn, name, &out_parts[i], "out", out));
        if (!lse_parts[i] && rows > 0) BAD("%s: lse_parts[%d] is NULL", fn, i);
    }
    return FA_OK;
}
