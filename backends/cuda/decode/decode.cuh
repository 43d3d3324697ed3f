/* decode.cuh - the decode forward (decode.h has the table): fp16/bf16, few query rows per
 * sequence, dense and KV-cache layouts (contiguous or paged with any page size), every
 * feature of the score pipeline but bias and dropout (scale, softcap, ALiBi, windows,
 * causal in both alignments, sinks), lse, split-KV into fp32 parts merged by merge.cu,
 * head-dim classes 64/128/256 with d_qk != d_v.
 *
 * Block = (sequence b, KV heads hk .. hk + HP - 1, split). Packed row r (r < R = HP * group *
 * sq) is query head (hk + r / (group sq)) * group + r % (group sq) / sq at new token r % sq.
 * HP = 2 (the class-128 kernel only): two KV heads of d <= 64 side by side, head hk + i in
 * columns 64 i .. 64 i + 63 of each K and V row and of its rows' Q (zero elsewhere), so
 * S = Q K^T sees only a row's own head and each row stores its own head's half of
 * O = P V. Warp w: row group wm = w % WM (rows 16 wm ..
 * 16 wm + 15), key lane wn = w / WM of WN = 4 / WM. Per 64-key chunk, warp (wm, wn) takes
 * the 16-key slices wn, wn + WN, ...: S = Q K^T (mma.sync m16n8k16, K by ldmatrix), its
 * own online softmax in base 2, O += P V (V by ldmatrix.trans), so each key is read from
 * shared memory once per row group. At the end the WN warps of a row group merge their
 * (max, sum, O) in shared memory and the key lane 0 warp writes the rows once.
 * Q fragments stay in registers for D <= 128 (d256: re-read by ldmatrix per slice).
 * K/V chunks: a ring of FA_DEC_STAGES stages filled by 16-byte cp.async copies; each
 * iteration refills the stage every warp has finished with, then waits for its own copies
 * of the current chunk and meets the other threads at a barrier. With a block table the
 * 16 rows a warp copies per pass are looked up once, by lanes 0-15, and handed to the
 * copying lanes by shuffles. The grid lets the split merge (merge.cu) launch early
 * (programmatic dependent launch).
 */
#ifndef FA_CUDA_DECODE_CUH
#define FA_CUDA_DECODE_CUH

#include <math.h>
#include <limits.h>
#include "device/problem.cuh"
#include "device/tiles.cuh"
#include "decode/decode.h"

/* The one write of a thread's two rows (C-fragment rows lane/4 and lane/4 + 8 of its
   m-tile), each of its own head hr[r] and token ir[r] (fa_store_rows with per-row heads). */
template <typename T, int D, int DH>
__device__ __forceinline__ void fa_dec_store(const fa_cu_fwd &p, const fa_dseq &s, int b, int split, const float *acc,
                                             const float (&fac)[2], const float (&lse)[2], const int (&hr)[2],
                                             const int (&ir)[2], const int (&co)[2], const bool (&ok)[2])
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (!ok[r]) continue;
        const int h = hr[r], i = ir[r];
        if (p.n_splits > 1) {
            const int64_t rows = (int64_t)p.batch * p.hq * p.sq, row = ((int64_t)b * p.hq + h) * p.sq + i;
            float *o = p.o_part + ((int64_t)split * rows + row) * p.dv;
#pragma unroll
            for (int nt = 0; nt < D / 8; nt++) {
                const int c = nt * 8 + (lane % 4) * 2 - co[r];
                if ((DH == D || (c >= 0 && c < DH)) && c < p.dv)
                    *reinterpret_cast<float2 *>(o + c) = make_float2(acc[4 * nt + 2 * r] * fac[r], acc[4 * nt + 2 * r + 1] * fac[r]);
            }
            if (lane % 4 == 0) p.lse_part[(int64_t)split * rows + row] = lse[r];
            continue;
        }
        const int64_t orow = s.tb * p.o_sb + (s.q0 + i) * p.o_ss + (int64_t)h * p.o_sh;
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            const int c = nt * 8 + (lane % 4) * 2 - co[r];
            if ((DH != D && (c < 0 || c >= DH)) || c >= p.dv) continue;
            const float x0 = acc[4 * nt + 2 * r] * fac[r], x1 = acc[4 * nt + 2 * r + 1] * fac[r];
            if (p.out_dtype == FA_CU_F32)
                *reinterpret_cast<float2 *>(reinterpret_cast<float *>(p.out) + orow + c) = make_float2(x0, x1);
            else
                *reinterpret_cast<uint32_t *>(reinterpret_cast<T *>(p.out) + orow + c) = fa_pack2(x0, x1, T());
        }
        if (p.lse && lane % 4 == 0) p.lse[fa_lse_row(p, s, b, h, i)] = lse[r];
    }
}

/* Chunk nb into ring stage st: K rows, then V rows, by 16-byte cp.async copies. Thread t
   copies column t % CPR of rows t / CPR + i RSTEP (rows D apart, columns XOR-swizzled by
   fa_swz, so the 8 rows of an ldmatrix phase fall in 8 bank groups); rows outside [lo, hi) and columns past
   d_qk / d_v are zero-filled without a read. A warp covers 16 rows of the chunk; with a
   block table its lanes 0-15 look up one row's page each and the copying lanes take theirs
   by shuffles. */
template <typename T, int D, int DH>
__device__ __forceinline__ void fa_dec_load(const fa_cu_fwd &p, const fa_dseq &s, int b, int hk, int lo, int hi,
                                            T *ring, int nb, int st)
{
    constexpr int BN = FA_DEC_BN, CPR = D / 8, RSTEP = FA_DEC_NT / CPR, RPW = 32 / CPR;   /* rows per warp per pass */
    static_assert(BN / RSTEP * RPW == 16, "a warp copies 16 rows of a chunk");
    const T *gk = reinterpret_cast<const T *>(p.k), *gv = reinterpret_cast<const T *>(p.v);
    T *dK = ring + st * 2 * BN * D, *dV = dK + BN * D;
    const int tid = threadIdx.x, lane = tid % 32, ch = tid % CPR, r0 = tid / CPR;
    const int hh = DH == D ? 0 : ch * 8 / DH, col = ch * 8 - hh * DH;   /* the column's head: hk + hh */
    const bool kc = col < p.dqk, vc = col < p.dv;
    const T *kb = gk + (int64_t)(hk + hh) * p.k_sh + col, *vb = gv + (int64_t)(hk + hh) * p.v_sh + col;
    int pg = 0, jr = 0;
    if (p.block_table && lane < 16) {     /* lane l: the warp's l-th row, pass l / RPW */
        const int j = nb * BN + (tid / 32) * RPW + lane % RPW + (lane / RPW) * RSTEP;
        if (j >= lo && j < hi) {
            pg = fa_clampi(p.block_table[(int64_t)b * p.max_pages + j / p.page_size], 0, p.num_pages - 1);
            jr = j % p.page_size;
        }
    }
#pragma unroll
    for (int it = 0; it < BN / RSTEP; it++) {
        const int r = r0 + it * RSTEP, j = nb * BN + r;
        const bool ok = j >= lo && j < hi;
        const T *ks, *vs;
        if (p.block_table) {
            const int src = it * RPW + lane / CPR;
            const int64_t pj = __shfl_sync(0xffffffffu, pg, src), rj = __shfl_sync(0xffffffffu, jr, src);
            ks = kb + pj * p.k_sb + rj * p.k_ss;
            vs = vb + pj * p.v_sb + rj * p.v_ss;
        } else {
            ks = kb + s.tb * p.k_sb + (s.k0 + j) * p.k_ss;
            vs = vb + s.tb * p.v_sb + (s.k0 + j) * p.v_ss;
        }
        fa_cp_async16(dK + fa_swz<D>(r, ch), ok && kc ? ks : gk, ok && kc ? 16 : 0);
        fa_cp_async16(dV + fa_swz<D>(r, ch), ok && vc ? vs : gv, ok && vc ? 16 : 0);
    }
}

template <typename T, int D, int HP>
__global__ void __launch_bounds__(FA_DEC_NT) fa_decode_kernel(const fa_cu_fwd p, const int WM)
{
    constexpr int BN = FA_DEC_BN, NT = FA_DEC_NT, ST = FA_DEC_STAGES, CPR = D / 8;
    constexpr bool QREG = D <= 128;                 /* Q fragments kept in registers */
    constexpr int DH = D / HP;                       /* columns per KV head */
    extern __shared__ __align__(128) unsigned char fa_smem[];
    T *sQ = reinterpret_cast<T *>(fa_smem);
    T *sKV = sQ + 16 * WM * D;                       /* [ST][K, V][BN][D] */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    fa_griddep_launch();   /* the merge may launch */
#endif
    int64_t bid = blockIdx.x;
    const int split = (int)(bid % p.n_splits); bid /= p.n_splits;
    const int hk = (int)(bid % (p.hkv / HP)) * HP;   /* the block's first KV head */
    const int b = (int)(bid / (p.hkv / HP));
    const fa_dseq s = fa_dev_seq(p, b);
    const int GR = p.group * s.sq, R = HP * GR;       /* packed rows per KV head, per block */
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int WN = 4 / WM, wm = warp % WM, wn = warp / WM;

    /* keys the block's rows may see (the union of their windows), then this split's chunks */
    int lo = 0, hi = s.sk;
    if (p.window_left >= 0) lo = max(0, s.off - p.window_left);
    if (p.window_right >= 0) hi = min(s.sk, s.sq - 1 + s.off + p.window_right + 1);
    int nb_lo = lo / BN, nb_hi = hi > lo ? (hi + BN - 1) / BN : nb_lo;
    {
        const int total = nb_hi - nb_lo, per = (total + p.n_splits - 1) / p.n_splits;
        nb_lo = min(nb_hi, nb_lo + split * per);
        nb_hi = min(nb_hi, nb_lo + per);
    }
    int full_lo, full_hi;
    fa_fwd_full_range(p, s, 0, s.sq - 1, full_lo, full_hi);

    /* Q: packed rows [0, R), the rest of the 16 WM rows zero */
    {
        const T *q = reinterpret_cast<const T *>(p.q);
        for (int c = tid; c < 16 * WM * CPR; c += NT) {
            const int r = c / CPR, ch = c % CPR, hh = HP > 1 && r < R ? r / GR : 0;   /* row r's head: hk + hh */
            const bool ok = r < R && (HP == 1 || (ch * 8 >= hh * DH && ch * 8 < hh * DH + DH)) && ch * 8 - hh * DH < p.dqk;
            const int col = ch * 8 - hh * DH;
            const int h = (hk + hh) * p.group + (ok ? (r - hh * GR) / s.sq : 0), i = ok ? r % s.sq : 0;
            const T *src = q + s.tb * p.q_sb + (s.q0 + i) * p.q_ss + (int64_t)h * p.q_sh + col;
            fa_cp_async16(sQ + fa_swz<D>(r, ch), ok ? src : q, ok ? 16 : 0);
        }
        fa_cp_async_commit();
    }
#pragma unroll
    for (int st = 0; st < ST - 1; st++) {
        if (nb_lo + st < nb_hi) fa_dec_load<T, D, DH>(p, s, b, hk, lo, hi, sKV, nb_lo + st, st);
        fa_cp_async_commit();
    }

    /* this thread's two rows: packed rows 16 wm + lane/4 (+ 8) */
    int hr[2], ir[2], pos[2], co[2];
    bool rok[2];
    float slope[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int pr = 16 * wm + lane / 4 + 8 * r;
        rok[r] = pr < R;
        const int hh = HP > 1 && rok[r] ? pr / GR : 0;   /* the row's head: hk + hh */
        co[r] = hh * DH;
        hr[r] = (hk + hh) * p.group + (rok[r] ? (pr - hh * GR) / s.sq : 0);
        ir[r] = rok[r] ? pr % s.sq : 0;
        pos[r] = ir[r] + s.off;
        slope[r] = p.alibi ? p.alibi[hr[r]] : 0.f;
    }
    const bool feat = p.softcap > 0.f || p.alibi != nullptr;
    const float sl2 = p.scale * FA_LOG2E;

    fa_cp_async_wait<ST - 1>();                       /* Q landed */
    __syncthreads();
    constexpr int QF = QREG ? D / 16 : 1;
    uint32_t qf[QF][4];
    if constexpr (QREG) {
#pragma unroll
        for (int kk = 0; kk < QF; kk++) fa_ldmatrix_x4(qf[kk], sQ + fa_swz<D>(16 * wm + lane % 16, kk * 2 + lane / 16));
    }

    float oacc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
    float rmax[2] = { -INFINITY, -INFINITY }, rsum[2] = { 0.f, 0.f };

    for (int nb = nb_lo; nb < nb_hi; nb++) {
        const int it = nb - nb_lo;
        /* The barrier frees chunk nb - 1's stage (every warp is done with it); it is refilled
           with chunk nb + ST - 1 before this thread waits for its own copies of chunk nb,
           and the second barrier makes everyone's copies of chunk nb visible. */
        __syncthreads();
        if (nb + ST - 1 < nb_hi)
            fa_dec_load<T, D, DH>(p, s, b, hk, lo, hi, sKV, nb + ST - 1, (it + ST - 1) % ST);
        fa_cp_async_commit();
        fa_cp_async_wait<ST - 1>();
        __syncthreads();
        const T *cK = sKV + (it % ST) * 2 * BN * D, *cV = cK + BN * D;
        for (int sl = wn; sl < BN / 16; sl += WN) {
            const int n0 = nb * BN + sl * 16;
            if (n0 >= hi || n0 + 16 <= lo) continue;
            float sacc[2][4];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t a[4];
                if constexpr (QREG) {
                    a[0] = qf[kk % QF][0]; a[1] = qf[kk % QF][1]; a[2] = qf[kk % QF][2]; a[3] = qf[kk % QF][3];
                } else {
                    fa_ldmatrix_x4(a, sQ + fa_swz<D>(16 * wm + lane % 16, kk * 2 + lane / 16));
                }
                uint32_t bb[4];
                fa_ldmatrix_x4(bb, cK + fa_swz<D>(sl * 16 + (lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
                fa_mma(sacc[0], a, bb[0], bb[1], T());
                fa_mma(sacc[1], a, bb[2], bb[3], T());
            }
            /* scores -> base-2 logits (problem.h's pipeline), masked */
            const bool need_mask = n0 < full_lo || n0 + 16 > full_hi;
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e / 2, j = n0 + nt * 8 + (lane % 4) * 2 + (e & 1);
                    float x;
                    if (feat) {
                        float td;
                        x = fa_dev_score(p, s, b, hr[r], ir[r], j, sacc[nt][e] * p.scale, slope[r], td) * FA_LOG2E;
                    } else {
                        x = sacc[nt][e] * sl2;
                    }
                    if (need_mask) {
                        const bool vis = j < s.sk && (p.window_left < 0 || j >= pos[r] - p.window_left) &&
                                         (p.window_right < 0 || j <= pos[r] + p.window_right);
                        if (!vis) x = -INFINITY;
                    }
                    sacc[nt][e] = x;
                }
            /* online softmax of the slice: a row lives in the 4 lanes of a quad */
            float alpha[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = fmaxf(fmaxf(sacc[0][2 * r], sacc[0][2 * r + 1]), fmaxf(sacc[1][2 * r], sacc[1][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mnew = fmaxf(rmax[r], mx);
                const float ms = mnew == -INFINITY ? 0.f : mnew;
                alpha[r] = fa_exp2(rmax[r] - ms);
                rmax[r] = mnew;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    sacc[nt][2 * r] = fa_exp2(sacc[nt][2 * r] - ms);
                    sacc[nt][2 * r + 1] = fa_exp2(sacc[nt][2 * r + 1] - ms);
                    sum += sacc[nt][2 * r] + sacc[nt][2 * r + 1];
                }
                rsum[r] = rsum[r] * alpha[r] + sum;
            }
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                oacc[i][0] *= alpha[0]; oacc[i][1] *= alpha[0];
                oacc[i][2] *= alpha[1]; oacc[i][3] *= alpha[1];
            }
            /* O += P V: S's accumulators are the A fragment of the slice's 16 keys */
            uint32_t a[4];
            a[0] = fa_pack2(sacc[0][0], sacc[0][1], T());
            a[1] = fa_pack2(sacc[0][2], sacc[0][3], T());
            a[2] = fa_pack2(sacc[1][0], sacc[1][1], T());
            a[3] = fa_pack2(sacc[1][2], sacc[1][3], T());
#pragma unroll
            for (int np = 0; np < D / 16; np++) {
                uint32_t bb[4];
                fa_ldmatrix_x4_trans(bb, cV + fa_swz<D>(sl * 16 + ((lane / 8) % 2) * 8 + lane % 8, np * 2 + lane / 16));
                fa_mma(oacc[2 * np], a, bb[0], bb[1], T());
                fa_mma(oacc[2 * np + 1], a, bb[2], bb[3], T());
            }
        }
    }
    fa_cp_async_wait_all();
    __syncthreads();                  /* the ring is free: the merge reuses it */

    /* merge the WN key lanes of each row group: per warp its rows' max and sum, and (key
       lanes > 0) O in the fragment order [warp][element][lane] */
    float *sO = reinterpret_cast<float *>(sKV);
    float *sM = sO + 4 * (D / 2) * 32, *sL = sM + 4 * 16;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        rsum[r] += __shfl_xor_sync(0xffffffffu, rsum[r], 1);
        rsum[r] += __shfl_xor_sync(0xffffffffu, rsum[r], 2);
        if (lane % 4 == 0) { sM[warp * 16 + lane / 4 + 8 * r] = rmax[r]; sL[warp * 16 + lane / 4 + 8 * r] = rsum[r]; }
    }
    if (wn > 0) {
#pragma unroll
        for (int i = 0; i < D / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) sO[(warp * (D / 2) + 4 * i + e) * 32 + lane] = oacc[i][e];
    }
    __syncthreads();
    if (wn > 0) return;
    float fac[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = lane / 4 + 8 * r;
        float M = -INFINITY;
        for (int w = 0; w < WN; w++) M = fmaxf(M, sM[(w * WM + wm) * 16 + row]);
        const float ms = M == -INFINITY ? 0.f : M;
        float L = 0.f;
        for (int w = 0; w < WN; w++) {
            const float f = fa_exp2(sM[(w * WM + wm) * 16 + row] - ms);
            L += sL[(w * WM + wm) * 16 + row] * f;
            if (w == 0) {
#pragma unroll
                for (int i = 0; i < D / 8; i++) { oacc[i][2 * r] *= f; oacc[i][2 * r + 1] *= f; }
            } else {
                const float *o = sO + (size_t)(w * WM + wm) * (D / 2) * 32 + lane;
#pragma unroll
                for (int i = 0; i < D / 8; i++) {
                    oacc[i][2 * r] += f * o[(4 * i + 2 * r) * 32];
                    oacc[i][2 * r + 1] += f * o[(4 * i + 2 * r + 1) * 32];
                }
            }
        }
        /* fa_row_end adds the quad's partial sums: the whole sum rides on lane 0 of the quad */
        fa_row_end(p, hr[r], M, lane % 4 == 0 ? L : 0.f, fac[r], lse[r]);
    }
    fa_dec_store<T, D, DH>(p, s, b, split, &oacc[0][0], fac, lse, hr, ir, co, rok);
}

/* The kernel's attributes for `smem` bytes of dynamic shared memory: the size, and the
   whole carveout as shared memory. */
template <typename T, int D, int HP>
static cudaError_t fa_dec_attrs(int smem)
{
    cudaError_t e = cudaFuncSetAttribute(fa_decode_kernel<T, D, HP>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(fa_decode_kernel<T, D, HP>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    return e;
}

template <typename T, int D, int HP>
static cudaError_t fa_dec_launch_hp(const fa_cu_fwd &p, int wm, int64_t blocks, cudaStream_t st)
{
    const int smem = fa_dec_smem(D, wm);
    const cudaError_t e = fa_dec_attrs<T, D, HP>(smem);
    if (e != cudaSuccess) return e;
    fa_decode_kernel<T, D, HP><<<(unsigned)blocks, FA_DEC_NT, smem, st>>>(p, wm);
    return cudaGetLastError();
}

template <typename T, int D, int HP>
static int fa_dec_blocks_hp(int wm)
{
    const int smem = fa_dec_smem(D, wm);
    int n = 0;
    if (fa_dec_attrs<T, D, HP>(smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fa_decode_kernel<T, D, HP>, FA_DEC_NT, smem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

/* Class 128 has a second kernel, for pairs of KV heads of d <= 64 (p.dec_hp = 2). */
template <typename T, int D>
cudaError_t fa_decode_launch(const fa_cu_fwd &p, int wm, int64_t blocks, cudaStream_t st)
{
    if constexpr (D == 128)
        if (p.dec_hp == 2) return fa_dec_launch_hp<T, D, 2>(p, wm, blocks, st);
    return fa_dec_launch_hp<T, D, 1>(p, wm, blocks, st);
}

template <typename T, int D>
int fa_decode_blocks_per_sm(int wm, int hp)
{
    if constexpr (D == 128)
        if (hp == 2) return fa_dec_blocks_hp<T, D, 2>(wm);
    return fa_dec_blocks_hp<T, D, 1>(wm);
}

#define FA_DECODE_INSTANTIATE(D) \
    template cudaError_t fa_decode_launch<__half, D>(const fa_cu_fwd &, int, int64_t, cudaStream_t); \
    template cudaError_t fa_decode_launch<__nv_bfloat16, D>(const fa_cu_fwd &, int, int64_t, cudaStream_t); \
    template int fa_decode_blocks_per_sm<__half, D>(int, int); \
    template int fa_decode_blocks_per_sm<__nv_bfloat16, D>(int, int);

#endif /* FA_CUDA_DECODE_CUH */
