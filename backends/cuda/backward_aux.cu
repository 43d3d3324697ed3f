/* backward_aux.cu - the backward's small memory-bound kernels around fa_bwd_kernel:
 *   pre:  D_i = rowsum(dO_i * O_i) (fp32) and dq_acc rows = 0, one warp per row;
 *   post: dq = scale * dq_acc in dq's dtype, one warp per row; dsinks[h] =
 *         -sum_i exp(sink_h - lse_i) * D_i, one block per head, summed in a fixed order
 *         (bitwise reproducible). Rows past a sequence (varlen) are never touched.
 */
#include <math.h>
#include "common.cuh"
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
    float *q = pb.dq_acc + li * p.dqk;
    for (int c = lane; c < p.dqk; c += 32) q[c] = 0.f;
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

static dim3 fa_aux_grid(const fa_cu_bwd &p)
{
    int64_t rows = p.max_sq;
    return dim3((unsigned)((rows + FA_AUX_ROWS - 1) / FA_AUX_ROWS), (unsigned)(p.f.batch * p.f.hq));
}

cudaError_t fa_bwd_pre_launch(const fa_cu_bwd &p, cudaStream_t st)
{
    dim3 g = fa_aux_grid(p);
    if (g.x == 0 || g.y == 0) return cudaSuccess;
    fa_bwd_pre_kernel<<<g, 32 * FA_AUX_ROWS, 0, st>>>(p);
    return cudaGetLastError();
}

cudaError_t fa_bwd_post_launch(const fa_cu_bwd &p, cudaStream_t st)
{
    dim3 g = fa_aux_grid(p);
    if (g.x && g.y) {
        fa_bwd_post_kernel<<<g, 32 * FA_AUX_ROWS, 0, st>>>(p);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    if (p.dsinks && p.f.sinks && p.f.hq > 0) {
        fa_bwd_dsinks_kernel<<<p.f.hq, 256, 0, st>>>(p);
        return cudaGetLastError();
    }
    return cudaSuccess;
}
