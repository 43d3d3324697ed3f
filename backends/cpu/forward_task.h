/* forward_task.h - one task of the CPU forward (forward_task.c): the rows of a Q block
 * against a range of its KV tiles, leaving the unnormalised O, m and l. forward.c makes
 * the blocks, the scratch and the parallel loop around it. */
#ifndef FA_CPU_FORWARD_TASK_H
#define FA_CPU_FORWARD_TASK_H

#include <stdint.h>
#include "backend.h"
#include "kernels.h"

/* A Q block: rows r < nh * ni are head h0 + r / ni, query i0 + r % ni of batch b. */
typedef struct { int64_t b, h0, nh, i0, ni; } fwd_block;

/* The call's constants, the same for every task. */
typedef struct {
    const fa_problem *p;
    const fa_cpu_kernels *K;
    const fa_cpu_amx_kernels *X;   /* AMX tiles (q, k, v bf16 on an amx context), else NULL */
    int bfp;                       /* bf16 dot products (K->gemm_bf16_*), else fp32 kernels */
    int slow;                      /* the per-score pipeline runs (softcap, ALiBi, bias) */
    float sc;                      /* the scale softmax_fwd applies (1 after the pipeline) */
    int bkv;                       /* keys per KV tile */
    int64_t dqk, dv, dqp;          /* head dims; dqp: k pairs of the bf16 dot products */
    int64_t ldq, ldk, ldv;         /* leading dims of S^T / Q^T, K rows, V and O rows */
    int64_t ldka, ldvt;            /* AMX: K rows round_up(dqk, 32), V^T round_up(bkv, 32) */
} fwd_geom;

/* One thread's scratch (forward.c carves it). */
typedef struct {
    float *qt, *s, *kc, *vc, *o, *m, *l, *alpha, *row, *pp, *ot, *tmp;
    const uint16_t **rp;   /* AMX packing: row pointers, max(bkv, ldq) */
    int64_t *hr, *ir, *idrop, *lo, *hi;
    /* K/V cache: fp32 rows of the whole sequence of KV head (cb, chk), tile kb packed when
       packed[kb]; kept across the consecutive tasks a thread gets from the dynamic
       schedule (they share the head), so each K/V tile is converted and made
       contiguous once per thread and head instead of once per Q block. NULL: per-tile. */
    float *kall, *vall;
    unsigned char *packed;
    int64_t cb, chk;
} fwd_scratch;

/* The constants of a call with tiles bq x bkv on the context's kernel set. */
fwd_geom fa_cpu_fwd_geom(const fa_context *ctx, const fa_problem *p, int bq, int bkv);

/* Split `split` of `nsplit` of block f: its rows against their visible KV tiles of that
   share of the sequence. Leaves the unnormalised O [rows][ldv], m and l in o, m, l, and
   each row's head and query in w->hr, w->ir. */
void fa_cpu_fwd_task(const fwd_geom *g, const fwd_block *f, int split, int nsplit,
                     fwd_scratch *w, float *o, float *m, float *l);

#endif
