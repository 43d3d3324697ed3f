"""One context per (backend, device, thread): threads calling at once each get their own
and get the single-threaded answer bit for bit."""
import threading

import torch

import flashattn
from flashattn import _context
from conftest import randn


def test_threads_use_their_own_contexts(device):
    inputs = [tuple(randn(1, 24, 2, 16, device=device) for _ in range(3)) for _ in range(4)]
    want = [flashattn.flash_attn_func(*x, causal=True) for x in inputs]
    got, contexts = [None] * 4, [None] * 4
    barrier = threading.Barrier(4)
    key = (_context.cpu_backend, None) if device == "cpu" else \
        (_context.L.BACKEND_CUDA, torch.device(device).index or 0)

    def work(n):
        barrier.wait()
        for _ in range(5):
            got[n] = flashattn.flash_attn_func(*inputs[n], causal=True)
        contexts[n] = _context.get(*key)
        barrier.wait()   # every thread (and so its contexts) is alive until all have read

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(contexts)) == 4 and _context.get(*key) not in contexts
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_set_num_threads():
    q, k, v = (randn(2, 70, 4, 16) for _ in range(3))
    default = flashattn.flash_attn_func(q, k, v, causal=True)
    flashattn.set_num_threads(1)
    try:
        assert flashattn.get_num_threads() == 1
        assert "threads: 1 (fa_context_set_threads)" in flashattn.describe("cpu")
        # the forward is bitwise reproducible across thread counts
        assert torch.equal(flashattn.flash_attn_func(q, k, v, causal=True), default)
    finally:
        flashattn.set_num_threads(0)
    assert "threads: 1 (fa_context_set_threads)" not in flashattn.describe("cpu")
