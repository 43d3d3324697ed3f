/* simt_f32_bwd.cu - the fp32 backward (simt_f32.cuh), head-dim classes 64, 128, 256. */
#include "simt_f32.cuh"

template cudaError_t fa_f32_bwd_launch<64>(const fa_cu_bwd &, int64_t, cudaStream_t);
template cudaError_t fa_f32_bwd_launch<128>(const fa_cu_bwd &, int64_t, cudaStream_t);
template cudaError_t fa_f32_bwd_launch<256>(const fa_cu_bwd &, int64_t, cudaStream_t);
