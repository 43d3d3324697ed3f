/* backward_sm90_d128.cu - the Hopper (sm_90a, wgmma) backward of head-dim class 128, fp16 and bf16. */
#include "backward_sm90.cuh"
FA_BWD_SM90_INSTANTIATE(128)
