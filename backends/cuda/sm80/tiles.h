/* tiles.h - the tile table of the sm80 kernels (mma.sync, runs on sm80..sm90): query rows
 * and keys per block, threads, shared memory. The kernels assert that their own layouts
 * agree with these numbers; the host plans grids and checks shared memory with them.
 */
#ifndef FA_CUDA_SM80_TILES_H
#define FA_CUDA_SM80_TILES_H

/* forward.cuh, the general forward (every feature): 128 query rows x 64 keys, 8 warps;
   Q + double-buffered K and V, 2-byte elements. */
static constexpr inline int fa_fwd_smem(int D) { return (128 * D + 4 * 64 * D) * 2; }

/* forward_fast.cuh, the lean FA2 forward (no bias, ALiBi, softcap or dropout): 4 warps,
   query rows per block fa_fwd_fast_bm(D), 64 keys per KV tile, single K and V buffers. */
#define FA_FWD_FAST_BN 64
#define FA_FWD_FAST_NT 128
static constexpr inline int fa_fwd_fast_bm(int D) { return D >= 256 ? 64 : 128; }
static constexpr inline int fa_fwd_fast_smem(int D) { return (fa_fwd_fast_bm(D) + 2 * FA_FWD_FAST_BN) * D * 2; }

/* backward.cuh: 64 keys per block (one KV head), query tiles of 64 rows; K, V tiles
   [64][D], Q and dO tiles [64][D] double-buffered, dS [64][64], lse and D rows (2 x 2 x 64
   floats). */
static constexpr inline int fa_bwd_smem(int D) { return (2 * 64 * D + 4 * 64 * D + 64 * 64) * 2 + 4 * 64 * 4; }

#endif /* FA_CUDA_SM80_TILES_H */
