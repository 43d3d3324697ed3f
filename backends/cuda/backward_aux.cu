/* backward_aux.cu - the backward's small memory-bound kernels around fa_bwd_kernel:
 *   pre:  D_i = rowsum(dO_i * O_i) (fp32), one warp per row (dq_acc is zeroed by the
 *         caller, plan_backward.cu, with cudaMemsetAsync over the whole workspace);
 *   post: dq = scale * dq_acc in dq's dtype, one warp per row;
 *   dsinks[h] = -sum_i exp(sink_h - lse_i) * D_i, one block per head, summed in a fixed
 *         order (bitwise reproducible). Rows past a sequence (varlen) are never touched.
 * pre and post have vector forms for fp16/bf16 rows of multiples of 8 elements on 16-byte
 * boundaries (what training calls pass): 16-byte loads and stores, a row over a segment of
 * lanes, several rows per warp. At 16k tokens x 2048 on an H200 the scalar forms (pre then
 * also zeroing dq_acc row by row) took 160-190 us (pre) and 86-110 us (post), 28-46% of the
 * memory bandwidth: a third of a 512-key backward.
 */
#include <math.h>
#include "device/problem.cuh"
#include "kernels.h"

#define FA_AUX_ROWS 8   /* warps (rows) per block */


__global__ void __launch_bounds__(32 * FA_AUX_ROWS) fa_bwd_pre_kernel(const fa_cu_bwd pb)
{
    const fa_cu_fwd &p = pb.f;
    const int bh = blockIdx.y, h = bh % p.hq, b = bh / p.hq;
    const int i = blockIdx.x * FA_AUX_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    const fa_dseq s = fa_dev_seq(p, b);
    if (i >= s.sq) return;
    const int64_t orow = s.tb * p.o_sb + (s.q0 + i) * p.o_ss + (int64_t)h * p.o_sh;
    const int64_t drow = s.tb * pb.do_sb + (s.q0 + i) * pb.do_ss + (int64_t)h * pb.do_sh;
    float d = 0.f;
    for (int c = lane; c < p.dv; c += 32)
        d += fa_ld_any(pb.dout, pb.dtype, drow + c) * fa_ld_any(p.out, p.out_dtype, orow + c);
    for (int o = 16; o; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    const int64_t li = fa_lse_row(p, s, b, h, i);
    if (lane == 0) pb.dsum[li] = d;
}

__global__ void __launch_bounds__(32 * FA_AUX_ROWS) fa_bwd_post_kernel(const fa_cu_bwd pb)
{
    const fa_cu_fwd &p = pb.f;
    const int bh = blockIdx.y, h = bh % p.hq, b = bh / p.hq;
    const int i = blockIdx.x * FA_AUX_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    const fa_dseq s = fa_dev_seq(p, b);
    if (i >= s.sq) return;
    const float *q = pb.dq_acc + fa_lse_row(p, s, b, h, i) * p.dqk;
    const int64_t row = s.tb * pb.dq_sb + (s.q0 + i) * pb.dq_ss + (int64_t)h * pb.dq_sh;
    for (int c = lane; c < p.dqk; c += 32) fa_st_any(pb.dq, pb.dq_dtype, row + c, q[c] * p.scale);
}

/* dsinks[h]: one block of 256 threads per head; thread t sums rows t, t+256, ... in order,
   then a fixed tree over the threads. */
__global__ void __launch_bounds__(256) fa_bwd_dsinks_kernel(const fa_cu_bwd pb)
{
    const fa_cu_fwd &p = pb.f;
    const int h = blockIdx.x;
    __shared__ float red[256];
    const float sink = p.sinks[h];
    float acc = 0.f;
    if (p.layout == FA_CU_VARLEN) {
        const int n = fa_clampi(p.cu_q[p.batch], 0, p.total_q);
        for (int r = threadIdx.x; r < n; r += 256) {
            const int64_t li = (int64_t)h * p.total_q + r;
            const float l = p.lse[li];
            if (l != -INFINITY) acc -= expf(sink - l) * pb.dsum[li];
        }
    } else {
        const int64_t n = (int64_t)p.batch * p.sq;
        for (int64_t r = threadIdx.x; r < n; r += 256) {
            const int b = (int)(r / p.sq), i = (int)(r % p.sq);
            const int64_t li = ((int64_t)b * p.hq + h) * p.sq + i;
            const float l = p.lse[li];
            if (l != -INFINITY) acc -= expf(sink - l) * pb.dsum[li];
        }
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w; w >>= 1) {
        if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) pb.dsinks[h] = red[0];
}

/* ---- the vector forms: thread t of a block of FA_VEC_NT serves chunk t % G (elements
   8 (t % G) .. 8 (t % G) + 7) of row blockIdx.x * (FA_VEC_NT / G) + t / G, G = 2^lg the
   power of two >= the row's chunks (<= 32, so a row's segment lies inside one warp) ---- */
#define FA_VEC_NT 256

template <typename T> __device__ __forceinline__ float2 fa_vec_f2(uint32_t u);
template <> __device__ __forceinline__ float2 fa_vec_f2<__half>(uint32_t u)
{
    return __half22float2(*reinterpret_cast<const __half2 *>(&u));
}
template <> __device__ __forceinline__ float2 fa_vec_f2<__nv_bfloat16>(uint32_t u)
{
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u));
}

/* D_i: each lane's 8 products in fp32, then the segment adds the lanes with xor shuffles
   (a fixed order: bitwise reproducible) */
template <typename T>
__global__ void __launch_bounds__(FA_VEC_NT) fa_bwd_pre_vec_kernel(const fa_cu_bwd pb, int lg)
{
    const fa_cu_fwd &p = pb.f;
    const int bh = blockIdx.y, h = bh % p.hq, b = bh / p.hq;
    const int G = 1 << lg, lane = threadIdx.x % 32;
    const int i = (int)((blockIdx.x * FA_VEC_NT + threadIdx.x) >> lg), c = (threadIdx.x & (G - 1)) * 8;
    const fa_dseq s = fa_dev_seq(p, b);
    if (i >= s.sq) return;   /* a row's segment leaves whole */
    float d = 0.f;
    if (c < p.dv) {
        const int64_t orow = s.tb * p.o_sb + (s.q0 + i) * p.o_ss + (int64_t)h * p.o_sh;
        const int64_t drow = s.tb * pb.do_sb + (s.q0 + i) * pb.do_ss + (int64_t)h * pb.do_sh;
        const uint4 g = *reinterpret_cast<const uint4 *>(reinterpret_cast<const T *>(pb.dout) + drow + c);
        const uint4 o = *reinterpret_cast<const uint4 *>(reinterpret_cast<const T *>(p.out) + orow + c);
        const uint32_t gu[4] = { g.x, g.y, g.z, g.w }, ou[4] = { o.x, o.y, o.z, o.w };
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 a = fa_vec_f2<T>(gu[k]), e = fa_vec_f2<T>(ou[k]);
            d = fmaf(a.x, e.x, d);
            d = fmaf(a.y, e.y, d);
        }
    }
    const unsigned seg = G == 32 ? 0xffffffffu : ((1u << G) - 1) << (lane & ~(G - 1));
    for (int o = G / 2; o; o >>= 1) d += __shfl_xor_sync(seg, d, o);
    if ((lane & (G - 1)) == 0) pb.dsum[fa_lse_row(p, s, b, h, i)] = d;
}

template <typename T>
__global__ void __launch_bounds__(FA_VEC_NT) fa_bwd_post_vec_kernel(const fa_cu_bwd pb, int lg)
{
    const fa_cu_fwd &p = pb.f;
    const int bh = blockIdx.y, h = bh % p.hq, b = bh / p.hq;
    const int i = (int)((blockIdx.x * FA_VEC_NT + threadIdx.x) >> lg), c = (threadIdx.x & ((1 << lg) - 1)) * 8;
    const fa_dseq s = fa_dev_seq(p, b);
    if (i >= s.sq || c >= p.dqk) return;
    const float4 *q = reinterpret_cast<const float4 *>(pb.dq_acc + fa_lse_row(p, s, b, h, i) * p.dqk + c);
    const float4 x = q[0], y = q[1];
    const float sc = p.scale;
    uint4 u;
    u.x = fa_pack2(x.x * sc, x.y * sc, T());
    u.y = fa_pack2(x.z * sc, x.w * sc, T());
    u.z = fa_pack2(y.x * sc, y.y * sc, T());
    u.w = fa_pack2(y.z * sc, y.w * sc, T());
    const int64_t row = s.tb * pb.dq_sb + (s.q0 + i) * pb.dq_ss + (int64_t)h * pb.dq_sh;
    *reinterpret_cast<uint4 *>(reinterpret_cast<T *>(pb.dq) + row + c) = u;
}

/* rows of n 16-bit elements (n a multiple of 8 up to 256) that start on 16-byte boundaries */
static bool fa_vec_rows(const void *base, int dtype, int n, int64_t sb, int64_t ss, int64_t sh)
{
    return (dtype == FA_CU_F16 || dtype == FA_CU_BF16) && n > 0 && n % 8 == 0 && n <= 256 &&
           ((uintptr_t)base & 15) == 0 && sb % 8 == 0 && ss % 8 == 0 && sh % 8 == 0;
}

/* log2 of the power of two >= n / 8 */
static int fa_vec_lg(int n)
{
    int lg = 0;
    while ((8 << lg) < n) lg++;
    return lg;
}

static dim3 fa_vec_grid(const fa_cu_bwd &p, int lg)
{
    const int rows = FA_VEC_NT >> lg;
    return dim3((unsigned)((p.max_sq + rows - 1) / rows), (unsigned)(p.f.batch * p.f.hq));
}

static dim3 fa_aux_grid(const fa_cu_bwd &p)
{
    int64_t rows = p.max_sq;
    return dim3((unsigned)((rows + FA_AUX_ROWS - 1) / FA_AUX_ROWS), (unsigned)(p.f.batch * p.f.hq));
}

cudaError_t fa_bwd_pre_launch(const fa_cu_bwd &p, cudaStream_t st)
{
    dim3 g = fa_aux_grid(p);
    if (g.x == 0 || g.y == 0) return cudaSuccess;
    const fa_cu_fwd &f = p.f;
    if (p.dtype == f.out_dtype && fa_vec_rows(p.dout, p.dtype, f.dv, p.do_sb, p.do_ss, p.do_sh) &&
        fa_vec_rows(f.out, f.out_dtype, f.dv, f.o_sb, f.o_ss, f.o_sh)) {
        const int lg = fa_vec_lg(f.dv);
        if (p.dtype == FA_CU_BF16) fa_bwd_pre_vec_kernel<__nv_bfloat16><<<fa_vec_grid(p, lg), FA_VEC_NT, 0, st>>>(p, lg);
        else fa_bwd_pre_vec_kernel<__half><<<fa_vec_grid(p, lg), FA_VEC_NT, 0, st>>>(p, lg);
        return cudaGetLastError();
    }
    fa_bwd_pre_kernel<<<g, 32 * FA_AUX_ROWS, 0, st>>>(p);
    return cudaGetLastError();
}

cudaError_t fa_bwd_post_launch(const fa_cu_bwd &p, cudaStream_t st)
{
    dim3 g = fa_aux_grid(p);
    if (g.x && g.y) {
        if (fa_vec_rows(p.dq, p.dq_dtype, p.f.dqk, p.dq_sb, p.dq_ss, p.dq_sh)) {
            const int lg = fa_vec_lg(p.f.dqk);
            if (p.dq_dtype == FA_CU_BF16) fa_bwd_post_vec_kernel<__nv_bfloat16><<<fa_vec_grid(p, lg), FA_VEC_NT, 0, st>>>(p, lg);
            else fa_bwd_post_vec_kernel<__half><<<fa_vec_grid(p, lg), FA_VEC_NT, 0, st>>>(p, lg);
        } else {
            fa_bwd_post_kernel<<<g, 32 * FA_AUX_ROWS, 0, st>>>(p);
        }
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    if (p.dsinks && p.f.sinks && p.f.hq > 0) {
        fa_bwd_dsinks_kernel<<<p.f.hq, 256, 0, st>>>(p);
        return cudaGetLastError();
    }
    return cudaSuccess;
}
