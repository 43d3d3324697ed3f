/* tiles.h - the tile table of the fp32 kernels: simt.cuh (fp32 FMA, every feature, any
 * head dim up to 256, classes D = 64/128/256) and tf32x3.cuh (the forward of classes 64
 * and 128 on the tensor cores).
 */
#ifndef FA_CUDA_FP32_TILES_H
#define FA_CUDA_FP32_TILES_H

/* simt.cuh, 256 threads per block. Forward: 64 query rows per block, KV tiles of 32 keys;
   shared memory Q [64][D+4], K and V [32][D+4], P [32][68] floats. Backward: 32 keys per
   block, query tiles of fa_f32_bwd_bq(D) rows; K, V [32][D+4], Q, dO [BQ][D+4], P Z and dS
   [32][BQ+4], lse and D rows. */
#define FA_F32_NT 256
#define FA_F32_FWD_BM 64
#define FA_F32_FWD_BN 32
#define FA_F32_BWD_BN 32
static constexpr inline int fa_f32_bwd_bq(int D) { return D >= 128 ? 32 : 64; }
static constexpr inline int fa_f32_fwd_smem(int D)
{
    return (FA_F32_FWD_BM * (D + 4) + 2 * FA_F32_FWD_BN * (D + 4) + FA_F32_FWD_BN * (FA_F32_FWD_BM + 4)) * 4;
}
static constexpr inline int fa_f32_bwd_smem(int D)
{
    return (2 * FA_F32_BWD_BN * (D + 4) + 2 * fa_f32_bwd_bq(D) * (D + 4) + 2 * FA_F32_BWD_BN * (fa_f32_bwd_bq(D) + 4) +
            2 * fa_f32_bwd_bq(D)) * 4;
}

/* tf32x3.cuh: 8 warps x 16 query rows, KV tiles of 32 keys; shared memory Q [128][D+8],
   K [32][D+8], V [32][D+4] floats. */
#define FA_TF32_NT 256
#define FA_TF32_FWD_BM 128
#define FA_TF32_FWD_BN 32
static constexpr inline int fa_tf32_fwd_smem(int D) { return ((FA_TF32_FWD_BM + FA_TF32_FWD_BN) * (D + 8) + FA_TF32_FWD_BN * (D + 4)) * 4; }

#endif /* FA_CUDA_FP32_TILES_H */
