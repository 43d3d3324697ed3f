"""flash_attn_func's forward against liboracle (oracle.py): dtypes, GQA, masks, features."""
import pytest
import torch

import flashattn
import oracle as O
from conftest import randn

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def run_case(device, dtype, B=2, Sq=37, Sk=53, H=4, Hkv=4, D=32, Dv=None, causal=False,
             window=(-1, -1), softcap=0.0, alibi=False, sinks=False, scale=None):
    Dv = Dv or D
    q = randn(B, Sq, H, D, dtype=dtype, device=device)
    k = randn(B, Sk, Hkv, D, dtype=dtype, device=device)
    v = randn(B, Sk, Hkv, Dv, dtype=dtype, device=device)
    sl = torch.rand(H, dtype=torch.float64).float() * 0.5 if alibi else None
    sk = torch.randn(H, dtype=torch.float64).float() if sinks else None
    out, lse, probs = flashattn.flash_attn_func(
        q, k, v, softmax_scale=scale, causal=causal, window_size=window, softcap=softcap,
        alibi_slopes=None if sl is None else sl.to(device),
        sinks=None if sk is None else sk.to(device), return_attn_probs=True)
    assert probs is None
    assert out.dtype == dtype and out.device == q.device and lse.dtype == torch.float32
    o = O.dense(q, k, v, dtype=dtype, scale=scale, causal="br" if causal else None,
                window=window, softcap=softcap, alibi=sl, sinks=sk)
    o.check("out", O.OUT, out)
    o.check("lse", O.LSE, O.lse_rows(lse))


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes(device, dtype):
    run_case(device, dtype)


@pytest.mark.parametrize("H,Hkv", [(8, 1), (8, 2), (6, 3)])
def test_gqa_mqa(device, H, Hkv):
    run_case(device, torch.float32, H=H, Hkv=Hkv)


@pytest.mark.parametrize("Sq,Sk", [(37, 53), (53, 37), (1, 40), (40, 1)])
def test_causal_bottom_right(device, Sq, Sk):
    # Sq > Sk leaves the first Sq - Sk rows with no key: out 0, lse -inf
    run_case(device, torch.float32, Sq=Sq, Sk=Sk, causal=True)


@pytest.mark.parametrize("window,causal", [((8, 0), False), ((-1, 4), False), ((5, 3), False),
                                           ((6, -1), True)])
def test_windows(device, window, causal):
    run_case(device, torch.float32, window=window, causal=causal)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softcap_alibi_sinks_scale(device, dtype):
    run_case(device, dtype, softcap=5.0, alibi=True, sinks=True, scale=0.3, causal=True)


def test_head_dims_differ(device):
    run_case(device, torch.float32, D=64, Dv=32)


def test_fully_masked_rows_with_sinks(device):
    # rows that see no key get out 0 and lse = the sink logit
    run_case(device, torch.float32, Sq=20, Sk=8, causal=True, sinks=True)


def test_strided_views_are_read_in_place(device):
    """qkv packed as [B, S, 3, H, D] and a [B, H, S, D] tensor seen as [B, S, H, D]: both
    reach the C library as strided views and give the oracle's answer."""
    B, S, H, D = 2, 29, 4, 16
    qkv = randn(B, S, 3, H, D, device=device)
    out = flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
    O.dense(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dtype=torch.float32,
            causal="br").check("qkvpacked out", O.OUT, out)
    kv_bhsd = randn(B, 2, H, S, D, device=device)
    q = randn(B, S, H, D, device=device)
    kv = kv_bhsd.permute(0, 3, 1, 2, 4)   # [B, S, 2, H, D], not contiguous
    out = flashattn.flash_attn_kvpacked_func(q, kv)
    O.dense(q, kv[:, :, 0], kv[:, :, 1], dtype=torch.float32).check("kvpacked out", O.OUT, out)


def test_unit_last_stride_is_made(device):
    # a last dimension with stride 2 is copied (the C API needs stride[3] = 1)
    q = randn(1, 9, 2, 32, device=device)[..., ::2]
    k = randn(1, 11, 2, 16, device=device)
    v = randn(1, 11, 2, 16, device=device)
    out = flashattn.flash_attn_func(q, k, v)
    O.dense(q, k, v, dtype=torch.float32).check("out", O.OUT, out)


def test_empty_and_output_layout(device):
    q = randn(2, 0, 4, 16, device=device)
    k = randn(2, 5, 4, 16, device=device)
    out = flashattn.flash_attn_func(q, k, k)
    assert out.shape == (2, 0, 4, 16)
    q = randn(2, 6, 4, 16, device=device)
    out = flashattn.flash_attn_func(q, k, k)
    assert out.is_contiguous()


def test_dlpack_input(device):
    class Foreign:
        """An array known to flashattn only through the DLPack protocol."""
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    q, k, v = (randn(1, 12, 2, 16, device=device) for _ in range(3))
    out = flashattn.flash_attn_func(Foreign(q), Foreign(k), Foreign(v), causal=True)
    assert isinstance(out, torch.Tensor) and out.device == q.device
    assert torch.equal(out, flashattn.flash_attn_func(q, k, v, causal=True))
