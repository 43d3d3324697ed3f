"""torch.library custom operators (torch >= 2.4): opcheck on their fake and autograd
registrations, and torch.compile(fullgraph=True) tracing the entry points without graph
breaks. Older torch has the autograd.Function path only: these tests say so as skips."""
import pytest
import torch

import flashattn
from flashattn import _torch_ops
from conftest import randn

needs_ops = pytest.mark.skipif(
    not _torch_ops.HAS_CUSTOM_OP,
    reason="torch %s has no torch.library.custom_op (the autograd.Function path is used)"
    % torch.__version__)


def _compile(fn):
    # aot_eager runs the traced graph eagerly: it checks tracing and the fake kernels
    # without needing a C++ or Triton toolchain
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


@needs_ops
def test_opcheck(device):
    q = randn(1, 9, 4, 16, device=device, grad=True)
    k = randn(1, 11, 2, 16, device=device, grad=True)
    v = randn(1, 11, 2, 16, device=device, grad=True)
    sinks = randn(4, device=device, grad=True)
    args = (q, k, v, sinks, None, None, None, 0.0, 1, -1, -1, 0.0, 0.0, True)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, args)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32, device=device)
    cuk = torch.tensor([0, 5, 11], dtype=torch.int32, device=device)
    vargs = (q[0], k[0], v[0], cu, cuk, 5, 6, sinks, None, None, 0.0, 1, -1, -1, 0.0, 0.0,
             True)
    torch.library.opcheck(torch.ops.flashattn.varlen_fwd.default, vargs)


@needs_ops
def test_compiled_forward_and_backward_match_eager(device):
    q = randn(2, 17, 4, 16, device=device, grad=True)
    k = randn(2, 23, 2, 16, device=device, grad=True)
    v = randn(2, 23, 2, 16, device=device, grad=True)
    sinks = randn(4, device=device, grad=True)

    def step(q, k, v, sinks):
        out = flashattn.flash_attn_func(q, k, v, dropout_p=0.1, causal=True, sinks=sinks,
                                        deterministic=True)
        return (out * out).sum()

    torch.manual_seed(3)
    eager_loss = step(q, k, v, sinks)
    eager = torch.autograd.grad(eager_loss, (q, k, v, sinks))
    torch.manual_seed(3)
    comp_loss = _compile(step)(q, k, v, sinks)
    comp = torch.autograd.grad(comp_loss, (q, k, v, sinks))
    assert torch.equal(eager_loss, comp_loss)
    for a, b in zip(eager, comp):
        assert torch.equal(a, b)


@needs_ops
def test_compiled_sdpa_varlen_kvcache(device):
    q = randn(2, 3, 9, 16, device=device, grad=True)
    mask = randn(9, 9, device=device)
    f = _compile(lambda q: flashattn.sdpa(q, q, q, attn_mask=mask, is_causal=True))
    assert torch.equal(f(q), flashattn.sdpa(q, q, q, attn_mask=mask, is_causal=True))
    f(q).sum().backward()
    assert q.grad is not None

    qv = randn(12, 2, 16, device=device, grad=True)
    cu = torch.tensor([0, 5, 12], dtype=torch.int32, device=device)
    g = _compile(lambda x: flashattn.flash_attn_varlen_func(x, x, x, cu, cu, 7, 7,
                                                            causal=True))
    assert torch.equal(g(qv), flashattn.flash_attn_varlen_func(qv, qv, qv, cu, cu, 7, 7,
                                                               causal=True))

    kc, vc = randn(2, 8, 2, 16, device=device), randn(2, 8, 2, 16, device=device)
    kc2, vc2 = kc.clone(), vc.clone()
    qd, kn = randn(2, 1, 2, 16, device=device), randn(2, 1, 2, 16, device=device)
    seqlens = torch.tensor([2, 5], dtype=torch.int32, device=device)
    h = _compile(lambda q, kc, vc, kn: flashattn.flash_attn_with_kvcache(
        q, kc, vc, kn, kn, cache_seqlens=seqlens))
    got = h(qd, kc, vc, kn)
    want = flashattn.flash_attn_with_kvcache(qd, kc2, vc2, kn, kn, cache_seqlens=seqlens)
    assert torch.equal(got, want)
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)   # the compiled call appended too
