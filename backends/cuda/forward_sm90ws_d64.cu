/* forward_sm90ws_d64.cu - the warp-specialized Hopper (sm_90a, TMA + wgmma) forward of head-dim class 64, fp16 and bf16. */
#include "forward_sm90ws.cuh"
FA_FWD_WS_INSTANTIATE(64)
