#!/usr/bin/env python3
"""torch_gpu.py - the GPU peer: PyTorch's scaled_dot_product_attention (flash, cuDNN and
efficient backends) on the cells of flashattn-bench's GPU sweep, and ours/peer ratios.

Reads one or more CSVs of `flashattn-bench --backend cuda --mode sweep` (its results.csv
layout; the rows of section "gpu" that passed), times torch on the same cells the same way
(CUDA events around each call, the median of 10 calls after 3 warm-ups, half a second of
forwards before the first cell so that both sides start from a busy GPU's clocks), and
prints the peers' rows in the same CSV layout (section "peer") on stdout and the ratio
table on stderr. FLOPs: 4*B*H*S*S*d, halved for causal; the backward counts 2.5x.

  flashattn-bench --backend cuda --mode sweep --csv ours.csv
  python3 bench/peers/torch_gpu.py --ours ours.csv > peers.csv 2> ratios.txt
  python3 bench/peers/torch_gpu.py --ours ours1.csv ours2.csv ours3.csv --rounds 3 ...

With several --ours files (rounds of ours) and --rounds N (rounds of the peers), each
side's figure is its median over the rounds, and the table adds the lowest and highest
single-round ours/flash ratio (round i against round i), which shows the cells whose
ratio is within the run-to-run noise. --ratios-only --peer peers.csv skips the timing.

--decode LOG: the decode cells instead. LOG is the output of `flashattn-bench --backend
cuda --mode decode` (decode_gpu.c's lines: shape, our K/V bytes read per second, the copy
ceiling of that run); torch SDPA (cuDNN and flash backends, enable_gqa) is timed on the
same shapes, q [B, H, new, d] against contiguous k, v [B, Hkv, S, d] (and cuDNN also on
[B, S, Hkv, d] storage, flashattn's own layout, as a strided view; torch has no paged form:
the paged rows compare with torch's contiguous figures), no mask, CUDA events around
20 calls (median of 5 rounds, as flashattn-bench times its own), and the side-by-side table goes to stdout, in the same
metric (K/V bytes read once per second).

  flashattn-bench --backend cuda --mode decode > decode.log
  python3 bench/peers/torch_gpu.py --decode decode.log > decode-table.txt
Exit status: 0, 2 bad usage, 3 torch or a CUDA device is missing.
"""
import argparse
import csv
import re
import statistics
import sys

BACKENDS = ("flash", "cudnn", "efficient")
TORCH_DTYPE = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def cell_of(row):
    return (row["dir"], row["dtype"], int(row["B"]), int(row["H"]), int(row["Sq"]),
            int(row["d"]), int(row["causal"]))


def read_ours(paths):
    """Per cell, the TFLOP/s of each round (file) that measured it."""
    cells = {}
    for i, path in enumerate(paths):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get("section") != "gpu" or row.get("status") != "PASS":
                    continue
                cells.setdefault(cell_of(row), {})[i] = float(row["gflops"]) / 1e3
    return cells


def flops(cell):
    direction, _, B, H, S, d, causal = cell
    f = 4.0 * B * H * S * S * d / (2 if causal else 1)
    return 2.5 * f if direction == "bwd" else f


def burn_in(torch, F, seconds=0.5):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    x = torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]), torch.no_grad():
        while True:
            for _ in range(20):
                F.scaled_dot_product_attention(x, x, x)
            t1.record()
            torch.cuda.synchronize()
            if t0.elapsed_time(t1) >= seconds * 1e3:
                break


def time_ms(torch, fn, warm=3, reps=10, n=1):
    """Milliseconds per call: CUDA events around n calls, the median of reps rounds after
    warm calls (n = 20, reps = 5: flashattn-bench's decode timing)."""
    for _ in range(warm):
        fn()
    e0, e1, ts = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(reps):
        e0.record()
        for _ in range(n):
            fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / n)
    return statistics.median(ts)


def run_round(torch, cells):
    """One round of the peers on every cell: {(backend, cell): TFLOP/s or None}."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION}
    burn_in(torch, F)
    out = {}
    shapes = sorted({c[1:] for c in cells})
    for dtype, B, H, S, d, causal in shapes:
        dt = getattr(torch, TORCH_DTYPE[dtype])
        q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=dt, requires_grad=True)
                   for _ in range(3))
        for name in BACKENDS:
            for direction in ("fwd", "bwd"):
                cell = (direction, dtype, B, H, S, d, causal)
                if cell not in cells:
                    continue
                try:
                    with sdpa_kernel([be[name]]):
                        if direction == "fwd":
                            with torch.no_grad():
                                ms = time_ms(torch, lambda: F.scaled_dot_product_attention(
                                    q, k, v, is_causal=bool(causal)))
                        else:
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                            g = torch.randn_like(o)
                            ms = time_ms(torch, lambda: torch.autograd.grad(
                                o, (q, k, v), g, retain_graph=True))
                            del o, g
                    out[(name, cell)] = flops(cell) / (ms * 1e-3) / 1e12
                except Exception as e:            # a backend lacking a cell is a gap
                    out[(name, cell)] = None
                    print(f"[peer] {name} {cell}: {type(e).__name__}: {str(e)[:120]}",
                          file=sys.stderr)
        del q, k, v
        torch.cuda.empty_cache()
    return out


def write_rows(rounds, cells):
    cols = ("section,impl,kernel,dir,dtype,B,H,Hkv,Sq,Sk,d,causal,paged,threads,block_q,"
            "block_kv,status,check_err,check_tol,time_med_s,time_min_s,time_max_s,runs,"
            "gflops,pct_peak,peak_gflops,extra_model_bytes,rss_delta_bytes,io_model_bytes,"
            "io_measured_bytes,tile_bytes,note").split(",")
    w = csv.DictWriter(sys.stdout, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for cell in sorted(cells):
        direction, dtype, B, H, S, d, causal = cell
        for name in BACKENDS:
            vals = [r[(name, cell)] for r in rounds if r.get((name, cell)) is not None]
            row = dict.fromkeys(cols, "")
            row.update(section="peer", impl="torch sdpa " + name, dir=direction, dtype=dtype,
                       B=B, H=H, Hkv=H, Sq=S, Sk=S, d=d, causal=causal, paged=0)
            if vals:
                tf = statistics.median(vals)
                row.update(status="PASS", gflops=f"{tf * 1e3:.6g}",
                           time_med_s=f"{flops(cell) / (tf * 1e12):.6g}", runs=10,
                           note=f"median of {len(vals)} round(s); CUDA events")
            else:
                row.update(status="n/a", note="the backend does not take this cell")
            w.writerow(row)


def print_ratios(ours, peer_rounds, out):
    print("# ours / torch SDPA, TFLOP/s (medians over the rounds); spread: the lowest and "
          "highest single-round ours/flash", file=out)
    print("# dir dtype d S causal |    ours | " + " ".join(f"{n:>9}" for n in BACKENDS) +
          " | ours/flash ours/cudnn | spread", file=out)
    for cell in sorted(ours, key=lambda c: (c[0] != "fwd", c[1], c[5], c[4], c[6])):
        direction, dtype, B, H, S, d, causal = cell
        mine = statistics.median(ours[cell].values())
        peer = []
        for n in BACKENDS:
            v = [r[(n, cell)] for r in peer_rounds if r.get((n, cell)) is not None]
            peer.append(statistics.median(v) if v else float("nan"))
        single = [ours[cell][i] / peer_rounds[i][("flash", cell)]
                  for i in ours[cell] if i < len(peer_rounds)
                  and peer_rounds[i].get(("flash", cell))]
        spread = f"{min(single):.2f}-{max(single):.2f}" if single else "-"
        print(f"{direction} {dtype:>4} d{d:<3} S{S:<5} c{causal} | {mine:7.1f} | " +
              " ".join(f"{x:9.1f}" for x in peer) + " | " +
              " ".join(f"{mine / x:10.2f}" for x in peer[:2]) + f" | {spread}", file=out)


def read_peer_csv(path):
    r = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("section") == "peer" and row.get("status") == "PASS":
                r[(row["impl"].replace("torch sdpa ", ""), cell_of(row))] = float(row["gflops"]) / 1e3
    return r


DECODE_LINE = re.compile(r"B=\s*(\d+) S=\s*(\d+) H=(\d+)/(\d+) d(\d+) new=(\d+) cache=(\S+)\s+KV\s+[\d.]+ MB"
                         r"\s+([\d.]+) us\s+([\d.]+) TB/s\s+copy\s+([\d.]+) TB/s")


def read_decode(path):
    """Our decode cells: [(B, S, H, Hkv, d, new, cache, us, TB/s, copy TB/s)]."""
    cells = []
    with open(path) as f:
        for line in f:
            m = DECODE_LINE.search(line)
            if m:
                g = m.groups()
                cells.append(tuple(int(x) for x in g[:6]) + (g[6],) + tuple(float(x) for x in g[7:]))
    return cells


def decode_peers(torch, shapes):
    """{(backend, shape): TB/s of K/V bytes, or None}, shape = (B, S, H, Hkv, d, new)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
          "cudnn-bshd": SDPBackend.CUDNN_ATTENTION}
    burn_in(torch, F)
    out = {}
    for B, S, H, Hkv, d, new in sorted(shapes):
        q = torch.randn(B, H, new, d, device="cuda", dtype=torch.bfloat16)
        kv = 2.0 * B * S * Hkv * d * 2
        for name in be:
            # cudnn-bshd: the cache stored [B, S, Hkv, d] (flashattn's layout), a strided view
            if name == "cudnn-bshd":
                k, v = (torch.randn(B, S, Hkv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                        for _ in range(2))
            elif name == "cudnn":
                k, v = (torch.randn(B, Hkv, S, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            try:
                with sdpa_kernel([be[name]]), torch.no_grad():
                    ms = time_ms(torch, lambda: F.scaled_dot_product_attention(
                        q, k, v, enable_gqa=Hkv != H), reps=5, n=20)
                out[(name, (B, S, H, Hkv, d, new))] = kv / (ms * 1e-3) / 1e12
            except Exception as e:            # a backend lacking a cell is a gap
                out[(name, (B, S, H, Hkv, d, new))] = None
                print(f"[peer] {name} B={B} S={S} H={H}/{Hkv} d{d} new={new}: {type(e).__name__}: "
                      f"{str(e)[:100]}", file=sys.stderr)
            if name != "cudnn":
                del k, v
                torch.cuda.empty_cache()
        del q
    return out


def print_decode(cells, peers, out):
    print("# decode, bf16: K/V bytes read once per second (TB/s); copy = device-to-device copy "
          "(read + written) of the same run; torch SDPA, no mask, the cache [B, H, S, d] "
          "(cudnn, flash) or [B, S, H, d] (cudnn-bshd, flashattn's contig)", file=out)
    print("# shape                                        |  ours |  cudnn | cudnn-bshd |  flash |  copy | "
          "ours/cudnn ours/cudnn-bshd ours/flash ours/copy", file=out)
    for B, S, H, Hkv, d, new, cache, us, tb, copy in cells:
        sh = (B, S, H, Hkv, d, new)
        c, cb, fl = peers.get(("cudnn", sh)), peers.get(("cudnn-bshd", sh)), peers.get(("flash", sh))
        fmt = lambda x: f"{x:6.2f}" if x else "   n/a"
        rat = lambda x: f"{tb / x:10.2f}" if x else "       n/a"
        print(f"B={B:3d} S={S:5d} H={H}/{Hkv} d{d} new={new} {cache:7s} {us:8.1f} us | {tb:5.2f} | {fmt(c)} | "
              f"    {fmt(cb)} | {fmt(fl)} | {copy:5.2f} | {rat(c)} {rat(cb):>15} {rat(fl)} {tb / copy:9.2f}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", nargs="+", help="flashattn-bench CSV(s) of the "
                    "GPU sweep (one per round)")
    ap.add_argument("--decode", help="flashattn-bench --mode decode output: time torch on its cells")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the peers (default 1)")
    ap.add_argument("--ratios-only", action="store_true", help="do not time torch; read --peer")
    ap.add_argument("--peer", nargs="+", help="with --ratios-only: CSVs this script wrote")
    args = ap.parse_args()
    if args.decode:
        cells = read_decode(args.decode)
        if not cells:
            print("torch_gpu.py: no decode cells in " + args.decode, file=sys.stderr)
            return 2
        try:
            import torch
        except ImportError as e:
            print(f"torch_gpu.py: PyTorch is not installed ({e})", file=sys.stderr)
            return 3
        if not torch.cuda.is_available():
            print("torch_gpu.py: torch sees no CUDA device", file=sys.stderr)
            return 3
        print_decode(cells, decode_peers(torch, {c[:6] for c in cells}), sys.stdout)
        return 0
    if not args.ours:
        ap.error("--ours or --decode is needed")
    ours = read_ours(args.ours)
    if not ours:
        print("torch_gpu.py: no passed 'gpu' rows in " + " ".join(args.ours), file=sys.stderr)
        return 2
    if args.ratios_only:
        if not args.peer:
            ap.error("--ratios-only needs --peer")
        print_ratios(ours, [read_peer_csv(p) for p in args.peer], sys.stdout)
        return 0
    try:
        import torch
    except ImportError as e:
        print(f"torch_gpu.py: PyTorch is not installed ({e})", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_gpu.py: torch sees no CUDA device", file=sys.stderr)
        return 3
    rounds = []
    for r in range(args.rounds):
        rounds.append(run_round(torch, set(ours)))
        print(f"[peer] round {r + 1} of {args.rounds} done", file=sys.stderr)
    write_rows(rounds, set(ours))
    print_ratios(ours, rounds, sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
