/* tiles.c - tile sizes from the cache sizes hwloc reports (ctx->topo), one formula each,
 * named after the memory level it targets:
 *
 *   Bc (keys per KV tile, "L1 panel"): the B panel of O += P V is Bc keys x NR columns of
 *      V and is re-read for every MR-query block, so it must stay in L1 next to the
 *      P^T column block it meets (Bc cache lines):
 *          Bc * 4 * (NR + 16) <= L1d * 3/4   -> Bc = floor(L1d*3/4 / (4*(NR+16))), a
 *      multiple of 16 in [32, 512]. (48 KiB L1, NR 32: Bc = 192.)
 *   Br (query rows per Q block, "L2 block"): Q^T, the O accumulator, the S^T tile and
 *      the K and V tiles are all touched once per KV tile and must stay in L2:
 *          4 * (Br*(dqk + dv) + Bc*(dqk + dv) + Br*Bc) <= L2 / 2
 *      -> Br = (L2/8 - Bc*(dqk+dv)) / (dqk + dv + Bc), a multiple of 16 in [16, 256];
 *      K/V stream from L3 once per Q block, so Br sets the L3 traffic: measured (d=128,
 *      S=2048, 1 thread) Br 128 -> 0.50 of FMA peak, Br 256 -> 0.71. Capped at 256.
 *   Backward keeps twice as many row tiles live (K, V, dK, dV; Q, Q^T, dO, dO^T) and three
 *      S-sized tiles (S/P, dP/dS, P_drop):
 *          4 * (2*Br*(dqk+dv) + 2*Bc*(dqk+dv) + 3*Br*Bc) <= L2 / 2
 *   Kernel sets that block k (kernels.h kc > 0, AVX-512: KC = 128) keep a KC x NR panel in
 *      L1 whatever Bc is, so Bc = 2*KC (256): a longer KV tile amortises the per-tile work
 *      (the backward streams every Q block's Q, Q^T, dO, dO^T per KV tile; the forward
 *      rescales O per KV tile). The backward then takes the forward's Br formula (its Q
 *      side is re-read per KV tile from L3 anyway). Measured S=4096 d=128, 1 thread,
 *      fraction of FMA peak: bwd Br x Bc 240x112 0.52, 240x192 0.57, 240x256 0.58,
 *      96x256 0.39-0.52; fwd 256x112 0.59, 256x192 0.61, 256x256 0.60-0.66.
 */
#include "config.h"
#include <stdio.h>
#include "scratch.h"
#include "state.h"
#include "tiles.h"

#define FA_CPU_TILE_MAX 1024   /* rows; cap of fa_context_set_tiles sizes */

static int clamp16(int64_t v, int lo, int hi)
{
    v = v / 16 * 16;
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return (int)v;
}

void fa_cpu_tiles(const fa_context *ctx, int backward, int64_t dqk, int64_t dv,
                  int *bq, int *bkv, char *why, size_t whylen)
{
    const fa_cpu_state *st = (const fa_cpu_state *)ctx->impl;
    int64_t l1 = ctx->topo.l1d > 0 ? ctx->topo.l1d : 32768;
    int64_t l2 = ctx->topo.l2 > 0 ? ctx->topo.l2 : 1048576;
    int nr = st->k->nr > 1 ? st->k->nr : 32;
    /* Head dims are only bounded by the tensors' element counts (anything when a
       dimension is 0, e.g. fa_query on an empty call): clamp each before the formula
       so that it stays in int64. Past 2^20 the formula gives the minimum Br anyway. */
    const int64_t dmax = (int64_t)1 << 20;
    int64_t d = (dqk < dmax ? dqk : dmax) + (dv < dmax ? dv : dmax);
    int kc = st->k->kc;
    int bc = kc > 0 ? clamp16(2 * (int64_t)kc, 32, 512)
                    : clamp16(l1 * 3 / 4 / (4 * (nr + 16)), 32, 512);
    int64_t budget = l2 / 8;   /* floats in half of L2 */
    int bwdf = backward && kc == 0;   /* the backward's own Br formula */
    int64_t mult = bwdf ? 2 : 1;
    int64_t brn = (budget - mult * bc * d) / (mult * d + (bwdf ? 3 : 1) * bc);
    int br = clamp16(brn, 16, 256);
    int rq = st->req_bq > 0 ? st->req_bq : ctx->block_q, rk = st->req_bkv > 0 ? st->req_bkv : ctx->block_kv;
    /* Requested sizes are rounded up to the kernels' padding and capped at
       FA_CPU_TILE_MAX: scratch is sized by the tiles, and a tile past a few thousand
       rows only wastes memory (fa_context_set_tiles lets backends round sizes;
       describe says what is used). */
    int fbq = rq > 0 ? (int)fa_cpu_pad(rq < FA_CPU_TILE_MAX ? rq : FA_CPU_TILE_MAX) : br;
    int fbkv = rk > 0 ? (int)fa_cpu_pad(rk < FA_CPU_TILE_MAX ? rk : FA_CPU_TILE_MAX) : bc;
    *bq = fbq;
    *bkv = fbkv;
    if (why && whylen) {
        char bcwhy[96];
        if (kc > 0)
            snprintf(bcwhy, sizeof bcwhy, "Bc = 2*KC = 2*%d -> %d (k blocked: L1 holds a KC x NR panel)",
                     kc, bc);
        else
            snprintf(bcwhy, sizeof bcwhy, "Bc = L1d*3/4 / (4*(NR+16)) = %lld*3/4 / (4*(%d+16)) -> %d",
                     (long long)l1, nr, bc);
        snprintf(why, whylen,
                 "%s; "
                 "Br = (L2/8 - %s*Bc*(dqk+dv)) / (%s*(dqk+dv) + %s*Bc) with L2 = %lld, dqk+dv = %lld -> %d "
                 "(multiple of 16 in [16, 256])%s; effective Br x Bc = %d x %d",
                 bcwhy, bwdf ? "2" : "1",
                 bwdf ? "2" : "1", bwdf ? "3" : "1", (long long)l2, (long long)d, br,
                 (rq > 0 || rk > 0) ? "; overridden by fa_context_set_tiles" : "",
                 fbq, fbkv);
    }
}
