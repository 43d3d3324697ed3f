/* forward.cuh - the first Hopper forward (sm_90a): both products on wgmma, the warpgroup
 * matrix instructions, for the feature set of the fast sm80 kernel (no bias, ALiBi, softcap
 * or dropout; masks, sinks, GQA, varlen, KV cache, split-KV and fp32 out kept).
 *
 * No TMA and no warp specialization (forward_ws.cuh has both; this kernel serves paged KV
 * caches whose pages cannot be TMA boxes, and grids past forward_ws.cuh's 32-bit tile
 * count). A block is 2 warpgroups (256 threads) and 128 query rows; each
 * warpgroup owns 64 rows:
 *   - Q [128 x D], K and V [BN x D] tiles live in shared memory in the 128-byte swizzled
 *     layout wgmma reads: the D columns are cut into blocks of 64 (128 bytes per row), each
 *     block stored as rows of 128 bytes whose 16-byte chunk c of row r sits at c ^ (r % 8);
 *   - K/V tiles are double-buffered with cp.async: tile n+1 is in flight while tile n is
 *     computed;
 *   - S = Q K^T: wgmma m64nBNk16 with both operands in shared memory (K-major), D/16 steps;
 *   - online softmax on the accumulators in registers (base 2, as the sm80 kernels);
 *   - O += P V: wgmma m64nDk16 with P from registers (the accumulator fragment is the A
 *     fragment's layout after the bf16/fp16 conversion) and V from shared memory read
 *     N-major (V is [keys][D] in memory: its rows are the K dimension of this product).
 * Tiles: BN = 128 keys for D <= 128, 64 for D = 256 (registers: S is BN/2 floats per thread,
 * O is D/2). Shared memory: (128 + 4 BN) D 2 bytes + 1 KiB of alignment slack.
 */
#ifndef FA_CUDA_SM90_FORWARD_CUH
#define FA_CUDA_SM90_FORWARD_CUH

#include <math.h>
#include <limits.h>
#include "device/tiles.cuh"
#include "sm90/forward_parts.cuh"
#include "sm90/tiles.h"

template <int D> struct fa_f90_cfg {
    static constexpr int BM = 128, BN = fa_fwd_sm90_bn(D), NT = 256;
    static constexpr int QB = BM * D * 2, KB = BN * D * 2;   /* bytes of one Q, K or V tile */
    static constexpr int SMEM = fa_fwd_sm90_smem(D);
    static_assert(SMEM == QB + 4 * KB + 1024, "kernels.h and the kernel disagree on the shared memory");
};

template <typename T, int D>
__global__ void __launch_bounds__(256, fa_fwd_sm90_minb(D)) fa_fwd_sm90_kernel(const fa_cu_fwd p, const uint32_t v_lbo, const uint32_t v_sbo)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef fa_f90_cfg<D> C;
    constexpr int BM = C::BM, BN = C::BN, NT = C::NT;
    extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
    unsigned char *smem = fa_align1024(fa_smem_raw);
    unsigned char *sQ = smem;
    unsigned char *sK = sQ + C::QB;          /* 2 stages */
    unsigned char *sV = sK + 2 * C::KB;      /* 2 stages */

    fa_fwd_block fb;
    if (!fa_fwd_block_of<BM, BN>(p, fb)) return;
    const fa_dseq s = fb.s;
    const int b = fb.b, h = fb.h, hk = fb.hk, split = fb.split, m0 = fb.m0;
    const int nb_lo = fb.nb_lo, nb_hi = fb.nb_hi;
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    /* The rows of this warpgroup decide which of its tiles need the mask. */
    const int wm0 = m0 + wg * 64, wlast = min(wm0 + 63, s.sq - 1);
    int full_lo, full_hi;
    fa_fwd_full_range(p, s, wm0, wlast, full_lo, full_hi);

    const T *qbase = reinterpret_cast<const T *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
    const T *kbase = reinterpret_cast<const T *>(p.k) + s.tb * p.k_sb + s.k0 * p.k_ss + (int64_t)hk * p.k_sh;
    const T *vbase = reinterpret_cast<const T *>(p.v) + s.tb * p.v_sb + s.k0 * p.v_ss + (int64_t)hk * p.v_sh;
    const bool paged = p.block_table != nullptr;

    auto load_k = [&](int nb) {
        const int n0 = nb * BN, nval = min(BN, s.sk - n0);
        if (!paged && nval == BN) {
            fa_load_full90<D, BN, NT, T>(sK + (nb & 1) * C::KB, kbase + (int64_t)n0 * p.k_ss, p.k_ss, p.dqk);
            return;
        }
        fa_load_tile90<D, BN, NT, T>(sK + (nb & 1) * C::KB, nval, p.dqk, [&](int r) {
            return paged ? reinterpret_cast<const T *>(p.k) + fa_dev_krow(p, s, b, n0 + r, hk, p.k_sb, p.k_ss, p.k_sh)
                         : kbase + (int64_t)(n0 + r) * p.k_ss;
        });
    };
    auto load_v = [&](int nb) {
        const int n0 = nb * BN, nval = min(BN, s.sk - n0);
        if (!paged && nval == BN) {
            fa_load_full90<D, BN, NT, T>(sV + (nb & 1) * C::KB, vbase + (int64_t)n0 * p.v_ss, p.v_ss, p.dv);
            return;
        }
        fa_load_tile90<D, BN, NT, T>(sV + (nb & 1) * C::KB, nval, p.dv, [&](int r) {
            return paged ? reinterpret_cast<const T *>(p.v) + fa_dev_krow(p, s, b, n0 + r, hk, p.v_sb, p.v_ss, p.v_sh)
                         : vbase + (int64_t)(n0 + r) * p.v_ss;
        });
    };

    float oacc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) oacc[i] = 0.f;
    float rmax[2] = { -INFINITY, -INFINITY }, rsum[2] = { 0.f, 0.f };
    const float sl2 = p.scale * FA_LOG2E;
    const uint32_t qaddr = fa_smem_u32(sQ) + wg * 64 * 128;
    const int wrow = wg * 64 + warp * 16;     /* first row of this warp in the block */
    float sacc[BN / 2];
    uint32_t pa[BN / 16][4];

    const int row0 = m0 + wrow + lane / 4;   /* this thread's first query row */
    auto issue_qk = [&](int nb) { fa90_issue_qk<T, D, BM, BN>(sacc, qaddr, fa_smem_u32(sK + (nb & 1) * C::KB)); };
    auto issue_pv = [&](int nb) { fa90_issue_pv<T, D, BN>(oacc, pa, fa_smem_u32(sV + (nb & 1) * C::KB), v_lbo, v_sbo); };
    auto softmax = [&](int nb, float (&alpha)[2]) {
        fa90_softmax<BN>(p, s, sacc, row0, nb * BN, nb * BN < full_lo || nb * BN + BN > full_hi, sl2, rmax, rsum, alpha);
    };
    auto pack_p = [&]() { fa90_pack_p<T, BN>(pa, sacc); };

    /* Pipeline (one warpgroup's view; K and V each have 2 buffers, tile n in buffer n & 1),
       one block barrier per tile:
         prologue: load Q, K[lo]; barrier; load K[lo+1], V[lo]; S = Q K[lo]^T; softmax -> P
         tile n > lo: wait for the copies in flight (K[n], V[n-1]); barrier; load K[n+1],
                      V[n]; issue S = Q K[n]^T and O += P V[n-1] together; wait for S;
                      softmax of tile n while the tensor cores run P V[n-1]; wait for
                      P V[n-1]; O *= alpha; P = exp(S - m)
         end: wait for V[hi-1]; barrier; O += P V[hi-1]
       The barrier of tile n both publishes K[n] and V[n-1] (each thread's copies, then
       fence.proxy.async, then the barrier: the tensor cores read what every thread copied)
       and frees two buffers: every warpgroup has passed its wait for S of tile n-1 (K[n-1]
       read) and for P V[n-2] (V[n-2] read), so K[n+1] and V[n] go there. */
    fa_load_tile90<D, BM, NT, T>(sQ, s.sq - m0, p.dqk, [&](int r) { return qbase + (int64_t)r * p.q_ss; });
    if (nb_lo < nb_hi) load_k(nb_lo);
    fa_cp_async_commit();
    if (nb_lo < nb_hi) {
        fa_cp_async_wait<0>();
        fa_fence_proxy_async();
        __syncthreads();
        if (nb_lo + 1 < nb_hi) load_k(nb_lo + 1);
        load_v(nb_lo);
        fa_cp_async_commit();
        issue_qk(nb_lo);
        fa_wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BN / 2; i++) fa_reg_fence(sacc[i]);
        float alpha[2];
        softmax(nb_lo, alpha);
        pack_p();
    }
    for (int nb = nb_lo + 1; nb < nb_hi; nb++) {
        fa_cp_async_wait<0>();                /* K[nb] and V[nb-1] landed (this thread's copies) */
        fa_fence_proxy_async();               /* cp.async's writes, then the tensor cores' reads */
        __syncthreads();                      /* ... everyone's; K[nb-1] and V[nb-2] are free */
        if (nb + 1 < nb_hi) load_k(nb + 1);
        load_v(nb);
        fa_cp_async_commit();
        issue_qk(nb);
        issue_pv(nb - 1);
        fa_wgmma_wait<1>();                   /* S done; P V[nb-1] may still run */
#pragma unroll
        for (int i = 0; i < BN / 2; i++) fa_reg_fence(sacc[i]);
        float alpha[2];
        softmax(nb, alpha);
        fa_wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < D / 2; i++) fa_reg_fence(oacc[i]);
        fa90_rescale<D>(oacc, alpha);
        pack_p();
    }
    if (nb_lo < nb_hi) {
        fa_cp_async_wait<0>();                /* V[hi-1] */
        fa_fence_proxy_async();
        __syncthreads();
        issue_pv(nb_hi - 1);
        fa_wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < D / 2; i++) fa_reg_fence(oacc[i]);
    }
    fa_cp_async_wait<0>();

    fa90_epilogue<T, D>(p, s, b, h, split, oacc, rmax, rsum, row0);
#endif
}

template <typename T, int D>
cudaError_t fa_fwd_sm90_launch(const fa_cu_fwd &p, int64_t blocks, cudaStream_t st)
{
    typedef fa_f90_cfg<D> C;
    cudaError_t e = cudaFuncSetAttribute(fa_fwd_sm90_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
    /* V is read N-major: one swizzle atom is 64 columns x 8 keys (1 KiB); the atoms of the
       next 64 columns are a tile's 64-column block further (BN x 128 bytes). */
    fa_fwd_sm90_kernel<T, D><<<(unsigned)blocks, C::NT, C::SMEM, st>>>(p, C::BN * 128, 1024);
    return cudaGetLastError();
}

#define FA_FWD_SM90_INSTANTIATE(D) \
    template cudaError_t fa_fwd_sm90_launch<__half, D>(const fa_cu_fwd &, int64_t, cudaStream_t); \
    template cudaError_t fa_fwd_sm90_launch<__nv_bfloat16, D>(const fa_cu_fwd &, int64_t, cudaStream_t);

#endif /* FA_CUDA_SM90_FORWARD_CUH */
