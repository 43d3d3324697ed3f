/* forward_sm90.cuh - the Hopper forward (sm_90a): both products on wgmma, the warpgroup
 * matrix instructions, for the feature set of the fast sm80 kernel (no bias, ALiBi, softcap
 * or dropout; masks, sinks, GQA, varlen, KV cache, split-KV and fp32 out kept).
 *
 * First version (see bench/NOTES.md, "CUDA Hopper forward"): no TMA and no warp
 * specialization yet. A block is 2 warpgroups (256 threads) and 128 query rows; each
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
#ifndef FA_CUDA_FORWARD_SM90_CUH
#define FA_CUDA_FORWARD_SM90_CUH

#include <math.h>
#include <limits.h>
#include "common.cuh"
#include "kernels.h"
#include "wgmma_ops.cuh"

template <int D> struct fa_f90_cfg {
    static constexpr int BM = 128, BN = fa_fwd_sm90_bn(D), NT = 256;
    static constexpr int QB = BM * D * 2, KB = BN * D * 2;   /* bytes of one Q, K or V tile */
    static constexpr int SMEM = fa_fwd_sm90_smem(D);
    static_assert(SMEM == QB + 4 * KB + 1024, "kernels.h and the kernel disagree on the shared memory");
};

/* The first 1024-byte aligned shared-memory address at or after p (the 128-byte swizzle
   repeats every 1024 bytes; the kernels ask for 1 KiB of slack). */
__device__ __forceinline__ unsigned char *fa_align1024(unsigned char *p)
{
    return p + ((1024 - (fa_smem_u32(p) & 1023)) & 1023);
}

/* Byte offset of 16-byte chunk ch of row r in a swizzled tile of R rows. */
template <int R>
__device__ __forceinline__ uint32_t fa_swz128(int r, int ch)
{
    return (uint32_t)((ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

/* Shared-memory matrix descriptor: start address, leading and stride byte offsets, 128-byte
   swizzle (layout type 1 in bits 62-63). */
__device__ __forceinline__ uint64_t fa_gmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | ((uint64_t)1 << 62);
}

__device__ __forceinline__ void fa_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fa_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void fa_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
/* Pins a register across the asynchronous window: the compiler may not move reads or
   writes of x across this point. */
__device__ __forceinline__ void fa_reg_fence(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fa_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void fa_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* Rows [0, nvalid) x columns [0, ncols) of a tile of R rows into the swizzled layout; the
   rest is zero-filled (cp.async with 0 source bytes). */
template <int D, int R, int NT, typename T, typename RowFn>
__device__ __forceinline__ void fa_load_tile90(unsigned char *dst, int nvalid, int ncols, RowFn rowptr)
{
    constexpr int CPR = D / 8;
#pragma unroll
    for (int it = 0; it < R * CPR / NT; it++) {
        const int c = threadIdx.x + it * NT;
        const int r = c / CPR, ch = c % CPR;
        const bool ok = r < nvalid && ch * 8 < ncols;
        const T *src = ok ? rowptr(r) + ch * 8 : rowptr(0);
        fa_cp_async16(dst + fa_swz128<R>(r, ch), src, ok ? 16 : 0);
    }
}

/* The same by the 32 lanes of one warp (a producer warp), rows at row0 + r * rstride: lane
   l copies chunks l, l + 32, ... in a rolled loop (a producer runs on few registers). */
template <int D, int R, typename T>
__device__ __forceinline__ void fa_load_rows_warp(unsigned char *dst, const T *row0, int64_t rstride, int nvalid, int ncols)
{
    constexpr int CPR = D / 8;
    for (int c = threadIdx.x % 32; c < R * CPR; c += 32) {
        const int r = c / CPR, ch = c % CPR;
        const bool ok = r < nvalid && ch * 8 < ncols;
        fa_cp_async16(dst + fa_swz128<R>(r, ch), ok ? row0 + (int64_t)r * rstride + ch * 8 : row0, ok ? 16 : 0);
    }
}

/* A whole tile of R rows from a dense tensor (rows at src_row0 + r * row_stride): the fast
   path of the K/V loads. Thread t always copies chunk t % (D/8) of rows t / (D/8) + i * RSTEP,
   and RSTEP is a multiple of 8, so its swizzled destination is one base plus i * RSTEP rows
   and its source one pointer stepped by RSTEP rows: two adds per 16-byte copy, against the
   general loader's per-row index arithmetic. */
template <int D, int R, int NT, typename T>
__device__ __forceinline__ void fa_load_full90(unsigned char *dst, const T *src_row0, int64_t row_stride, int ncols)
{
    constexpr int CPR = D / 8, RSTEP = NT / CPR, IT = R * CPR / NT;
    static_assert(RSTEP % 8 == 0 && NT % CPR == 0, "the swizzle must repeat every RSTEP rows");
    const int ch = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
    const bool ok = ch * 8 < ncols;
    const T *src = src_row0 + (int64_t)r0 * row_stride + ch * 8;
    const int64_t step = (int64_t)RSTEP * row_stride;
    unsigned char *d0 = dst + fa_swz128<R>(r0, ch);
#pragma unroll
    for (int it = 0; it < IT; it++) {
        fa_cp_async16(d0 + it * RSTEP * 128, ok ? src : src_row0, ok ? 16 : 0);
        src += step;
    }
}

/* ---- pieces both Hopper forwards use (this kernel and forward_sm90ws.cuh) ---------------- */

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

/* The epilogue (as forward_fast.cuh): quad row sums, sinks, normalisation and one write of
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

#endif /* FA_CUDA_FORWARD_SM90_CUH */
