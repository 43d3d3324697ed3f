/* simt_f32_fwd.cu - the fp32 forward (simt_f32.cuh), head-dim classes 64, 128, 256. */
#include "simt_f32.cuh"

template cudaError_t fa_f32_fwd_launch<64>(const fa_cu_fwd &, int64_t, cudaStream_t);
template cudaError_t fa_f32_fwd_launch<128>(const fa_cu_fwd &, int64_t, cudaStream_t);
template cudaError_t fa_f32_fwd_launch<256>(const fa_cu_fwd &, int64_t, cudaStream_t);
