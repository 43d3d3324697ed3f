/* cpu.h - private state of the CPU backend, shared by cpu.c, tiles.c, forward.c and
 * backward.c. */
#ifndef FA_CPU_H
#define FA_CPU_H

#include "backend.h"
#include "kernels.h"

typedef enum { FA_CPU_GENERIC = 0, FA_CPU_AVX2, FA_CPU_AVX512, FA_CPU_AMX } fa_cpu_isa;

typedef struct {
    fa_cpu_isa isa;
    const fa_cpu_kernels *k;
    int req_bq, req_bkv;   /* fa_context_set_tiles, 0 = automatic */
    int bf16dot;           /* k->gemm_bf16_* usable: compiled in and CPUID AVX512-BF16 */
    const fa_cpu_amx_kernels *amx;   /* isa FA_CPU_AMX: the bf16 forward and backward on AMX tiles (or
                                        their C emulation, FA_CPU_AMX_EMULATE); else NULL */
} fa_cpu_state;

/* The AMX kernels for a call, or NULL: the forward takes them when q, k and v are bf16,
   the backward when dout is bf16 too (forward.c, backward.c and fa_query's names all ask
   here, so the name always tells the kernels that run). */
static inline const fa_cpu_amx_kernels *fa_cpu_amx_for(const fa_cpu_state *st, const fa_problem *p,
                                                        int backward)
{
    int bf = p->q.dtype == FA_BF16 && p->k.dtype == FA_BF16 && p->v.dtype == FA_BF16 &&
             (!backward || p->dout.dtype == FA_BF16);
    return bf ? st->amx : NULL;
}

/* Tiles for a call: bq query rows (Br) and bkv key rows (Bc), both multiples of 16.
   why (optional) receives the formula with its numbers. tiles.c */
void fa_cpu_tiles(const fa_context *ctx, int backward, int64_t dqk, int64_t dv,
                  int *bq, int *bkv, char *why, size_t whylen);

/* Threads a parallel region uses: ctx->threads or all cores. */
int fa_cpu_threads(const fa_context *ctx);

/* Split-KV factor of a forward call (shapes only, never threads). forward.c */
int fa_cpu_fwd_splits(const fa_problem *p, int bq, int bkv, int64_t *rows_per_block,
                      int64_t *heads_per_block);
/* dQ chunks of a backward call (shapes only). backward.c */
int fa_cpu_bwd_chunks(const fa_problem *p, int bkv);

fa_status fa_cpu_forward(fa_context *ctx, const fa_problem *p);
fa_status fa_cpu_backward(fa_context *ctx, const fa_problem *p);

/* Round up to a multiple of FA_CPU_PAD. */
static inline int64_t fa_cpu_pad(int64_t n) { return (n + FA_CPU_PAD - 1) / FA_CPU_PAD * FA_CPU_PAD; }
/* Leading dimension of a scratch tile of n columns: fa_cpu_pad(n), plus FA_CPU_PAD when
   that is an even number of 64-byte lines. A power-of-two row stride puts a tile's
   column panel (the NR columns a gemm keeps in L1 while A streams past) in a few L1
   sets only, so the panel is re-read from L2 (bench/NOTES.md item 9); an odd number of
   lines spreads consecutive rows over every set. n <= INT64_MAX - 2 * FA_CPU_PAD. */
static inline int64_t fa_cpu_ld(int64_t n)
{
    int64_t p = fa_cpu_pad(n);
    return (p / FA_CPU_PAD) % 2 == 0 ? p + FA_CPU_PAD : p;
}

#endif
