"""Gradients (dq, dk, dv, dsinks) through flash_attn_func against liboracle's backward
(oracle.py), and the deterministic backward."""
import pytest
import torch

import flashattn
import oracle as O
from conftest import randn


def grads_case(device, dtype=torch.float32, B=2, Sq=23, Sk=31, H=4, Hkv=2, D=16, Dv=None,
               causal=False, window=(-1, -1), softcap=0.0, alibi=False, sinks=False,
               deterministic=False):
    Dv = Dv or D
    q = randn(B, Sq, H, D, dtype=dtype, device=device, grad=True)
    k = randn(B, Sk, Hkv, D, dtype=dtype, device=device, grad=True)
    v = randn(B, Sk, Hkv, Dv, dtype=dtype, device=device, grad=True)
    sl = torch.rand(H, dtype=torch.float64).float() * 0.5 if alibi else None
    sk = randn(H, device=device, grad=True) if sinks else None
    dout = randn(B, Sq, H, Dv, dtype=dtype, device=device)
    out = flashattn.flash_attn_func(q, k, v, causal=causal, window_size=window,
                                    softcap=softcap, deterministic=deterministic,
                                    alibi_slopes=None if sl is None else sl.to(device),
                                    sinks=sk)
    inputs = [q, k, v] + ([sk] if sinks else [])
    ours = torch.autograd.grad(out, inputs, dout)
    o = O.dense(q, k, v, dout=dout, dtype=dtype, causal="br" if causal else None,
                window=window, softcap=softcap, alibi=sl, sinks=sk, backward=True)
    for name, t, g in zip(["dq", "dk", "dv", "dsinks"], [O.DQ, O.DK, O.DV, O.DSINKS], ours):
        assert g.dtype == (dtype if name != "dsinks" else torch.float32)
        o.check(name, t, g)
    return ours


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_grads_dtypes(device, dtype):
    grads_case(device, dtype)


@pytest.mark.parametrize("causal,Sq,Sk", [(True, 23, 31), (True, 31, 23), (False, 1, 17)])
def test_grads_causal(device, causal, Sq, Sk):
    grads_case(device, causal=causal, Sq=Sq, Sk=Sk)


def test_grads_window_softcap_alibi(device):
    grads_case(device, window=(7, 2), softcap=4.0, alibi=True)


@pytest.mark.parametrize("H,Hkv", [(4, 4), (6, 1)])
def test_grads_sinks(device, H, Hkv):
    grads_case(device, sinks=True, causal=True, H=H, Hkv=Hkv)


def test_grads_head_dims_differ(device):
    grads_case(device, D=32, Dv=16)


def test_deterministic_backward_repeats_bitwise(device):
    grads_case(device, deterministic=True, sinks=True, Sq=40, Sk=40)
    q = randn(1, 40, 4, 16, device=device, grad=True)
    k = randn(1, 40, 2, 16, device=device, grad=True)
    v = randn(1, 40, 2, 16, device=device, grad=True)
    out = flashattn.flash_attn_func(q, k, v, causal=True, deterministic=True)
    dout = randn(1, 40, 4, 16, device=device)
    g1 = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    g2 = torch.autograd.grad(out, (q, k, v), dout)
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)


def test_lse_is_not_differentiable(device):
    q, k, v = (randn(1, 8, 2, 16, device=device, grad=True) for _ in range(3))
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert out.requires_grad and not lse.requires_grad


def test_no_grad_short_path_matches(device):
    q, k, v = (randn(1, 8, 2, 16, device=device, grad=True) for _ in range(3))
    with_graph = flashattn.flash_attn_func(q, k, v, causal=True)
    with torch.no_grad():
        without = flashattn.flash_attn_func(q, k, v, causal=True)
    assert with_graph.grad_fn is not None and without.grad_fn is None
    assert torch.equal(with_graph.detach(), without)
