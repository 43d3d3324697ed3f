"""Plain-math attention in torch: the float64 oracle, the same-precision naive model that
sets the tolerance, the Philox dropout keep-mask, and the comparison rule.

Layout [B, S, H, D] as flash-attn's. The rule (as the C tests use it): with `oracle` in
float64 and `naive` computed from the same rounded inputs at the storage precision,
max|ours - oracle| <= factor * max|naive - oracle| + max|oracle| * eps(dtype), with factor
2 for outputs and lse, 3 for gradients.
"""
import math

import numpy as np
import torch

EPS = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def allowed(Sq, Sk, causal=None, window=(-1, -1), device="cpu"):
    """[Sq, Sk] bool: which keys each query sees. causal: None, 'br' (bottom-right) or 'tl'
    (top-left); window (left, right) with -1 unbounded, aligned like causal."""
    off = 0 if causal == "tl" else Sk - Sq
    i = torch.arange(Sq, device=device)[:, None] + off
    j = torch.arange(Sk, device=device)[None, :]
    left, right = window
    if causal:
        right = 0
    ok = torch.ones(Sq, Sk, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def attention(q, k, v, scale=None, causal=None, window=(-1, -1), softcap=0.0, alibi=None,
              sinks=None, bias=None, keep=None, dropout_p=0.0, compute=torch.float64,
              store=None):
    """(out [B, Sq, H, Dv], lse [B, H, Sq]) computed in `compute`; with `store` (a half
    dtype) the probabilities and the output are rounded to it the way a plain
    implementation in that dtype would. Differentiable in q, k, v, sinks.
    bias broadcasts to [B, H, Sq, Sk]; keep is a [B, H, Sq, Sk] bool keep-mask."""
    B, Sq, H, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    k = k.repeat_interleave(H // Hkv, dim=2)
    v = v.repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * (scale if scale else 1.0 / math.sqrt(D))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    off = 0 if causal == "tl" else Sk - Sq
    if alibi is not None:
        dist = (torch.arange(Sq)[:, None] + off - torch.arange(Sk)[None, :]).abs()
        s = s - alibi.to(compute)[None, :, None, None] * dist.to(compute).to(s.device)
    if bias is not None:
        s = s + bias.to(compute)
    ok = allowed(Sq, Sk, causal, window, s.device)
    s = s.masked_fill(~ok, -math.inf)
    if sinks is not None:
        sk = sinks.to(compute)[None, :, None, None].expand(B, H, Sq, 1)
        lse = torch.logsumexp(torch.cat([s, sk], dim=-1), dim=-1)
    else:
        lse = torch.logsumexp(s, dim=-1)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - safe[..., None])
    if keep is not None:
        p = p * keep.to(p.device) / (1.0 - float(np.float32(dropout_p)))
    if store is not None:
        p = p.to(store).to(compute)
    out = torch.einsum("bhqk,bkhd->bqhd", p, v)
    if store is not None:
        out = out.to(store).to(compute)
    return out, lse


def check(name, ours, oracle, naive, dtype, factor=2.0):
    """Assert the tolerance rule; the message names the quantity and the margins."""
    ours, oracle, naive = ours.double().cpu(), oracle.double().cpu(), naive.double().cpu()
    assert ours.shape == oracle.shape, "%s: shape %s, expected %s" % (
        name, tuple(ours.shape), tuple(oracle.shape))
    fin = torch.isfinite(oracle)
    assert torch.equal(fin, torch.isfinite(ours)), "%s: infinities differ" % name
    assert torch.equal(oracle[~fin], ours[~fin]), "%s: infinite values differ" % name
    err = (ours - oracle)[fin].abs().max().item() if fin.any() else 0.0
    nerr = (naive - oracle)[fin].abs().max().item() if fin.any() else 0.0
    mag = oracle[fin].abs().max().item() if fin.any() else 0.0
    bound = factor * nerr + mag * EPS[dtype]
    assert err <= bound, "%s: max error %.3g > bound %.3g (naive %.3g, |oracle| %.3g)" % (
        name, err, bound, nerr, mag)


# ---- Philox4x32-10 and the dropout keep-mask (the definition in the C library's docs) ---

_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_U32 = np.uint64(0xFFFFFFFF)


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on numpy uint64 arrays holding 32-bit words (broadcast together)."""
    c = [np.asarray(x, dtype=np.uint64) & _U32 for x in (c0, c1, c2, c3)]
    k0, k1 = np.asarray(k0, dtype=np.uint64), np.asarray(k1, dtype=np.uint64)
    for _ in range(10):
        p0 = np.uint64(_M0) * c[0]
        p1 = np.uint64(_M1) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & _U32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _U32
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = (k0 + np.uint64(_W0)) & _U32
        k1 = (k1 + np.uint64(_W1)) & _U32
    return c


def keep_mask(seed, offset, p, B, H, Sq, Sk, row0=None):
    """[B, H, Sq, Sk] bool keep-mask for dropout probability p; row0[b] shifts the query
    positions of batch b (the KV-cache position of its first query)."""
    key = philox(offset & 0xFFFFFFFF, offset >> 32, 0x64726F70, 0,
                 seed & 0xFFFFFFFF, seed >> 32)
    k0, k1 = key[0], key[1]
    thr = np.uint64(int(float(np.float32(p)) * 4294967296.0))
    b = np.arange(B)[:, None, None, None]
    h = np.arange(H)[None, :, None, None]
    i = np.arange(Sq)[None, None, :, None] + (0 if row0 is None else
                                               np.asarray(row0)[:, None, None, None])
    j = np.arange(Sk)[None, None, None, :]
    words = philox(j >> 2, i, h, b, k0, k1)
    w = np.select([(j & 3) == n for n in range(4)], words)
    return torch.from_numpy(w >= thr)
