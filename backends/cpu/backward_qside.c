/* backward_qside.c - packing the backward's Q side (backward_qside.h): Q, dO, lse and D
 * rows, their transposes for the fp32 kernels, and the bf16 pairs of the AMX tiles. */
#include "config.h"
#include <math.h>
#include <string.h>
#include "backward_qside.h"
#include "scratch.h"
#include "vecops.h"

/* Floats of one Q-side block; 0 and *ovf set when it does not fit int64. */
int64_t fa_cpu_qside_size(const qgeom *g, int *ovf)
{
    int64_t n = fa_sz_mul(fa_sz_add(g->dqk, g->dv, ovf), g->ldq, ovf);
    n = fa_sz_add(n, fa_sz_mul(g->ldq, fa_sz_add(g->ldk, g->ldv, ovf), ovf), ovf);
    n = fa_sz_add(n, 2 * g->ldq, ovf);
    if (g->amx) {
        n = fa_sz_add(n, fa_sz_mul(16 * (g->kq32 + g->kv32), g->ldq, ovf), ovf);
        n = fa_sz_add(n, fa_sz_mul(g->lqp, fa_sz_add(g->ldk, g->ldv, ovf), ovf), ovf);
    }
    return n;
}

qside fa_cpu_qside_at(float *blk, const qgeom *g)
{
    qside q;
    q.qt = blk;
    q.qc = q.qt + g->dqk * g->ldq;
    q.dot = q.qc + g->ldq * g->ldk;
    q.doc = q.dot + g->dv * g->ldq;
    q.lse = q.doc + g->ldq * g->ldv;
    q.d = q.lse + g->ldq;
    float *e = q.d + g->ldq;
    q.qtp = q.dotp = q.dop = q.qp = NULL;
    if (g->amx) {
        q.qtp = (uint32_t *)e;
        q.dotp = q.qtp + 16 * g->kq32 * g->ldq;
        q.dop = q.dotp + 16 * g->kv32 * g->ldq;
        q.qp = q.dop + g->lqp * g->ldv;
    }
    return q;
}

/* The AMX parts of a Q-side block from its fp32 parts (rows r < ni; exact: the fp32
   rows hold bf16 values, fully masked rows zeros). Columns ni .. round_up(ni, 16) of the
   transposed operands are zeros, so the score and dP tiles' padding columns stay finite. */
static void pack_q_amx(const fa_cpu_amx_kernels *X, const fa_cpu_kernels *K, const qgeom *g,
                       const qside *q, int ni, uint16_t *t16, int64_t ldt)
{
    int rend = (ni + 15) / 16 * 16;
    for (int pass = 0; pass < 2; pass++) {
        const float *src = pass ? q->doc : q->qc;
        int64_t n = pass ? g->dv : g->dqk, lds = pass ? g->ldv : g->ldk;
        int64_t k32 = pass ? g->kv32 : g->kq32;
        for (int r = 0; r < rend; r++) {
            uint16_t *d = t16 + r * ldt;
            if (r < ni) {
                K->cvt_out(d, FA_BF16, src + r * lds, n, 1.0f);
                memset(d + n, 0, sizeof(uint16_t) * (size_t)(32 * k32 - n));
            } else {
                memset(d, 0, sizeof(uint16_t) * (size_t)(32 * k32));
            }
        }
        X->tr32(pass ? q->dotp : q->qtp, g->ldq, (const uint32_t *)t16, ldt / 2, rend, (int)(16 * k32));
    }
    X->to_pairs(q->dop, g->ldv, q->doc, g->ldv, ni, (int)g->dv);
    X->to_pairs(q->qp, g->ldk, q->qc, g->ldk, ni, (int)g->dqk);
}

/* Pack row r of a Q-side block: Q (row-major qc), dO (doc), lse and D (the transposed or
   AMX operands follow per block, pack_q_block).
   A fully masked row (lse = -inf) contributes nothing: its Q, dO and D are packed as zeros
   (exact, since its P is 0), so a NaN it holds cannot reach dK/dV through 0 * NaN. */
static void pack_q_row(const fa_problem *p, const fa_cpu_kernels *K, const fa_seq *sq,
                       int64_t b, int64_t h, int64_t i, int r, int64_t ldk, int64_t ldv,
                       const float *D, float *qc, float *doc, float *lsev, float *dd)
{
    const int64_t dqk = p->dqk, dv = p->dv;
    int64_t li = fa_lse_index(p, sq, b, h, i);
    float lv = p->lse_in[li];
    if (lv == -INFINITY) {
        for (int64_t c = 0; c < dqk; c++) qc[r * ldk + c] = 0.0f;
        for (int64_t c = 0; c < dv; c++) doc[r * ldv + c] = 0.0f;
    } else {
        K->cvt_in(qc + r * ldk, fa_cpu_qrow_ptr(&p->q, sq, i, h), dqk, p->q.dtype);
        K->cvt_in(doc + r * ldv, fa_cpu_qrow_ptr(&p->dout, sq, i, h), dv, p->dout.dtype);
    }
    lsev[r] = lv == -INFINITY ? INFINITY : lv;
    dd[r] = lv == -INFINITY ? 0.0f : D[li];
}

/* The fp32 kernels' transposed operands of a Q-side block, Q^T and dO^T, into qt and dot
   (the block's own, or another block's when the Q side must not be written). */
void fa_cpu_pack_q_transposed(const fa_cpu_kernels *K, const qgeom *g, const qside *q, int ni,
                              float *qt, float *dot)
{
    fa_cpu_transpose_f32(K, qt, g->ldq, q->qc, g->ldk, ni, g->dqk);
    fa_cpu_transpose_f32(K, dot, g->ldq, q->doc, g->ldv, ni, g->dv);
}

/* A whole Q-side block: rows i0 .. i0 + ni of head h, then Q^T and dO^T for the fp32
   kernels, or, with AMX, the tile operands (Q^T and dO^T are then made only for a pair
   that takes the fp32 path, pack_q_transposed). */
void fa_cpu_pack_q_block(const fa_problem *p, const fa_cpu_kernels *K, const fa_cpu_amx_kernels *X,
                         const qgeom *g, const qside *q, const fa_seq *sq, int64_t b, int64_t h,
                         int64_t i0, int ni, const float *D, uint16_t *t16, int64_t ldt)
{
    for (int r = 0; r < ni; r++)
        pack_q_row(p, K, sq, b, h, i0 + r, r, g->ldk, g->ldv, D, q->qc, q->doc, q->lse, q->d);
    if (X) pack_q_amx(X, K, g, q, ni, t16, ldt);
    else fa_cpu_pack_q_transposed(K, g, q, ni, q->qt, q->dot);
}
