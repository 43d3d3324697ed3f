/* forward_sm90_d128.cu - the Hopper (sm_90a, wgmma) forward of head-dim class 128, fp16 and bf16. */
#include "forward_sm90.cuh"
FA_FWD_SM90_INSTANTIATE(128)
