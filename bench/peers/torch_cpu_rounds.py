#!/usr/bin/env python3
"""torch_cpu_rounds.py - ours against torch's CPU scaled_dot_product_attention, cell by cell
in alternating rounds: the CPU-vs-torch table in one command.

  python3 bench/peers/torch_cpu_rounds.py --bench BUILD/bench/flashattn-bench --threads 1,16
  python3 bench/peers/torch_cpu_rounds.py --bench ... --threads 1,2 --quick   # small shapes

Cells: dtype (f32, bf16) x d (64, 128) x S (1k, 4k) x threads x direction, B = 1, H = 16,
non-causal (--causal adds the causal cells and their causal / non-causal ratio per useful
FLOP). FLOPs as flashattn-bench counts them (torch_cpu.flops).

How it times. Two worker processes stay up for the whole run, one calling the library
(libflashattn through ctypes, the public API: fa_forward, fa_backward on [B, S, H, d]) and
one torch; separate processes so that each has its own OpenMP runtime (torch ships its
own). Both get the same inputs (uniform in [-1, 1), written once by the torch worker to
files both map) and the same pinning: OMP_NUM_THREADS = the largest thread count,
OMP_PLACES=cores, OMP_PROC_BIND=close (unless set), then fa_context_set_threads(n) and
torch.set_num_threads(n) per cell. Per cell: a first call and one timed call on each side
(the first alone when it takes over half a second; torch: on each layout tried, see
below), then --rounds rounds; in each, each side times k calls (k from that timed call,
so that they last about --min-time seconds, at most --max-calls) and reports their
median; the side that goes first alternates from round to round. A cell's figure is the median of its rounds; the rounds column gives the lowest and
highest single-round ours/torch. Cells run S by S (all of 1k, then 4k), so that
--deadline, when it cuts the run short, leaves out the longest cells.
The forward is timed alone. The backward is timed alone on both sides: ours calls
fa_backward on the out and lse of one untimed fa_forward; torch runs the forward (with
autograd) once outside the timed region and times torch.autograd.grad(out, (q, k, v),
dout, retain_graph=True) on that graph.
torch's layout: its SDPA takes [B, H, S, d]; it gets either those contiguous (bhsd) or
our [B, S, H, d] storage as a transposed view (bshd). --torch-layout best (the default)
times the warm-up's call on each and keeps the faster for the cell; the table says which.
Agreement: after the rounds the torch worker compares our outputs (out; dq, dk, dv) with
its own on the same inputs: max |ours - torch| / max |torch|, a guard that both sides
solved the same problem (above 1e-4 for f32 or 2e-2 for bf16 the cell is marked DIFFER and
the exit status is 1). The oracle check of our kernels is flashattn-bench's: the run
starts with `flashattn-bench --mode sweep --sweep-only` on a small problem of each dtype
(H 2, S 256, d 64, causal too with --causal; 1 thread and the largest count), whose rows
must PASS (its check of an S4k backward alone takes about a minute), and whose
ceiling (peak_gflops, the FMA loop; for bf16 the highest of FMA, bf16 dot and AMX tiles)
is the denominator of the ours/peak column.

Exit status: 0; 1 a check failed (flashattn-bench FAIL, or DIFFER); 2 bad usage;
3 torch is not installed.
"""
import argparse
import ctypes
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_cpu import flops, read_csv  # noqa: E402  (no torch needed for these)

DTYPES = {"f32": (0, 4), "bf16": (2, 2)}            # fa_dtype, bytes per element
AGREE_TOL = {"f32": 1e-4, "bf16": 2e-2}


def tensors_of(direction):
    return ("out",) if direction == "fwd" else ("dq", "dk", "dv")


def nelem(c):
    return c["B"] * c["S"] * c["H"] * c["d"]


def first_calls(fn):
    """A first call, and the time of a second one; of the first alone when it took more
    than half a second (long enough that what a first call sets up does not show)."""
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    if t > 0.5:
        return t
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_k(fn, k):
    ts = []
    for _ in range(k):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


# ----------------------------------------------------------------- ours (ctypes) ---

class FaTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class FaOptions(ctypes.Structure):                # all zero = the defaults (flashattn.h)
    _fields_ = [("scale", ctypes.c_float), ("causal", ctypes.c_int), ("window", ctypes.c_int),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
                ("softcap", ctypes.c_float), ("alibi_slopes", ctypes.c_void_p),
                ("sinks", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("dropout_p", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("offset", ctypes.c_uint64), ("deterministic", ctypes.c_int),
                ("reserved", ctypes.c_uint64 * 8)]


class Ours:
    def __init__(self, tmp, lib):
        self.tmp, self.lib = tmp, ctypes.CDLL(lib)
        self.lib.fa_last_error.restype = ctypes.c_char_p
        self.lib.fa_context_describe.restype = ctypes.c_char_p
        self.ctx, self.maps = {}, {}

    def context(self, threads):
        if threads not in self.ctx:
            p = ctypes.c_void_p()
            if self.lib.fa_context_create(ctypes.byref(p), 2):          # FA_BACKEND_CPU
                raise RuntimeError(self.lib.fa_last_error(None).decode())
            self.lib.fa_context_set_threads(p, threads)
            self.ctx[threads] = p
        return self.ctx[threads]

    def data(self, c):
        for m in self.maps.values():
            m.close()
        self.c, self.maps, n = c, {}, nelem(c)
        code, size = DTYPES[c["dtype"]]
        for name in ("q", "k", "v", "dout", "out", "dq", "dk", "dv", "lse"):
            nbytes = 4 * c["B"] * c["H"] * c["S"] if name == "lse" else n * size
            path = os.path.join(self.tmp, "ours-" + name if name not in ("q", "k", "v", "dout")
                                else name)
            with open(path, "a+b") as f:
                f.truncate(nbytes)
                self.maps[name] = mmap.mmap(f.fileno(), nbytes)
        self.t = {}
        for name, m in self.maps.items():
            addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
            if name == "lse":
                self.lse = ctypes.c_void_p(addr)
                continue
            S, H, d = c["S"], c["H"], c["d"]
            self.t[name] = FaTensor(addr, code, (c["B"], S, H, d), (S * H * d, H * d, d, 1))
        self.opt = FaOptions()
        self.opt.causal = 1 if c["causal"] else 0                    # bottom-right (Sq = Sk)
        return {}

    def call(self, threads, direction):
        ctx, t, r = self.context(threads), self.t, ctypes.byref
        if direction == "fwd":
            st = self.lib.fa_forward(ctx, r(t["out"]), self.lse, r(t["q"]), r(t["k"]),
                                     r(t["v"]), r(self.opt))
        else:
            st = self.lib.fa_backward(ctx, r(t["dq"]), r(t["dk"]), r(t["dv"]), None,
                                      r(t["dout"]), r(t["q"]), r(t["k"]), r(t["v"]),
                                      r(t["out"]), self.lse, r(self.opt))
        if st:
            raise RuntimeError(self.lib.fa_last_error(ctx).decode())

    def warm(self, threads, direction):
        if direction == "bwd":
            self.call(threads, "fwd")                 # out and lse for the backward
        return {"t": first_calls(lambda: self.call(threads, direction)), "layout": "bshd"}

    def time(self, threads, direction, k):
        return {"t": time_k(lambda: self.call(threads, direction), k)}


# ----------------------------------------------------------------- torch -----------

class Torch:
    def __init__(self, tmp):
        import torch
        self.torch, self.tmp = torch, tmp
        self.F = torch.nn.functional

    def data(self, c):
        torch = self.torch
        self.c, n = c, nelem(c)
        dt = {"f32": torch.float32, "bf16": torch.bfloat16}[c["dtype"]]
        g = torch.Generator(device="cpu").manual_seed(1)
        self.base = {}
        for name in ("q", "k", "v", "dout"):
            path = os.path.join(self.tmp, name)
            if os.path.exists(path):
                os.remove(path)
            x = torch.from_file(path, shared=True, size=n, dtype=dt)
            x.copy_((torch.rand(n, generator=g) * 2 - 1).to(dt))
            self.base[name] = x.view(c["B"], c["S"], c["H"], c["d"])
        self.made = {}
        return {}

    def tensors(self, layout, backward):
        """q, k, v, dout as [B, H, S, d]: contiguous copies (bhsd) or views of the
        [B, S, H, d] storage (bshd)."""
        key = (layout, backward)
        if key not in self.made:
            ts = {}
            for name, x in self.base.items():
                y = x.transpose(1, 2)
                y = y.contiguous() if layout == "bhsd" else y
                ts[name] = y.detach().requires_grad_(backward and name != "dout")
            self.made[key] = ts
        return self.made[key]

    def prepare(self, layout, direction):
        """The function one timed call runs (the backward: on a graph built here)."""
        ts, F = self.tensors(layout, direction == "bwd"), self.F
        kw = dict(is_causal=bool(self.c["causal"]))
        if direction == "fwd":
            def fwd():
                with self.torch.no_grad():
                    self.res = (F.scaled_dot_product_attention(ts["q"], ts["k"], ts["v"], **kw),)
            return fwd
        out = F.scaled_dot_product_attention(ts["q"], ts["k"], ts["v"], **kw)

        def bwd():
            self.res = self.torch.autograd.grad(out, (ts["q"], ts["k"], ts["v"]), ts["dout"],
                                                retain_graph=True)
        return bwd

    def warm(self, threads, direction, layout):
        """first_calls on each layout tried; keeps the faster."""
        self.torch.set_num_threads(threads)
        best = None
        for lay in (("bhsd", "bshd") if layout == "best" else (layout,)):
            fn = self.prepare(lay, direction)
            t = first_calls(fn)
            if best is None or t < best[0]:
                best = (t, lay, fn)
        self.fn = best[2]
        return {"t": best[0], "layout": best[1]}

    def time(self, threads, direction, k):
        self.torch.set_num_threads(threads)
        return {"t": time_k(self.fn, k)}

    def agree(self, direction):
        """max |ours - torch| / max |torch| over the outputs of the last call."""
        torch, c = self.torch, self.c
        worst = 0.0
        for name, mine in zip(tensors_of(direction), self.res):
            mine = mine.detach().transpose(1, 2).float()              # [B, S, H, d]
            dt = {"f32": torch.float32, "bf16": torch.bfloat16}[c["dtype"]]
            ours = torch.from_file(os.path.join(self.tmp, "ours-" + name), shared=False,
                                   size=nelem(c), dtype=dt).float().view_as(mine)
            ref = mine.abs().max().item()
            err = (ours - mine).abs().max().item()
            worst = max(worst, err / ref if ref > 0 else err)
        return {"rel": worst}


def worker(kind, tmp, lib):
    impl = Ours(tmp, lib) if kind == "ours" else Torch(tmp)
    for line in sys.stdin:
        req = json.loads(line)
        op = req.pop("op")
        try:
            rep = getattr(impl, op)(**req)
        except Exception as e:                      # reported to the driver, which stops
            rep = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(rep), flush=True)


# ----------------------------------------------------------------- the driver ------

class Worker:
    """One worker process, asked one JSON line at a time."""

    def __init__(self, kind, tmp, lib, env):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--tmp", tmp]
        self.kind = kind
        self.p = subprocess.Popen(cmd + (["--lib", lib] if lib else []), env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, op, **kw):
        self.p.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.kind} worker exited")
        rep = json.loads(line)
        if "error" in rep:
            raise RuntimeError(f"{self.kind}: {rep['error']}")
        return rep

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def find_lib(args):
    if args.lib:
        return args.lib
    here = os.path.dirname(os.path.abspath(args.bench))
    for cand in (os.path.join(here, "libflashattn.so.0"),               # a kit
                 os.path.join(here, "..", ".libs", "libflashattn.so.0")):  # a build tree
        if os.path.exists(cand):
            return os.path.normpath(cand)
    sys.exit(f"torch_cpu_rounds.py: no libflashattn.so.0 beside {args.bench} or in its "
             "build tree; give --lib")


def bench_check(args, dtype, causal, tmp, env):
    """flashattn-bench on a small problem: the oracle check of our kernels for dtype and
    the ceilings it measures, {threads: peak GFLOP/s}."""
    csvp = os.path.join(tmp, f"bench-{dtype}-{causal}.csv")
    cmd = [args.bench, "--backend", "cpu", "--mode", "sweep", "--sweep-only", "--dtype", dtype,
           "--heads", "2", "--seqlen", "256", "--headdim", "64", "--budget", "0.2",
           "--repeats", "3", "--format", "csv", "--out", os.path.join(tmp, "bench-out"),
           "--csv", csvp] + (["--causal"] if causal else [])
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    rows = [x for x in read_csv(csvp) if x["section"] == "full"] if os.path.exists(csvp) else []
    ok = r.returncode == 0 and rows and all(x["status"] == "PASS" for x in rows)
    peak = {int(x["threads"]): float(x["peak_gflops"]) for x in rows if x["peak_gflops"]}
    kernels = sorted({x["kernel"] for x in rows})
    print(f"flashattn-bench {dtype}{' causal' if causal else ''} (H 2, S 256, d 64; 1 and "
          f"{max(args.thr)} threads): "
          f"oracle check {'PASS' if ok else 'FAILED'}, kernels {', '.join(kernels)}; ceiling "
          + ", ".join(f"{t} thr {p:.1f} GFLOP/s" for t, p in sorted(peak.items())))
    if not ok:
        print(r.stderr[-2000:], file=sys.stderr)
    return ok, peak


def measure(args, ours, torch, c, thr, direction):
    """One cell: warm-up, then the rounds; the row of the table."""
    wo = ours.ask("warm", threads=thr, direction=direction)
    wt = torch.ask("warm", threads=thr, direction=direction, layout=args.torch_layout)
    k = {s: max(1, min(args.max_calls, round(args.min_time / max(w["t"], 1e-9))))
         for s, w in (("ours", wo), ("torch", wt))}
    side = {"ours": ours, "torch": torch}
    f = flops(dict(c, Sq=c["S"], Sk=c["S"]), direction == "bwd") / 1e9
    g = {"ours": [], "torch": []}
    for r in range(args.rounds):
        for s in (("ours", "torch") if r % 2 == 0 else ("torch", "ours")):
            g[s].append(f / side[s].ask("time", threads=thr, direction=direction, k=k[s])["t"])
    rel = torch.ask("agree", direction=direction)["rel"]
    single = [a / b for a, b in zip(g["ours"], g["torch"])]
    mo, mt = statistics.median(g["ours"]), statistics.median(g["torch"])
    name = (f"{c['dtype']} d{c['d']} S{c['S']}" + (" causal" if c["causal"] else "") +
            f" {direction} {thr}T")
    return dict(cell=name, dtype=c["dtype"], d=c["d"], S=c["S"], causal=c["causal"],
                dir=direction, threads=thr, ours=mo, torch=mt, ratio=mo / mt,
                lo=min(single), hi=max(single), layout=wt["layout"], rel=rel,
                differ=rel > AGREE_TOL[c["dtype"]], calls=f"{k['ours']}/{k['torch']}")


HEADER = (f"{'cell':<30} {'ours':>8} {'torch':>8} {'ours/torch':>10}  {'rounds':<11} "
          f"{'ours/peak':>9}  {'torch layout':<12} {'agree':>8}  calls")


def row_str(x, peaks):
    pk = peaks[x["dtype"]].get(x["threads"])
    frac = f"{x['ours'] / pk:.2f}" if pk else "-"
    return (f"{x['cell']:<30} {x['ours']:>8.1f} {x['torch']:>8.1f} {x['ratio']:>9.2f}x  "
            f"{x['lo']:.2f}-{x['hi']:.2f}   {frac:>9}  {x['layout']:<12} {x['rel']:>8.1e}"
            f"{' DIFFER' if x['differ'] else ''}  {x['calls']}")


def print_table(args, rows, peaks, out):
    print("\n" + HEADER, file=out)
    for x in rows:
        print(row_str(x, peaks), file=out)
    causal = {(x["dtype"], x["d"], x["S"], x["dir"], x["threads"]): x for x in rows
              if x["causal"]}
    if causal:
        print("\ncausal / non-causal per useful FLOP (ours; torch):", file=out)
        for x in rows:
            y = causal.get((x["dtype"], x["d"], x["S"], x["dir"], x["threads"]))
            if y and not x["causal"]:
                print(f"  {x['cell']:<28} {y['ours'] / x['ours']:.2f}; "
                      f"{y['torch'] / x['torch']:.2f}", file=out)
    low = [x["cell"] for x in rows if x["ratio"] < args.target]
    print(f"\ncells below {args.target}x torch: {len(low)} of {len(rows)}"
          + (": " + ", ".join(low) if low else ""), file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", help="flashattn-bench (a build tree's or a kit's)")
    ap.add_argument("--lib", help="libflashattn.so.0 (default: beside --bench, or the build "
                    "tree's .libs)")
    ap.add_argument("--threads", default="", help="thread counts, e.g. 1,16 (default: 1 and "
                    "all cores)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--headdim", default="64,128")
    ap.add_argument("--seqlen", help="default 1024,4096 (--quick 256,512)")
    ap.add_argument("--heads", type=int, help="default 16 (--quick 4)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--causal", action="store_true", help="also the causal cells")
    ap.add_argument("--quick", action="store_true", help="small shapes: S 256 and 512, H 4")
    ap.add_argument("--torch-layout", default="best", choices=("best", "bhsd", "bshd"))
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds of calls per side "
                    "per round (at least one call)")
    ap.add_argument("--max-calls", type=int, default=20, help="most calls per side per round")
    ap.add_argument("--target", type=float, default=1.1, help="ours/torch a cell should reach")
    ap.add_argument("--deadline", type=float, default=0, help="seconds after which no new "
                    "(dtype, d, S) is started (0: none); the ones left are listed")
    ap.add_argument("--csv", help="also write the table's rows to this CSV file")
    ap.add_argument("--worker", choices=("ours", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.tmp, args.lib)
        return 0
    if not args.bench or args.rounds < 1:
        ap.error("--bench is required; --rounds >= 1")
    try:
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            raise ImportError("no module named torch")
    except ImportError as e:
        print(f"torch_cpu_rounds.py: PyTorch is not installed ({e})", file=sys.stderr)
        return 3
    args.seqlen = args.seqlen or ("256,512" if args.quick else "1024,4096")
    args.heads = args.heads or (4 if args.quick else 16)
    ncores = os.cpu_count() or 1
    args.thr = sorted({int(t) for t in args.threads.split(",")} if args.threads else {1, ncores})
    lib = find_lib(args)
    env = dict(os.environ, OMP_NUM_THREADS=str(max(args.thr)))
    env.setdefault("OMP_PLACES", "cores")
    env.setdefault("OMP_PROC_BIND", "close")
    dtypes = args.dtype.split(",")
    status = 0
    with tempfile.TemporaryDirectory(prefix="torch-cpu-rounds-") as tmp:
        print(f"# ours: {lib}; torch's CPU scaled_dot_product_attention; B={args.batch} "
              f"H={args.heads}; {args.rounds} rounds alternating ours and torch per cell, "
              f"medians; OMP_NUM_THREADS={env['OMP_NUM_THREADS']} OMP_PLACES="
              f"{env['OMP_PLACES']} OMP_PROC_BIND={env['OMP_PROC_BIND']}, then "
              "fa_context_set_threads / torch.set_num_threads per cell")
        peaks = {}
        for dt in dtypes:
            for causal in ((0, 1) if args.causal else (0,)):
                ok, peak = bench_check(args, dt, causal, tmp, env)
                peaks.setdefault(dt, peak)
                status |= 0 if ok else 1
        torch = Worker("torch", tmp, None, env)
        ours = Worker("ours", tmp, lib, env)
        ver = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, env=env).stdout.strip()
        print(f"# torch {ver}; GFLOP/s of useful FLOPs (4 B H S^2 d, halved causal, backward "
              "2.5x); each side's backward timed alone (torch: autograd.grad with "
              "retain_graph on a graph built outside the timed calls); ours [B, S, H, d], "
              "torch the layout in its column (bhsd contiguous or bshd strided view); "
              "agree: max|ours-torch| / max|torch|; calls: per round, ours/torch",
              flush=True)
        rows, skipped = [], []
        t0 = time.time()
        print(HEADER, file=sys.stderr, flush=True)
        try:
            for S in [int(x) for x in args.seqlen.split(",")]:
                for dt in dtypes:
                    for d in [int(x) for x in args.headdim.split(",")]:
                        for causal in ((0, 1) if args.causal else (0,)):
                            c = dict(dtype=dt, B=args.batch, H=args.heads, S=S, d=d,
                                     causal=causal, Hkv=args.heads)
                            name = f"{dt} d{d} S{S}" + (" causal" if causal else "")
                            if args.deadline and time.time() - t0 > args.deadline:
                                skipped.append(name)
                                continue
                            torch.ask("data", c=c)
                            ours.ask("data", c=c)
                            for thr in args.thr:
                                for direction in ("fwd", "bwd"):
                                    x = measure(args, ours, torch, c, thr, direction)
                                    rows.append(x)
                                    status |= 1 if x["differ"] else 0
                                    print(row_str(x, peaks) + f"  [{time.time() - t0:.0f} s]",
                                          file=sys.stderr, flush=True)
        finally:
            torch.close()
            ours.close()
    print_table(args, rows, peaks, sys.stdout)
    if skipped:
        print(f"not measured (--deadline {args.deadline:g} s passed): " + ", ".join(skipped))
    print(f"total {time.time() - t0:.0f} s of cells")
    if args.csv:
        import csv
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["cell"],
                               lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    return status


if __name__ == "__main__":
    sys.exit(main())
