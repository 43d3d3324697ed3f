"""flashattn.ring_attention over torch.distributed: 2, 3 and 4 processes on this host with
gloo and CPU tensors (and, where GPUs are visible, 2 processes with CUDA tensors: over gloo
on one GPU, over NCCL on two). Each case is checked on the gathered result against
flash_attn_func over the whole sequence; ring_worker.py does the work, one launch per
world size serving all its cases. Plus the options the ring refuses, in this process.

Bounded: the group is created with a 30 s timeout and the launch is killed after
RING_TIMEOUT_S (120 s) in all, so a hang fails the tests instead of stalling them.
"""
import functools
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest
import torch

import flashattn
from ring_worker import CASES

HERE = os.path.dirname(os.path.abspath(__file__))
WORLDS = (2, 3, 4)
RING_TIMEOUT_S = 120


def _launch(world, backend="gloo", device="cpu"):
    """Runs ring_worker.py on `world` processes: {case: "ok" or why not} over all ranks."""
    with tempfile.TemporaryDirectory(prefix="fa-ring-") as tmp:
        return _run_ranks(world, backend, device, tmp)


def _run_ranks(world, backend, device, tmp):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE,
                                           os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "ring_worker.py"),
                               str(world), str(r), os.path.join(tmp, "init"), tmp, backend,
                               device], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
             for r in range(world)]
    deadline, logs = time.monotonic() + RING_TIMEOUT_S, []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            logs.append("timed out after %d s" % RING_TIMEOUT_S)
        logs.append(out.decode("utf-8", "replace")[-2000:])
    results = {}
    for r in range(world):
        path = os.path.join(tmp, "rank%d.json" % r)
        if not os.path.exists(path):
            return "rank %d wrote no results:\n%s" % (r, "\n".join(logs))
        with open(path) as f:
            for name, res in json.load(f).items():
                if res != "ok" or name not in results:
                    results[name] = res if res == "ok" else "rank %d: %s" % (r, res)
    return results


@functools.lru_cache(maxsize=None)
def world_results(world, backend, device):
    return _launch(world, backend, device)


GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
RUNS = [("gloo", "cpu", WORLDS, []),
        # CUDA tensors, every rank on cuda:0, messages staged through host memory
        ("gloo", "cuda", (2,), [pytest.mark.skipif(GPUS < 1, reason="no CUDA device")]),
        # NCCL, one GPU per rank
        ("nccl", "cuda", (2,), [pytest.mark.skipif(
            GPUS < 2 or not torch.distributed.is_nccl_available(),
            reason="NCCL ring needs 2 GPUs and NCCL")])]
PARAMS = [pytest.param(b, d, w, name, marks=marks, id="%s-%s-%d-%s" % (b, d, w, name))
          for b, d, worlds, marks in RUNS for w in worlds
          for name in [c["name"] for c in CASES if w in c["worlds"]] + ["mismatch", "refused"]]


@pytest.mark.parametrize("backend,device,world,name", PARAMS)
def test_ring_matches_single_process(backend, device, world, name):
    res = world_results(world, backend, device)
    assert isinstance(res, dict), res
    assert name in res, "case %s did not run: %s" % (name, res)
    assert res[name] == "ok", res[name]


def test_ring_refuses_what_the_ring_cannot_serve():
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(NotImplementedError, match="dropout"):
        flashattn.ring_attention(q, q, q, dropout_p=0.1)


def test_ring_rejects_bad_arguments():
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match="layout"):
        flashattn.ring_attention(q, q, q, layout="striped")
    with pytest.raises(ValueError, match="4-D"):
        flashattn.ring_attention(q[0], q, q)
    with pytest.raises(ValueError, match="sinks"):
        flashattn.ring_attention(q, q, q, sinks=torch.zeros(3))
    with pytest.raises(ValueError, match="alibi_slopes"):
        flashattn.ring_attention(q, q, q, alibi_slopes=torch.ones(3))
    with pytest.raises(ValueError, match="window_size"):
        flashattn.ring_attention(q, q, q, window_size=(-2, 0))
