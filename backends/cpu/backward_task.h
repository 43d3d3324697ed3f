/* backward_task.h - one task of the CPU backward (backward_task.c): the KV tiles of one
 * chunk of one (batch, KV head), against every Q block of the group's query heads that
 * sees them; dK and dV written, dQ added into the chunk's partial. backward.c makes the
 * scratch, D, the shared Q side and the parallel phases around it. */
#ifndef FA_CPU_BACKWARD_TASK_H
#define FA_CPU_BACKWARD_TASK_H

#include <stdint.h>
#include "backend.h"
#include "backward_qside.h"
#include "kernels.h"

/* The call's constants and shared buffers, the same for every task. */
typedef struct {
    const fa_problem *p;
    const fa_cpu_kernels *K;
    const fa_cpu_amx_kernels *X;   /* AMX tiles (q, k, v, dout bf16 on an amx context) or NULL */
    qgeom qg;                      /* the Q side's shape */
    int bq, bkv, C;                /* tiles; dQ chunks per (batch, KV head) */
    int T;                         /* tasks per (batch, KV head), 1..C, by the thread count:
                                      each covers whole chunks, so the sums do not change */
    int slow, drop;                /* per-score pipeline; dropout */
    int64_t dqk, dv, ldq, ldk, ldv, lddq;
    int64_t ldka, ldva, ldpa, ldsa, ldt;   /* AMX leading dims (bf16 elements) */
    int64_t qrows;                 /* rows of q: dense B*Sq, varlen total */
    int64_t qblk, nqbmax;          /* floats of one Q-side block; Q blocks per head */
    const float *D;                /* rowsum(dO * O) by lse index */
    float *dqp;                    /* dQ partials [C][hq][qrows][lddq] */
    const float *qsh;              /* the shared Q-side pack, or NULL */
} bwd_geom;

/* One thread's scratch (backward.c carves it). */
typedef struct {
    float *kc, *vc, *dk, *dv, *s, *dp, *pd, *t, *row, *row2, *qcache;
    float *qblock;   /* this thread's Q side when there is no cache */
    unsigned char *qflag;
    int64_t *hr, *ir, *idrop, *lo, *hi;
    /* AMX: K, V rows bf16 [bkv][ldka|ldva]; K pairs over keys [lkp][ldk] words; P^T or
       dS^T rows bf16 [bkv][ldpa]; dS^T pairs [lkp][ldq] words; dS rows bf16 [ldq][ldsa];
       a bf16 row temp [ldq][ldt]; a dQ tile [ldq][lddq] for a block of rows not a
       multiple of 16 (the tile gemm writes whole 16-row tiles) */
    uint16_t *kb, *vb, *pb, *dsb, *t16;
    uint32_t *kp, *tp;
    float *dqt;
} bwd_scratch;

/* Task t of T * B * Hkv: span u = t / (B Hkv) of the chunks (C u / T .. C (u + 1) / T, each
   chunk still summed into its own dQ partial), batch t % (B Hkv) / Hkv, KV head t % Hkv.
   Every head's first span comes first: under a causal mask it is the heaviest (its keys
   are seen by the most query rows), so the dynamic schedule starts the long tasks first
   instead of alternating long and short ones. */
void fa_cpu_bwd_task(const bwd_geom *g, int64_t t, bwd_scratch *w);

#endif
