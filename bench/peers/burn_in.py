"""The burn-in the GPU peer scripts run before their first timed cell: half a second of bf16
d128 S4k forwards (torch's cuDNN backend, flash if cuDNN is missing), as bench/gpu/bench_gpu.c
runs its own before ours, so that both sides start from the same heated state (on a cold GPU
torch's first cells ran at higher clocks than ours, which are timed after the burn-in)."""
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F


def burn_in(seconds=0.5):
    x = torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
    t0, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]), torch.no_grad():
        while True:
            for _ in range(20):
                F.scaled_dot_product_attention(x, x, x)
            e.record()
            torch.cuda.synchronize()
            if t0.elapsed_time(e) >= seconds * 1e3:
                break
    del x
