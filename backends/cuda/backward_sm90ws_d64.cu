/* backward_sm90ws_d64.cu - the warp-specialized Hopper (sm_90a, TMA + wgmma) backward of head-dim class 64, fp16 and bf16. */
#include "backward_sm90ws.cuh"
FA_BWD_WS_INSTANTIATE(64)
