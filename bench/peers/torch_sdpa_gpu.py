#!/usr/bin/env python3
"""torch SDPA (flash = FA2, cuDNN, efficient) on the GPU sweep of PERFORMANCE.md, timed the
same way as bench/gpu/bench_gpu.c (CUDA events, median of 10 after 3 warm-ups, half a second
of forwards first), and the
ratios ours/peer when given our CSV.
Usage: torch_sdpa_gpu.py [--ours ours.csv] [--quick] [--bf16|--fp32] > peers.csv
  --bf16: bf16 cells only; --fp32: the fp32 cells instead (torch's efficient backend is the
  one of the three that takes fp32)."""
import sys, statistics, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from burn_in import burn_in

quick = "--quick" in sys.argv
bf16_only = "--bf16" in sys.argv
fp32 = "--fp32" in sys.argv
ours = {}
if "--ours" in sys.argv:
    for line in open(sys.argv[sys.argv.index("--ours") + 1]):
        f = line.strip().split(",")
        if len(f) == 8 and f[0] == "ours" and f[7] != "nan":
            ours[(f[1], f[2], int(f[3]), int(f[4]), int(f[5]))] = float(f[7])

def timeit(fn, warm=3, reps=10):
    for _ in range(warm): fn()
    e0, e1, ts = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(reps):
        e0.record(); fn(); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)

backs = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
         ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
if fp32: backs = backs[2:]
burn_in()
print("who,dir,dtype,d,S,causal,ms,tflops")
rows = []
for dt, tn in ((torch.float32, "fp32"),) if fp32 else ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
    for d in (64, 128, 256):
        for si, S in enumerate((512, 1024, 2048, 4096, 8192, 16384)):
            for c in (0, 1):
                if quick and si % 2: continue
                if bf16_only and tn == "fp16": continue
                B, H = 16384 // S, 2048 // d
                q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
                fl = 4.0 * B * H * S * S * d / (2 if c else 1)
                for name, be in backs:
                    for dirn in ("fwd", "bwd"):
                        try:
                            with sdpa_kernel([be]):
                                if dirn == "fwd":
                                    with torch.no_grad():
                                        ms = timeit(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(c)))
                                else:
                                    out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(c))
                                    g = torch.randn_like(out)
                                    ms = timeit(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True))
                                    del out, g
                            tf = fl * (2.5 if dirn == "bwd" else 1) / (ms * 1e-3) / 1e12
                        except Exception as ex:
                            ms, tf = float("nan"), float("nan")
                        print(f"{name},{dirn},{tn},{d},{S},{c},{ms:.4f},{tf:.1f}", flush=True)
                        rows.append((name, dirn, tn, d, S, c, tf))
                del q, k, v
                torch.cuda.empty_cache()
if ours:
    print("\n# ratios ours/peer (TFLOP/s), fwd", file=sys.stderr)
    names = [n for n, _ in backs]
    print("# dir dtype d S causal | ours | " + " ".join(names) + " | " + " ".join("ours/" + n for n in names[:2]),
          file=sys.stderr)
    peer = {(r[0], r[1], r[2], r[3], r[4], r[5]): r[6] for r in rows}
    for (dirn, tn, d, S, c), t in sorted(ours.items()):
        p = [peer.get((n, dirn, tn, d, S, c), float("nan")) for n in names]
        print(f"{dirn} {tn} d{d} S{S} c{c} | {t:7.1f} | " + " ".join(f"{x:7.1f}" for x in p) + " | " +
              " ".join(f"{t / x:5.2f}" for x in p[:2]), file=sys.stderr)
