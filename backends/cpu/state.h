/* state.h - the CPU backend's per-context state (ctx->impl): the kernel set cpu.c chose
 * and the tile sizes fa_context_set_tiles asked for; read by tiles.c, forward.c and
 * backward.c. */
#ifndef FA_CPU_STATE_H
#define FA_CPU_STATE_H

#include "backend.h"
#include "kernels.h"
#include "scratch.h"

typedef enum { FA_CPU_GENERIC = 0, FA_CPU_AVX2, FA_CPU_AVX512, FA_CPU_AMX } fa_cpu_isa;

typedef struct {
    fa_cpu_isa isa;
    const fa_cpu_kernels *k;
    int req_bq, req_bkv;   /* fa_context_set_tiles, 0 = automatic */
    int bf16dot;           /* the bf16 forward on k->gemm_bf16_*: compiled in, AVX512-BF16,
                              an AMD CPU (cpu.c says why) */
    const fa_cpu_amx_kernels *amx;   /* isa FA_CPU_AMX: the bf16 forward and backward on AMX tiles (or
                                        their C emulation, FA_CPU_AMX_EMULATE); else NULL */
    /* scratch kept between calls (a context is used by one thread at a time):
       FA_CPU_KEPT_SCR the per-thread tiles, FA_CPU_KEPT_BIG the dQ partials (backward) or
       the K/V caches (forward), FA_CPU_KEPT_QSIDE the Q-side pack or caches (backward) */
    fa_cpu_kept kept[3];
} fa_cpu_state;

enum { FA_CPU_KEPT_SCR = 0, FA_CPU_KEPT_BIG, FA_CPU_KEPT_QSIDE };

/* The AMX kernels for a call, or NULL: the forward takes them when q, k and v are bf16,
   the backward when dout is bf16 too (the forward, the backward and fa_query's names all ask
   here, so the name always tells the kernels that run). */
static inline const fa_cpu_amx_kernels *fa_cpu_amx_for(const fa_cpu_state *st, const fa_problem *p,
                                                        int backward)
{
    int bf = p->q.dtype == FA_BF16 && p->k.dtype == FA_BF16 && p->v.dtype == FA_BF16 &&
             (!backward || p->dout.dtype == FA_BF16);
    return bf ? st->amx : NULL;
}

#endif
