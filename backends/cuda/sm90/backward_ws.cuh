/* backward_ws.cuh - the warp-specialized Hopper backward (sm_90a): Q, dO by TMA from a
 * producer warp into a ring of stages, the five products on wgmma in two consumer
 * warpgroups, mbarriers and one named barrier per query tile instead of block barriers,
 * register reallocation. Head-dim classes 64 and 128, the lean feature set (masks, GQA,
 * varlen, sinks through backward_aux.cu, deterministic mode), dense and varlen layouts.
 *
 * A block is 128 keys of one (sequence, KV head) and 3 warpgroups (384 threads):
 *   - warpgroup 0 gives registers back (setmaxnreg.dec); its first warp is the producer,
 *     the other three exit. It loads K and V once (by TMA, or, for the partial last KV tile
 *     of a varlen sequence, by cp.async with zero fill: the rows after it belong to the next
 *     sequence), then walks the block's query tiles (64 rows of one query head of the group)
 *     in the consumers' order: Q and dO by TMA into stage it % ST (the dense layout's rows
 *     past the sequence are outside the tensor map and come as zeros; a varlen tail tile is
 *     copied with zero fill). Each of the 32 lanes arrives on the stage's full barrier after
 *     its own copies; lane 0's arrival also announces the TMA bytes.
 *   - warpgroups 1 and 2 take registers (setmaxnreg.inc) and own keys 0-63 and 64-127 of the
 *     block; per query tile, with the products of backward_parts.cuh:
 *       S^T = K_w Q^T and dP^T = V_w dO^T; P^T computed while dP^T is on the tensor cores;
 *       dS^T = P^T (dP^T - D), stored transposed into dS buffer it % 2; dV_w += P^T dO
 *       and dK_w += dS^T Q (A from registers), and the previous tile's dQ (both
 *       warpgroups' dS, K) issued behind them; the stage released (one arrival per warp)
 *       once dV and dK are complete; the previous tile's dQ handed to the
 *       tensor-map reduce through the staging boxes; named barriers between the two
 *       warpgroups (below) make both halves of dS(it) visible.
 *     The lse and D rows of tile it+1 (zeros past the sequence) are loaded from global
 *     memory into a register while tile it's dV/dK/dQ products run and stored into buffer
 *     (it+1) % 2 before the warpgroup's own barrier, which orders them before their reads and after the
 *     reads of tile it-1 (the same buffer). The producer stored them once, in the stage,
 *     ordered by the mbarriers alone; racecheck reported those stores against the
 *     consumers' reads, and the producer's global loads delayed its next TMA issue.
 *     dS is double-buffered: dS(it) is written after the barrier of tile it-1, which both
 *     warpgroups pass only after the dQ(it-2) that read the same buffer has completed. No
 *     wgmma is in flight across the loop's back edge (ptxas would serialize them all), and
 *     no more accumulators are live at once than dK, dV and one of S^T/dP^T or dQ (the
 *     240 registers of a consumer hold no more: dQ issued next to S^T and dP^T spilled);
 *     the last tile's dQ is issued after the loop.
 *   The two consumer warpgroups are not kept in step by a per-tile barrier over both (that
 *   would leave the tensor cores idle through both softmax phases at once) but meet by
 *   one-way pairs of named barriers, so one warpgroup can run up to a tile ahead of the other:
 *     - after storing its half of dS(it), warpgroup w arrives on DS(w, it % 2); the other
 *       syncs on it before issuing dQ(it) (in its tile it+1, or after the loop);
 *     - after its dQ(it-1) has completed, w arrives on DQ(w, (it-1) % 2) if a tile it+1
 *       exists; the other syncs on it before storing dS(it+1) into that buffer;
 *     - each warpgroup keeps its own lse/D copy, ordered by a barrier of its own.
 *   Every arrival has exactly one matching sync, and a warpgroup cannot arrive twice on
 *   one barrier before the other has synced (the second arrival needs the other's next
 *   barrier). On the H200 this runs 1.04-1.14x a per-tile barrier at d64 and 1.05-1.18x at
 *   d128.
 * Stage barriers flip phase at each use: query tile it (the tile's index, not the stage's
 * use count) waits for parity (it / ST) & 1 on stage it % ST;
 * the producer and the consumers walk the same tiles in the same order.
 * dK (times scale) and dV are stored once at the end; deterministic=1 keeps one launch per
 * KV tile (each dQ element gets one add per launch), as the first Hopper backward.
 */
#ifndef FA_CUDA_SM90_BACKWARD_WS_CUH
#define FA_CUDA_SM90_BACKWARD_WS_CUH

#include "device/tiles.cuh"
#include "sm90/backward_parts.cuh"
#include "sm90/tiles.h"

#define FA_BWS_PRODUCER_REGS 24
#define FA_BWS_CONSUMER_REGS 240
/* The launch gives every thread 168 registers (ptxas under __launch_bounds__(384, 1)):
   384 x 168 = 64512 is the pool the warpgroups trade. A consumer's setmaxnreg.inc retries
   until the pool has its registers, so more than the pool would hang the block. */
static_assert(128 * FA_BWS_PRODUCER_REGS + 256 * FA_BWS_CONSUMER_REGS <= 384 * 168,
              "the producer and consumer register counts must fit the launch's 384 x 168");

template <int D> struct fa_bws_cfg {
    static constexpr int BN = FA_BWD_WS_BN, BQ = FA_BWD_SM90_BQ, ST = fa_bwd_ws_stages(D), NT = FA_BWD_WS_NT;
    static constexpr int KB = BN * D * 2, QB = BQ * D * 2, SB = BQ * BN * 2;
    static constexpr int XB = FA_BWD_SM90_DQ_BOX_ROWS * FA_BWD_SM90_DQ_BOX_COLS * 4;
    static constexpr int DH = D / 2, NBOX = DH / FA_BWD_SM90_DQ_BOX_COLS;   /* dQ columns per warpgroup, boxes per warp */
    /* byte offsets: the swizzled tiles and the staging boxes (1 KiB multiples) first */
    static constexpr int OK = 0, OV = KB, OQ = 2 * KB, ODO = OQ + ST * QB, ODS = ODO + ST * QB, ODQ = ODS + 2 * SB;
    static constexpr int OL = ODQ + 8 * NBOX * XB, ODD = OL + 4 * BQ * 4, OBAR = ODD + 4 * BQ * 4;   /* lse, D: 2 tiles x 2 copies */
    static constexpr int SMEM = fa_bwd_ws_smem(D);
    static_assert(SMEM == OBAR + 8 * (1 + 2 * ST) + 1024, "kernels.h and the kernel disagree on the shared memory");
    static_assert(D == 64 || D == 128, "head-dim classes 64 and 128");
    static_assert(KB % 1024 == 0 && QB % 1024 == 0 && SB % 1024 == 0 && XB % 1024 == 0, "swizzled tiles 1 KiB aligned");
};

template <bool B> struct fa_bool { static constexpr bool value = B; };

/* Named barriers (0: __syncthreads, 1: the consumers' first sync). */
#define FA_BWS_BAR_DS 2      /* + 2 w + parity: warpgroup w's half of dS(it) is stored     */
#define FA_BWS_BAR_DQ 6      /* + 2 w + parity: warpgroup w's dQ(it) no longer reads dS    */
#define FA_BWS_BAR_LOCAL 10  /* + w: warpgroup w's own lse/D copy for the next tile        */

template <typename T, int D>
__global__ void __launch_bounds__(384, 1)
    fa_bwd_ws_kernel(const fa_cu_bwd pb, const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                     const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                     const __grid_constant__ CUtensorMap dq_map, const int dq_tma)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef fa_bws_cfg<D> C;
    constexpr int BN = C::BN, BQ = C::BQ, ST = C::ST, DH = C::DH;
    const fa_cu_fwd &p = pb.f;
    extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
    unsigned char *smem = fa_align1024(fa_smem_raw);
    unsigned char *sK = smem + C::OK, *sV = smem + C::OV, *sQ = smem + C::OQ, *sdO = smem + C::ODO;
    unsigned char *sDQ = smem + C::ODQ;
    float *sL = reinterpret_cast<float *>(smem + C::OL), *sDs = reinterpret_cast<float *>(smem + C::ODD);
    const uint32_t bars = fa_smem_u32(smem + C::OBAR);
    const uint32_t full_kv = bars;
    auto full_q = [&](int st) { return bars + 8 + 8 * st; };
    auto empty_q = [&](int st) { return bars + 8 + 8 * (ST + st); };
    constexpr int CONSUMER_WARPS = 8;

    /* the block: as the first Hopper backward */
    fa_bwd_block blk;
    if (!fa_bwd_block_of<BN, BQ>(pb, blk)) return;
    const fa_dseq &s = blk.s;
    const int b = blk.b, hk = blk.hk, n0 = blk.n0, mt_lo = blk.mt_lo, nq = blk.nq, iters = blk.iters;
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int G = p.group;

    if (threadIdx.x == 0) {
        fa_mbar_init(full_kv, 32);
        for (int st = 0; st < ST; st++) {
            fa_mbar_init(full_q(st), 32);
            fa_mbar_init(empty_q(st), CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- the producer ---- */
        fa_setmaxnreg_dec<FA_BWS_PRODUCER_REGS>();
        if (warp != 0 || iters == 0) return;
        /* after the lanes' cp.async copies (fa_load_rows_warp): each lane waits for its own
           and orders them before the tensor cores' reads, then arrives on bar */
        auto copies_done = [&](uint32_t bar) {
            fa_cp_async_commit();
            fa_cp_async_wait<0>();
            fa_fence_proxy_async();
            fa_mbar_arrive(bar);
        };
        /* two tiles of `rows` rows (K and V, or Q and dO) by TMA onto bar: lane 0 announces
           the bytes and issues the boxes of 64 columns, the other lanes arrive */
        auto tma_two = [&](uint32_t bar, uint32_t bytes, int rows, unsigned char *da, const CUtensorMap *ma,
                           unsigned char *db, const CUtensorMap *mb, int row, int head) {
            if (lane == 0) {
                fa_mbar_expect_tx(bar, bytes);
#pragma unroll
                for (int c = 0; c < D / 64; c++) {
                    fa_tma_load_4d(fa_smem_u32(da + c * rows * 128), ma, bar, c * 64, row, head, (int)s.tb);
                    fa_tma_load_4d(fa_smem_u32(db + c * rows * 128), mb, bar, c * 64, row, head, (int)s.tb);
                }
            } else {
                fa_mbar_arrive(bar);
            }
        };
        const bool dense = p.layout == FA_CU_DENSE;
        const int nval = min(BN, s.sk - n0);
        if (nval == BN || dense) {
            tma_two(full_kv, 2 * C::KB, BN, sK, &tm_k, sV, &tm_v, (int)s.k0 + n0, hk);
        } else {
            const int64_t kr = s.tb * p.k_sb + (s.k0 + n0) * p.k_ss + (int64_t)hk * p.k_sh;
            const int64_t vr = s.tb * p.v_sb + (s.k0 + n0) * p.v_ss + (int64_t)hk * p.v_sh;
            fa_load_rows_warp<D, BN, T>(sK, reinterpret_cast<const T *>(p.k) + kr, p.k_ss, nval, p.dqk);
            fa_load_rows_warp<D, BN, T>(sV, reinterpret_cast<const T *>(p.v) + vr, p.v_ss, nval, p.dv);
            copies_done(full_kv);
        }
        for (int it = 0; it < iters; it++) {
            const int st = it % ST;
            fa_mbar_wait(empty_q(st), ((it / ST) & 1) ^ 1);
            const int h = hk * G + it / nq, m0 = (mt_lo + it % nq) * BQ;
            if (s.sq - m0 >= BQ || dense) {
                tma_two(full_q(st), 2 * C::QB, BQ, sQ + st * C::QB, &tm_q, sdO + st * C::QB, &tm_do, (int)s.q0 + m0, h);
            } else {
                const T *qb = reinterpret_cast<const T *>(p.q) + s.tb * p.q_sb + (s.q0 + m0) * p.q_ss + (int64_t)h * p.q_sh;
                const T *ob = reinterpret_cast<const T *>(pb.dout) + s.tb * pb.do_sb + (s.q0 + m0) * pb.do_ss + (int64_t)h * pb.do_sh;
                fa_load_rows_warp<D, BQ, T>(sQ + st * C::QB, qb, p.q_ss, s.sq - m0, p.dqk);
                fa_load_rows_warp<D, BQ, T>(sdO + st * C::QB, ob, pb.do_ss, s.sq - m0, p.dv);
                copies_done(full_q(st));
            }
        }
        return;
    }

    /* ---- the consumers: warpgroup cw owns keys cw * 64 .. cw * 64 + 63 of the block ---- */
    fa_setmaxnreg_inc<FA_BWS_CONSUMER_REGS>();
    const int cw = wg - 1, kw = cw * 64;
    const int krow = kw + warp * 16 + lane / 4;           /* this thread's first key row in the block */
    const float sl2 = p.scale * FA_LOG2E;
    const uint32_t kaddr = fa_smem_u32(sK), vaddr = fa_smem_u32(sV), dsaddr = fa_smem_u32(smem + C::ODS);
    const uint32_t st_off = fa_b90_ds_offset<BQ>(kw);   /* this thread's dS stores, in either buffer */
    unsigned char *sdq = sDQ + (cw * 4 + warp) * C::NBOX * C::XB;   /* this warp's staging boxes */

    float dka[D / 2], dva[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dka[i] = dva[i] = 0.f;
    /* the lse (consumer threads 0..BQ-1) or D (BQ..2 BQ-1) row of query tile it; zero past
       the sequence (such rows have zero Q and dO rows, so P = 1, dP = 0, dS = 0: they add
       nothing). Both warpgroups load, the first stores (no branch around the loads). */
    /* each warpgroup loads and stores its own copy (its threads 0..2 BQ-1 of 128 hold one row
       each: 2 BQ = 128) and orders it with a barrier of its own */
    const int lt = (int)(threadIdx.x - 128) % (2 * BQ), lr = lt % BQ;
    /* (threadIdx.x >> 8 is cw for the consumers; written from cw, the offset cost the d128
       kernel 252 bytes of spills, 16 LDL.64 of them at the top of its loop; written this
       way, 52 bytes and 2 LDL in the loop) */
    const int lcopy = (int)(threadIdx.x >> 8) * 2 * BQ;
    auto lsed_load = [&](int it) -> float {
        const int h = hk * G + it / nq, i = (mt_lo + it % nq) * BQ + lr;
        if (it >= iters || i >= s.sq) return 0.f;
        const int64_t li = fa_lse_row(p, s, b, h, i);
        return lt < BQ ? p.lse[li] : pb.dsum[li];
    };
    auto lsed_store = [&](int it, float x) {
        (lt < BQ ? sL : sDs)[lcopy + (it & 1) * BQ + lr] = x;
    };
    const int ow = 1 - cw;   /* the other consumer warpgroup */
    if (iters > 0) {
        lsed_store(0, lsed_load(0));
        fa_named_sync(1, 256);        /* tile 0's lse and D rows */
        fa_mbar_wait(full_kv, 0);
        /* one query tile; FIRST: tile 0, which has no previous dQ. The first tile is a
           separate instance of the body: a wgmma issued or waited for under a branch makes
           ptxas serialize every wgmma of the kernel. */
        auto tile = [&](auto first, int it) {
            constexpr bool FIRST = decltype(first)::value;
            const int st = it % ST;
            const int m0 = (mt_lo + it % nq) * BQ;
            const uint32_t qaddr = fa_smem_u32(sQ + st * C::QB), doaddr = fa_smem_u32(sdO + st * C::QB);
            const float *cL = sL + lcopy + (it & 1) * BQ, *cD = sDs + lcopy + (it & 1) * BQ;
            fa_mbar_wait(full_q(st), (it / ST) & 1);
            float sacc[BQ / 2], pacc[BQ / 2];
            fa_b90_issue_sdp<T, D, BN, BQ>(sacc, pacc, kaddr, vaddr, qaddr, doaddr, kw);
            fa_wgmma_wait<1>();           /* S^T */
#pragma unroll
            for (int i = 0; i < BQ / 2; i++) fa_reg_fence(sacc[i]);
            const bool full = n0 + BN <= s.sk &&
                              (p.window_left < 0 || n0 >= m0 + BQ - 1 + s.off - p.window_left) &&
                              (p.window_right < 0 || n0 + BN - 1 <= m0 + s.off + p.window_right);
            fa_b90_p<BQ>(p, s, sacc, cL, full, n0, krow, m0, sl2);
            fa_wgmma_wait<0>();           /* dP^T */
#pragma unroll
            for (int i = 0; i < BQ / 2; i++) fa_reg_fence(pacc[i]);
            uint32_t pa[BQ / 16][4], ga[BQ / 16][4];
            fa_b90_ds_pack<T, BQ>(sacc, pacc, cD, pa, ga);
            /* dS [query][key] into buffer it % 2 (K-major for dQ = dS K); stored before dK's
               wgmma takes ga as its A operand (PTX leaves reading those registers while the
               wgmma runs undefined) */
            /* buffer it % 2 last held dS(it-2); the other warpgroup's dQ(it-2) must be done
               reading it (its own is: program order) */
            if (it >= 2) fa_named_sync(FA_BWS_BAR_DQ + 2 * ow + (it & 1), 256);
            fa_b90_store_ds<BQ>(dsaddr + (it & 1) * C::SB + st_off, ga);
            fa_fence_proxy_async();
            fa_named_arrive(FA_BWS_BAR_DS + 2 * cw + (it & 1), 256);
            fa_b90_issue_dkdv<T, D, BQ>(dka, dva, pa, ga, qaddr, doaddr, 0);
            /* dQ of the previous tile: both halves of its dS are in buffer (it - 1) % 2 (the
               other warpgroup's half is announced by its barrier) */
            float qacc[DH / 2];
            if constexpr (!FIRST) fa_named_sync(FA_BWS_BAR_DS + 2 * ow + ((it - 1) & 1), 256);
            if constexpr (!FIRST) fa_b90_issue_dq<T, DH, BN, BQ>(qacc, dsaddr + ((it - 1) & 1) * C::SB, kaddr, cw * DH);
            /* tile it+1's lse/D row, loaded while the tensor cores work and stored before the
               barrier; loaded after this tile's last lse/D reads (issued at the tile's start,
               the load cost 7-10% at d128: the shared-memory reads behind it waited for it) */
            const float lsed_next = lsed_load(it + 1);
            fa_wgmma_wait<FIRST ? 0 : 1>();   /* dV, dK: stage st no longer read */
#pragma unroll
            for (int i = 0; i < D / 2; i++) { fa_reg_fence(dka[i]); fa_reg_fence(dva[i]); }
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++)
#pragma unroll
                for (int q = 0; q < 4; q++) { fa_reg_fence_u(pa[kk][q]); fa_reg_fence_u(ga[kk][q]); }
            /* every lane past the wait for dV/dK (the stage's last reader) before lane 0's
               release */
            __syncwarp();
            if (lane == 0) fa_mbar_arrive(empty_q(st));
            if constexpr (!FIRST) {
                fa_wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < DH / 2; i++) fa_reg_fence(qacc[i]);
                /* dQ(it-1) has read buffer (it - 1) % 2; the other warpgroup waits for
                   this before storing dS(it+1) there (only if there is a tile it+1: every
                   arrival is matched by a sync) */
                if (it + 1 < iters) fa_named_arrive(FA_BWS_BAR_DQ + 2 * cw + ((it - 1) & 1), 256);
                const int itp = it - 1;
                fa_b90_dq_out<DH, C::XB>(pb, s, b, hk * G + itp / nq, (mt_lo + itp % nq) * BQ, cw * DH, qacc, sdq, &dq_map, dq_tma);
            }
            lsed_store(it + 1, lsed_next);
            fa_named_sync(FA_BWS_BAR_LOCAL + cw, 128);   /* this warpgroup's lse/D(it+1) */
        };
        tile(fa_bool<true>(), 0);
        for (int it = 1; it < iters; it++) tile(fa_bool<false>(), it);
        /* the last tile's dQ */
        const int itl = iters - 1, h_prev = hk * G + itl / nq, m0_prev = (mt_lo + itl % nq) * BQ;
        float qacc[DH / 2];
        fa_named_sync(FA_BWS_BAR_DS + 2 * ow + ((iters - 1) & 1), 256);
        fa_b90_issue_dq<T, DH, BN, BQ>(qacc, dsaddr + ((iters - 1) & 1) * C::SB, kaddr, cw * DH);
        fa_wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < DH / 2; i++) fa_reg_fence(qacc[i]);
        fa_b90_dq_out<DH, C::XB>(pb, s, b, h_prev, m0_prev, cw * DH, qacc, sdq, &dq_map, dq_tma);
        if (lane == 0) fa_bulk_wait();    /* the dQ adds are complete before the block exits */
    }
    /* dK (times scale) and dV once; keys no query sees get zeros */
    fa_b90_store_dkdv<T, D>(pb, s, b, hk, n0, krow, 0, dka, dva);
#endif
}

/* maps: the CUtensorMaps of q, k, v and dout (tmaps.cu); dq_map: as for fa_bwd_sm90_launch. */
template <typename T, int D>
cudaError_t fa_bwd_ws_launch(const fa_cu_bwd &p, int64_t blocks, cudaStream_t st, const void *maps, const void *dq_map)
{
    typedef fa_bws_cfg<D> C;
    auto kern = fa_bwd_ws_kernel<T, D>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return e;
    CUtensorMap m[4], dqm;
    memcpy(m, maps, sizeof m);
    if (dq_map) memcpy(&dqm, dq_map, sizeof dqm);
    else memset(&dqm, 0, sizeof dqm);
    kern<<<(unsigned)blocks, C::NT, C::SMEM, st>>>(p, m[0], m[1], m[2], m[3], dqm, dq_map != NULL);
    return cudaGetLastError();
}

#define FA_BWD_WS_INSTANTIATE(D) \
    template cudaError_t fa_bwd_ws_launch<__half, D>(const fa_cu_bwd &, int64_t, cudaStream_t, const void *, const void *); \
    template cudaError_t fa_bwd_ws_launch<__nv_bfloat16, D>(const fa_cu_bwd &, int64_t, cudaStream_t, const void *, const void *);

#endif /* FA_CUDA_SM90_BACKWARD_WS_CUH */
