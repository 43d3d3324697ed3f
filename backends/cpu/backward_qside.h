/* backward_qside.h - the backward's "Q side": one Q block's operands, packed once and
 * read for every KV tile that the block sees (backward_qside.c). */
#ifndef FA_CPU_BACKWARD_QSIDE_H
#define FA_CPU_BACKWARD_QSIDE_H

#include <stdint.h>
#include "backend.h"
#include "kernels.h"

/* One Q block's operands (the "Q side"), packed once and read for every KV tile:
   fp32 Q^T [dqk][ldq], Q [ldq][ldk], dO^T [dv][ldq], dO [ldq][ldv], lse and D [ldq];
   with AMX (bf16 q, k, v, dout) also the bf16 B operands of four products, in 32-bit words
   of two bf16 (kernels.h, fa_cpu_amx_kernels):
     qtp  Q^T pairs over d   [round_up(dqk, 32)/2][ldq]   S^T = K Q^T
     dotp dO^T pairs over d  [round_up(dv, 32)/2][ldq]    dP^T = V dO^T
     dop  dO pairs over rows [lqp][ldv]                   dV += P^T dO
     qp   Q pairs over rows  [lqp][ldk]                   dK += dS^T Q     */
typedef struct {
    int64_t dqk, dv, ldq, ldk, ldv, kq32, kv32, lqp;
    int amx;
} qgeom;

typedef struct {
    float *qt, *qc, *dot, *doc, *lse, *d;
    uint32_t *qtp, *dotp, *dop, *qp;
} qside;

/* First element of row i, head h of sequence s in a q-shaped tensor (q, dout, out). */
static inline const void *fa_cpu_qrow_ptr(const fa_tensor *t, const fa_seq *s, int64_t i, int64_t h)
{
    return (const char *)t->data + fa_qrow(t, s, i, h) * (int64_t)fa_dtype_size(t->dtype);
}

/* Floats of one Q-side block; 0 and *ovf set when it does not fit int64. */
int64_t fa_cpu_qside_size(const qgeom *g, int *ovf);

/* The Q side whose block starts at blk. */
qside fa_cpu_qside_at(float *blk, const qgeom *g);

/* The fp32 kernels' transposed operands of a Q-side block, Q^T and dO^T, into qt and dot
   (the block's own, or another block's when the Q side must not be written). */
void fa_cpu_pack_q_transposed(const fa_cpu_kernels *K, const qgeom *g, const qside *q, int ni,
                              float *qt, float *dot);

/* A whole Q-side block: rows i0 .. i0 + ni of head h (D: the call's D by lse index),
   then Q^T and dO^T for the fp32 kernels, or, with AMX (X), the tile operands (Q^T and
   dO^T are then made only for a pair that takes the fp32 path,
   fa_cpu_pack_q_transposed); t16 is a bf16 temp of [round_up(ni, 16)][ldt]. */
void fa_cpu_pack_q_block(const fa_problem *p, const fa_cpu_kernels *K, const fa_cpu_amx_kernels *X,
                         const qgeom *g, const qside *q, const fa_seq *sq, int64_t b, int64_t h,
                         int64_t i0, int ni, const float *D, uint16_t *t16, int64_t ldt);

#endif
