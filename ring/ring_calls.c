/* ring_calls.c - the ring's geometry: which fa_forward/fa_backward calls one (query
 * shard, key block) pair takes, with which options, and which blocks travel on.
 *
 * In the global sequence, query i sees key j when i + off - wl <= j <= i + off + wr (each
 * bound only when set; causal sets wr = 0). For one query chunk against one key chunk,
 * with rows and keys counted in the chunks, the same holds with D = (query chunk start) +
 * off - (key chunk start) in place of off. A call over rows [r0, r1) and keys [k0, k1)
 * places row i at key i + (k1 - r1) (fa_forward's bottom-right alignment, which causal
 * NONE shares): its window bounds are shifted by D - (k1 - r1) so that they draw the same
 * two lines. One call per chunk pair then gives any mask, provided its keys end where the
 * right bound of its last row does, or its rows stop where the left bound leaves the keys.
 * ALiBi needs more: the call's alignment itself must be D, or every key of the call must
 * lie on one side of each row's position (then the bias splits into a key term, passed as
 * a bias tensor, and a row term, added to the call's lse). A chunk pair is cut by rows
 * into the rows whose position falls among the keys (exact alignment, with the keys past
 * their last row's position as a one-sided call) and those before or after (one-sided).
 */
#include <math.h>
#include <stdlib.h>
#include "ring_internal.h"

/* One chunk of a shard: global start, length, first row in the shard. */
typedef struct { int64_t start, len, row; } ring_seg;

/* Chunk length c (0 .. nchunks-1) of the global sequence, from the per-rank table len. */
static int64_t chunk_len(const ring_geom *g, const int64_t *len, int c)
{
    if (g->kind == FA_RING_CONTIGUOUS) return len[2 * c];
    return c < g->R ? len[2 * c] : len[2 * (2 * g->R - 1 - c) + 1];
}

static void rank_segs(const ring_geom *g, const int64_t *len, int r, ring_seg seg[2])
{
    int nch = g->kind == FA_RING_CONTIGUOUS ? g->R : 2 * g->R;
    int mine[2] = { r, g->kind == FA_RING_CONTIGUOUS ? -1 : 2 * g->R - 1 - r };
    int64_t pos = 0;
    seg[0] = (ring_seg){ 0, 0, 0 };
    seg[1] = (ring_seg){ 0, 0, len[2 * r] };
    for (int c = 0; c < nch; c++) {
        int64_t n = chunk_len(g, len, c);
        for (int i = 0; i < 2; i++)
            if (c == mine[i]) { seg[i].start = pos; seg[i].len = n; }
        pos += n;
    }
}

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* One chunk pair: nq rows, nk keys, row i's position D + i among the keys. */
typedef struct {
    const ring_geom *g;
    int64_t qrow, krow, D;
    ring_call *out;
    int n;
} pair_ctx;

/* Rows [r0, r1) against keys [kmin, kmax) of the pair, as one call: its keys trimmed to
   those some row sees, its rows to those that see some key, its window the pair's lines
   in its own alignment. alibi: RING_ALIBI_EXACT only where kmax is the last row's
   position plus one (the alignment is then D); SPLIT where the keys lie on one side. */
static void emit(pair_ctx *p, int64_t r0, int64_t r1, int64_t kmin, int64_t kmax, int alibi)
{
    int64_t D = p->D, L = p->g->wl, Rw = p->g->wr;
    if (L >= 0) r1 = min64(r1, kmax - D + L);    /* later rows: left bound past kmax    */
    if (Rw >= 0) r0 = max64(r0, kmin - D - Rw);  /* earlier rows: right bound before kmin */
    if (r0 >= r1 || kmin >= kmax) return;
    int64_t klo = L < 0 ? kmin : max64(kmin, r0 + D - L);
    int64_t khi = Rw < 0 ? kmax : min64(kmax, r1 + D + Rw);
    if (klo >= khi) return;
    int64_t m = r1 - r0, n = khi - klo, Dc = khi - r1, off = n - m;
    int64_t Lc = L < 0 ? -1 : Dc - D + L, Rc = Rw < 0 ? -1 : D + Rw - Dc;
    int left = Lc >= 0 && m - 1 + off - Lc > 0;   /* the left line cuts some row's keys  */
    int right = Rc >= 0 && off + Rc < n - 1;      /* the right line does                 */
    ring_call c = { p->qrow + r0, m, p->krow + klo, n, FA_CAUSAL_NONE, 0, -1, -1,
                    RING_ALIBI_NONE, 0, 0 };
    if (right && Rc == 0) {
        c.causal = FA_CAUSAL_BOTTOM_RIGHT;
        c.right = 0;
    } else if (right) {
        c.window = 1;
        c.right = Rc;
    }
    if (left) { c.window = 1; c.left = Lc; }
    c.alibi = alibi;   /* EXACT: kmax = r1 + D, so that Dc = D */
    if (alibi == RING_ALIBI_SPLIT) {
        c.kink = r0 + D - klo;                       /* row i_c sits at key i_c + kink      */
        c.jref = khi - 1 <= r0 + D ? n - 1 : 0;      /* every key past (or all ahead)       */
    }
    p->out[p->n++] = c;
}

static void pair_calls(pair_ctx *p, int64_t nq, int64_t nk)
{
    const ring_geom *g = p->g;
    int64_t D = p->D;
    int64_t ia = g->wr < 0 ? 0 : clamp64(-D - g->wr, 0, nq);   /* rows that see a key */
    int64_t ib = g->wl < 0 ? nq : clamp64(nk - D + g->wl, 0, nq);
    if (ia >= ib) return;
    if (!g->alibi) {
        emit(p, ia, ib, 0, nk, RING_ALIBI_NONE);
        return;
    }
    int64_t s0 = clamp64(-D, ia, ib), s1 = clamp64(nk - D, ia, ib);
    emit(p, ia, s0, 0, nk, RING_ALIBI_SPLIT);            /* every key ahead of the row */
    emit(p, s0, s1, 0, s1 + D, RING_ALIBI_EXACT);        /* the row's position inside  */
    emit(p, s0, s1, s1 + D, nk, RING_ALIBI_SPLIT);       /* keys ahead of those rows   */
    emit(p, s1, ib, 0, nk, RING_ALIBI_SPLIT);            /* every key behind the row   */
}

int ring_calls(const ring_geom *g, int qr, int kr, ring_call calls[RING_MAX_CALLS])
{
    ring_seg qs[2], ks[2];
    rank_segs(g, g->qlen, qr, qs);
    rank_segs(g, g->kvlen, kr, ks);
    pair_ctx p = { g, 0, 0, 0, calls, 0 };
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            if (qs[a].len == 0 || ks[b].len == 0) continue;
            p.qrow = qs[a].row;
            p.krow = ks[b].row;
            p.D = qs[a].start + g->off - ks[b].start;
            pair_calls(&p, qs[a].len, ks[b].len);
        }
    return p.n;
}

int ring_needed_after(const ring_geom *g, int owner, int t)
{
    ring_call c[RING_MAX_CALLS];
    for (int s = t + 1; s < g->R; s++)
        if (ring_calls(g, (owner + s) % g->R, owner, c) > 0) return 1;
    return 0;
}

fa_options ring_call_options(const ring_geom *g, const ring_call *c, const fa_options *base,
                             float *bias_buf, fa_tensor *bias_view)
{
    fa_options o = *base;
    o.causal = c->causal;
    o.window = c->window;
    o.window_left = c->left;
    o.window_right = c->right;
    o.alibi_slopes = c->alibi == RING_ALIBI_EXACT ? base->alibi_slopes : NULL;
    o.bias = NULL;
    if (c->alibi == RING_ALIBI_SPLIT) {
        for (int64_t h = 0; h < g->H; h++)
            for (int64_t j = 0; j < c->nk; j++)
                bias_buf[h * c->nk + j] = -base->alibi_slopes[h] * (float)llabs(j - c->jref);
        *bias_view = (fa_tensor){ bias_buf, FA_F32, { 1, c->nq, g->H, c->nk },
                                  { 0, 0, c->nk, 1 } };
        o.bias = bias_view;
    }
    return o;
}

void ring_call_shift_lse(const ring_geom *g, const ring_call *c, const float *slopes,
                         float *lse, int sign)
{
    if (c->alibi != RING_ALIBI_SPLIT) return;
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t h = 0; h < g->H; h++) {
            float *row = lse + (b * g->H + h) * c->nq;
            for (int64_t i = 0; i < c->nq; i++)
                row[i] += (float)sign * (-slopes[h] * (float)llabs(i + c->kink - c->jref));
        }
}
