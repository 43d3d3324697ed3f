/* decode.h - the decode kernel's table and launcher (decode.cuh), for the host: few query
 * rows per sequence (new tokens x the query heads of a KV group) against a long KV cache.
 * One block = one (sequence, KV head, KV split), or at class 128 a pair of KV heads of
 * d <= 64 side by side; the group's query rows are packed into 16-row m-tiles, so each K/V
 * byte is read once per split whatever the group size. 4 warps
 * in WM row groups of WN = 4 / WM warps; the WN warps of a row group take turns over the
 * 16-key slices of each 64-key chunk and merge in shared memory at the end. K/V chunks come
 * through a ring of 16-byte cp.async copies (page by page through block_table for any
 * page size). The splits' parts are merged by merge.cu.
 */
#ifndef FA_CUDA_DECODE_H
#define FA_CUDA_DECODE_H

#include <cuda_runtime.h>
#include "params.h"

#define FA_DEC_BN 64          /* keys per chunk (one ring stage)                        */
#define FA_DEC_STAGES 3       /* chunks in the cp.async ring                             */
#define FA_DEC_NT 128         /* 4 warps                                                 */
#define FA_DEC_MAX_ROWS 64    /* packed query rows (group x new tokens): 4 m-tiles of 16 */
#define FA_DEC_MAX_SQ 16      /* new tokens (query rows per sequence)                    */

/* Row groups for `rows` packed query rows: 1, 2 or 4 (one m-tile of 16 rows per warp). */
static constexpr inline int fa_dec_wm(int rows) { return rows <= 16 ? 1 : rows <= 32 ? 2 : 4; }
/* Shared memory of head-dim class D with wm row groups: Q [16 wm][D] and the ring of K and
   V chunks [STAGES][2][BN][D], 2-byte elements (the end's merge reuses the ring). */
static constexpr inline int fa_dec_smem(int D, int wm)
{
    return (16 * wm * D + FA_DEC_STAGES * 2 * FA_DEC_BN * D) * 2;
}

/* blocks = batch * hkv / p.dec_hp * p.n_splits; wm = fa_dec_wm(p.dec_hp * group * sq).
   T = __half or __nv_bfloat16, D = 64, 128, 256 (instantiated by the decode_dNNN stubs);
   p.dec_hp = 2 (pairs of KV heads of d <= 64) at D = 128 only. */
template <typename T, int D> cudaError_t fa_decode_launch(const fa_cu_fwd &p, int wm, int64_t blocks, cudaStream_t st);
/* Blocks of that kernel (hp KV heads per block) resident on one SM with wm row groups (its
   registers and shared memory as compiled, on the current device), 0 on a CUDA error: the
   split rule's wave. */
template <typename T, int D> int fa_decode_blocks_per_sm(int wm, int hp);
/* merge.cu: the splits' fp32 parts into out and lse (c in the combine kernel's strided
   form, c.n <= FA_CU_MAX_PARTS): one warp per query row, the parts read side by side. */
cudaError_t fa_decode_merge_launch(const fa_cu_combine &c, cudaStream_t st);

#endif /* FA_CUDA_DECODE_H */
