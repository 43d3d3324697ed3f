"""Dropout: the keep-mask is Philox4x32-10 keyed by (seed, offset, b, h, i, j), with seed
and offset drawn from torch's default generator, so the oracle can rebuild it exactly."""
import torch

import flashattn
import refimpl as R
from conftest import randn


def test_philox_known_answers():
    # the published Philox4x32-10 test vectors: the oracle's generator is the real one
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2,
              (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in cases:
        assert tuple(int(w) for w in R.philox(*ctr, *key)) == want


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
    keep = R.keep_mask(seed, offset, p, B, H, Sq, Sk)
    assert 0.55 < keep.float().mean().item() < 0.85   # about 1 - p of them kept

    def ref(compute):
        leaves = [x.detach().cpu().to(compute).requires_grad_() for x in (q, k, v, sinks)]
        o, _ = R.attention(*leaves[:3], sinks=leaves[3], causal="br", keep=keep,
                           dropout_p=p, compute=compute)
        return [o] + list(torch.autograd.grad(o, leaves, dout.cpu().to(compute)))

    oracle, naive = ref(torch.float64), ref(torch.float32)
    for name, g, o, n in zip(["out", "dq", "dk", "dv", "dsinks"], [out] + list(ours),
                             oracle, naive):
        R.check(name, g.detach(), o, n, torch.float32, factor=3.0)


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
    for b in range(2):
        qs = slice(int(cu_q[b]), int(cu_q[b + 1]))
        ks = slice(int(cu_k[b]), int(cu_k[b + 1]))
        keep = R.keep_mask(seed, offset, p, 2, H, lens_q[b], lens_k[b])[b:b + 1]
        args = (q[qs].cpu()[None], k[ks].cpu()[None], v[ks].cpu()[None])
        o64, _ = R.attention(*args, keep=keep, dropout_p=p)
        on, _ = R.attention(*args, keep=keep, dropout_p=p, compute=torch.float32)
        R.check("out[seq %d]" % b, out[qs][None], o64, on, torch.float32)
