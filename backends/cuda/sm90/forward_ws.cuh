/* forward_ws.cuh - the warp-specialized Hopper forward (sm_90a): K/V by TMA from a
 * producer warp, wgmma in two or three consumer warpgroups, mbarriers instead of block
 * barriers, register reallocation, a persistent grid.
 *
 * Tiles are BM query rows x BN keys (template parameters; kernels.h lists those compiled).
 * A block is 1 + BM / 64 warpgroups (384 or 512 threads) and runs work tiles (b, h, KV
 * split, BM query rows) until none is left (the grid is at most one block per SM): its first tile is
 * blockIdx.x, each next one gridDim.x plus a ticket from a global counter, taken by the
 * producer and passed to the consumers through a 2-slot ring in shared memory. Tiles are
 * numbered m-block fastest (the tiles that share K/V run together), in descending order
 * within a head: under a causal mask the longest tiles go first and the shortest fill the
 * end. (A fixed round-robin assignment left up to 2x the mean work on one block under a
 * causal mask.) The block that takes the launch's last ticket sets the counter back to 0
 * for the next launch: a launch hands out exactly `ntiles` tickets. A grid of `ntiles`
 * blocks or more takes no ticket (tickets may then be NULL).
 *   - warpgroup 0 gives registers back (setmaxnreg.dec to C::PREGS); its first
 *     warp is the producer, the other three exit. The producer loads the tile's Q (BM rows)
 *     and its KV tiles into a ring of ST stages, K and V of a stage with barriers of their
 *     own. Full KV tiles and every tile of the dense layout (rows past the sequence end are
 *     outside the tensor map: TMA fills zeros) come by TMA (cp.async.bulk.tensor, the
 *     128-byte swizzle that the wgmma descriptors read, completion counted in bytes on the
 *     stage's full barrier). The last, partial tile of a varlen or KV-cache sequence is
 *     copied by the warp's 32 lanes with cp.async and zero fill, since the rows after it
 *     belong to another sequence or to unwritten cache: whatever they hold, P = 0 there must
 *     multiply zeros.
 *   - warpgroups 1 .. BM / 64 take registers (setmaxnreg.inc to C::CREGS) and each
 *     computes 64 of the BM rows, as the first Hopper forward's warpgroups do (S = Q K^T
 *     from shared memory, online softmax in registers, O += P V with P from registers),
 *     with S of tile n and P V of tile n-1 in flight together and the softmax of tile n run
 *     while P V of tile n-1 is on the tensor cores. A consumer warp releases a stage (one
 *     arrival per warp on its empty barrier) once its wgmma that read it is complete, and
 *     Q once the tile's last S is; the next work tile's loads then overlap this tile's
 *     last product and its epilogue.
 * Stage and Q barriers flip phase at each use: use u of a barrier waits for parity u & 1.
 * The producer and the consumers walk the same work tiles and KV tiles in the same order,
 * so each keeps its own count of stage uses.
 * Served: the fast kernel's feature set for dense, varlen and KV-cache layouts. A paged
 * cache's full KV tiles come by TMA one box per page (the tensor map spans [pages, page
 * rows, heads, columns]; a box is min(page size, BN) rows, which the host requires to be a
 * multiple of 8 that divides BN or is a multiple of it, so that every box starts on the
 * swizzle's 8-row period and stays within its page); its partial tile is copied row by row
 * through the block table. That code is compiled only into the PAGED instantiations, so the
 * kernels of the other layouts are the same machine code as without it. Other page sizes
 * stay on forward.cuh, and the host falls back to that kernel when a tensor map cannot be
 * encoded.
 */
#ifndef FA_CUDA_SM90_FORWARD_WS_CUH
#define FA_CUDA_SM90_FORWARD_WS_CUH

#include <string.h>
#include <cuda.h>
#include "device/tiles.cuh"
#include "sm90/forward_parts.cuh"
#include "sm90/tiles.h"

template <int D, int BM_, int BN_> struct fa_ws_cfg {
    /* BM / 64 consumer warpgroups; registers after setmaxnreg: 2 consumers 232 (producer 40:
       128 x 40 + 256 x 232 = 384 x 168, the launch allocation), 3 consumers 160 (producer
       32: 128 x 32 + 384 x 160 = 512 x 128) */
    static constexpr int BM = BM_, BN = BN_, ST = fa_fwd_ws_stages(D, BN_), NCW = BM_ / 64, NT = fa_fwd_ws_nt(BM_);
    static constexpr int PREGS = NCW == 2 ? 40 : 32, CREGS = NCW == 2 ? 232 : 160;
    static_assert(NCW == 2 || NCW == 3, "2 or 3 consumer warpgroups");
    /* the budgets must fit the launch's allocation (registers per thread at NT threads, in
       steps of 8), or setmaxnreg.inc would wait for registers that never come free */
    static_assert(128 * PREGS + 128 * NCW * CREGS <= NT * ((65536 / NT) & ~7), "the launch's register allocation");
    static constexpr int QB = BM * D * 2, KB = BN * D * 2;
    static constexpr int BAR = QB + 2 * ST * KB;         /* barriers after the tiles, then the tile ring */
    static constexpr int SMEM = fa_fwd_ws_smem(D, BM_, BN_);
    static_assert(SMEM == BAR + 8 * (4 * ST + 7) + 1024, "kernels.h and the kernel disagree on the shared memory");
};

/* Work tile t -> its block: m-block fastest, in descending order within a head. */
template <int BM, int BN>
__device__ __forceinline__ bool fa_ws_block(const fa_cu_fwd &p, fa_fwd_block &fb, int t)
{
    const int mb = t % p.m_blocks;
    return fa_fwd_block_at<BM, BN>(p, fb, (int64_t)(t - mb) + (p.m_blocks - 1 - mb));
}

#define FA_FWS_BAR_SCHED 1   /* + cw: named barriers of the ping-pong (0 is __syncthreads) */
#define FA_FWS_PP_MIN_KEYS 4096   /* a work tile's keys from which it takes turns */

template <typename T, int D, int BM_, int BN_, bool PAGED>
__global__ void __launch_bounds__(fa_fwd_ws_nt(BM_), 1)
    fa_fwd_ws_kernel(const fa_cu_fwd p, const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                     const __grid_constant__ CUtensorMap tm_v, const int ntiles, int *const tickets, const uint32_t v_lbo,
                     const uint32_t v_sbo)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef fa_ws_cfg<D, BM_, BN_> C;
    constexpr int BM = C::BM, BN = C::BN, ST = C::ST;
    extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
    unsigned char *smem = fa_align1024(fa_smem_raw);
    unsigned char *sQ = smem;
    unsigned char *sK = sQ + C::QB;             /* ST stages */
    unsigned char *sV = sK + ST * C::KB;        /* ST stages */
    const uint32_t bars = fa_smem_u32(smem + C::BAR);
    const uint32_t full_q = bars, empty_q = bars + 8;
    auto full_k = [&](int st) { return bars + 16 + 8 * st; };
    auto empty_k = [&](int st) { return bars + 16 + 8 * (ST + st); };
    auto full_v = [&](int st) { return bars + 16 + 8 * (2 * ST + st); };
    auto empty_v = [&](int st) { return bars + 16 + 8 * (3 * ST + st); };
    /* the tile ring: slot i's tile index, its full and empty barriers */
    volatile int *tile_slot = reinterpret_cast<volatile int *>(smem + C::BAR + 8 * (2 + 4 * ST));
    auto full_t = [&](int i) { return bars + 8 * (2 + 4 * ST) + 8 + 8 * i; };
    auto empty_t = [&](int i) { return bars + 8 * (2 + 4 * ST) + 24 + 8 * i; };
    constexpr int CONSUMER_WARPS = 4 * C::NCW;

    if (threadIdx.x == 0) {
        fa_mbar_init(full_q, 1);
        fa_mbar_init(empty_q, CONSUMER_WARPS);
        for (int st = 0; st < ST; st++) {
            fa_mbar_init(full_k(st), 1);
            fa_mbar_init(empty_k(st), CONSUMER_WARPS);
            fa_mbar_init(full_v(st), 1);
            fa_mbar_init(empty_v(st), CONSUMER_WARPS);
        }
        for (int i = 0; i < 2; i++) {
            fa_mbar_init(full_t(i), 1);
            fa_mbar_init(empty_t(i), CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;

    if (wg == 0) {
        /* ---- the producer ---- */
        fa_setmaxnreg_dec<C::PREGS>();
        if (warp != 0) return;
        /* A KV tile of the partial kind: rows [0, nval) x columns [0, ncols), the rest zero;
           the 32 lanes copy, wait for their copies, order them before the tensor cores'
           reads, and lane 0 completes the barrier's phase. */
        auto copied = [&](uint32_t bar) {
            fa_cp_async_commit();
            fa_cp_async_wait<0>();
            fa_fence_proxy_async();
            __syncwarp();
            if (lane == 0) fa_mbar_arrive(bar);
        };
        auto copy_tail = [&](unsigned char *dst, uint32_t bar, const T *row0, int64_t rstride, int nval, int ncols) {
            fa_load_rows_warp<D, BN, T>(dst, row0, rstride, nval, ncols);
            copied(bar);
        };
        /* the same for a paged cache: each row through the block table */
        auto copy_tail_paged = [&](unsigned char *dst, uint32_t bar, const fa_fwd_block &fb, int n0, const void *base,
                                   int64_t sb, int64_t ss, int64_t sh, int nval, int ncols) {
            const T *t0 = reinterpret_cast<const T *>(base);
            fa_load_rows_warp_fn<D, BN, T>(dst, t0, nval, ncols, [&](int r) {
                return t0 + fa_dev_krow(p, fb.s, fb.b, n0 + r, fb.hk, sb, ss, sh);
            });
            copied(bar);
        };
        /* a paged cache (the PAGED instantiations, so that the others compile as if pages
           did not exist): rows per TMA box (the host takes this kernel only for page sizes
           that are multiples of 8 and divide BN or are multiples of it) */
        constexpr bool paged = PAGED;
        const int pr = paged ? min(p.page_size, BN) : BN;
        int use = 0, qn = 0;
        for (int t = blockIdx.x, j = 0;; j++) {
            /* publish tile t (ntiles or more: the end) in slot j % 2, then take the next ticket */
            fa_mbar_wait(empty_t(j & 1), ((j >> 1) & 1) ^ 1);
            if (lane == 0) {
                tile_slot[j & 1] = t;
                fa_mbar_arrive(full_t(j & 1));
            }
            if (t >= ntiles) break;
            int tn = ntiles;                                   /* grid >= ntiles: one tile per block */
            if (lane == 0 && ntiles > (int)gridDim.x) {
                const int r = atomicAdd(tickets, 1);
                if (r == ntiles - 1) atomicExch(tickets, 0);   /* the launch's last ticket */
                tn = r + (int)gridDim.x;
            }
            const int tc = t;
            t = __shfl_sync(0xffffffffu, tn, 0);
            fa_fwd_block fb;
            if (!fa_ws_block<BM, BN>(p, fb, tc) || fb.nb_lo >= fb.nb_hi) continue;
            const fa_dseq &s = fb.s;
            fa_mbar_wait(empty_q, (qn & 1) ^ 1);
            qn++;
            if (lane == 0) {
                fa_mbar_expect_tx(full_q, C::QB);
#pragma unroll
                for (int c = 0; c < D / 64; c++)
                    fa_tma_load_4d(fa_smem_u32(sQ + c * BM * 128), &tm_q, full_q, c * 64, (int)s.q0 + fb.m0, fb.h, (int)s.tb);
            }
            for (int nb = fb.nb_lo; nb < fb.nb_hi; nb++, use++) {
                const int st = use % ST;
                const uint32_t ph = (use / ST) & 1;
                const int n0 = nb * BN, nval = min(BN, s.sk - n0);
                const bool tma = nval == BN || p.layout == FA_CU_DENSE;
                /* one of K and V into stage st: by TMA, or copied (the partial kind) */
                auto load = [&](const CUtensorMap *map, unsigned char *dst, uint32_t full, uint32_t empty,
                                const void *base, int64_t sb, int64_t ss, int64_t sh, int ncols) {
                    fa_mbar_wait(empty, ph ^ 1);
                    if (!tma && paged) {
                        copy_tail_paged(dst, full, fb, n0, base, sb, ss, sh, nval, ncols);
                    } else if (!tma) {
                        copy_tail(dst, full, reinterpret_cast<const T *>(base) + s.tb * sb + (s.k0 + n0) * ss + (int64_t)fb.hk * sh,
                                  ss, nval, ncols);
                    } else if (paged) {
                        /* a paged cache's full tile: lane i loads box i (pr rows) from the
                           page that holds keys n0 + i * pr .., once lane 0 has set the
                           expected bytes */
                        if (lane == 0) fa_mbar_expect_tx(full, C::KB);
                        __syncwarp();
                        if (lane < BN / pr) {
                            const int r0 = lane * pr;
                            const int pg = fa_clampi(p.block_table[(int64_t)fb.b * p.max_pages + (n0 + r0) / p.page_size],
                                                     0, p.num_pages - 1);
#pragma unroll
                            for (int c = 0; c < D / 64; c++)
                                fa_tma_load_4d(fa_smem_u32(dst + c * BN * 128 + r0 * 128), map, full, c * 64,
                                               (n0 + r0) % p.page_size, fb.hk, pg);
                        }
                    } else if (lane == 0) {
                        fa_mbar_expect_tx(full, C::KB);
#pragma unroll
                        for (int c = 0; c < D / 64; c++)
                            fa_tma_load_4d(fa_smem_u32(dst + c * BN * 128), map, full, c * 64, (int)s.k0 + n0, fb.hk, (int)s.tb);
                    }
                };
                load(&tm_k, sK + st * C::KB, full_k(st), empty_k(st), p.k, p.k_sb, p.k_ss, p.k_sh, p.dqk);
                load(&tm_v, sV + st * C::KB, full_v(st), empty_v(st), p.v, p.v_sb, p.v_ss, p.v_sh, p.dv);
            }
        }
        return;
    }

    /* ---- the consumers: warpgroup cw owns rows cw * 64 .. cw * 64 + 63 of each tile ---- */
    fa_setmaxnreg_inc<C::CREGS>();
    const int cw = wg - 1;
    const float sl2 = p.scale * FA_LOG2E;
    const uint32_t qaddr = fa_smem_u32(sQ) + cw * 64 * 128;
    const int wrow = cw * 64 + warp * 16;        /* first row of this warp in the tile */
    auto release = [&](uint32_t bar) {
        if (lane == 0) fa_mbar_arrive(bar);
    };
    /* Ping-pong (three consumer warpgroups: d64's 192-row tiles): the warpgroups take
       turns issuing their products, in order 0, 1, 2, 0, ..: a warpgroup issues a KV tile's
       wgmmas only after the previous one has issued its own (named barrier
       FA_FWS_BAR_SCHED + cw, its 128 threads and the previous warpgroup's 128 arrivals), so
       the softmaxes are staggered instead of running at once while the tensor cores wait.
       Every warpgroup makes the same number of turns (one per KV tile and one for the last
       P V of each work tile: they share the tile's KV range); the last warpgroup's first
       arrival opens warpgroup 0's first turn, and warpgroup 0 takes the one arrival left
       over after the last tile. Data waits stay outside a turn. A work tile takes turns
       only when it spans FA_FWS_PP_MIN_KEYS keys or more (the same choice in every
       warpgroup, so the counts still agree). Measured on the H200 (bf16 and fp16, 5
       rounds): d64 192 x 128 +1-4.5% from 4k keys, -2 to -4% at 512; with two warpgroups
       (d128, causal d64) 0-6% slower, so those tiles run without it. */
    constexpr bool PP = C::NCW == 3;   /* the ping-pong: three consumer warpgroups */
    bool pp = false;   /* this work tile takes turns */
    auto turn_wait = [&]() {
        if constexpr (PP)
            if (pp) fa_named_sync(FA_FWS_BAR_SCHED + cw, 256);
    };
    auto turn_pass = [&]() {
        if constexpr (PP)
            if (pp) fa_named_arrive(FA_FWS_BAR_SCHED + (cw + 1) % C::NCW, 256);
    };
    if constexpr (PP)
        if (cw == C::NCW - 1) fa_named_arrive(FA_FWS_BAR_SCHED, 256);
    int use = 0, qn = 0;
    for (int j = 0;; j++) {
        fa_mbar_wait(full_t(j & 1), (j >> 1) & 1);
        const int t = tile_slot[j & 1];
        __syncwarp();
        release(empty_t(j & 1));
        if (t >= ntiles) {
            if constexpr (PP)
                if (cw == 0) fa_named_sync(FA_FWS_BAR_SCHED, 256);
            break;
        }
        fa_fwd_block fb;
        if (!fa_ws_block<BM, BN>(p, fb, t)) continue;
        const fa_dseq &s = fb.s;
        const int nb_lo = fb.nb_lo, nb_hi = fb.nb_hi;
        pp = (nb_hi - nb_lo) * BN >= FA_FWS_PP_MIN_KEYS;
        const int wm0 = fb.m0 + cw * 64, wlast = min(wm0 + 63, s.sq - 1);
        int full_lo, full_hi;
        fa_fwd_full_range(p, s, wm0, wlast, full_lo, full_hi);
        const int row0 = fb.m0 + wrow + lane / 4;
        float oacc[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) oacc[i] = 0.f;
        float rmax[2] = { -INFINITY, -INFINITY }, rsum[2] = { 0.f, 0.f };
        if (nb_lo < nb_hi) {
            float sacc[BN / 2];
            uint32_t pa[BN / 16][4];
            auto masked = [&](int nb) { return nb * BN < full_lo || nb * BN + BN > full_hi; };
            fa_mbar_wait(full_q, qn & 1);
            qn++;
            /* the first KV tile: S, softmax, P */
            int st = use % ST;
            uint32_t ph = (use / ST) & 1;
            fa_mbar_wait(full_k(st), ph);
            turn_wait();
            fa90_issue_qk<T, D, BM, BN>(sacc, qaddr, fa_smem_u32(sK + st * C::KB));
            turn_pass();
            fa_wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < BN / 2; i++) fa_reg_fence(sacc[i]);
            release(empty_k(st));
            if (nb_lo + 1 == nb_hi) release(empty_q);
            {
                float alpha[2];
                fa90_softmax<BN>(p, s, sacc, row0, nb_lo * BN, masked(nb_lo), sl2, rmax, rsum, alpha);
            }
            fa90_pack_p<T, BN>(pa, sacc);
            for (int nb = nb_lo + 1; nb < nb_hi; nb++) {
                const int st1 = (use + 1) % ST;
                const uint32_t ph1 = ((use + 1) / ST) & 1;
                fa_mbar_wait(full_k(st1), ph1);
                if constexpr (PP) fa_mbar_wait(full_v(st), ph);
                turn_wait();
                fa90_issue_qk<T, D, BM, BN>(sacc, qaddr, fa_smem_u32(sK + st1 * C::KB));
                if constexpr (!PP) fa_mbar_wait(full_v(st), ph);
                fa90_issue_pv<T, D, BN>(oacc, pa, fa_smem_u32(sV + st * C::KB), v_lbo, v_sbo);
                turn_pass();
                fa_wgmma_wait<1>();                   /* S done; P V of the previous tile may still run */
#pragma unroll
                for (int i = 0; i < BN / 2; i++) fa_reg_fence(sacc[i]);
                release(empty_k(st1));
                if (nb + 1 == nb_hi) release(empty_q);
                float alpha[2];
                fa90_softmax<BN>(p, s, sacc, row0, nb * BN, masked(nb), sl2, rmax, rsum, alpha);
                fa_wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < D / 2; i++) fa_reg_fence(oacc[i]);
                release(empty_v(st));
                /* alpha is exactly 1 in rows whose max did not grow (exp2(0)): most tiles
                   after the first few need no rescale; warp-uniform branch */
                if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) fa90_rescale<D>(oacc, alpha);
                fa90_pack_p<T, BN>(pa, sacc);
                use++;
                st = st1;
                ph = ph1;
            }
            fa_mbar_wait(full_v(st), ph);
            turn_wait();
            fa90_issue_pv<T, D, BN>(oacc, pa, fa_smem_u32(sV + st * C::KB), v_lbo, v_sbo);
            turn_pass();
            fa_wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < D / 2; i++) fa_reg_fence(oacc[i]);
            release(empty_v(st));
            use++;
        }
        fa90_epilogue<T, D>(p, s, fb.b, fb.h, fb.split, oacc, rmax, rsum, row0);
    }
#endif
}

template <typename T, int D, int BM, int BN, bool PAGED>
static cudaError_t fa_fwd_ws_launch_kernel(const fa_cu_fwd &p, int64_t tiles, int grid, const CUtensorMap (&m)[3],
                                           int *tickets, cudaStream_t st)
{
    typedef fa_ws_cfg<D, BM, BN> C;
    cudaError_t e = cudaFuncSetAttribute(fa_fwd_ws_kernel<T, D, BM, BN, PAGED>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         C::SMEM);
    if (e != cudaSuccess) return e;
    fa_fwd_ws_kernel<T, D, BM, BN, PAGED><<<(unsigned)grid, C::NT, C::SMEM, st>>>(p, m[0], m[1], m[2], (int)tiles, tickets,
                                                                                  BN * 128, 1024);
    return cudaGetLastError();
}

/* The kernel of tile BM x BN for a paged cache or for the other layouts. */
template <typename T, int D, int BM, int BN>
static cudaError_t fa_fwd_ws_launch_tile(const fa_cu_fwd &p, int64_t tiles, int grid, const CUtensorMap (&m)[3], int *tickets,
                                         cudaStream_t st)
{
    return p.block_table ? fa_fwd_ws_launch_kernel<T, D, BM, BN, true>(p, tiles, grid, m, tickets, st)
                         : fa_fwd_ws_launch_kernel<T, D, BM, BN, false>(p, tiles, grid, m, tickets, st);
}

/* maps[3]: the tensor maps of q, k and v (CUtensorMap, made by the host: tmaps.cu, with
   boxes of bm Q rows and bn K/V rows); tickets: a device int that is 0 (each launch leaves
   it 0 again); bm x bn: one of the tiles compiled for D (sm90/tiles.h: fa_fwd_ws_has), others
   cudaErrorInvalidValue. */
template <typename T, int D>
cudaError_t fa_fwd_ws_launch(const fa_cu_fwd &p, int64_t tiles, int grid, const void *maps, int *tickets, int bm, int bn,
                             cudaStream_t st)
{
    CUtensorMap m[3];
    memcpy(m, maps, sizeof m);
    constexpr int B0 = fa_fwd_ws_bn(D), B1 = fa_fwd_ws_bn_alt(D) > 0 ? fa_fwd_ws_bn_alt(D) : B0;
    constexpr int M1 = fa_fwd_ws_bm_alt(D) > 0 ? fa_fwd_ws_bm_alt(D) : 128;
    if (!fa_fwd_ws_has(D, bm, bn)) return cudaErrorInvalidValue;
    if (bm == 128) return bn == B0 ? fa_fwd_ws_launch_tile<T, D, 128, B0>(p, tiles, grid, m, tickets, st)
                                   : fa_fwd_ws_launch_tile<T, D, 128, B1>(p, tiles, grid, m, tickets, st);
    return fa_fwd_ws_launch_tile<T, D, M1, B1>(p, tiles, grid, m, tickets, st);
}

#define FA_FWD_WS_INSTANTIATE(D) \
    template cudaError_t fa_fwd_ws_launch<__half, D>(const fa_cu_fwd &, int64_t, int, const void *, int *, int, int, cudaStream_t); \
    template cudaError_t fa_fwd_ws_launch<__nv_bfloat16, D>(const fa_cu_fwd &, int64_t, int, const void *, int *, int, int, cudaStream_t);

#endif /* FA_CUDA_SM90_FORWARD_WS_CUH */
