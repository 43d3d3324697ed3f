/* ring_check.c - the whole-sequence problem, its oracle and single-process results, the
 * shards, and the comparison with the rule's form (ring_check.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ring_check.h"
#include "models.h"
#include "dtype.h"

static uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rnd_unif(uint64_t *s) { return (double)(rnd_next(s) >> 11) * 0x1p-52 - 1.0; }

/* Chunk lengths of rank r: the same formula on every rank. */
static void chunk_lens(const rc_case *c, int R, int r, int64_t q[2], int64_t kv[2])
{
    int nch = c->kind == FA_RING_ZIGZAG ? 2 : 1;
    for (int i = 0; i < 2; i++) {
        q[i] = kv[i] = 0;
        if (i >= nch) continue;
        int64_t n = 6;
        if (c->uneven) n = (int64_t)((c->seed * 31 + (uint64_t)r * 7 + (uint64_t)i * 13) % 11);
        if (c->uneven == 2) n = 40 + 4 * n;   /* longer: several of the backends' tiles */
        if (R > 1 && c->empty_rank >= 0 && r == c->empty_rank % R) n = 0;
        q[i] = n;
        kv[i] = n + c->kv_delta * (int64_t)((r + i) % 2);
        if (kv[i] < 0) kv[i] = 0;
    }
}

/* Global start of every chunk, in the order of the sequence, and the positions of rank
   `rank`'s rows. */
static int64_t *positions(const rc_case *c, int R, int rank, int64_t (*len)[2], int64_t *n)
{
    int nch = c->kind == FA_RING_ZIGZAG ? 2 * R : R;
    int64_t pos = 0, start[2] = { 0, 0 };
    for (int ch = 0; ch < nch; ch++) {
        int owner = ch < R ? ch : 2 * R - 1 - ch, part = ch < R ? 0 : 1;
        if (owner == rank) start[part] = pos;
        pos += len[owner][part];
    }
    *n = len[rank][0] + len[rank][1];
    int64_t *p = malloc(sizeof(int64_t) * (size_t)(*n > 0 ? *n : 1));
    for (int64_t i = 0; i < len[rank][0]; i++) p[i] = start[0] + i;
    for (int64_t i = 0; i < len[rank][1]; i++) p[len[rank][0] + i] = start[1] + i;
    return p;
}

static void fill(void *buf, double *d, fa_dtype dt, int64_t n, uint64_t *s)
{
    for (int64_t i = 0; i < n; i++) {
        fa_store(buf, dt, i, (float)rnd_unif(s));
        d[i] = fa_load(buf, dt, i);
    }
}

/* dst rows [i] = src rows pos[i] ([B, S, H, d] contiguous, element size esz). */
static void *shard(const void *src, int64_t B, int64_t S, int64_t H, int64_t d, size_t esz,
                   const int64_t *pos, int64_t n)
{
    size_t row = (size_t)(H * d) * esz;
    char *dst = malloc(row * (size_t)(B * n) + 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)(b * n + i) * row, (const char *)src + (size_t)(b * S + pos[i]) * row,
                   row);
    return dst;
}

static void oracle(rc_problem *p)
{
    const rc_case *c = &p->c;
    for (int64_t b = 0; b < c->B; b++) {
        or_seq s = { 0 };
        s.sq = p->Sq; s.sk = p->Sk; s.hq = c->H; s.hkv = c->Hkv; s.dqk = c->dqk; s.dv = c->dv;
        s.scale = 1.0 / sqrt((double)c->dqk);
        s.causal = c->causal;
        s.softcap = c->softcap;
        s.sinks = p->sinksd;
        s.window = c->window;
        s.wl = c->wl;
        s.wr = c->wr;
        s.alibi = p->slopesd;
        s.drop_b = b;
        int64_t qo = b * p->Sq * c->H, ko = b * p->Sk * c->Hkv;
        or_forward(&s, p->qd + qo * c->dqk, p->kd + ko * c->dqk, p->vd + ko * c->dv,
                   p->o_out + qo * c->dv, p->o_lse + b * c->H * p->Sq);
        or_backward(&s, p->qd + qo * c->dqk, p->kd + ko * c->dqk, p->vd + ko * c->dv,
                    p->doutd + qo * c->dv, p->o_dq + qo * c->dqk, p->o_dk + ko * c->dqk,
                    p->o_dv + ko * c->dv, p->o_ds);
    }
}

static double *to_double(const void *buf, fa_dtype dt, int64_t n)
{
    double *d = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) d[i] = fa_load(buf, dt, i);
    return d;
}

/* Where single() puts a buffer: host memory, or (dev) a device copy of it. */
typedef struct { int dev, n; void *mem[12]; } placer;

static void *place(placer *pl, void *host, size_t bytes)
{
    if (!pl->dev) return host;
    void *d = rc_dev_put(host, bytes);
    pl->mem[pl->n++] = d;
    return d;
}

/* One fa_forward + fa_backward over the whole sequence (on a CUDA context, on device
   copies). */
static int single(rc_problem *p, fa_context *ctx, char *msg, size_t len)
{
    const rc_case *c = &p->c;
    size_t oe = fa_dtype_size(c->odt), e = fa_dtype_size(c->dt);
    int64_t nout = c->B * p->Sq * c->H * c->dv, ndq = c->B * p->Sq * c->H * c->dqk;
    int64_t ndk = c->B * p->Sk * c->Hkv * c->dqk, ndv = c->B * p->Sk * c->Hkv * c->dv;
    int64_t nl = c->B * c->H * p->Sq;
    void *out = calloc(1, oe * (size_t)nout + 1), *dq = calloc(1, oe * (size_t)ndq + 1);
    void *dk = calloc(1, oe * (size_t)ndk + 1), *dv = calloc(1, oe * (size_t)ndv + 1);
    float *lse = calloc(1, sizeof(float) * (size_t)nl + 1);
    float ds[64] = { 0 };
    placer pl = { fa_context_backend(ctx) == FA_BACKEND_CUDA, 0, { 0 } };
    if (pl.dev && rc_dev_load(msg, len) != 0) {
        free(out); free(dq); free(dk); free(dv); free(lse);
        return -1;
    }
    void *mem[2] = { NULL, NULL };
    fa_options o = pl.dev ? rc_dev_options(&p->opt, c->H, mem) : p->opt;
    int64_t B = c->B, Sq = p->Sq, Sk = p->Sk, H = c->H, Hkv = c->Hkv;
    fa_tensor to = fa_tensor_contiguous(place(&pl, out, oe * (size_t)nout), c->odt, B, Sq, H,
                                        c->dv);
    fa_tensor tq = fa_tensor_contiguous(place(&pl, p->q, e * (size_t)ndq), c->dt, B, Sq, H,
                                        c->dqk);
    fa_tensor tk = fa_tensor_contiguous(place(&pl, p->k, e * (size_t)ndk), c->dt, B, Sk, Hkv,
                                        c->dqk);
    fa_tensor tv = fa_tensor_contiguous(place(&pl, p->v, e * (size_t)ndv), c->dt, B, Sk, Hkv,
                                        c->dv);
    fa_tensor tdo = fa_tensor_contiguous(place(&pl, p->dout, e * (size_t)nout), c->dt, B, Sq,
                                         H, c->dv);
    fa_tensor tdq = fa_tensor_contiguous(place(&pl, dq, oe * (size_t)ndq), c->odt, B, Sq, H,
                                         c->dqk);
    fa_tensor tdk = fa_tensor_contiguous(place(&pl, dk, oe * (size_t)ndk), c->odt, B, Sk, Hkv,
                                         c->dqk);
    fa_tensor tdv = fa_tensor_contiguous(place(&pl, dv, oe * (size_t)ndv), c->odt, B, Sk, Hkv,
                                         c->dv);
    float *tl = place(&pl, lse, sizeof(float) * (size_t)nl);
    float *tds = place(&pl, ds, sizeof ds);
    int rc = 0;
    if (fa_forward(ctx, &to, tl, &tq, &tk, &tv, &o) != FA_OK ||
        fa_backward(ctx, &tdq, &tdk, &tdv, c->sinks ? tds : NULL, &tdo, &tq, &tk, &tv, &to, tl,
                    &o) != FA_OK) {
        snprintf(msg, len, "single-process call failed: %s", fa_last_error(ctx));
        rc = -1;
    } else if (pl.dev && (rc_dev_get(out, to.data, oe * (size_t)nout) || rc_dev_get(lse, tl,
               sizeof(float) * (size_t)nl) || rc_dev_get(dq, tdq.data, oe * (size_t)ndq) ||
               rc_dev_get(dk, tdk.data, oe * (size_t)ndk) || rc_dev_get(dv, tdv.data,
               oe * (size_t)ndv) || rc_dev_get(ds, tds, sizeof ds))) {
        snprintf(msg, len, "copying the single-process results from the device failed");
        rc = -1;
    }
    if (rc == 0) {
        p->s_out = to_double(out, c->odt, nout);
        p->s_lse = to_double(lse, FA_F32, nl);
        p->s_dq = to_double(dq, c->odt, ndq);
        p->s_dk = to_double(dk, c->odt, ndk);
        p->s_dv = to_double(dv, c->odt, ndv);
        p->s_ds = to_double(ds, FA_F32, c->H);
    }
    for (int i = 0; i < pl.n; i++) rc_dev_free(pl.mem[i]);
    rc_dev_free(mem[0]);
    rc_dev_free(mem[1]);
    free(out); free(dq); free(dk); free(dv); free(lse);
    return rc;
}

int rc_build(rc_problem *p, const rc_case *c, int R, int rank, fa_context *ctx, char *msg,
             size_t len)
{
    memset(p, 0, sizeof *p);
    p->c = *c;
    p->R = R;
    p->rank = rank;
    p->qlen = malloc(sizeof *p->qlen * (size_t)R);
    p->kvlen = malloc(sizeof *p->kvlen * (size_t)R);
    for (int r = 0; r < R; r++) {
        chunk_lens(c, R, r, p->qlen[r], p->kvlen[r]);
        p->Sq += p->qlen[r][0] + p->qlen[r][1];
        p->Sk += p->kvlen[r][0] + p->kvlen[r][1];
    }
    p->qpos = positions(c, R, rank, p->qlen, &p->nq);
    p->kvpos = positions(c, R, rank, p->kvlen, &p->nk);
    p->layout = (fa_ring_layout){ c->kind, { p->qlen[rank][0], p->qlen[rank][1] },
                                  { p->kvlen[rank][0], p->kvlen[rank][1] } };
    size_t e = fa_dtype_size(c->dt);
    int64_t nq = c->B * p->Sq * c->H, nk = c->B * p->Sk * c->Hkv;
    p->q = malloc(e * (size_t)(nq * c->dqk) + 1); p->qd = malloc(sizeof(double) * (size_t)(nq * c->dqk) + 8);
    p->k = malloc(e * (size_t)(nk * c->dqk) + 1); p->kd = malloc(sizeof(double) * (size_t)(nk * c->dqk) + 8);
    p->v = malloc(e * (size_t)(nk * c->dv) + 1); p->vd = malloc(sizeof(double) * (size_t)(nk * c->dv) + 8);
    p->dout = malloc(e * (size_t)(nq * c->dv) + 1); p->doutd = malloc(sizeof(double) * (size_t)(nq * c->dv) + 8);
    uint64_t s = c->seed;
    fill(p->q, p->qd, c->dt, nq * c->dqk, &s);
    fill(p->k, p->kd, c->dt, nk * c->dqk, &s);
    fill(p->v, p->vd, c->dt, nk * c->dv, &s);
    fill(p->dout, p->doutd, c->dt, nq * c->dv, &s);
    if (c->sinks) {
        p->sinks = malloc(sizeof(float) * (size_t)c->H);
        p->sinksd = malloc(sizeof(double) * (size_t)c->H);
        for (int64_t h = 0; h < c->H; h++) p->sinksd[h] = p->sinks[h] = (float)(2.0 * rnd_unif(&s));
    }
    if (c->alibi) {
        p->slopes = malloc(sizeof(float) * (size_t)c->H);
        p->slopesd = malloc(sizeof(double) * (size_t)c->H);
        for (int64_t h = 0; h < c->H; h++)
            p->slopesd[h] = p->slopes[h] = (float)(0.35 + 0.3 * rnd_unif(&s));
    }
    p->opt = (fa_options){ 0 };
    p->opt.causal = c->causal;
    p->opt.window = c->window;
    p->opt.window_left = c->wl;
    p->opt.window_right = c->wr;
    p->opt.alibi_slopes = p->slopes;
    p->opt.softcap = c->softcap;
    p->opt.sinks = p->sinks;
    p->opt.deterministic = c->deterministic;
    p->o_out = calloc((size_t)(nq * c->dv) + 1, sizeof(double));
    p->o_lse = calloc((size_t)(c->B * c->H * p->Sq) + 1, sizeof(double));
    p->o_dq = calloc((size_t)(nq * c->dqk) + 1, sizeof(double));
    p->o_dk = calloc((size_t)(nk * c->dqk) + 1, sizeof(double));
    p->o_dv = calloc((size_t)(nk * c->dv) + 1, sizeof(double));
    p->o_ds = calloc((size_t)c->H + 1, sizeof(double));
    oracle(p);
    p->lq = shard(p->q, c->B, p->Sq, c->H, c->dqk, e, p->qpos, p->nq);
    p->ldout = shard(p->dout, c->B, p->Sq, c->H, c->dv, e, p->qpos, p->nq);
    p->lk = shard(p->k, c->B, p->Sk, c->Hkv, c->dqk, e, p->kvpos, p->nk);
    p->lv = shard(p->v, c->B, p->Sk, c->Hkv, c->dv, e, p->kvpos, p->nk);
    return single(p, ctx, msg, len);
}

/* Does some query of rank x see some key of rank o (the oracle's mask)? */
static int rank_needs(const rc_problem *p, const or_seq *s, int x, int o)
{
    int64_t nx, no;
    int64_t *qp = positions(&p->c, p->R, x, p->qlen, &nx);
    int64_t *kp = positions(&p->c, p->R, o, p->kvlen, &no);
    int need = 0;
    for (int64_t i = 0; i < nx && !need; i++)
        for (int64_t j = 0; j < no && !need; j++) need = or_visible(s, qp[i], kp[j]);
    free(qp);
    free(kp);
    return need;
}

int64_t rc_expected_kv_bytes(const rc_problem *p)
{
    const rc_case *c = &p->c;
    or_seq s = { 0 };
    s.sq = p->Sq; s.sk = p->Sk; s.causal = c->causal;
    s.window = c->window; s.wl = c->wl; s.wr = c->wr;
    int R = p->R;
    int64_t bytes = 0;
    for (int t = 0; t < R - 1; t++) {
        int o = (p->rank + R - t) % R, later = 0;
        for (int u = t + 1; u < R && !later; u++) later = rank_needs(p, &s, (o + u) % R, o);
        int64_t nk = p->kvlen[o][0] + p->kvlen[o][1];
        int64_t b = c->B * nk * c->Hkv * (c->dqk + c->dv) * (int64_t)fa_dtype_size(c->dt);
        if (later) bytes += (b + 63) / 64 * 64;
    }
    return bytes;
}

void rc_free(rc_problem *p)
{
    void *all[] = { p->qlen, p->kvlen, p->qpos, p->kvpos, p->q, p->k, p->v, p->dout, p->qd,
                    p->kd, p->vd, p->doutd, p->sinks, p->sinksd, p->slopes, p->slopesd, p->o_out, p->o_lse, p->o_dq,
                    p->o_dk, p->o_dv, p->o_ds, p->s_out, p->s_lse, p->s_dq, p->s_dk, p->s_dv,
                    p->s_ds, p->lq, p->lk, p->lv, p->ldout };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

fa_tensor rc_view(const void *shard, fa_dtype dt, int64_t B, int64_t S, int64_t H, int64_t d,
                  int padded, void **mem)
{
    *mem = NULL;
    if (!padded) return fa_tensor_contiguous((void *)shard, dt, B, S, H, d);
    size_t e = fa_dtype_size(dt);
    int64_t sh = d + 3, ss = H * sh + 2, sb = S * ss + 5;
    char *p = malloc((size_t)(B * sb + 1) * e);
    memset(p, 0xff, (size_t)(B * sb + 1) * e);   /* padding is NaN: reading it shows */
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < H; h++)
                memcpy(p + (size_t)(b * sb + s * ss + h * sh) * e,
                       (const char *)shard + (size_t)(((b * S + s) * H + h) * d) * e,
                       (size_t)d * e);
    *mem = p;
    fa_tensor t = { p, dt, { B, S, H, d }, { sb, ss, sh, 1 } };
    return t;
}

/* ---- output buffers ------------------------------------------------------------------ */
#define GUARD 40

void rc_buf_new(rc_buf *b, fa_dtype dt, int64_t B, int64_t S, int64_t H, int64_t d)
{
    size_t e = fa_dtype_size(dt);
    b->guard = GUARD * e;
    b->bytes = (size_t)(B * S * H * d) * e + 2 * b->guard;
    b->base = malloc(b->bytes);
    memset(b->base, 0xff, b->bytes);   /* NaN in every dtype */
    b->t = fa_tensor_contiguous(b->base + b->guard, dt, B, S, H, d);
}

void rc_buf_free(rc_buf *b) { free(b->base); }

int rc_guard_ok(const rc_buf *b)
{
    for (size_t i = 0; i < b->guard; i++)
        if (b->base[i] != 0xff || b->base[b->bytes - 1 - i] != 0xff) return 0;
    return 1;
}

int rc_all_poison(const rc_buf *b)
{
    for (size_t i = 0; i < b->bytes; i++)
        if (b->base[i] != 0xff) return 0;
    return 1;
}

double rc_get(const rc_buf *b, int64_t i) { return fa_load(b->t.data, b->t.dtype, i); }

/* ---- comparison ------------------------------------------------------------------------ */
static double eps_of(fa_dtype t) { return t == FA_F16 ? 0x1p-10 : t == FA_BF16 ? 0x1p-7 : 0x1p-23; }

static double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

static double max_diff(const double *a, const double *b, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(b[i]) && fabs(a[i] - b[i]) > m) m = fabs(a[i] - b[i]);
    return m;
}

/* ours[i] vs orc[map(i)]: rows x width elements; row r of ours is row rowmap[r] of the
   oracle's tensor, whose rows are grouped by batch (rows_per_b of each). */
typedef struct {
    const char *tag, *name;
    const double *orc, *sgl;     /* whole tensors                                         */
    int64_t n_all;               /* their element count                                   */
    double factor, ulps, ref_mag;
    fa_dtype in_dt, odt;
    double extra;                /* added to the bound (dsinks: what out's bound moves)    */
} cmp_spec;

static int compare(const rc_problem *p, const cmp_spec *c, const double *ours,
                   const int64_t *idx, int64_t n)
{
    double nerr = max_diff(c->sgl, c->orc, c->n_all);
    double mag = c->ref_mag > 0 ? c->ref_mag : max_abs(c->orc, c->n_all);
    double bound = c->factor * nerr + c->ulps * eps_of(c->odt) * mag + c->extra + 0x1p-149;
    double err = 0.0;
    int64_t worst = -1;
    for (int64_t i = 0; i < n; i++) {
        double o = c->orc[idx[i]], x = ours[i];
        if (!isfinite(o)) {
            if (!(x == o || (isnan(o) && isnan(x)))) {
                printf("FAIL rank %d %s %s: element %lld is %g, oracle %g (must match)\n",
                       p->rank, c->tag, c->name, (long long)i, x, o);
                return 1;
            }
            continue;
        }
        double d = fabs(x - o);
        if (!(d <= err)) { err = isnan(d) ? INFINITY : d; worst = i; }
    }
    int ok = err <= bound && (c->in_dt != FA_F32 || err <= 1e-5 * mag + 0x1p-149);
    if (!ok)
        printf("FAIL rank %d %s %s: max|ring-oracle| %.3g > bound %.3g (single-process %.3g, "
               "|oracle| %.3g) at %lld\n", p->rank, c->tag, c->name, err, bound, nerr, mag,
               (long long)worst);
    return !ok;
}

/* Indices into a global [B, S, H, w] tensor of this rank's rows pos[0..n). */
static int64_t *row_index(int64_t B, int64_t S, int64_t H, int64_t w, const int64_t *pos,
                          int64_t n)
{
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(B * n * H * w + 1));
    int64_t m = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t e = 0; e < H * w; e++) idx[m++] = (b * S + pos[i]) * H * w + e;
    return idx;
}

static double *buf_doubles(const rc_buf *b, int64_t n)
{
    double *d = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) d[i] = rc_get(b, i);
    return d;
}

static int check_rows(const rc_problem *p, cmp_spec *s, const rc_buf *b, int64_t S, int64_t H,
                      int64_t w, const int64_t *pos, int64_t n)
{
    int64_t cnt = p->c.B * n * H * w;
    int64_t *idx = row_index(p->c.B, S, H, w, pos, n);
    double *ours = buf_doubles(b, cnt);
    int f = compare(p, s, ours, idx, cnt);
    if (!rc_guard_ok(b)) {
        printf("FAIL rank %d %s %s: guard band overwritten\n", p->rank, s->tag, s->name);
        f++;
    }
    free(idx);
    free(ours);
    return f;
}

int rc_check_forward(const rc_problem *p, const char *tag, const rc_buf *out, const float *lse)
{
    const rc_case *c = &p->c;
    int f = 0;
    cmp_spec s = { tag, "out", p->o_out, p->s_out, c->B * p->Sq * c->H * c->dv, 2, 2, 0,
                   c->dt, c->odt, 0 };
    f += check_rows(p, &s, out, p->Sq, c->H, c->dv, p->qpos, p->nq);
    /* lse [B, H, nq] against [B, H, Sq] */
    int64_t cnt = c->B * c->H * p->nq, m = 0;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(cnt + 1));
    double *ours = malloc(sizeof(double) * (size_t)(cnt + 1));
    for (int64_t bh = 0; bh < c->B * c->H; bh++)
        for (int64_t i = 0; i < p->nq; i++) {
            idx[m] = bh * p->Sq + p->qpos[i];
            ours[m++] = lse[bh * p->nq + i];
        }
    cmp_spec sl = { tag, "lse", p->o_lse, p->s_lse, c->B * c->H * p->Sq, 2, 2, 0, c->dt, FA_F32, 0 };
    f += compare(p, &sl, ours, idx, cnt);
    free(idx);
    free(ours);
    return f;
}

int rc_check_backward(const rc_problem *p, const char *tag, const rc_buf *dq, const rc_buf *dk,
                      const rc_buf *dv, const float *dsinks)
{
    const rc_case *c = &p->c;
    int64_t nq = c->B * p->Sq * c->H, nk = c->B * p->Sk * c->Hkv;
    double mag = max_abs(p->o_dq, nq * c->dqk);
    double m2 = max_abs(p->o_dk, nk * c->dqk), m3 = max_abs(p->o_dv, nk * c->dv);
    if (m2 > mag) mag = m2;
    if (m3 > mag) mag = m3;
    int f = 0;
    cmp_spec s = { tag, "dq", p->o_dq, p->s_dq, nq * c->dqk, 3, 8, mag, c->dt, c->odt, 0 };
    f += check_rows(p, &s, dq, p->Sq, c->H, c->dqk, p->qpos, p->nq);
    s.name = "dk"; s.orc = p->o_dk; s.sgl = p->s_dk; s.n_all = nk * c->dqk;
    f += check_rows(p, &s, dk, p->Sk, c->Hkv, c->dqk, p->kvpos, p->nk);
    s.name = "dv"; s.orc = p->o_dv; s.sgl = p->s_dv; s.n_all = nk * c->dv;
    f += check_rows(p, &s, dv, p->Sk, c->Hkv, c->dv, p->kvpos, p->nk);
    if (dsinks) {
        /* dsinks[h] = -sum_i exp(sinks[h] - lse_i) (dout_i . out_i), with the ring's own
           out: it moves by as much as out's bound (2 x single + 2 ulps) and the single
           process's out error allow, weighted by exp(sinks[h] - lse_i) |dout_i|_1. */
        int64_t no = c->B * p->Sq * c->H * c->dv;
        double eo = 3.0 * max_diff(p->s_out, p->o_out, no) +
                    2.0 * eps_of(c->odt) * max_abs(p->o_out, no);
        double extra = 0.0;
        for (int64_t h = 0; h < c->H; h++) {
            double sum = 0.0;
            for (int64_t b = 0; b < c->B; b++)
                for (int64_t i = 0; i < p->Sq; i++) {
                    double l1 = 0.0;
                    const double *d = p->doutd + ((b * p->Sq + i) * c->H + h) * c->dv;
                    for (int64_t e = 0; e < c->dv; e++) l1 += fabs(d[e]);
                    sum += exp(p->sinksd[h] - p->o_lse[(b * c->H + h) * p->Sq + i]) * l1;
                }
            if (sum * eo > extra) extra = sum * eo;
        }
        double ours[64];
        int64_t idx[64];
        for (int64_t h = 0; h < c->H; h++) { ours[h] = dsinks[h]; idx[h] = h; }
        cmp_spec sd = { tag, "dsinks", p->o_ds, p->s_ds, c->H, 3, 8, 0, c->dt, FA_F32, extra };
        f += compare(p, &sd, ours, idx, c->H);
    }
    return f;
}
