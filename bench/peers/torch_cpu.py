#!/usr/bin/env python3
"""torch_cpu.py - the CPU peer: PyTorch's CPU scaled_dot_product_attention on the shapes of a
flashattn-bench CSV, and ours/torch ratios.

Runs torch SDPA on the CPU with the same thread count as flashattn-bench, using the same
FLOP convention (4*B*H*Sq*Sk*d, halved for causal; backward 2.5x), and prints rows in the
column layout of flashattn-bench's results.csv (section "peer") on stdout, so the two files
can be concatenated. With --ours it times every (shape, direction) that passed there and
prints ours / torch for each on stderr (best of our rungs per shape, direction, threads).

  flashattn-bench --backend cpu --mode sweep --sweep-only --heads 16 --seqlen 4096 \\
      --headdim 128 --csv ours.csv
  python3 bench/peers/torch_cpu.py --ours ours.csv --threads 1 > torch-1.csv
  python3 bench/peers/torch_cpu.py --ours ours.csv > torch-all.csv   # our thread count
  python3 bench/peers/torch_cpu.py --ratios-only --ours ours.csv --peer torch-1.csv
  python3 bench/peers/torch_cpu.py                                  # the ladder's shape

Timing: one warm-up, then at least 3 and at most --repeats calls within --budget seconds;
the median is reported. The backward is timed alone: the forward (with autograd) runs once
outside the timed calls, which call torch.autograd.grad(out, (q, k, v), dout,
retain_graph=True) on its graph. torch gets [B, H, S, d] contiguous. For the whole table in
alternating rounds (ours and torch cell by cell), see torch_cpu_rounds.py.
Exit status: 0, 2 bad usage, 3 torch is not installed.
"""
import argparse
import csv
import statistics
import sys
import time

COLUMNS = ("section,impl,kernel,dir,dtype,B,H,Hkv,Sq,Sk,d,causal,paged,threads,block_q,"
           "block_kv,status,check_err,check_tol,time_med_s,time_min_s,time_max_s,runs,"
           "gflops,pct_peak,peak_gflops,extra_model_bytes,rss_delta_bytes,io_model_bytes,"
           "io_measured_bytes,tile_bytes,note").split(",")


def flops(s, backward):
    pairs = s["Sq"] * s["Sk"]
    if s["causal"]:
        if s["Sq"] == s["Sk"]:
            pairs /= 2
        else:
            off = s["Sk"] - s["Sq"]
            pairs = sum(min(s["Sk"], max(0, i + off + 1)) for i in range(s["Sq"]))
    f = 4.0 * s["B"] * s["H"] * pairs * s["d"]
    return 2.5 * f if backward else f


def key(s, direction, threads):
    return (s["dtype"], s["B"], s["H"], s["Hkv"], s["Sq"], s["Sk"], s["d"], s["causal"],
            direction, int(threads))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def shape_of(row):
    return {k: int(row[k]) for k in ("B", "H", "Hkv", "Sq", "Sk", "d", "causal")} | {
        "dtype": row["dtype"]}


def time_call(fn, sync, repeats, budget):
    fn()                                   # warm-up (and first allocation)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t0
    n = max(3, min(repeats, int(budget / max(first, 1e-6))))
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts), max(ts), n


def time_shape(torch, s, direction, args):
    """(median, min, max, n) seconds of one call of torch SDPA on shape s."""
    F = torch.nn.functional
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    g = torch.Generator(device="cpu").manual_seed(1)
    bw = direction == "bwd"

    def mk(S, heads):
        x = torch.rand(s["B"], heads, S, s["d"], generator=g) * 2 - 1
        return x.to(dt[s["dtype"]]).requires_grad_(bw)

    q, k, v = mk(s["Sq"], s["H"]), mk(s["Sk"], s["Hkv"]), mk(s["Sk"], s["Hkv"])
    # torch's is_causal is top-left; flashattn-bench uses bottom-right, which is the same
    # when Sq == Sk; other causal shapes are not compared.
    if s["causal"] and s["Sq"] != s["Sk"]:
        raise RuntimeError("causal with Sq != Sk: torch aligns top-left, ours bottom-right")
    kw = dict(is_causal=bool(s["causal"]))
    if s["H"] != s["Hkv"]:
        kw["enable_gqa"] = True
    sync = lambda: None
    fwd = lambda: F.scaled_dot_product_attention(q, k, v, **kw)
    with torch.no_grad():
        tf = time_call(fwd, sync, args.repeats, args.budget)
    if not bw:
        return tf
    out = fwd()                          # the graph, built outside the timed calls
    dout = torch.rand_like(out)
    return time_call(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                     sync, args.repeats, args.budget)   # the backward alone


def run_torch(torch, shapes, args):
    rows = []
    for (s, direction) in shapes:
        row = dict.fromkeys(COLUMNS, "")
        row.update(section="peer", impl="torch sdpa cpu", kernel="torch " + torch.__version__,
                   dir=direction, dtype=s["dtype"], B=s["B"], H=s["H"], Hkv=s["Hkv"],
                   Sq=s["Sq"], Sk=s["Sk"], d=s["d"], causal=s["causal"], paged=0,
                   threads=args.threads, block_q=0, block_kv=0)
        try:
            med, lo, hi, n = time_shape(torch, s, direction, args)
            gf = flops(s, direction == "bwd") / med / 1e9
            row.update(status="PASS", time_med_s=f"{med:.6g}", time_min_s=f"{lo:.6g}",
                       time_max_s=f"{hi:.6g}", runs=n, gflops=f"{gf:.6g}",
                       note="backward alone: autograd.grad(retain_graph=True) on one graph"
                       if direction == "bwd" else "")
        except Exception as e:               # one shape torch lacks must not stop the rest
            row.update(status="n/a", note=f"{type(e).__name__}: {e}".replace("\n", " ")[:190])
        rows.append(row)
        desc = (f"{s['dtype']} B={s['B']} H={s['H']}:{s['Hkv']} Sq={s['Sq']} Sk={s['Sk']} "
                f"d={s['d']}" + (" causal" if s["causal"] else ""))
        print(f"[peer] torch sdpa cpu {direction} {desc}: "
              f"{row['gflops'] + ' GFLOP/s' if row['gflops'] else row['note']}", file=sys.stderr)
    return rows


def print_ratios(ours, peer, out):
    mine = {}
    for r in ours:
        if (r.get("status") == "PASS" and r.get("section") not in ("peer", "gpu") and
                r.get("gflops") and not r.get("impl", "").startswith("cuda")):
            k = key(shape_of(r), r["dir"], r["threads"] or 0)
            if float(r["gflops"]) > mine.get(k, (0, ""))[0]:
                mine[k] = (float(r["gflops"]), r["impl"])
    print("\nours / torch (same shape, direction and threads; best of our rungs):", file=out)
    print(f"{'shape':<44} {'dir':<4} {'thr':>3} {'ours':>10} {'torch':>10} {'ratio':>7}  peer",
          file=out)
    for r in peer:
        if r.get("status") != "PASS":
            continue
        s = shape_of(r)
        k = key(s, r["dir"], r["threads"] or 0)
        if k not in mine:
            continue
        g, impl = mine[k]
        t = float(r["gflops"])
        desc = f"{s['dtype']} B={s['B']} H={s['H']}:{s['Hkv']} Sq={s['Sq']} Sk={s['Sk']} d={s['d']}" + \
               (" causal" if s["causal"] else "")
        print(f"{desc:<44} {r['dir']:<4} {r['threads'] or '-':>3} {g:>10.2f} {t:>10.2f} "
              f"{g / t:>6.2f}x  {impl} vs {r['impl']}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", help="flashattn-bench results.csv: run torch on its shapes "
                    "and print ours/torch ratios")
    ap.add_argument("--peer", help="with --ratios-only: a CSV this script wrote earlier")
    ap.add_argument("--ratios-only", action="store_true", help="do not run torch; compare "
                    "--ours with --peer")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: "
                    "the thread count in --ours, else all cores)")
    ap.add_argument("--dtype", default="f32", choices=("f32", "f16", "bf16"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", default="8", help="H or H:HKV")
    ap.add_argument("--seqlen", default="1024", help="S or SQ:SK")
    ap.add_argument("--headdim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backward", action="store_true", help="also time the backward")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per measurement")
    args = ap.parse_args()

    ours = read_csv(args.ours) if args.ours else []
    if args.ratios_only:
        if not (args.ours and args.peer):
            ap.error("--ratios-only needs --ours and --peer")
        print_ratios(ours, read_csv(args.peer), sys.stdout)
        return 0
    try:
        import torch
    except ImportError as e:
        print(f"torch_cpu.py: PyTorch is not installed ({e}); install it (pip install torch) "
              "to measure the peer. flashattn-bench itself does not need it.", file=sys.stderr)
        return 3

    shapes = []
    if ours:
        seen = set()
        for r in ours:
            if (r.get("status") != "PASS" or r.get("section") in ("peer", "gpu") or
                    r.get("paged") == "1" or r.get("impl", "").startswith("cuda")):
                continue
            s = shape_of(r)
            k = key(s, r["dir"], 0)
            if k not in seen:
                seen.add(k)
                shapes.append((s, r["dir"]))
        if not args.threads:
            thr = [int(r["threads"]) for r in ours if r.get("threads")]
            args.threads = max(thr) if thr else 0
    else:
        h = [int(x) for x in args.heads.split(":")]
        sl = [int(x) for x in args.seqlen.split(":")]
        s = dict(dtype=args.dtype, B=args.batch, H=h[0], Hkv=h[-1], Sq=sl[0], Sk=sl[-1],
                 d=args.headdim, causal=int(args.causal))
        shapes = [(s, "fwd")] + ([(s, "bwd")] if args.backward else [])
    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()

    rows = run_torch(torch, shapes, args)
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    if ours:
        print_ratios(ours, rows, sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
