/* tiles.h - the tile table of the Hopper (sm_90a, wgmma) kernels and the per-call choice
 * among the warp-specialized forward's tiles. The kernels assert that their own layouts
 * agree with these numbers; the host plans grids and checks shared memory with them.
 */
#ifndef FA_CUDA_SM90_TILES_H
#define FA_CUDA_SM90_TILES_H

/* ---- forward.cuh: the first Hopper forward (paged KV caches of other page sizes) -------- */
/* 2 warpgroups, 128 query rows, BN keys per KV tile, K/V double-buffered */
static constexpr inline int fa_fwd_sm90_bn(int D) { return D >= 256 || D <= 64 ? 64 : 128; }
/* blocks per SM the kernel is compiled for: d64 (tiles 128 x 64, ~100 registers) runs 2 */
static constexpr inline int fa_fwd_sm90_minb(int D) { return D <= 64 ? 2 : 1; }
static constexpr inline int fa_fwd_sm90_smem(int D) { return (128 + 4 * fa_fwd_sm90_bn(D)) * D * 2 + 1024; }
#define FA_FWD_SM90_BM 128
#define FA_FWD_SM90_NT 256

/* ---- forward_ws.cuh: the warp-specialized forward --------------------------------------- */
/* The tiles compiled, bm query rows (bm / 64 consumer warpgroups) x bn keys: 128 x
   fa_fwd_ws_bn(D) and, where the alternatives are > 0, 128 x fa_fwd_ws_bn_alt(D) and
   fa_fwd_ws_bm_alt(D) x fa_fwd_ws_bn_alt(D) (d64: 128 x 192, 128 x 128, 192 x 128; 192 x 192
   would spill 552 bytes at the 160 registers of 3 consumer warpgroups); d128 128 x 128,
   d256 128 x 80. */
static constexpr inline int fa_fwd_ws_bn(int D) { return D >= 256 ? 80 : D > 64 ? 128 : 192; }
static constexpr inline int fa_fwd_ws_bn_alt(int D) { return D > 64 ? 0 : 128; }
static constexpr inline int fa_fwd_ws_bm_alt(int D) { return D > 64 ? 0 : 192; }
static constexpr inline bool fa_fwd_ws_has(int D, int bm, int bn)
{
    return (bm == 128 && (bn == fa_fwd_ws_bn(D) || (fa_fwd_ws_bn_alt(D) > 0 && bn == fa_fwd_ws_bn_alt(D)))) ||
           (fa_fwd_ws_bm_alt(D) > 0 && bm == fa_fwd_ws_bm_alt(D) && bn == fa_fwd_ws_bn_alt(D));
}
static constexpr inline int fa_fwd_ws_nt(int bm) { return 128 * (bm / 64 + 1); }
static constexpr inline int fa_fwd_ws_stages(int D, int BN) { return BN * D <= 128 * 128 ? 3 : 2; }
static constexpr inline int fa_fwd_ws_smem(int D, int BM, int BN)
{
    return (BM + 2 * fa_fwd_ws_stages(D, BN) * BN) * D * 2 + 8 * (4 * fa_fwd_ws_stages(D, BN) + 7) + 1024;
}
/* The tile of one call at head-dim class D (measured on the H200): d64 takes 128-key
   tiles up to 2048 keys (1.04-1.15x the 192-key ones at 512-1024 keys, even at 2048;
   0.95-0.98x from 4096 on); d64 without a causal mask or window from 512 queries takes 192
   query rows (3 consumer warpgroups) x 128 keys, 1.08-1.15x the two-warpgroup tiles at
   512-16k keys (under a causal mask 0.96-1.04x: more of each diagonal tile is masked). */
static inline void fa_fwd_ws_pick(int D, long long max_sq, long long max_sk, int masked, int *bm, int *bn)
{
    *bn = D == 64 && max_sk <= 2048 ? fa_fwd_ws_bn_alt(D) : fa_fwd_ws_bn(D);
    *bm = 128;
    if (fa_fwd_ws_bm_alt(D) > 0 && !masked && max_sq >= 512) {
        *bm = fa_fwd_ws_bm_alt(D);
        *bn = fa_fwd_ws_bn_alt(D);
    }
    if (!fa_fwd_ws_has(D, *bm, *bn)) *bm = 128;
}

/* ---- backward.cuh: the first Hopper backward (d256) ------------------------------------- */
/* 2 warpgroups, query tiles of 64 rows. d64/d128: 128 keys per block, 64 per warpgroup.
   d256: 64 keys per block, both warpgroups on the same keys, each owning half of dK/dV's
   columns (S^T and dP^T computed by both). */
#define FA_BWD_SM90_BQ 64
static constexpr inline int fa_bwd_sm90_bn(int D) { return D > 128 ? 64 : 128; }
/* The dQ staging boxes (fp32, 16 rows x 32 columns, 128-byte swizzle) the tensor-map reduce
   reads: a query tile's BQ x D for d64/d128; one box per warp for d256 (its dQ leaves in
   rounds of 32 columns). */
#define FA_BWD_SM90_DQ_BOX_COLS 32
#define FA_BWD_SM90_DQ_BOX_ROWS 16
static constexpr inline int fa_bwd_sm90_dq_staging(int D)
{
    return D > 128 ? 8 * FA_BWD_SM90_DQ_BOX_ROWS * FA_BWD_SM90_DQ_BOX_COLS * 4 : FA_BWD_SM90_BQ * D * 4;
}
static constexpr inline int fa_bwd_sm90_smem(int D)
{
    return 2 * fa_bwd_sm90_bn(D) * D * 2 + 4 * FA_BWD_SM90_BQ * D * 2 + FA_BWD_SM90_BQ * fa_bwd_sm90_bn(D) * 2 +
           4 * FA_BWD_SM90_BQ * 4 + fa_bwd_sm90_dq_staging(D) + 1024;
}

/* ---- backward_ws.cuh: the warp-specialized backward (d64, d128) ------------------------- */
/* a producer warp, 2 consumer warpgroups of 64 keys each, Q/dO tiles in a ring of
   fa_bwd_ws_stages(D) stages */
#define FA_BWD_WS_NT 384
#define FA_BWD_WS_BN 128
static constexpr inline int fa_bwd_ws_stages(int D) { return D <= 64 ? 3 : 2; }
/* K, V [128][D]; Q and dO [64][D] per stage; dS [64][128] x 2; the dQ staging boxes (64 x D
   fp32); lse and D rows of two query tiles, two copies; barriers: K/V full, Q full and empty per stage. */
static constexpr inline int fa_bwd_ws_smem(int D)
{
    return 2 * FA_BWD_WS_BN * D * 2 + 2 * fa_bwd_ws_stages(D) * FA_BWD_SM90_BQ * D * 2 + 2 * FA_BWD_SM90_BQ * FA_BWD_WS_BN * 2 +
           FA_BWD_SM90_BQ * D * 4 + 2 * 4 * FA_BWD_SM90_BQ * 4 + 8 * (1 + 2 * fa_bwd_ws_stages(D)) + 1024;
}

#endif /* FA_CUDA_SM90_TILES_H */
