"""numpy arrays: the forward entry points take them and return numpy results."""
import numpy as np
import pytest
import torch

import flashattn
import refimpl as R


def _np(*shape, dtype=np.float32):
    return np.random.standard_normal(shape).astype(dtype)


def _check(name, out, ref64, ref32, dtype=torch.float32):
    assert isinstance(out, np.ndarray)
    R.check(name, torch.from_numpy(np.ascontiguousarray(out)), ref64, ref32, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_forward(dtype):
    np.random.seed(3)
    q, k, v = _np(2, 13, 4, 16, dtype=dtype), _np(2, 21, 2, 16, dtype=dtype), \
        _np(2, 21, 2, 16, dtype=dtype)
    sinks = [0.5, -1.0, 2.0, 0.0]
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, sinks=sinks,
                                            return_attn_probs=True)
    assert out.dtype == dtype and lse.dtype == np.float32
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    ts = torch.tensor(sinks)
    tdt = torch.float32 if dtype == np.float32 else torch.float16
    store = None if dtype == np.float32 else tdt
    o64, l64 = R.attention(tq, tk, tv, causal="br", sinks=ts)
    on, ln = R.attention(tq, tk, tv, causal="br", sinks=ts, compute=torch.float32,
                         store=store)
    _check("out", out, o64, on, tdt)
    _check("lse", lse, l64, ln, tdt)


def test_numpy_strided_views():
    np.random.seed(4)
    bhsd = _np(2, 3, 11, 16)
    q = bhsd.swapaxes(1, 2)            # a [B, S, H, D] view: read in place
    k = _np(2, 11, 3, 16)[:, ::-1]     # negative strides: copied first
    v = _np(2, 11, 3, 32)[..., ::2]    # a strided last dimension: copied first
    out = flashattn.flash_attn_func(q, k, v)
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x)) for x in (q, k, v))
    _check("out", out, R.attention(tq, tk, tv)[0],
           R.attention(tq, tk, tv, compute=torch.float32)[0])


def test_numpy_varlen_and_kvcache():
    np.random.seed(5)
    q, k = _np(9, 2, 16), _np(12, 2, 16)
    cu_q, cu_k = np.array([0, 4, 9]), np.array([0, 5, 12])   # int64: converted
    out = flashattn.flash_attn_varlen_func(q, k, k, cu_q, cu_k, 5, 7, causal=True)
    for b in range(2):
        tq = torch.from_numpy(q[cu_q[b]:cu_q[b + 1]])[None]
        tk = torch.from_numpy(k[cu_k[b]:cu_k[b + 1]])[None]
        _check("varlen out", out[cu_q[b]:cu_q[b + 1]][None],
               R.attention(tq, tk, tk, causal="br")[0],
               R.attention(tq, tk, tk, causal="br", compute=torch.float32)[0])
    kc, vc = _np(2, 10, 2, 16), _np(2, 10, 2, 16)
    kn, vn, qd = _np(2, 1, 2, 16), _np(2, 1, 2, 16), _np(2, 1, 2, 16)
    out = flashattn.flash_attn_with_kvcache(qd, kc, vc, kn, vn, cache_seqlens=[3, 6])
    for b, n in enumerate([3, 6]):
        assert np.array_equal(kc[b, n], kn[b, 0]) and np.array_equal(vc[b, n], vn[b, 0])
        tk, tv = torch.from_numpy(kc[b, :n + 1])[None], torch.from_numpy(vc[b, :n + 1])[None]
        tq = torch.from_numpy(qd[b])[None]
        _check("kvcache out", out[b][None], R.attention(tq, tk, tv)[0],
               R.attention(tq, tk, tv, compute=torch.float32)[0])


def test_numpy_dropout_follows_numpy_seed():
    q = _np(1, 16, 2, 16)
    np.random.seed(11)
    a = flashattn.flash_attn_func(q, q, q, dropout_p=0.5)
    np.random.seed(11)
    b = flashattn.flash_attn_func(q, q, q, dropout_p=0.5)
    assert np.array_equal(a, b) and not np.array_equal(a, flashattn.flash_attn_func(q, q, q))


def test_numpy_sdpa():
    np.random.seed(6)
    q, k, v = _np(2, 3, 7, 16), _np(2, 3, 9, 16), _np(2, 3, 9, 16)
    mask = np.random.standard_normal((7, 9)) > -1.0
    mask[:, 0] = True
    out = flashattn.sdpa(q, k, v, attn_mask=mask)
    tq, tk, tv = (torch.from_numpy(x).transpose(1, 2) for x in (q, k, v))
    bias = torch.zeros(7, 9, dtype=torch.float64).masked_fill(~torch.from_numpy(mask),
                                                              float("-inf"))
    o64, _ = R.attention(tq, tk, tv, bias=bias)
    on, _ = R.attention(tq, tk, tv, bias=bias, compute=torch.float32)
    _check("sdpa out", out.swapaxes(1, 2), o64, on)


def test_numpy_rejects_float64():
    q = _np(1, 2, 1, 8).astype(np.float64)
    with pytest.raises(ValueError, match="float64"):
        flashattn.flash_attn_func(q, q, q)
