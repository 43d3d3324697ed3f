/* testutil.c - see testutil.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dtype.h"

/* ---- environment ------------------------------------------------------------------- */
int tu_env_flag(const char *name)
{
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

const char *tu_backend_name(fa_backend b)
{
    switch (b) {
    case FA_BACKEND_AUTO: return "auto";
    case FA_BACKEND_REFERENCE: return "reference";
    case FA_BACKEND_CPU: return "cpu";
    case FA_BACKEND_CUDA: return "cuda";
    }
    return "?";
}

int tu_backends(fa_backend out[8])
{
    const char *e = getenv("FA_TEST_BACKENDS");
    if (!e || !*e) e = "reference,cpu";
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", e);
    for (char *tok = strtok(buf, ", "); tok && n < 8; tok = strtok(NULL, ", ")) {
        if (!strcmp(tok, "reference")) out[n++] = FA_BACKEND_REFERENCE;
        else if (!strcmp(tok, "cpu")) out[n++] = FA_BACKEND_CPU;
        else if (!strcmp(tok, "cuda")) out[n++] = FA_BACKEND_CUDA;
        else if (!strcmp(tok, "auto")) out[n++] = FA_BACKEND_AUTO;
        else {
            fprintf(stderr, "FA_TEST_BACKENDS: unknown backend '%s'\n", tok);
            ck_abort_msg("FA_TEST_BACKENDS: unknown backend '%s'", tok);
        }
    }
    return n;
}

fa_context *tu_ctx(fa_backend b)
{
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, b);
    ck_assert_msg(st == FA_OK && ctx != NULL,
                  "fa_context_create(%s) = %d (%s): %s", tu_backend_name(b), (int)st,
                  fa_status_string(st), fa_last_error(NULL));
    return ctx;
}

void tu_note(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "NOTE: %s\n", buf);
    printf("NOTE: %s\n", buf);
    fflush(stdout);
}

/* ---- rng ------------------------------------------------------------------------------ */
uint64_t tu_next(tu_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_unif(tu_rng *r)
{
    return (double)(tu_next(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* ---- buffers ---------------------------------------------------------------------------- */
static const uint32_t POISON32 = 0x7fdead01u;
static const uint16_t POISON16 = 0x7e5bu;   /* fp16 quiet NaN with a payload */
static const uint16_t POISONBF = 0x7fd5u;   /* bf16 quiet NaN with a payload */

static void put_poison(tu_buf *b, size_t e)
{
    if (b->esz == 4) memcpy(b->base + e * 4, &POISON32, 4);
    else memcpy(b->base + e * 2, b->t.dtype == FA_F16 ? &POISON16 : &POISONBF, 2);
}

int tu_is_poison(const tu_buf *b, int64_t e)
{
    if (b->esz == 4) return memcmp(b->base + e * 4, &POISON32, 4) == 0;
    return memcmp(b->base + e * 2, b->t.dtype == FA_F16 ? &POISON16 : &POISONBF, 2) == 0;
}

double tu_eps(fa_dtype t)
{
    switch (t) {
    case FA_F16: return 0x1p-10;
    case FA_BF16: return 0x1p-7;
    default: return 0x1p-23;
    }
}

const char *tu_dtype_name(fa_dtype t)
{
    switch (t) {
    case FA_F32: return "f32";
    case FA_F16: return "f16";
    case FA_BF16: return "bf16";
    }
    return "?";
}

tu_buf *tu_buf_strided(fa_dtype dt, const int64_t shape[4], const int64_t stride[4])
{
    tu_buf *b = calloc(1, sizeof *b);
    int64_t span = 0, empty = 0;
    for (int i = 0; i < 4; i++) {
        if (shape[i] == 0) empty = 1;
        if (shape[i] > 0) span += (shape[i] - 1) * stride[i];
    }
    span = empty ? 0 : span + 1;
    b->esz = dt == FA_F32 ? 4 : 2;
    b->off = TU_GUARD;
    b->nel = (size_t)(span + 2 * TU_GUARD);
    b->base = malloc(b->nel * b->esz);
    b->snap = malloc(b->nel * b->esz);
    b->must = calloc(b->nel, 1);
    ck_assert_msg(b->base && b->snap && b->must, "out of memory (%zu elements)", b->nel);
    b->t.data = b->base + (size_t)b->off * b->esz;
    b->t.dtype = dt;
    for (int i = 0; i < 4; i++) { b->t.shape[i] = shape[i]; b->t.stride[i] = stride[i]; }
    for (size_t e = 0; e < b->nel; e++) put_poison(b, e);
    return b;
}

tu_buf *tu_buf_new(fa_dtype dt, int64_t B, int64_t S, int64_t H, int64_t D, tu_layout L)
{
    int64_t shape[4] = { B, S, H, D }, st[4];
    switch (L) {
    case TL_TRANSPOSED:          /* memory [B][H][S][D] */
        st[3] = 1; st[1] = D; st[2] = S * D; st[0] = H * S * D;
        break;
    case TL_PADDED:              /* padded head rows, padded seq rows, padded batches */
        st[3] = 1; st[2] = D + 3; st[1] = H * (D + 3) + 5; st[0] = S * st[1] + 7;
        break;
    default:
        st[3] = 1; st[2] = D; st[1] = H * D; st[0] = S * H * D;
        break;
    }
    return tu_buf_strided(dt, shape, st);
}

tu_buf *tu_buf_flat(fa_dtype dt, int64_t n)
{
    int64_t shape[4] = { 1, 1, 1, n }, st[4] = { n, n, n, 1 };
    return tu_buf_strided(dt, shape, st);
}

void tu_buf_free(tu_buf *b)
{
    if (!b) return;
    free(b->base); free(b->snap); free(b->must); free(b);
}

int64_t tu_idx(const tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return b->off + i0 * b->t.stride[0] + i1 * b->t.stride[1] + i2 * b->t.stride[2]
           + i3 * b->t.stride[3];
}

double tu_get(const tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return fa_load(b->base, b->t.dtype, tu_idx(b, i0, i1, i2, i3));
}

void tu_set(tu_buf *b, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double x)
{
    fa_store(b->base, b->t.dtype, tu_idx(b, i0, i1, i2, i3), (float)x);
}

#define FOR_VIEW(b, i0, i1, i2, i3) \
    for (int64_t i0 = 0; i0 < (b)->t.shape[0]; i0++) \
    for (int64_t i1 = 0; i1 < (b)->t.shape[1]; i1++) \
    for (int64_t i2 = 0; i2 < (b)->t.shape[2]; i2++) \
    for (int64_t i3 = 0; i3 < (b)->t.shape[3]; i3++)

void tu_fill(tu_buf *b, tu_rng *r, double amp)
{
    for (size_t e = 0; e < b->nel; e++) put_poison(b, e);
    FOR_VIEW(b, i0, i1, i2, i3) {
        double x;
        do { x = tu_unif(r) * amp; } while (fa_round_to(b->t.dtype, (float)x) == 0.0f);
        tu_set(b, i0, i1, i2, i3, x);
    }
}

void tu_poison(tu_buf *b)
{
    for (size_t e = 0; e < b->nel; e++) put_poison(b, e);
    memset(b->must, 0, b->nel);
    FOR_VIEW(b, i0, i1, i2, i3) b->must[tu_idx(b, i0, i1, i2, i3)] = 1;
}

void tu_must_rows(tu_buf *b, int64_t s0, int64_t s1)
{
    memset(b->must, 0, b->nel);
    FOR_VIEW(b, i0, i1, i2, i3)
        if (i1 >= s0 && i1 < s1) b->must[tu_idx(b, i0, i1, i2, i3)] = 1;
}

void tu_snapshot(tu_buf *b) { memcpy(b->snap, b->base, b->nel * b->esz); }

static void elem_where(const tu_buf *b, int64_t e, char *w, size_t len)
{
    int64_t rel = e - b->off;
    if (rel < 0) { snprintf(w, len, "guard element %lld before the view", (long long)-rel); return; }
    snprintf(w, len, "element %lld of the view span (allocation index %lld)", (long long)rel,
             (long long)e);
}

int tu_check_written(const tu_buf *b, const char *name, char *msg, size_t len)
{
    for (size_t e = 0; e < b->nel; e++) {
        char w[128];
        if (b->must[e]) {
            if (tu_is_poison(b, (int64_t)e)) {
                elem_where(b, (int64_t)e, w, sizeof w);
                snprintf(msg, len, "%s: %s was not written (still the NaN poison)", name, w);
                return 0;
            }
        } else if (memcmp(b->base + e * b->esz, b->snap + e * b->esz, b->esz) != 0) {
            elem_where(b, (int64_t)e, w, sizeof w);
            snprintf(msg, len, "%s: %s outside what the call may write was modified", name, w);
            return 0;
        }
    }
    return 1;
}

int tu_check_unchanged(const tu_buf *b, const char *name, char *msg, size_t len)
{
    for (size_t e = 0; e < b->nel; e++)
        if (memcmp(b->base + e * b->esz, b->snap + e * b->esz, b->esz) != 0) {
            char w[128];
            elem_where(b, (int64_t)e, w, sizeof w);
            snprintf(msg, len, "%s: %s was modified", name, w);
            return 0;
        }
    return 1;
}

double *tu_gather(const tu_buf *b, int64_t tb, int64_t s0, int64_t n)
{
    int64_t H = b->t.shape[2], D = b->t.shape[3];
    size_t cnt = (size_t)(n * H * D);
    double *x = malloc(sizeof(double) * (cnt ? cnt : 1));
    for (int64_t s = 0; s < n; s++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < D; d++)
                x[(s * H + h) * D + d] = tu_get(b, tb, s0 + s, h, d);
    return x;
}

/* ---- tolerance ----------------------------------------------------------------------- */
int tu_tol(const double *ours, const double *orc, const double *naive, int64_t n,
           fa_dtype in_dt, fa_dtype odt, double factor, tu_cmp *r)
{
    return tu_tol_ref(ours, orc, naive, n, in_dt, odt, factor, 0.0, r);
}

int tu_tol_ref(const double *ours, const double *orc, const double *naive, int64_t n,
               fa_dtype in_dt, fa_dtype odt, double factor, double ref_mag, tu_cmp *r)
{
    return tu_tol_floor(ours, orc, naive, n, in_dt, odt, factor, ref_mag, 1.0, r);
}

int tu_tol_floor(const double *ours, const double *orc, const double *naive, int64_t n,
                 fa_dtype in_dt, fa_dtype odt, double factor, double ref_mag,
                 double floor_ulps, tu_cmp *r)
{
    return tu_tol_terms(ours, orc, naive, n, in_dt, odt, factor, ref_mag, floor_ulps, 0.0, r);
}

int tu_tol_terms(const double *ours, const double *orc, const double *naive, int64_t n,
                 fa_dtype in_dt, fa_dtype odt, double factor, double ref_mag,
                 double floor_ulps, double term_floor, tu_cmp *r)
{
    r->err = r->nerr = r->mag = 0.0;
    r->worst = -1;
    r->ours_w = r->orc_w = 0.0;
    int ok = 1;
    for (int64_t x = 0; x < n; x++) {
        if (!isfinite(orc[x])) {
            int same = isnan(orc[x]) ? isnan(ours[x]) : ours[x] == orc[x];
            if (!same && ok) {
                ok = 0; r->worst = x; r->ours_w = ours[x]; r->orc_w = orc[x];
                r->err = INFINITY;
            }
            continue;
        }
        double a = fabs(orc[x]);
        if (a > r->mag) r->mag = a;
        double ne = fabs(naive[x] - orc[x]);
        if (isfinite(ne) && ne > r->nerr) r->nerr = ne;
        double e = fabs(ours[x] - orc[x]);
        if (isnan(e)) e = INFINITY;
        if (ok && e > r->err) { r->err = e; r->worst = x; r->ours_w = ours[x]; r->orc_w = orc[x]; }
    }
    double fm = r->mag > ref_mag ? r->mag : ref_mag;
    r->bound = factor * r->nerr + floor_ulps * fm * tu_eps(odt);
    if (in_dt == FA_F32) {
        double rel = 1e-5 * fm;
        if (rel < r->bound) r->bound = rel;
    }
    /* The term floor (the roundoff of the terms a result is made of, or what the flush
       below 2^-126 can drop) is added after the fp32 relative rule: where the terms cancel
       (every oracle dq exactly 0, one key per row) the rule, at the result's magnitude,
       would demand an exact 0 that no fp32 order of the terms gives (KNOWN_FAILURES #23). */
    r->bound += term_floor;
    /* plus the spacing of odt at zero (its smallest subnormal), under any rule: a result
       stored in odt cannot come closer than half of it to an oracle value below it (an
       fp32 dsinks of 1e-46 is 0; KNOWN_FAILURES #18) */
    r->bound += odt == FA_F16 ? 0x1p-24 : odt == FA_BF16 ? 0x1p-133 : 0x1p-149;
    if (!(r->err <= r->bound)) ok = 0;
    return ok;
}

/* ---- the case runner -------------------------------------------------------------------- */
void tu_case_str(const tu_case *c, char *buf, size_t len)
{
    static const char *cz[] = { "none", "bottom-right", "top-left" };
    static const char *lz[] = { "contig", "transposed", "padded" };
    char sh[160];
    if (c->varlen) {
        int n = snprintf(sh, sizeof sh, "varlen B=%lld lq/lk=", (long long)c->B);
        for (int64_t b = 0; b < c->B && n < 120; b++)
            n += snprintf(sh + n, sizeof sh - (size_t)n, "%lld/%lld,", (long long)c->lq[b],
                          (long long)c->lk[b]);
    } else {
        snprintf(sh, sizeof sh, "B=%lld Sq=%lld Sk=%lld", (long long)c->B, (long long)c->Sq,
                 (long long)c->Sk);
    }
    snprintf(buf, len,
             "[%s] seed=%llu %s H=%lld Hkv=%lld dqk=%lld dv=%lld dtype=%s out=%s layout=%s "
             "causal=%s window=%d(%lld,%lld) scale=%g softcap=%g alibi=%d sinks=%d bias=%d(%s) "
             "dropout=%g(seed %llu off %llu) amp=%g sink_amp=%g lse=%s det=%d nan=%d bwd=%d "
             "extra_rows=%lld slack=%lld tiles=%dx%d threads=%d",
             c->tag ? c->tag : "", (unsigned long long)c->seed, sh, (long long)c->H,
             (long long)c->Hkv, (long long)c->dqk, (long long)c->dv, tu_dtype_name(c->dt),
             tu_dtype_name(c->odt), lz[c->layout], cz[c->causal], c->window,
             (long long)c->wl, (long long)c->wr, (double)c->scale, (double)c->softcap,
             c->alibi, c->sinks, c->bias, tu_dtype_name(c->bias_dt), (double)c->dropout_p,
             (unsigned long long)c->dseed, (unsigned long long)c->doffset,
             c->amp, c->sink_amp, c->no_lse ? "NULL" : "yes", c->deterministic, c->nan_mode,
             c->backward, (long long)c->extra_rows, (long long)c->max_slack, c->tile_q,
             c->tile_kv, c->threads);
}

typedef struct {
    /* per sequence layout */
    int64_t nseq;
    int64_t *q0, *k0, *sq, *sk, *tb;   /* starting rows, lengths, batch entry */
} seqmap;

#define FAILF(...) do { char d_[1024]; tu_case_str(c, d_, sizeof d_); \
        char m_[1024]; snprintf(m_, sizeof m_, __VA_ARGS__); \
        fprintf(stderr, "FAIL %s: %s\n", d_, m_); \
        ck_abort_msg("%s: %s", d_, m_); } while (0)

static tu_buf *make_bias(const tu_case *c, tu_rng *r)
{
    int64_t B = c->B, Sq = c->Sq, H = c->H, Sk = c->Sk;
    int64_t shape[4] = { B, Sq, H, Sk }, st[4] = { Sq * H * Sk, H * Sk, Sk, 1 };
    switch (c->bias) {
    case TB_B_STRIDE0: st[0] = 0; break;
    case TB_H_SHAPE1: shape[2] = 1; st[1] = Sk; st[0] = Sq * Sk; break;
    case TB_BH_SHAPE1_PADDED: shape[0] = 1; shape[2] = 1; st[2] = Sk + 2; st[1] = Sk + 5;
        st[0] = Sq * (Sk + 5) + 1; break;
    case TB_Q_STRIDE0: st[1] = 0; st[0] = H * Sk; break;
    default: break;
    }
    tu_buf *b = tu_buf_strided(c->bias_dt, shape, st);
    tu_fill(b, r, 2.0);
    return b;
}

/* bias for sequence b as [H][Sq][Sk] doubles */
static double *bias_gather(const tu_buf *bb, int64_t b, int64_t H, int64_t Sq, int64_t Sk)
{
    double *x = malloc(sizeof(double) * (size_t)(H * Sq * Sk > 0 ? H * Sq * Sk : 1));
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t j = 0; j < Sk; j++)
                x[(h * Sq + i) * Sk + j] = tu_get(bb, bb->t.shape[0] == 1 ? 0 : b, i,
                                                  bb->t.shape[2] == 1 ? 0 : h, j);
    return x;
}

/* Two same-precision models: keep in a[x] whichever of a[x], b[x] is farther from the
   oracle o[x] (the naive error is the larger of theirs, KNOWN_FAILURES #13) */
static void far_of(double *a, const double *b, const double *o, int64_t n)
{
    for (int64_t x = 0; x < n; x++)
        if (fabs(b[x] - o[x]) > fabs(a[x] - o[x])) a[x] = b[x];
}

/* scatter a [n][H][D] double array into a logical [rows][H][D] array at row r0 */
static void put_rows(double *dst, const double *src, int64_t r0, int64_t n, int64_t H,
                     int64_t D)
{
    memcpy(dst + r0 * H * D, src, sizeof(double) * (size_t)(n * H * D));
}

/* ours: logical [B*rows][H][D] doubles from a buffer (rows = shape[1]) */
static double *gather_all(const tu_buf *b)
{
    int64_t B = b->t.shape[0], S = b->t.shape[1], H = b->t.shape[2], D = b->t.shape[3];
    double *x = malloc(sizeof(double) * (size_t)(B * S * H * D > 0 ? B * S * H * D : 1));
    for (int64_t i0 = 0; i0 < B; i0++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++)
                    x[((i0 * S + s) * H + h) * D + d] = tu_get(b, i0, s, h, d);
    return x;
}

static double *dcalloc(int64_t n)
{
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    ck_assert(x != NULL);
    return x;
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* The coarser of two dtypes: the precision the data of a result passed through. */
static fa_dtype coarser(fa_dtype a, fa_dtype b)
{
    return tu_eps(a) >= tu_eps(b) ? a : b;
}

/* odt: the dtype whose epsilon sets the floor; ref_mag and floor_ulps: see tu_tol_floor.
   smax > 0 (large-logit cases): the score itself is rounded at magnitude |s| in any
   implementation, which moves P by ~|s|*eps relative; the floor is the noise of one add at
   the magnitude of the logits, and the fp32 1e-5 rule (which no fp32 implementation, the
   naive one included, can meet at |s| ~ 1e4) is not applied. */
static void compare(const tu_case *c, const char *be, const char *name, const double *ours,
                    const double *orc, const double *naive, int64_t n, fa_dtype odt,
                    double factor, double ref_mag, double floor_ulps, double term_floor,
                    double smax)
{
    tu_cmp r;
    fa_dtype in_dt = c->dt;
    if (smax > 1.0) {
        double m = max_abs(orc, n);
        if (ref_mag < m) ref_mag = m;
        ref_mag *= smax * tu_eps(c->dt) / tu_eps(odt);
        in_dt = FA_F16;
    }
    if (!tu_tol_terms(ours, orc, naive, n, in_dt, odt, factor, ref_mag, floor_ulps,
                      term_floor, &r))
        FAILF("%s: %s: max|ours-oracle|=%.3e > bound %.3e (%.0fx max|naive-oracle|=%.3e + "
              "floor, max|oracle|=%.3e, term floor %.3e); worst element %lld: ours=%.9g "
              "oracle=%.9g", be, name, r.err, r.bound, factor, r.nerr, r.mag, term_floor,
              (long long)r.worst, r.ours_w, r.orc_w);
}

/* Row i of head h, batch entry b, in the library's lse layout: [H][rows] packed over the
   sequences (varlen, q0 the sequence's first row) or [B][H][Sq]. */
static int64_t lse_pos(const tu_case *c, int64_t rows_q, const int64_t *q0, int64_t b,
                       int64_t H, int64_t h, int64_t i)
{
    return c->varlen ? h * rows_q + q0[b] + i : (b * H + h) * c->Sq + i;
}

void tu_run(const tu_case *c)
{
    tu_rng rng = { c->seed * 0x9E3779B97F4A7C15ull + 12345 };
    const int64_t B = c->B, H = c->H, Hkv = c->Hkv, dqk = c->dqk, dv = c->dv;
    int64_t Tq, Tk, rows_q, rows_k, nseq = B;
    int64_t *q0 = calloc((size_t)(B + 1), sizeof(int64_t)), *k0 = calloc((size_t)(B + 1), sizeof(int64_t));
    int64_t *sq = calloc((size_t)(B + 1), sizeof(int64_t)), *sk = calloc((size_t)(B + 1), sizeof(int64_t));
    int32_t *cuq = calloc((size_t)(B + 1), sizeof(int32_t)), *cuk = calloc((size_t)(B + 1), sizeof(int32_t));
    int64_t maxq = 0, maxk = 0;
    if (c->varlen) {
        Tq = Tk = 0;
        for (int64_t b = 0; b < B; b++) {
            q0[b] = Tq; k0[b] = Tk; sq[b] = c->lq[b]; sk[b] = c->lk[b];
            Tq += sq[b]; Tk += sk[b];
            cuq[b + 1] = (int32_t)Tq; cuk[b + 1] = (int32_t)Tk;
            if (sq[b] > maxq) maxq = sq[b];
            if (sk[b] > maxk) maxk = sk[b];
        }
        rows_q = Tq + c->extra_rows; rows_k = Tk + c->extra_rows;
    } else {
        for (int64_t b = 0; b < B; b++) { sq[b] = c->Sq; sk[b] = c->Sk; }
        Tq = rows_q = c->Sq; Tk = rows_k = c->Sk;
    }
    const int64_t TB = c->varlen ? 1 : B;
    const int64_t nq_log = TB * rows_q;   /* logical query rows (all batch entries) */
    const int64_t nk_log = TB * rows_k;

    tu_buf *q = tu_buf_new(c->dt, TB, rows_q, H, dqk, c->layout);
    tu_buf *k = tu_buf_new(c->dt, TB, rows_k, Hkv, dqk, c->layout);
    tu_buf *v = tu_buf_new(c->dt, TB, rows_k, Hkv, dv, c->layout);
    tu_buf *dout = tu_buf_new(c->dt, TB, rows_q, H, dv, c->layout);   /* API.md item 4: dout has q's dtype */
    double amp = c->amp > 0 ? c->amp : 1.0;
    tu_fill(q, &rng, amp);
    tu_fill(k, &rng, amp);
    tu_fill(v, &rng, 1.0);
    tu_fill(dout, &rng, 1.0);
    /* NaN modes poison batch entry 0: none exists when TB = 0 (B = 0) */
    if (c->nan_mode == TN_Q_ROW && TB > 0 && rows_q > 0 && H > 0)
        for (int64_t d = 0; d < dqk; d++) tu_set(q, 0, rows_q / 2, H - 1, d, NAN);
    if (c->nan_mode == TN_K_ROW && TB > 0 && rows_k > 0 && Hkv > 0) tu_set(k, 0, rows_k / 3, 0, 0, NAN);
    if (c->nan_mode == TN_V_ELEM && TB > 0 && rows_k > 0 && Hkv > 0 && dv > 1)
        tu_set(v, 0, rows_k - 1, 0, 1, NAN);

    float *slopes = NULL, *sinks = NULL;
    double *slopes_d = NULL, *sinks_d = NULL;
    if (c->alibi) {
        slopes = malloc(sizeof(float) * (size_t)(H + 1));
        slopes_d = malloc(sizeof(double) * (size_t)(H + 1));
        for (int64_t h = 0; h < H; h++) {
            slopes[h] = (float)(exp2(-8.0 * (double)(h + 1) / (double)H) * (1.0 + 0.1 * tu_unif(&rng)));
            slopes_d[h] = slopes[h];
        }
    }
    if (c->sinks) {
        double sa = c->sink_amp > 0 ? c->sink_amp : 2.0;
        sinks = malloc(sizeof(float) * (size_t)(H + 1));
        sinks_d = malloc(sizeof(double) * (size_t)(H + 1));
        for (int64_t h = 0; h < H; h++) { sinks[h] = (float)(tu_unif(&rng) * sa); sinks_d[h] = sinks[h]; }
    }
    tu_buf *bias = c->bias ? make_bias(c, &rng) : NULL;

    fa_options opt;
    memset(&opt, 0, sizeof opt);
    opt.scale = c->scale; opt.causal = c->causal; opt.window = c->window;
    opt.window_left = c->wl; opt.window_right = c->wr; opt.softcap = c->softcap;
    opt.alibi_slopes = slopes; opt.sinks = sinks; opt.bias = bias ? &bias->t : NULL;
    opt.dropout_p = c->dropout_p; opt.seed = c->dseed; opt.offset = c->doffset;
    opt.deterministic = c->deterministic;

    /* ---- oracle and naive, logical layouts: out [nq_log][H][dv], lse like the library's */
    const int64_t lse_n = c->varlen ? H * rows_q : B * H * c->Sq;
    double *o_out = dcalloc(nq_log * H * dv), *n_out = dcalloc(nq_log * H * dv);
    double *o_lse = dcalloc(lse_n), *n_lse = dcalloc(lse_n);
    double *o_tout = dcalloc(nq_log * H * dv), *o_tlse = dcalloc(lse_n);   /* #20, #28 */
    double *o_dq = dcalloc(nq_log * H * dqk), *n_dq = dcalloc(nq_log * H * dqk);
    double *o_dk = dcalloc(nk_log * Hkv * dqk), *n_dk = dcalloc(nk_log * Hkv * dqk);
    double *o_dv = dcalloc(nk_log * Hkv * dv), *n_dv = dcalloc(nk_log * Hkv * dv);
    double *o_ds = dcalloc(H), *n_ds = dcalloc(H);
    double *t_q = dcalloc(nq_log * H * dqk), *t_k = dcalloc(nk_log * Hkv * dqk);
    double *t_v = dcalloc(nk_log * Hkv * dv);
    unsigned char *row_masked = calloc((size_t)(nq_log > 0 ? nq_log : 1), 1);
    unsigned char *key_unseen = calloc((size_t)(nk_log > 0 ? nk_log : 1), 1);
    double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)dqk);
    double smax = 0.0, sterm = 0.0, oterm = 0.0, vmax = 0.0, qkmax = 0.0, domax = 0.0;
    int64_t skmax = 0, sqmax = 0;
    for (int64_t b = 0; b < nseq; b++) {
        int64_t tb = c->varlen ? 0 : b;
        or_seq s;
        memset(&s, 0, sizeof s);
        s.sq = sq[b]; s.sk = sk[b]; s.hq = H; s.hkv = Hkv; s.dqk = dqk; s.dv = dv;
        s.scale = scale; s.causal = c->causal; s.window = c->window; s.wl = c->wl; s.wr = c->wr;
        s.softcap = c->softcap; s.alibi = slopes_d; s.sinks = sinks_d;
        s.dropout_p = c->dropout_p; s.seed = c->dseed; s.offset = c->doffset;
        s.drop_b = b; s.drop_i0 = 0;
        double *bq = tu_gather(q, tb, q0[b], sq[b]), *bk = tu_gather(k, tb, k0[b], sk[b]);
        double *bv = tu_gather(v, tb, k0[b], sk[b]), *bdo = tu_gather(dout, tb, q0[b], sq[b]);
        double *bb = bias ? bias_gather(bias, b, H, sq[b], sk[b]) : NULL;
        /* the largest |scale| sum_c |q_c k_c| (the size of a score's terms: any fp32 score
           carries roundoff of that size, and so does an lse dominated by one score,
           KNOWN_FAILURES #17) and, for large-logit cases, the largest |scale * q.k| */
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < sq[b]; i++)
                for (int64_t j = 0; j < sk[b]; j++) {
                    double dot = 0.0, dabs = 0.0;
                    const double *qr = bq + (i * H + h) * dqk, *kr = bk + (j * Hkv + h / (H / Hkv)) * dqk;
                    for (int64_t x = 0; x < dqk; x++) {
                        dot += qr[x] * kr[x];
                        dabs += fabs(qr[x] * kr[x]);
                    }
                    if (amp >= 10.0 && fabs(dot * scale) > smax) smax = fabs(dot * scale);
                    if (isfinite(dabs) && dabs * fabs(scale) > sterm) sterm = dabs * fabs(scale);
                }
        s.bias = bb;
        double *to = dcalloc(sq[b] * H * dv), *tl = dcalloc(H * sq[b]);
        double *to_sp = dcalloc(sq[b] * H * dv), *to_fl = NULL;
        int64_t r0 = tb * rows_q + q0[b], kr0 = tb * rows_k + k0[b];
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 0) or_forward(&s, bq, bk, bv, to, tl);
            else {
                or_forward_sp(&s, c->dt, c->odt, bq, bk, bv, to, tl);
                memcpy(to_sp, to, sizeof(double) * (size_t)(sq[b] * H * dv));
                if (c->dt != FA_F32) {
                    /* half inputs: P's roundings to dt are few samples where a row has
                       few keys, and they fall elsewhere in a flash-style model (P
                       unnormalized); each element takes the model farther from the
                       oracle (KNOWN_FAILURES #13) */
                    to_fl = dcalloc(sq[b] * H * dv);
                    or_forward_sp_flash(&s, c->dt, c->odt, bq, bk, bv, to_fl, NULL);
                    far_of(to, to_fl, o_out + r0 * H * dv, sq[b] * H * dv);
                }
            }
            put_rows(pass ? n_out : o_out, to, r0, sq[b], H, dv);
            double *L = pass ? n_lse : o_lse;
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < sq[b]; i++) {
                    int64_t li = lse_pos(c, rows_q, q0, b, H, h, i);
                    L[li] = tl[h * sq[b] + i];
                }
        }
        for (int64_t x = 0; x < sk[b] * Hkv * dv; x++)   /* the flush floor: #21 */
            if (isfinite(bv[x]) && fabs(bv[x]) > vmax) vmax = fabs(bv[x]);
        for (int64_t x = 0; x < sk[b] * Hkv * dqk; x++)
            if (isfinite(bk[x]) && fabs(bk[x]) > qkmax) qkmax = fabs(bk[x]);
        for (int64_t x = 0; x < sq[b] * H * dqk; x++)
            if (isfinite(bq[x]) && fabs(bq[x]) > qkmax) qkmax = fabs(bq[x]);
        for (int64_t x = 0; x < sq[b] * H * dv; x++)
            if (isfinite(bdo[x]) && fabs(bdo[x]) > domax) domax = fabs(bdo[x]);
        if (sk[b] > skmax) skmax = sk[b];
        if (sq[b] > sqmax) sqmax = sq[b];
        double *t_l = dcalloc(H * sq[b]);   /* lse's terms [H][sq]: dsinks, gradients (#28) */
        {   /* out's term floor: KNOWN_FAILURES #20; out's and lse's terms per row for
               dsinks' (#28) */
            double *t_o = dcalloc(sq[b] * H * dv);
            or_forward_terms(&s, bq, bk, bv, o_out + r0 * H * dv, t_o, t_l);
            double m = max_abs(t_o, sq[b] * H * dv);
            if (m > oterm) oterm = m;
            put_rows(o_tout, t_o, r0, sq[b], H, dv);
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < sq[b]; i++)
                    o_tlse[lse_pos(c, rows_q, q0, b, H, h, i)] = t_l[h * sq[b] + i];
            free(t_o);
        }
        for (int64_t i = 0; i < sq[b]; i++) {
            int vis = 0;
            for (int64_t j = 0; j < sk[b] && !vis; j++) vis = or_visible(&s, i, j);
            row_masked[r0 + i] = !vis;
        }
        for (int64_t j = 0; j < sk[b]; j++) {
            int vis = 0;
            for (int64_t i = 0; i < sq[b] && !vis; i++) vis = or_visible(&s, i, j);
            key_unseen[kr0 + j] = !vis;
        }
        if (c->backward) {
            double *gq = dcalloc(sq[b] * H * dqk), *gk = dcalloc(sk[b] * Hkv * dqk);
            double *gv = dcalloc(sk[b] * Hkv * dv);
            or_backward(&s, bq, bk, bv, bdo, gq, gk, gv, o_ds);
            put_rows(o_dq, gq, r0, sq[b], H, dqk); put_rows(o_dk, gk, kr0, sk[b], Hkv, dqk);
            put_rows(o_dv, gv, kr0, sk[b], Hkv, dv);
            or_backward_sp(&s, c->dt, c->odt, bq, bk, bv, to_sp, bdo, gq, gk, gv, n_ds);
            put_rows(n_dq, gq, r0, sq[b], H, dqk); put_rows(n_dk, gk, kr0, sk[b], Hkv, dqk);
            put_rows(n_dv, gv, kr0, sk[b], Hkv, dv);
            if (to_fl) {   /* the backward from the flash-style model's out (#13); it
                              writes every element of gq, gk, gv (dsinks not compared) */
                or_backward_sp_flash(&s, c->dt, c->odt, bq, bk, bv, to_fl, bdo, gq, gk, gv, NULL);
                far_of(n_dq + r0 * H * dqk, gq, o_dq + r0 * H * dqk, sq[b] * H * dqk);
                far_of(n_dk + kr0 * Hkv * dqk, gk, o_dk + kr0 * Hkv * dqk, sk[b] * Hkv * dqk);
                far_of(n_dv + kr0 * Hkv * dv, gv, o_dv + kr0 * Hkv * dv, sk[b] * Hkv * dv);
            }
            memset(gq, 0, sizeof(double) * (size_t)(sq[b] * H * dqk));
            memset(gk, 0, sizeof(double) * (size_t)(sk[b] * Hkv * dqk));
            memset(gv, 0, sizeof(double) * (size_t)(sk[b] * Hkv * dv));
            /* D's terms at the rounding of out as stored: one odt ulp per fp32 ulp when
               out is coarser than fp32 (KNOWN_FAILURES #22) */
            double *gq2 = dcalloc(sq[b] * H * dqk), *gk2 = dcalloc(sk[b] * Hkv * dqk);
            or_backward_terms(&s, bq, bk, bv, o_out + r0 * H * dv, bdo, t_l,
                              tu_eps(coarser(FA_F32, c->odt)) / tu_eps(FA_F32), gq, gk, gv,
                              gq2, gk2);
            /* P's own roundoff (#28), the root of its squares, joins the terms' floor */
            for (int64_t x = 0; x < sq[b] * H * dqk; x++) gq[x] += sqrt(gq2[x]);
            for (int64_t x = 0; x < sk[b] * Hkv * dqk; x++) gk[x] += sqrt(gk2[x]);
            put_rows(t_q, gq, r0, sq[b], H, dqk); put_rows(t_k, gk, kr0, sk[b], Hkv, dqk);
            put_rows(t_v, gv, kr0, sk[b], Hkv, dv);
            free(gq); free(gk); free(gv); free(gq2); free(gk2);
        }
        free(bq); free(bk); free(bv); free(bdo); free(bb); free(to); free(tl); free(to_sp);
        free(to_fl);
        free(t_l);
    }

    /* dsinks' reference magnitude: max over heads of sqrt(sum_i (psink_i L_i)^2),
       psink_i = exp(sink_h - lse_i), L_i = sum_c |dout_ic out_ic| (oracle out and lse).
       D_i's rounding error is at most about eps * L_i (one rounding per term: out stored
       in its dtype, and the sum's own adds); the rows' errors are independent, so they
       add in quadrature. psink_i itself is exp of a difference of fp32 numbers, so it
       carries a relative error of fp32 eps * (|sink_h| + |lse_i|), plus lse_i's own
       roundoff from its scores, eps * tlse_i (an fp32 dot product rounds at the size of
       its terms, whatever lse's size; KNOWN_FAILURES #28); and D_i is formed from out,
       whose elements carry eps * tout_ic of the same roundoff (#20): that part (ss2) is
       added in fp32 ulps, converted to the floor dtype's. */
    double ds_rss = 0.0, ds_l1 = 0.0;
    const fa_dtype ds_dt = coarser(c->dt, c->odt);
    if (c->backward && sinks) {
        for (int64_t h = 0; h < H; h++) {
            double ss = 0.0, ss2 = 0.0, sl1 = 0.0;
            for (int64_t b = 0; b < nseq; b++) {
                int64_t tb = c->varlen ? 0 : b, r0 = tb * rows_q + q0[b];
                for (int64_t i = 0; i < sq[b]; i++) {
                    int64_t li = lse_pos(c, rows_q, q0, b, H, h, i);
                    if (!isfinite(o_lse[li])) continue;
                    double ps = exp(sinks_d[h] - o_lse[li]), l1 = 0.0, dt_o = 0.0;
                    for (int64_t x = 0; x < dv; x++) {
                        const double g = fabs(tu_get(dout, tb, q0[b] + i, h, x));
                        const int64_t oi = ((r0 + i) * H + h) * dv + x;
                        l1 += g * fabs(o_out[oi]);
                        if (isfinite(g * o_tout[oi])) dt_o += g * o_tout[oi];
                    }
                    ss += ps * l1 * ps * l1;
                    sl1 += ps * l1;
                    const double tls = isfinite(o_tlse[li]) ? o_tlse[li] : 0.0;
                    double e = ps * (l1 * (fabs(sinks_d[h]) + fabs(o_lse[li]) + tls) + dt_o);
                    ss2 += e * e;
                }
            }
            double m = sqrt(ss) + sqrt(ss2) * tu_eps(FA_F32) / tu_eps(ds_dt);
            if (m > ds_rss) ds_rss = m;
            if (sl1 > ds_l1) ds_l1 = sl1;
        }
    }

    /* out's term floor (KNOWN_FAILURES #20): each score carries fp32 roundoff of its terms
       (|scale| sum_c |q_c k_c|) whatever the summation order, and out moves by
       P_ij (m_ij v_j - out_i) per unit of s_ij: one fp32 ulp of the largest
       sum_j P_ij |scale| (sum_c |q_ic k_jc|) |m_ij v_jc - out_ic|, plus the steps after the
       dot product, which round at the score's own size (#27; tests/oracle.c
       or_forward_terms). Part of the floor: for fp32 inputs the 1e-5 relative rule still
       caps the bound. */
    /* Plus the flush floor (KNOWN_FAILURES #21): the fast backends give P = 0 where exp is
       below fp32's smallest normal (2^-126) rather than a subnormal; each row then loses
       at most Sk such terms of |v| / (1 - p) (l >= 1: the row's maximum has P = 1). It
       matters only where out itself is near 1e-38. */
    const double dropk = c->dropout_p < 1.0f ? 1.0 / (1.0 - (double)c->dropout_p) : 1.0;
    const double out_flush = (double)skmax * 0x1p-126 * vmax * dropk;
    const double out_term = tu_eps(FA_F32) * oterm + out_flush;

    /* The gradients' flush floor (#21): a P flushed to 0 drops its dS = P (dP - D) terms
       from dq and dk (each at most |scale| (|dP| + |D|) max|k or q|) and its P dout terms
       from dv, at most max(Sq, Sk) of each per element. */
    const double gflush = (double)(skmax > sqmax ? skmax : sqmax) * 0x1p-126 *
        ((fabs(scale) > 1.0 ? fabs(scale) : 1.0) * (double)dv * domax *
         (vmax * dropk + max_abs(o_out, nq_log * H * dv)) * (qkmax > 1.0 ? qkmax : 1.0) + domax * dropk);

    /* ---- every backend ---- */
    fa_backend bes[8];
    int nb = tu_backends(bes);
    tu_buf *out = tu_buf_new(c->odt, TB, rows_q, H, dv, c->layout);
    tu_buf *lse = tu_buf_flat(FA_F32, lse_n);
    tu_buf *dq = tu_buf_new(c->odt, TB, rows_q, H, dqk, c->layout);
    tu_buf *dk = tu_buf_new(c->odt, TB, rows_k, Hkv, dqk, c->layout);
    tu_buf *dvb = tu_buf_new(c->odt, TB, rows_k, Hkv, dv, c->layout);
    tu_buf *dsk = tu_buf_flat(FA_F32, H);
    tu_buf *ins[5] = { q, k, v, dout, bias };
    const char *in_names[5] = { "q", "k", "v", "dout", "bias" };
    char msg[512];
    for (int bi = 0; bi < nb; bi++) {
        const char *be = tu_backend_name(bes[bi]);
        fa_context *ctx = tu_ctx(bes[bi]);
        if (c->tile_q || c->tile_kv)
            ck_assert_int_eq(fa_context_set_tiles(ctx, c->tile_q, c->tile_kv), FA_OK);
        if (c->threads && bes[bi] != FA_BACKEND_REFERENCE)
            ck_assert_int_eq(fa_context_set_threads(ctx, c->threads), FA_OK);
        tu_poison(out); tu_poison(lse);
        if (c->varlen) {
            tu_must_rows(out, 0, Tq);
            memset(lse->must, 0, lse->nel);
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < Tq; i++) lse->must[lse->off + h * rows_q + i] = 1;
        }
        if (c->no_lse) memset(lse->must, 0, lse->nel);
        tu_snapshot(out); tu_snapshot(lse);
        for (int x = 0; x < 5; x++) if (ins[x]) tu_snapshot(ins[x]);
        float *lsep = c->no_lse ? NULL : (float *)lse->t.data;
        fa_status st = c->varlen
            ? fa_forward_varlen(ctx, &out->t, lsep, &q->t, &k->t, &v->t, cuq, cuk, B,
                                maxq + c->max_slack, maxk + c->max_slack, &opt)
            : fa_forward(ctx, &out->t, lsep, &q->t, &k->t, &v->t, &opt);
        if (st != FA_OK)
            FAILF("%s: forward returned %d (%s): %s", be, (int)st, fa_status_string(st),
                  fa_last_error(ctx));
        if (!tu_check_written(out, "out", msg, sizeof msg)) FAILF("%s: forward: %s", be, msg);
        if (!tu_check_written(lse, "lse", msg, sizeof msg)) FAILF("%s: forward: %s", be, msg);
        for (int x = 0; x < 5; x++)
            if (ins[x] && !tu_check_unchanged(ins[x], in_names[x], msg, sizeof msg))
                FAILF("%s: forward modified an input: %s", be, msg);
        double *g_out = gather_all(out);
        if (c->varlen)   /* rows past the total: checked untouched above, not compared */
            memcpy(g_out + Tq * H * dv, o_out + Tq * H * dv, sizeof(double) * (size_t)((rows_q - Tq) * H * dv));
        /* out: the floor stays in c->odt. A floor in the data's precision (for an F32 out
           of bf16 inputs) was tried for KNOWN_FAILURES #11 and rejected: one bf16 rounding
           at max|out| is larger than the systematic 0.3 % error #11 was, which the rule
           then no longer caught. #13 records what that leaves open. An F32 out of half
           inputs gets two fp32 eps at max|out|, not one: its products P v are exact in
           fp32 where P is rounded to the inputs' dtype, so the naive models can be exact,
           while out still takes three fp32 roundings at its own size (the sum's last add,
           1/l, the product), up to 1.5 ulps, and one eps at max|out| is one to two ulps
           of it depending on where it lies in its binade (#13, a row whose one key has
           P = 1: 2 ulps against a bound of 1.99). */
        const double out_floor = c->odt == FA_F32 && c->dt != FA_F32 ? 2.0 : 1.0;
        compare(c, be, "out", g_out, o_out, n_out, nq_log * H * dv, c->odt, 2.0, 0.0,
                out_floor, out_term, smax);
        double *g_lse = dcalloc(lse_n);
        if (!c->no_lse) {
            for (int64_t x = 0; x < lse_n; x++) g_lse[x] = ((float *)lse->t.data)[x];
            if (c->varlen)  /* rows past the total are not compared (checked untouched) */
                for (int64_t h = 0; h < H; h++)
                    for (int64_t i = Tq; i < rows_q; i++) g_lse[h * rows_q + i] = o_lse[h * rows_q + i];
            /* term floor: one fp32 ulp of the largest score's terms (KNOWN_FAILURES #17) */
            compare(c, be, "lse", g_lse, o_lse, n_lse, lse_n, FA_F32, 2.0, 0.0, 1.0,
                    tu_eps(FA_F32) * sterm, smax);
        }
        /* fully masked rows: exact zeros and exactly -inf / the sink */
        for (int64_t r = 0; r < nq_log; r++) {
            if (!row_masked[r]) continue;
            for (int64_t x = 0; x < H * dv; x++)
                if (g_out[r * H * dv + x] != 0.0 || signbit(g_out[r * H * dv + x]) != signbit(0.0))
                    FAILF("%s: fully masked row %lld: out element %lld = %.9g, expected exactly 0",
                          be, (long long)r, (long long)x, g_out[r * H * dv + x]);
        }
        if (!c->no_lse)
            for (int64_t x = 0; x < lse_n; x++) {
                int64_t h, r;
                if (c->varlen) { h = x / rows_q; r = x % rows_q; if (r >= Tq) continue; }
                else { r = (x / (H * c->Sq)) * c->Sq + x % c->Sq; h = (x / c->Sq) % H; }
                if (!row_masked[r]) continue;
                double want = sinks ? (double)sinks[h] : -INFINITY;
                if (g_lse[x] != want)
                    FAILF("%s: fully masked row %lld head %lld: lse = %.9g, expected exactly %.9g",
                          be, (long long)r, (long long)h, g_lse[x], want);
            }
        free(g_lse);

        if (c->backward) {
            tu_poison(dq); tu_poison(dk); tu_poison(dvb); tu_poison(dsk);
            if (c->varlen) { tu_must_rows(dq, 0, Tq); tu_must_rows(dk, 0, Tk); tu_must_rows(dvb, 0, Tk); }
            if (!sinks) memset(dsk->must, 0, dsk->nel);
            tu_snapshot(dq); tu_snapshot(dk); tu_snapshot(dvb); tu_snapshot(dsk);
            tu_snapshot(out); tu_snapshot(lse);
            float *dsp = sinks ? (float *)dsk->t.data : NULL;
            st = c->varlen
                ? fa_backward_varlen(ctx, &dq->t, &dk->t, &dvb->t, dsp, &dout->t, &q->t, &k->t,
                                     &v->t, &out->t, (float *)lse->t.data, cuq, cuk, B,
                                     maxq + c->max_slack, maxk + c->max_slack, &opt)
                : fa_backward(ctx, &dq->t, &dk->t, &dvb->t, dsp, &dout->t, &q->t, &k->t, &v->t,
                              &out->t, (float *)lse->t.data, &opt);
            if (st != FA_OK)
                FAILF("%s: backward returned %d (%s): %s", be, (int)st, fa_status_string(st),
                      fa_last_error(ctx));
            if (!tu_check_written(dq, "dq", msg, sizeof msg)) FAILF("%s: backward: %s", be, msg);
            if (!tu_check_written(dk, "dk", msg, sizeof msg)) FAILF("%s: backward: %s", be, msg);
            if (!tu_check_written(dvb, "dv", msg, sizeof msg)) FAILF("%s: backward: %s", be, msg);
            if (!tu_check_written(dsk, "dsinks", msg, sizeof msg)) FAILF("%s: backward: %s", be, msg);
            for (int x = 0; x < 5; x++)
                if (ins[x] && !tu_check_unchanged(ins[x], in_names[x], msg, sizeof msg))
                    FAILF("%s: backward modified an input: %s", be, msg);
            if (!tu_check_unchanged(out, "out", msg, sizeof msg) ||
                !tu_check_unchanged(lse, "lse", msg, sizeof msg))
                FAILF("%s: backward modified an input: %s", be, msg);
            double *g_dq = gather_all(dq), *g_dk = gather_all(dk), *g_dv = gather_all(dvb);
            if (c->varlen) {   /* rows past the totals: checked untouched above */
                memcpy(g_dq + Tq * H * dqk, o_dq + Tq * H * dqk, sizeof(double) * (size_t)((rows_q - Tq) * H * dqk));
                memcpy(g_dk + Tk * Hkv * dqk, o_dk + Tk * Hkv * dqk, sizeof(double) * (size_t)((rows_k - Tk) * Hkv * dqk));
                memcpy(g_dv + Tk * Hkv * dv, o_dv + Tk * Hkv * dv, sizeof(double) * (size_t)((rows_k - Tk) * Hkv * dv));
            }
            double gref = max_abs(o_dq, nq_log * H * dqk), t_;
            if ((t_ = max_abs(o_dk, nk_log * Hkv * dqk)) > gref) gref = t_;
            if ((t_ = max_abs(o_dv, nk_log * Hkv * dv)) > gref) gref = t_;
            /* Gradients: dS = P (dP - D) subtracts two dv-term dot products that cancel
               (exactly, for a row that sees one key), each accumulated in fp32 by every
               implementation, and dq/dk carry |scale| on top; so a gradient the naive
               happens to get exact still carries that fp32 noise. The floor is one ulp of
               odt at gref (the result's own rounding) plus (2 + sqrt(d_v)) x max(1,
               |scale|) fp32 ulps at gref (KNOWN_FAILURES #12). */
            double gfl = 1.0 + (2.0 + sqrt((double)dv)) * (fabs(scale) > 1.0 ? fabs(scale) : 1.0) *
                               tu_eps(FA_F32) / tu_eps(c->odt);
            /* dq and dk also carry the fp32 roundoff of the dP - D terms they are made of,
               at the magnitude of those terms, not of the result: t_dq = max over elements of
               sum_j P_ij |dcap_ij scale| (|m_ij| sum_c |dout_ic v_jc| + sum_c |dout_ic
               out_ic|) |k_jc| (t_dk alike with q; or_backward_terms). Where dP - D
               vanishes in exact arithmetic (a row whose softmax is one key, large logits)
               gref is the size of what is left of other rows, and no fp32 implementation
               gets below the terms' noise (KNOWN_FAILURES #16). The floor there is what
               TESTING.md makes every floor, one fp32 rounding at that magnitude (t sums
               the terms of both dot products, so it already grows with d_v and with the
               number of keys). It is part of the floor, so the fp32 1e-5 relative rule
               still caps the bound (lifted only for large logits, compare()). Each term
               also carries P_ij's own roundoff, ep_ij |m_ij dP'_ij - D_i| (#28), added
               in quadrature over the pairs (or_backward_terms). */
            const double t_dq = max_abs(t_q, nq_log * H * dqk), t_dk = max_abs(t_k, nk_log * Hkv * dqk);
            const double tfl = tu_eps(FA_F32);
            compare(c, be, "dq", g_dq, o_dq, n_dq, nq_log * H * dqk, c->odt, 3.0, gref, gfl,
                    tfl * t_dq + gflush, smax);
            compare(c, be, "dk", g_dk, o_dk, n_dk, nk_log * Hkv * dqk, c->odt, 3.0, gref, gfl,
                    tfl * t_dk + gflush, smax);
            /* dv: P's own roundoff, sqrt(sum_i (P_ij ep_ij |m_ij dout_ic|)^2) (#28) */
            const double t_dv = sqrt(max_abs(t_v, nk_log * Hkv * dv));
            compare(c, be, "dv", g_dv, o_dv, n_dv, nk_log * Hkv * dv, c->odt, 3.0, gref, gfl,
                    tfl * t_dv + gflush, smax);
            if (sinks) {
                double g_ds[512];
                ck_assert(H <= 512);
                for (int64_t h = 0; h < H; h++) g_ds[h] = ((float *)dsk->t.data)[h];
                /* dsinks_h = -sum_i exp(sink_h - lse_i) D_i, D_i = dout_i . out_i: a sum of
                   products that cancel, formed from out stored in c->odt and inputs in
                   c->dt. Its noise scales with the terms, not with |dsinks|: the reference
                   magnitude is ds_rss (above), and the floor is one rounding at that
                   magnitude in the data's precision (KNOWN_FAILURES #5). */
                /* plus the flush floor (#21): each row's psink_i D_i term, psink_i below
                   2^-126 given as 0, |D_i| <= d_v max|dout| max|out|; and D_i itself
                   formed from out whose P were flushed (psink_i <= 1): each out element
                   off by at most out's flush floor, out_flush (#25) */
                const double dsflush = (double)nq_log * (double)dv * domax *
                                       (0x1p-126 * max_abs(o_out, nq_log * H * dv) + out_flush);
                /* plus the sum over rows (#26): the backends add the terms in fp32, in an
                   order of their own, while the naive model sums them in double; any
                   order's rounding is at most (rows - 1) u sum_i |psink_i D_i| (ds_l1
                   bounds the sum: |D_i| <= L_i) */
                const double dssum = (double)(nq_log > 1 ? nq_log - 1 : 0) * 0x1p-24 * ds_l1;
                compare(c, be, "dsinks", g_ds, o_ds, n_ds, H, ds_dt, 3.0, ds_rss, 1.0, dsflush + dssum, smax);
            }
            for (int64_t r = 0; r < nq_log; r++) {
                if (!row_masked[r]) continue;
                for (int64_t x = 0; x < H * dqk; x++)
                    if (g_dq[r * H * dqk + x] != 0.0)
                        FAILF("%s: fully masked row %lld: dq element %lld = %.9g, expected 0", be,
                              (long long)r, (long long)x, g_dq[r * H * dqk + x]);
            }
            for (int64_t r = 0; r < nk_log; r++) {
                if (!key_unseen[r]) continue;
                for (int64_t x = 0; x < Hkv * dqk; x++)
                    if (g_dk[r * Hkv * dqk + x] != 0.0)
                        FAILF("%s: key row %lld seen by no query: dk element %lld = %.9g, expected 0",
                              be, (long long)r, (long long)x, g_dk[r * Hkv * dqk + x]);
                for (int64_t x = 0; x < Hkv * dv; x++)
                    if (g_dv[r * Hkv * dv + x] != 0.0)
                        FAILF("%s: key row %lld seen by no query: dv element %lld = %.9g, expected 0",
                              be, (long long)r, (long long)x, g_dv[r * Hkv * dv + x]);
            }
            free(g_dq); free(g_dk); free(g_dv);
        }
        free(g_out);
        fa_context_destroy(ctx);
    }
    tu_buf_free(q); tu_buf_free(k); tu_buf_free(v); tu_buf_free(dout); tu_buf_free(bias);
    tu_buf_free(out); tu_buf_free(lse); tu_buf_free(dq); tu_buf_free(dk); tu_buf_free(dvb);
    tu_buf_free(dsk);
    free(o_out); free(n_out); free(o_lse); free(n_lse); free(o_tout); free(o_tlse);
    free(o_dq); free(n_dq); free(o_dk); free(n_dk); free(o_dv); free(n_dv); free(t_q);
    free(t_k); free(t_v); free(o_ds); free(n_ds); free(row_masked);
    free(key_unseen); free(slopes); free(sinks); free(slopes_d); free(sinks_d);
    free(q0); free(k0); free(sq); free(sk); free(cuq); free(cuk);
}

int tu_main(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
