/* ring_common.c - the ring's agreed status and argument checks, and the block messages
 * and copies that fa_ring_forward and fa_ring_backward share. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ring_internal.h"
#include "dtype.h"

/* ---- the thread's last error and stats ---------------------------------------------- */
static _Thread_local char ring_err[320];
static _Thread_local fa_ring_stats ring_st;

FA_API const char *fa_ring_last_error(void) { return ring_err; }
FA_API void fa_ring_last_stats(fa_ring_stats *stats) { if (stats) *stats = ring_st; }
void ring_set_error(const char *msg) { snprintf(ring_err, sizeof ring_err, "%s", msg); }
void ring_set_stats(const fa_ring_stats *st) { ring_st = *st; }

double ring_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- status ---------------------------------------------------------------------------- */
void ring_fail(ring_status *s, fa_status st, const char *fmt, ...)
{
    if (s->st != FA_OK) return;   /* the first failure is the one reported */
    s->st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
}

void ring_fail_ctx(ring_status *s, fa_status st, fa_context *ctx, const char *what)
{
    ring_fail(s, st, "%s: %s", what, fa_last_error(ctx));
}

fa_status ring_agree(MPI_Comm comm, ring_status *s)
{
    /* INVALID_ARG ranks first (the call is wrong), then the lowest other code. */
    int code = s->st == FA_OK ? INT_MAX : s->st == FA_ERR_INVALID_ARG ? 0 : (int)s->st;
    int rank;
    MPI_Comm_rank(comm, &rank);
    struct { int v, r; } in = { code, rank }, worst;
    MPI_Allreduce(&in, &worst, 1, MPI_2INT, MPI_MINLOC, comm);
    if (worst.v == INT_MAX) return FA_OK;
    char buf[sizeof s->msg];
    if (rank == worst.r) {   /* messages from ring_setup's check already name the rank */
        if (strncmp(s->msg, "rank ", 5) == 0) memcpy(buf, s->msg, sizeof buf);
        else snprintf(buf, sizeof buf, "rank %d: %.230s", rank, s->msg);
    }
    MPI_Bcast(buf, (int)sizeof buf, MPI_CHAR, worst.r, comm);
    s->st = worst.v == 0 ? FA_ERR_INVALID_ARG : (fa_status)worst.v;
    snprintf(s->msg, sizeof s->msg, "%s", buf);
    ring_set_error(s->msg);
    return s->st;
}

void *ring_alloc(ring_status *s, size_t bytes, const char *what)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) ring_fail(s, FA_ERR_NO_MEMORY, "no memory for %s (%zu bytes)", what, bytes);
    return p;
}

/* ---- argument checks ---------------------------------------------------------------- */
static int bad_layout(ring_status *s, const char *fn, const fa_ring_layout *L,
                      const fa_tensor *q, const fa_tensor *k, const fa_tensor *v)
{
    if (L->kind != FA_RING_CONTIGUOUS && L->kind != FA_RING_ZIGZAG) {
        ring_fail(s, FA_ERR_INVALID_ARG, "%s: layout->kind=%d is not a fa_ring_kind", fn,
                  (int)L->kind);
        return 1;
    }
    for (int i = 0; i < 2; i++)
        if (L->q_len[i] < 0 || L->kv_len[i] < 0) {
            ring_fail(s, FA_ERR_INVALID_ARG, "%s: layout lengths must be >= 0 "
                      "(q_len[%d]=%lld, kv_len[%d]=%lld)", fn, i, (long long)L->q_len[i], i,
                      (long long)L->kv_len[i]);
            return 1;
        }
    if (L->kind == FA_RING_CONTIGUOUS && (L->q_len[1] || L->kv_len[1])) {
        ring_fail(s, FA_ERR_INVALID_ARG, "%s: a contiguous layout has one chunk "
                  "(q_len[1] and kv_len[1] must be 0)", fn);
        return 1;
    }
    if (L->q_len[0] + L->q_len[1] != q->shape[1]) {
        ring_fail(s, FA_ERR_INVALID_ARG, "%s: q.shape[1]=%lld but layout q_len sums to %lld",
                  fn, (long long)q->shape[1], (long long)(L->q_len[0] + L->q_len[1]));
        return 1;
    }
    if (L->kv_len[0] + L->kv_len[1] != k->shape[1] || k->shape[1] != v->shape[1]) {
        ring_fail(s, FA_ERR_INVALID_ARG, "%s: k.shape[1]=%lld, v.shape[1]=%lld but layout "
                  "kv_len sums to %lld", fn, (long long)k->shape[1], (long long)v->shape[1],
                  (long long)(L->kv_len[0] + L->kv_len[1]));
        return 1;
    }
    return 0;
}

/* A window bound: -1 (unbounded) for -1 and for 2^62 or more (docs/api.md). */
static int64_t window_bound(int64_t x) { return x >= 0 && x < ((int64_t)1 << 62) ? x : -1; }

void ring_check_common(fa_context *ctx, ring_status *s, const char *fn, const fa_tensor *q,
                       const fa_tensor *k, const fa_tensor *v, const fa_ring_layout *layout,
                       const fa_options *opt, ring_args *a)
{
    memset(a, 0, sizeof *a);
    if (!ctx) { ring_fail(s, FA_ERR_INVALID_ARG, "%s: ctx is NULL", fn); return; }
    if (!q || !k || !v) {
        ring_fail(s, FA_ERR_INVALID_ARG, "%s: %s is NULL", fn, !q ? "q" : !k ? "k" : "v");
        return;
    }
    fa_ring_layout def = { FA_RING_CONTIGUOUS, { q->shape[1], 0 }, { k->shape[1], 0 } };
    a->layout_null = layout == NULL;
    if (!layout) layout = &def;
    if (bad_layout(s, fn, layout, q, k, v)) return;
    fa_options o = opt ? *opt : (fa_options){ 0 };
    a->B = q->shape[0]; a->H = q->shape[2]; a->Hkv = k->shape[2];
    a->dqk = q->shape[3]; a->dv = v->shape[3]; a->dt = q->dtype;
    a->kind = layout->kind;
    for (int i = 0; i < 2; i++) { a->qlen[i] = layout->q_len[i]; a->kvlen[i] = layout->kv_len[i]; }
    a->causal = o.causal;
    a->window = o.window != 0;
    /* a bound of 2^62 or more is unbounded (docs/api.md) */
    a->wl = a->window ? window_bound(o.window_left) : -1;
    a->wr = a->window ? window_bound(o.window_right) : -1;
    a->alibi = o.alibi_slopes != NULL;
    a->staged = fa_context_backend(ctx) == FA_BACKEND_CUDA;
    a->sinks = o.sinks != NULL;
    a->deterministic = o.deterministic;
    memcpy(&a->scale_bits, &o.scale, 4);
    memcpy(&a->softcap_bits, &o.softcap, 4);
}

void ring_check_unsupported(ring_status *s, const char *fn, const fa_options *opt)
{
    if (opt && opt->bias)
        ring_fail(s, FA_ERR_UNSUPPORTED, "%s: opt->bias is not served", fn);
    else if (opt && opt->dropout_p > 0.0f)
        ring_fail(s, FA_ERR_UNSUPPORTED, "%s: dropout is not served (its keep-mask is keyed "
                  "by positions within one fa_forward call, not global positions)", fn);
}

static const char *arg_mismatch(const ring_args *a, const ring_args *b)
{
#define SAME(f, name) if (a->f != b->f) return name
    SAME(B, "q.shape[0]"); SAME(H, "q.shape[2]"); SAME(Hkv, "k.shape[2]");
    SAME(dqk, "q.shape[3]"); SAME(dv, "v.shape[3]"); SAME(dt, "q.dtype");
    SAME(kind, "layout->kind"); SAME(layout_null, "layout (NULL or not)");
    SAME(causal, "opt->causal"); SAME(sinks, "opt->sinks (NULL or not)");
    SAME(scale_bits, "opt->scale"); SAME(softcap_bits, "opt->softcap");
    SAME(dsinks_null, "dsinks (NULL or not)"); SAME(window, "opt->window");
    SAME(wl, "opt->window_left"); SAME(wr, "opt->window_right");
    SAME(alibi, "opt->alibi_slopes (NULL or not)");
    SAME(staged, "the context's backend (CUDA or not)");
#undef SAME
    return NULL;
}

fa_status ring_setup(MPI_Comm comm, const char *fn, ring_status *s, ring_geom *g,
                     const ring_args *mine)
{
    memset(g, 0, sizeof *g);
    MPI_Comm_size(comm, &g->R);
    MPI_Comm_rank(comm, &g->rank);
    ring_args *all = malloc(sizeof *all * (size_t)g->R);
    int ok = all != NULL, allok;
    MPI_Allreduce(&ok, &allok, 1, MPI_INT, MPI_MIN, comm);
    if (!allok) {
        free(all);
        ring_fail(s, FA_ERR_NO_MEMORY, "%s: no memory for the ranks' arguments", fn);
        return ring_agree(comm, s);
    }
    MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE, comm);
    /* Every rank sees the same table, so every rank reaches the same verdict. */
    for (int r = 1; r < g->R; r++) {
        const char *what = arg_mismatch(&all[0], &all[r]);
        if (what) {
            snprintf(s->msg, sizeof s->msg, "rank %d: %s: %s differs from rank 0's", r, fn,
                     what);
            s->st = FA_ERR_INVALID_ARG;
            ring_set_error(s->msg);
            free(all);
            return s->st;
        }
    }
    g->qlen = malloc(sizeof(int64_t) * 4 * (size_t)g->R);
    if (!g->qlen) {
        ring_fail(s, FA_ERR_NO_MEMORY, "%s: no memory for the layout table", fn);
        free(all);
        return FA_OK;   /* agreed with the allocations that follow */
    }
    g->kvlen = g->qlen + 2 * g->R;
    for (int r = 0; r < g->R; r++)
        for (int i = 0; i < 2; i++) {
            g->qlen[2 * r + i] = all[r].qlen[i];
            g->kvlen[2 * r + i] = all[r].kvlen[i];
            g->Sq += all[r].qlen[i];
            g->Sk += all[r].kvlen[i];
        }
    for (int r = 0; r < g->R; r++) {
        int64_t nk = all[r].kvlen[0] + all[r].kvlen[1];
        if (nk > g->max_nk) g->max_nk = nk;
    }
    g->kind = (fa_ring_kind)mine->kind;
    g->off = mine->causal == FA_CAUSAL_TOP_LEFT ? 0 : g->Sk - g->Sq;
    g->wl = mine->wl;
    g->wr = mine->causal != FA_CAUSAL_NONE ? 0 : mine->wr;
    g->alibi = (int)mine->alibi;
    g->B = mine->B; g->H = mine->H; g->Hkv = mine->Hkv;
    g->dqk = mine->dqk; g->dv = mine->dv; g->dt = (fa_dtype)mine->dt;
    g->esz = fa_dtype_size(g->dt);
    free(all);
    /* The largest message: a K/V block, or the backward's fp32 dK/dV block. */
    size_t kvb = ring_kv_bytes(g, g->max_nk);
    size_t dkvb = ring_round64(sizeof(float) * (size_t)(g->B * g->max_nk * g->Hkv) *
                               (size_t)(g->dqk + g->dv));
    if ((kvb > dkvb ? kvb : dkvb) / 64 > (size_t)INT_MAX)
        ring_fail(s, FA_ERR_UNSUPPORTED, "%s: a K/V block of %zu bytes is over what one "
                  "MPI message carries here (128 GiB)", fn, kvb > dkvb ? kvb : dkvb);
    return FA_OK;
}

void ring_geom_free(ring_geom *g) { free(g->qlen); g->qlen = g->kvlen = NULL; }

/* ---- blocks in flight ------------------------------------------------------------------ */
size_t ring_round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

size_t ring_kv_bytes(const ring_geom *g, int64_t nk)
{
    return ring_round64((size_t)(g->B * nk * g->Hkv) * (size_t)(g->dqk + g->dv) * g->esz);
}

fa_tensor ring_block_k(const ring_geom *g, void *buf, int64_t nk)
{
    return fa_tensor_contiguous(buf, g->dt, g->B, nk, g->Hkv, g->dqk);
}

fa_tensor ring_block_v(const ring_geom *g, void *buf, int64_t nk)
{
    char *p = (char *)buf + (size_t)(g->B * nk * g->Hkv * g->dqk) * g->esz;
    return fa_tensor_contiguous(p, g->dt, g->B, nk, g->Hkv, g->dv);
}

static void pack_one(const fa_tensor *src, fa_tensor dst, size_t esz)
{
    size_t row = (size_t)src->shape[3] * esz;
    for (int64_t b = 0; b < src->shape[0]; b++)
        for (int64_t s = 0; s < src->shape[1]; s++)
            for (int64_t h = 0; h < src->shape[2]; h++) {
                const char *from = (const char *)src->data +
                    (size_t)(b * src->stride[0] + s * src->stride[1] + h * src->stride[2]) * esz;
                char *to = (char *)dst.data +
                    (size_t)(b * dst.stride[0] + s * dst.stride[1] + h * dst.stride[2]) * esz;
                memcpy(to, from, row);
            }
}

void ring_pack_kv(const ring_geom *g, void *buf, const fa_tensor *k, const fa_tensor *v)
{
    pack_one(k, ring_block_k(g, buf, k->shape[1]), g->esz);
    pack_one(v, ring_block_v(g, buf, v->shape[1]), g->esz);
}

/* Messages count 64-byte units so that an int count reaches 128 GiB. The type is
   committed once and kept for the life of the process. */
static MPI_Datatype unit64_type = MPI_DATATYPE_NULL;
static pthread_once_t unit64_once = PTHREAD_ONCE_INIT;

static void unit64_init(void)
{
    MPI_Type_contiguous(64, MPI_BYTE, &unit64_type);
    MPI_Type_commit(&unit64_type);
}

static MPI_Datatype unit64(void)
{
    pthread_once(&unit64_once, unit64_init);
    return unit64_type;
}

int ring_isend(MPI_Comm comm, const void *buf, size_t bytes, int to, int tag, MPI_Request *rq)
{
    return MPI_Isend(buf, (int)(bytes / 64), unit64(), to, tag, comm, rq);
}

int ring_irecv(MPI_Comm comm, void *buf, size_t bytes, int from, int tag, MPI_Request *rq)
{
    return MPI_Irecv(buf, (int)(bytes / 64), unit64(), from, tag, comm, rq);
}

/* ---- views and copies ------------------------------------------------------------------ */
fa_tensor ring_rows(const fa_tensor *t, int64_t r0, int64_t n)
{
    fa_tensor v = *t;
    v.data = (char *)t->data + (size_t)(r0 * t->stride[1]) * fa_dtype_size(t->dtype);
    v.shape[1] = n;
    return v;
}

void ring_lse_gather(float *dst, const float *lse, int64_t B, int64_t H, int64_t S,
                     int64_t r0, int64_t n)
{
    for (int64_t bh = 0; bh < B * H; bh++)
        memcpy(dst + bh * n, lse + bh * S + r0, sizeof(float) * (size_t)n);
}

void ring_lse_scatter(float *lse, const float *src, int64_t B, int64_t H, int64_t S,
                      int64_t r0, int64_t n)
{
    for (int64_t bh = 0; bh < B * H; bh++)
        memcpy(lse + bh * S + r0, src + bh * n, sizeof(float) * (size_t)n);
}

#define FOR_ELEMS(t) \
    for (int64_t b = 0; b < (t)->shape[0]; b++) \
        for (int64_t s = 0; s < (t)->shape[1]; s++) \
            for (int64_t h = 0; h < (t)->shape[2]; h++) \
                for (int64_t d = 0; d < (t)->shape[3]; d++)
#define AT(t) (b * (t)->stride[0] + s * (t)->stride[1] + h * (t)->stride[2] + d)

void ring_store(fa_tensor *dst, const fa_tensor *src)
{
    const float *x = src->data;
    FOR_ELEMS(dst) fa_store(dst->data, dst->dtype, AT(dst), x[AT(src)]);
}

void ring_add(fa_tensor *dst, const fa_tensor *src)
{
    float *y = dst->data;
    const float *x = src->data;
    FOR_ELEMS(dst) y[AT(dst)] += x[AT(src)];
}
