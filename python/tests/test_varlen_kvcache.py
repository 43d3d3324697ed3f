"""Packed variable-length batches (forward and gradients) and KV-cache decoding
(contiguous and paged caches, appending new keys) against liboracle (oracle.py), one
sequence per packed sequence or batch entry."""
import pytest
import torch

import flashattn
import oracle as O
from conftest import randn


def _cu(lens, device):
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=device)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_forward_and_grads(device, causal):
    lens_q, lens_k = [5, 0, 17, 9, 3], [7, 3, 12, 0, 11]   # empty queries and empty keys
    H, Hkv, D = 4, 2, 16
    Tq, Tk = sum(lens_q), sum(lens_k)
    q = randn(Tq, H, D, device=device, grad=True)
    k = randn(Tk, Hkv, D, device=device, grad=True)
    v = randn(Tk, Hkv, D, device=device, grad=True)
    sinks = randn(H, device=device, grad=True)
    dout = randn(Tq, H, D, device=device)
    cu_q, cu_k = _cu(lens_q, device), _cu(lens_k, device)
    out, lse, _ = flashattn.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, window_size=(6, -1),
        sinks=sinks, return_attn_probs=True)
    assert out.shape == (Tq, H, D) and lse.shape == (H, Tq)
    ours = torch.autograd.grad(out, (q, k, v, sinks), dout)

    o = O.varlen(q, k, v, cu_q, cu_k, dout=dout, dtype=torch.float32,
                 causal="br" if causal else None, window=(6, -1), sinks=sinks, backward=True)
    for name, t, g in zip(["out", "lse", "dq", "dk", "dv", "dsinks"],
                          [O.OUT, O.LSE, O.DQ, O.DK, O.DV, O.DSINKS], [out, lse] + list(ours)):
        o.check(name, t, g)


def test_varlen_unused_rows_are_zero(device):
    # rows past cu_seqlens[-1] are not attention rows: the output and grads there are 0
    q = randn(10, 2, 16, device=device, grad=True)
    k = randn(12, 2, 16, device=device, grad=True)
    cu = torch.tensor([0, 3, 7], dtype=torch.int32, device=device)
    out = flashattn.flash_attn_varlen_func(q, k, k, cu, cu, 4, 4)
    assert torch.all(out[7:] == 0)
    dq, dk = torch.autograd.grad(out.sum(), (q, k))
    assert torch.all(dq[7:] == 0) and torch.all(dk[7:] == 0)


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("Sq,append", [(1, True), (1, False), (4, True)])
def test_kvcache(device, paged, Sq, append):
    B, H, Hkv, D, page = 3, 4, 2, 16, 7
    seqlens = [5, 0, 20]
    if paged:
        pages_per_seq, num_pages = 4, 14
        k_cache = randn(num_pages, page, Hkv, D, device=device)
        v_cache = randn(num_pages, page, Hkv, D, device=device)
        perm = torch.randperm(num_pages)[:B * pages_per_seq].view(B, pages_per_seq)
        block_table = perm.to(torch.int32).to(device)
    else:
        k_cache = randn(B, 28, Hkv, D, device=device)
        v_cache = randn(B, 28, Hkv, D, device=device)
        block_table = None
    k_before, v_before = k_cache.clone(), v_cache.clone()
    q = randn(B, Sq, H, D, device=device)
    k_new = randn(B, Sq, Hkv, D, device=device) if append else None
    v_new = randn(B, Sq, Hkv, D, device=device) if append else None
    cache_seqlens = torch.tensor(seqlens, dtype=torch.int32, device=device)
    out, lse = flashattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=cache_seqlens,
        block_table=block_table, causal=True, return_softmax_lse=True)

    def rows(cache, b, n):
        if not paged:
            return cache[b, :n]
        flat = cache[block_table[b].long()].reshape(-1, Hkv, D)
        return flat[:n]

    seqs = []
    for b in range(B):
        n = seqlens[b] + (Sq if append else 0)
        kb, vb = rows(k_cache, b, n).cpu(), rows(v_cache, b, n).cpu()
        if append:   # the new keys landed at cache_seqlens[b], the old ones are intact
            assert torch.equal(kb[seqlens[b]:], k_new[b].cpu())
            assert torch.equal(vb[seqlens[b]:], v_new[b].cpu())
            assert torch.equal(kb[:seqlens[b]], rows(k_before, b, seqlens[b]).cpu())
            assert torch.equal(vb[:seqlens[b]], rows(v_before, b, seqlens[b]).cpu())
        else:   # nothing was written
            assert torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before)
        seqs.append(dict(q=q[b], k=kb, v=vb))
    o = O.Oracle(seqs, dtype=torch.float32, causal="br")
    o.check("out", O.OUT, out)
    o.check("lse", O.LSE, O.lse_rows(lse))


def test_kvcache_int_seqlens_and_full_cache(device):
    q = randn(2, 1, 2, 16, device=device)
    kc, vc = randn(2, 9, 2, 16, device=device), randn(2, 9, 2, 16, device=device)
    full = flashattn.flash_attn_with_kvcache(q, kc, vc)
    as_int = flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=9)
    assert torch.equal(full, as_int)
    O.dense(q, kc, vc, dtype=torch.float32).check("out", O.OUT, full)


def test_kvcache_unsupported_arguments(device):
    q = randn(1, 1, 2, 16, device=device)
    kc = randn(1, 4, 2, 16, device=device)
    with pytest.raises(NotImplementedError, match="rotary_cos"):
        flashattn.flash_attn_with_kvcache(q, kc, kc, rotary_cos=kc)
    with pytest.raises(ValueError, match="cache_seqlens"):
        flashattn.flash_attn_with_kvcache(q, kc, kc, k=q, v=q)
