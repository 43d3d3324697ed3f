#!/usr/bin/env python3
"""Forward-only torch SDPA peers (flash = FA2, cuDNN) on bench_gpu's sweep, timed as
bench_gpu.c times (CUDA events, median of 10 after 3 warm-ups), and the table
ours (fast) / ours (general) / flash / cuDNN when given both CSVs of bench_gpu fwd.
Usage: peers_fwd.py NEW.csv GENERAL.csv [--prev PREV.csv] [--bf16] > peers_fwd.csv
(table on stderr; PREV: an earlier build of the fast kernel, timed in the same run)"""
import sys, statistics, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F
import os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
from burn_in import burn_in

def load(path):
    r = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) == 8 and f[0] == "ours" and f[1] == "fwd" and f[7] != "nan":
            r[(f[2], int(f[3]), int(f[4]), int(f[5]))] = float(f[7])
    return r

new, gen = load(sys.argv[1]), load(sys.argv[2])
prev = load(sys.argv[sys.argv.index("--prev") + 1]) if "--prev" in sys.argv else {}
bf16_only = "--bf16" in sys.argv

def timeit(fn, warm=3, reps=10):
    for _ in range(warm): fn()
    e0, e1, ts = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(reps):
        e0.record(); fn(); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)

backs = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
burn_in()
print("who,dir,dtype,d,S,causal,ms,tflops")
peer = {}
for dt, tn in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
    if bf16_only and tn == "fp16": continue
    for d in (64, 128, 256):
        for S in (512, 1024, 2048, 4096, 8192, 16384):
            if (tn, d, S, 0) not in new: continue
            B, H = 16384 // S, 2048 // d
            q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=dt) for _ in range(3))
            for c in (0, 1):
                fl = 4.0 * B * H * S * S * d / (2 if c else 1)
                for name, be in backs:
                    try:
                        with sdpa_kernel([be]), torch.no_grad():
                            ms = timeit(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(c)))
                        tf = fl / (ms * 1e-3) / 1e12
                    except Exception:
                        ms, tf = float("nan"), float("nan")
                    print(f"{name},fwd,{tn},{d},{S},{c},{ms:.4f},{tf:.1f}", flush=True)
                    peer[(name, tn, d, S, c)] = tf
            del q, k, v
            torch.cuda.empty_cache()
nan = float("nan")
print("# forward TFLOP/s: dtype d S causal | fast general prev | flash cudnn | fast/flash fast/cudnn fast/general", file=sys.stderr)
for key in sorted(new):
    tn, d, S, c = key
    t, g, pv = new[key], gen.get(key, nan), prev.get(key, nan)
    fl, cu = peer.get(("flash",) + key, nan), peer.get(("cudnn",) + key, nan)
    print(f"{tn} d{d:<3} S{S:<5} c{c} | {t:6.1f} {g:6.1f} {pv:6.1f} | {fl:6.1f} {cu:6.1f} | {t / fl:5.2f} {t / cu:5.2f} {t / g:5.2f}",
          file=sys.stderr)
