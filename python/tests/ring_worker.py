"""One rank of test_ring.py's process groups: runs every case of CASES that has this world
size through flashattn.ring_attention and checks the gathered result.

    ring_worker.py WORLD RANK INIT_FILE RESULT_DIR [BACKEND [DEVICE]]

BACKEND gloo (the default) or nccl; DEVICE cpu (the default) or cuda: under gloo every
rank's tensors are on cuda:0 (the ring stages its messages through host memory), under
nccl rank r's are on cuda:r.

Every rank draws the same global inputs (a seed per case), takes its shard, runs the ring
forward and backward, and all_gather_object's its shard of out, dq, dk, dv to rank 0, which
puts them back in global order and checks them (and dsinks), and flash_attn_func's over the
whole sequence, against liboracle with its rule (oracle.py). Each rank
writes RESULT_DIR/rank<R>.json: {case name: "ok" or the failure}.
"""
import datetime
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import flashattn  # noqa: E402
import oracle as O  # noqa: E402


def case(name, worlds, qlens, kvlens=None, layout="contiguous", causal=False, H=4, Hkv=2,
         D=16, Dv=None, sinks=False, dtype=torch.float32, softcap=0.0, B=2, scale=None,
         deterministic=False, window=(-1, -1), alibi=False):
    """qlens[w] / kvlens[w]: the local shard lengths of each rank at world size w."""
    return dict(name=name, worlds=worlds, qlens=qlens, kvlens=kvlens or qlens, layout=layout,
                causal=causal, H=H, Hkv=Hkv, D=D, Dv=Dv or D, sinks=sinks, dtype=dtype,
                softcap=softcap, B=B, scale=scale, deterministic=deterministic,
                window=window, alibi=alibi)


EVEN = {2: [12, 12], 3: [8, 8, 8], 4: [6, 6, 6, 6]}
UNEVEN = {2: [7, 16], 3: [11, 3, 9], 4: [5, 9, 2, 7]}
EMPTY = {2: [0, 13], 3: [9, 0, 6], 4: [6, 5, 0, 8]}
CASES = [
    case("contiguous", (2, 3, 4), EVEN),
    case("contiguous-causal", (2, 3, 4), EVEN, causal=True),
    case("zigzag-causal", (2, 3, 4), EVEN, layout="zigzag", causal=True),
    case("contiguous-causal-uneven-sinks", (2, 3, 4), UNEVEN, causal=True, sinks=True),
    case("zigzag-causal-uneven-sinks", (2, 3, 4), UNEVEN, layout="zigzag", causal=True,
         sinks=True),
    case("contiguous-causal-empty-rank", (2, 3, 4), EMPTY, causal=True, sinks=True),
    case("zigzag-causal-empty-rank", (2, 3, 4), EMPTY, layout="zigzag", causal=True),
    case("zigzag-noncausal-uneven", (3,), UNEVEN, layout="zigzag"),
    case("causal-more-keys-mqa", (2, 4), EVEN, kvlens={2: [15, 9], 4: [9, 3, 8, 10]},
         layout="zigzag", causal=True, H=4, Hkv=1),
    case("causal-fewer-keys-scale", (3,), UNEVEN, kvlens={3: [4, 6, 2]}, causal=True,
         sinks=True, scale=0.3),
    case("deterministic", (4,), EMPTY, layout="zigzag", causal=True, sinks=True,
         deterministic=True),
    case("bf16-softcap-dv", (2,), UNEVEN, layout="zigzag", causal=True, dtype=torch.bfloat16,
         softcap=5.0, D=32, Dv=16),
    case("fp16-mha", (4,), UNEVEN, causal=True, dtype=torch.float16, H=2, Hkv=2),
    case("causal-window", (2, 3, 4), UNEVEN, causal=True, window=(5, 0)),
    case("zigzag-window-sym", (2, 4), EMPTY, layout="zigzag", window=(3, 4), sinks=True),
    case("window-right-more-keys", (3,), UNEVEN, kvlens={3: [6, 9, 4]}, window=(-1, 2)),
    case("causal-alibi-zigzag", (2, 3, 4), UNEVEN, layout="zigzag", causal=True, alibi=True),
    case("alibi-noncausal-empty", (2, 4), EMPTY, alibi=True, sinks=True),
    case("alibi-window-bf16", (3,), UNEVEN, kvlens={3: [4, 12, 7]}, causal=True,
         window=(6, 0), alibi=True, dtype=torch.bfloat16, D=32),
    case("alibi-window-sym-deterministic", (4,), UNEVEN, layout="zigzag", window=(4, 7),
         alibi=True, deterministic=True),
]


def positions(lens, layout):
    """Global token indices of each rank's shard, built chunk by chunk in global order."""
    Rn = len(lens)
    if layout == "contiguous":
        starts = [sum(lens[:r]) for r in range(Rn)]
        return [list(range(s, s + n)) for s, n in zip(starts, lens)]
    chunks = [(r, 0, (lens[r] + 1) // 2) for r in range(Rn)] + \
        [(r, 1, lens[r] // 2) for r in reversed(range(Rn))]
    pos, at = [[[], []] for _ in range(Rn)], 0
    for r, part, n in chunks:
        pos[r][part] = list(range(at, at + n))
        at += n
    return [p[0] + p[1] for p in pos]


def run_case(c, world, rank, device):
    torch.manual_seed(1000 + sum(map(ord, c["name"])))
    qlens, kvlens, dt = c["qlens"][world], c["kvlens"][world], c["dtype"]
    B, H, Hkv, D, Dv = c["B"], c["H"], c["Hkv"], c["D"], c["Dv"]
    Sq, Sk = sum(qlens), sum(kvlens)
    q = torch.randn(B, Sq, H, D, dtype=torch.float64).to(dt)
    k = torch.randn(B, Sk, Hkv, D, dtype=torch.float64).to(dt)
    v = torch.randn(B, Sk, Hkv, Dv, dtype=torch.float64).to(dt)
    dout = torch.randn(B, Sq, H, Dv, dtype=torch.float64).to(dt)
    sk = torch.randn(H).float() if c["sinks"] else None
    slopes = (0.2 + 0.4 * torch.rand(H)).float() if c["alibi"] else None
    pq, pk = positions(qlens, c["layout"])[rank], positions(kvlens, c["layout"])[rank]
    ql, kl, vl = (x[:, p].clone().to(device).requires_grad_() for x, p in
                  ((q, pq), (k, pk), (v, pk)))
    sl = None if sk is None else sk.clone().to(device).requires_grad_()
    kw = dict(causal=c["causal"], softcap=c["softcap"], softmax_scale=c["scale"],
              window_size=c["window"],
              alibi_slopes=None if slopes is None else slopes.to(device))
    out, lse = flashattn.ring_attention(ql, kl, vl, layout=c["layout"], sinks=sl,
                                        deterministic=c["deterministic"], return_lse=True,
                                        **kw)
    leaves = [ql, kl, vl] + ([sl] if sl is not None else [])
    grads = torch.autograd.grad(out, leaves, dout[:, pq].to(device))
    if c["deterministic"]:   # the same gradients, bit for bit, on a second run
        again = torch.autograd.grad(flashattn.ring_attention(
            ql, kl, vl, layout=c["layout"], sinks=sl, deterministic=True, **kw), leaves,
            dout[:, pq].to(device))
        assert all(torch.equal(a, b) for a, b in zip(grads, again)), "not deterministic"
    mine = dict(pq=pq, pk=pk, out=out.detach().cpu(), lse=lse.cpu(), dq=grads[0].cpu(),
                dk=grads[1].cpu(), dv=grads[2].cpu(),
                ds=grads[3].cpu() if sl is not None else None)
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank != 0:
        return
    got = {"out": torch.zeros(B, Sq, H, Dv, dtype=dt), "lse": torch.zeros(B, H, Sq),
           "dq": torch.zeros_like(q),
           "dk": torch.zeros_like(k), "dv": torch.zeros_like(v)}
    for m in every:
        for name, p in (("out", m["pq"]), ("dq", m["pq"]), ("dk", m["pk"]), ("dv", m["pk"])):
            got[name][:, p] = m[name]
        got["lse"][:, :, m["pq"]] = m["lse"]
        assert m["ds"] is None or torch.equal(m["ds"], every[0]["ds"]), "dsinks differ"
    inputs = [x.clone().requires_grad_() for x in (q, k, v)] + \
        ([sk.clone().requires_grad_()] if sk is not None else [])
    kw["alibi_slopes"] = slopes
    single, slse, _ = flashattn.flash_attn_func(*inputs[:3], return_attn_probs=True,
                                                sinks=inputs[3] if sk is not None else None,
                                                **kw)
    sgrads = torch.autograd.grad(single, inputs, dout)

    o = O.dense(q, k, v, dout=dout, dtype=dt, causal="br" if c["causal"] else None,
                softcap=c["softcap"], scale=c["scale"], sinks=sk, window=c["window"],
                alibi=slopes, backward=True)
    ours = [got["out"], got["dq"], got["dk"], got["dv"]] + \
        ([every[0]["ds"]] if sk is not None else [])
    kinds = [O.OUT, O.DQ, O.DK, O.DV, O.DSINKS]
    for i, name in enumerate(["out", "dq", "dk", "dv", "dsinks"][:len(ours)]):
        o.check(name, kinds[i], ours[i])
        o.check(name + " (flash_attn_func)", kinds[i], ([single] + list(sgrads))[i])
    o.check("lse", O.LSE, O.lse_rows(got["lse"]))
    o.check("lse (flash_attn_func)", O.LSE, O.lse_rows(slse))


def run_mismatch(world, rank, device):
    """Settings that differ between ranks: ValueError on every rank, nothing hangs."""
    q = torch.randn(1, 4, 2, 8, device=device)
    last = rank == world - 1
    differ = [("causal", dict(causal=last)),
              ("window_size[0]", dict(window_size=(3 if last else 2, 0))),
              ("alibi_slopes", dict(alibi_slopes=None if last else torch.ones(2)))]
    for what, kw in differ:
        try:
            flashattn.ring_attention(q, q, q, **kw)
        except ValueError as e:
            assert what in str(e), str(e)
            continue
        raise AssertionError("no ValueError for a %s that differs between ranks" % what)


def run_refused(world, rank, device):
    """A call the library refuses (3 heads over 2 KV heads; a rank with an empty shard
    runs no block call of its own): the library's error on every rank, nothing hangs."""
    q = torch.randn(1, 0 if rank == 0 else 5, 3, 8, device=device)
    k = torch.randn(1, 0 if rank == 0 else 5, 2, 8, device=device)
    try:
        flashattn.ring_attention(q, k, k, causal=True)
    except flashattn.InvalidArgumentError as e:
        assert "does not divide" in str(e), str(e)
        return
    raise AssertionError("no InvalidArgumentError for 3 heads over 2 KV heads")


def main():
    world, rank, init, outdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    backend = sys.argv[5] if len(sys.argv) > 5 else "gloo"
    device = torch.device(sys.argv[6] if len(sys.argv) > 6 else "cpu")
    if backend == "nccl":   # one GPU per rank, the current device
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    flashattn.set_num_threads(1)
    dist.init_process_group(backend, init_method="file://" + init, world_size=world,
                            rank=rank, timeout=datetime.timedelta(seconds=30))
    results = {}
    todo = [(c["name"], lambda c=c: run_case(c, world, rank, device))
            for c in CASES if world in c["worlds"]]
    todo.append(("mismatch", lambda: run_mismatch(world, rank, device)))
    todo.append(("refused", lambda: run_refused(world, rank, device)))
    for name, fn in todo:
        try:
            fn()
            results[name] = "ok"
        except Exception:   # reported per case; the other cases still run
            results[name] = traceback.format_exc(limit=4)
        dist.barrier()
    with open(os.path.join(outdir, "rank%d.json" % rank), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
