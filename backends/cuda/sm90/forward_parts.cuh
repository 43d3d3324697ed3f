/* forward_parts.cuh - the pieces both Hopper forwards use (forward.cuh and forward_ws.cuh):
 * the two products issued on wgmma, P re-packed as A fragments, the masked online softmax
 * on the accumulators, the rescale and the epilogue.
 */
#ifndef FA_CUDA_SM90_FORWARD_PARTS_CUH
#define FA_CUDA_SM90_FORWARD_PARTS_CUH

#include <limits.h>
#include "device/problem.cuh"

/* S = Q K^T for one warpgroup: 64 query rows at qaddr (a swizzled tile of BM rows) against
   the BN keys at kaddr; issued and committed, not waited for. */
template <typename T, int D, int BM, int BN>
__device__ __forceinline__ void fa90_issue_qk(float (&sacc)[BN / 2], uint32_t qaddr, uint32_t kaddr)
{
#pragma unroll
    for (int i = 0; i < BN / 2; i++) fa_reg_fence(sacc[i]);
    fa_wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 16; k++)
        fa_wgmma_ss<BN>(sacc, fa_gmma_desc(qaddr + (k >> 2) * (BM * 128) + (k & 3) * 32, 16, 1024),
                        fa_gmma_desc(kaddr + (k >> 2) * (BN * 128) + (k & 3) * 32, 16, 1024), k > 0, T());
    fa_wgmma_commit();
}

/* O += P V: P from registers, V (BN keys at vaddr) read N-major; issued and committed. */
template <typename T, int D, int BN>
__device__ __forceinline__ void fa90_issue_pv(float (&oacc)[D / 2], const uint32_t (&pa)[BN / 16][4], uint32_t vaddr,
                                              uint32_t v_lbo, uint32_t v_sbo)
{
#pragma unroll
    for (int i = 0; i < D / 2; i++) fa_reg_fence(oacc[i]);
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
        fa_wgmma_rs<D>(oacc, pa[kk], fa_gmma_desc(vaddr + kk * 16 * 128, v_lbo, v_sbo), 1, T());
    fa_wgmma_commit();
}

/* The S accumulator (fp32, after exp) re-packed as the A fragments of P V. */
template <typename T, int BN>
__device__ __forceinline__ void fa90_pack_p(uint32_t (&pa)[BN / 16][4], const float (&sacc)[BN / 2])
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        pa[kk][0] = fa_pack2(sacc[8 * kk + 0], sacc[8 * kk + 1], T());
        pa[kk][1] = fa_pack2(sacc[8 * kk + 2], sacc[8 * kk + 3], T());
        pa[kk][2] = fa_pack2(sacc[8 * kk + 4], sacc[8 * kk + 5], T());
        pa[kk][3] = fa_pack2(sacc[8 * kk + 6], sacc[8 * kk + 7], T());
    }
}

/* Mask (when `masked`) and online softmax of the S accumulator of KV tile n0: a thread
   holds rows row0 and row0 + 8 (row0 = the query row of lane / 4), columns
   n0 + (lane % 4) * 2 + 8 nt + e. sacc becomes P (fp32, base 2), alpha the rescale of what
   was accumulated before this tile; rmax/rsum are the running max (base 2, scaled) and
   this thread's partial row sums. */
template <int BN>
__device__ __forceinline__ void fa90_softmax(const fa_cu_fwd &p, const fa_dseq &s, float (&sacc)[BN / 2], int row0, int n0,
                                             bool masked, float sl2, float (&rmax)[2], float (&rsum)[2], float (&alpha)[2])
{
    const int lane = threadIdx.x % 32;
    if (masked) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int pos = row0 + r * 8 + s.off;
            const int jlo = p.window_left >= 0 ? pos - p.window_left : INT_MIN;
            const int jhi = p.window_right >= 0 ? min(s.sk - 1, pos + p.window_right) : s.sk - 1;
            const int c0 = n0 + (lane % 4) * 2;
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = c0 + nt * 8 + e;
                    if (j < jlo || j > jhi) sacc[nt * 4 + 2 * r + e] = -INFINITY;
                }
        }
    }
    /* base 2: a row lives in the 4 lanes of a quad */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) mx = fmaxf(mx, fmaxf(sacc[nt * 4 + 2 * r], sacc[nt * 4 + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(rmax[r], mx * sl2);
        const float ms = mnew == -INFINITY ? 0.f : mnew;
        alpha[r] = fa_exp2(rmax[r] - ms);
        rmax[r] = mnew;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
            sacc[nt * 4 + 2 * r] = fa_exp2(fmaf(sacc[nt * 4 + 2 * r], sl2, -ms));
            sacc[nt * 4 + 2 * r + 1] = fa_exp2(fmaf(sacc[nt * 4 + 2 * r + 1], sl2, -ms));
            sum += sacc[nt * 4 + 2 * r] + sacc[nt * 4 + 2 * r + 1];
        }
        rsum[r] = rsum[r] * alpha[r] + sum;
    }
}

/* O *= alpha, per row */
template <int D>
__device__ __forceinline__ void fa90_rescale(float (&oacc)[D / 2], const float (&alpha)[2])
{
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        oacc[4 * i] *= alpha[0]; oacc[4 * i + 1] *= alpha[0];
        oacc[4 * i + 2] *= alpha[1]; oacc[4 * i + 3] *= alpha[1];
    }
}

/* The epilogue (as sm80/forward_fast.cuh): quad row sums, sinks, normalisation and one write of
   rows row0 and row0 + 8 of O and lse (or of this split's parts). */
template <typename T, int D>
__device__ __forceinline__ void fa90_epilogue(const fa_cu_fwd &p, const fa_dseq &s, int b, int h, int split,
                                              const float (&oacc)[D / 2], const float (&rmax)[2], const float (&rsum)[2],
                                              int row0)
{
    float fac[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; r++) fa_row_end(p, h, rmax[r], rsum[r], fac[r], lse[r]);
    fa_store_rows<T, D>(p, s, b, h, split, oacc, fac, lse, row0);
}

#endif /* FA_CUDA_SM90_FORWARD_PARTS_CUH */
