"""numpy arrays: the forward entry points take them and return numpy results."""
import numpy as np
import pytest
import torch

import flashattn
import oracle as O


def _np(*shape, dtype=np.float32):
    return np.random.standard_normal(shape).astype(dtype)


def _check(name, o, t, out):
    assert isinstance(out, np.ndarray)
    o.check(name, t, out)


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
    tdt = torch.float32 if dtype == np.float32 else torch.float16
    o = O.dense(tq, tk, tv, dtype=tdt, causal="br", sinks=np.float32(sinks))
    _check("out", o, O.OUT, out)
    _check("lse", o, O.LSE, O.lse_rows(torch.from_numpy(lse)).numpy())


def test_numpy_strided_views():
    np.random.seed(4)
    bhsd = _np(2, 3, 11, 16)
    q = bhsd.swapaxes(1, 2)            # a [B, S, H, D] view: read in place
    k = _np(2, 11, 3, 16)[:, ::-1]     # negative strides: copied first
    v = _np(2, 11, 3, 32)[..., ::2]    # a strided last dimension: copied first
    out = flashattn.flash_attn_func(q, k, v)
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x)) for x in (q, k, v))
    _check("out", O.dense(tq, tk, tv, dtype=torch.float32), O.OUT, out)


def test_numpy_varlen_and_kvcache():
    np.random.seed(5)
    q, k = _np(9, 2, 16), _np(12, 2, 16)
    cu_q, cu_k = np.array([0, 4, 9]), np.array([0, 5, 12])   # int64: converted
    out = flashattn.flash_attn_varlen_func(q, k, k, cu_q, cu_k, 5, 7, causal=True)
    _check("varlen out", O.varlen(q, k, k, cu_q, cu_k, dtype=torch.float32, causal="br"),
           O.OUT, out)
    kc, vc = _np(2, 10, 2, 16), _np(2, 10, 2, 16)
    kn, vn, qd = _np(2, 1, 2, 16), _np(2, 1, 2, 16), _np(2, 1, 2, 16)
    out = flashattn.flash_attn_with_kvcache(qd, kc, vc, kn, vn, cache_seqlens=[3, 6])
    seqs = []
    for b, n in enumerate([3, 6]):
        assert np.array_equal(kc[b, n], kn[b, 0]) and np.array_equal(vc[b, n], vn[b, 0])
        seqs.append(dict(q=qd[b], k=kc[b, :n + 1], v=vc[b, :n + 1]))
    _check("kvcache out", O.Oracle(seqs, dtype=torch.float32), O.OUT, out)


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
    _check("sdpa out", O.dense(tq, tk, tv, bias=bias, dtype=torch.float32), O.OUT,
           np.ascontiguousarray(out.swapaxes(1, 2)))


def test_numpy_rejects_float64():
    q = _np(1, 2, 1, 8).astype(np.float64)
    with pytest.raises(ValueError, match="float64"):
        flashattn.flash_attn_func(q, q, q)
