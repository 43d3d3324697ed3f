"""Dropout: the keep-mask is Philox4x32-10 keyed by (seed, offset, b, h, i, j), with seed
and offset drawn from torch's default generator, so liboracle (oracle.py) rebuilds it
exactly (its generator has known-answer tests in tests/test_oracle.c)."""
import torch

import flashattn
import oracle as O
from conftest import randn


def _drawn(seed):
    """The (seed, offset) pair flashattn draws after torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    s, o = torch.randint(0, 2 ** 62, (2,), dtype=torch.int64).tolist()
    torch.manual_seed(seed)
    return s, o


def test_dropout_forward_and_grads_match_the_mask(device):
    B, Sq, Sk, H, Hkv, D, p = 2, 19, 26, 4, 2, 16, 0.3
    q = randn(B, Sq, H, D, device=device, grad=True)
    k = randn(B, Sk, Hkv, D, device=device, grad=True)
    v = randn(B, Sk, Hkv, D, device=device, grad=True)
    sinks = randn(H, device=device, grad=True)
    dout = randn(B, Sq, H, D, device=device)
    seed, offset = _drawn(1234)
    out = flashattn.flash_attn_func(q, k, v, dropout_p=p, causal=True, sinks=sinks)
    ours = torch.autograd.grad(out, (q, k, v, sinks), dout)

    o = O.dense(q, k, v, dout=dout, dtype=torch.float32, causal="br", sinks=sinks,
                dropout_p=p, seed=seed, offset=offset, backward=True)
    o.check("out", O.OUT, out)
    for name, t, g in zip(["dq", "dk", "dv", "dsinks"], [O.DQ, O.DK, O.DV, O.DSINKS], ours):
        o.check(name, t, g)


def test_same_seed_same_result_other_seed_differs(device):
    q, k, v = (randn(1, 32, 2, 16, device=device) for _ in range(3))
    torch.manual_seed(7)
    a = flashattn.flash_attn_func(q, k, v, dropout_p=0.2)
    torch.manual_seed(7)
    b = flashattn.flash_attn_func(q, k, v, dropout_p=0.2)
    torch.manual_seed(8)
    c = flashattn.flash_attn_func(q, k, v, dropout_p=0.2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a, flashattn.flash_attn_func(q, k, v))


def test_varlen_dropout_positions_are_per_sequence(device):
    lens_q, lens_k, H, D, p = [5, 9], [7, 4], 2, 16, 0.25
    q = randn(sum(lens_q), H, D, device=device)
    k = randn(sum(lens_k), H, D, device=device)
    v = randn(sum(lens_k), H, D, device=device)
    cu_q = torch.tensor([0, 5, 14], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 7, 11], dtype=torch.int32, device=device)
    seed, offset = _drawn(99)
    out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 7, dropout_p=p)
    O.varlen(q, k, v, cu_q, cu_k, dtype=torch.float32, dropout_p=p, seed=seed,
             offset=offset).check("out", O.OUT, out)
