/* merge.cu - the decode kernel's split merge: the combine kernel's rules (combine.cu: NaN
 * wins, the sink as one more part with a zero output, a row with no part is out 0 and lse
 * -inf) with one warp per query row and the parts side by side: lane i reads part i's lse,
 * the row's max and sum are warp reductions, and each lane's columns of the n parts are
 * loaded with no dependence between them, so a row costs about two memory latencies
 * whatever the split count (the general combine walks the parts one after another). It is
 * launched as a programmatic dependent of the decode grid: its blocks may start while the
 * decode blocks run and wait (griddepcontrol.wait) until the parts are written.
 */
#include <cuda_runtime.h>
#include <math.h>
#include "device/problem.cuh"
#include "decode/decode.h"

#define FA_MERGE_WARPS 8

__global__ void __launch_bounds__(32 * FA_MERGE_WARPS) fa_decode_merge_kernel(const fa_cu_combine c)
{
    __shared__ float sw[FA_MERGE_WARPS][FA_CU_MAX_PARTS];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    fa_griddep_wait();   /* the decode grid's parts are written */
#endif
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t li = (int64_t)blockIdx.x * FA_MERGE_WARPS + warp;   /* lse layout: (b H + h) S + s */
    const int64_t rows = (int64_t)c.B * c.H * c.S;
    if (li >= rows) return;
    const int64_t s = li % c.S, h = (li / c.S) % c.H, b = li / ((int64_t)c.S * c.H);
    const float l = lane < c.n ? c.lse_base[lane * c.lse_pstride + li] : -INFINITY;
    const bool nan = __any_sync(0xffffffffu, l != l);
    float m = l;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float sink = c.sinks ? c.sinks[h] : -INFINITY;
    m = fmaxf(m, sink);
    const float w = m == -INFINITY ? 0.f : expf(l - m);
    float total = w;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    if (c.sinks && m != -INFINITY) total += expf(sink - m);
    const float inv = m == -INFINITY ? 0.f : 1.f / total;
    sw[warp][lane] = w * inv;
    __syncwarp();
    const float *part = c.o_base + li * c.D;
    const int64_t o = b * c.o_sb + s * c.o_ss + h * c.o_sh;
    for (int d = 2 * lane; d < c.D; d += 64) {
        float a0 = 0.f, a1 = 0.f;
#pragma unroll 8
        for (int i = 0; i < c.n; i++) {   /* an empty part holds zeros: no branch needed */
            const float2 x = *reinterpret_cast<const float2 *>(part + i * c.o_pstride + d);
            a0 += sw[warp][i] * x.x;
            a1 += sw[warp][i] * x.y;
        }
        if (nan) a0 = a1 = __int_as_float(0x7fc00000);
        fa_st_any(c.out, c.out_dtype, o + d, a0);
        fa_st_any(c.out, c.out_dtype, o + d + 1, a1);
    }
    if (c.lse_out && lane == 0)
        c.lse_out[li] = nan ? __int_as_float(0x7fc00000) : m == -INFINITY ? -INFINITY : m + logf(total);
}

cudaError_t fa_decode_merge_launch(const fa_cu_combine &c, cudaStream_t st)
{
    const int64_t rows = (int64_t)c.B * c.S * c.H;
    if (rows == 0) return cudaSuccess;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((rows + FA_MERGE_WARPS - 1) / FA_MERGE_WARPS));
    cfg.blockDim = dim3(32 * FA_MERGE_WARPS);
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, fa_decode_merge_kernel, c);
}
