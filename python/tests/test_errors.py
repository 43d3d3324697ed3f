"""Failures raise Python exceptions that carry the C library's one-line message."""
import os
import subprocess
import sys

import pytest
import torch

import flashattn
from flashattn import _lib
from conftest import HAVE_CUDA, randn


def test_invalid_argument_is_value_error_with_the_c_message(device):
    q = randn(1, 8, 4, 16, device=device)
    k = randn(1, 8, 3, 16, device=device)
    with pytest.raises(ValueError, match=r"fa_forward: k\.shape\[2\]=3 does not divide "
                                         r"q\.shape\[2\]=4") as e:
        flashattn.flash_attn_func(q, k, k)
    assert isinstance(e.value, flashattn.InvalidArgumentError)
    assert e.value.status == _lib.ERR_INVALID_ARG
    # the context stays usable after a failed call
    assert flashattn.flash_attn_func(q, q, q).shape == q.shape


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(dropout_p=1.0), "dropout_p"),
    (dict(window_size=(-2, 0)), "window_left"),
    (dict(softcap=-1.0), "softcap"),
])
def test_bad_options(device, kwargs, pattern):
    q = randn(1, 8, 2, 16, device=device)
    with pytest.raises(ValueError, match=pattern):
        flashattn.flash_attn_func(q, q, q, **kwargs)


def test_bad_index_arrays(device):
    if device == "cuda":
        pytest.skip("the CUDA backend checks index array contents only under FA_DEBUG=1")
    q = randn(10, 2, 16, device=device)
    cu = torch.tensor([1, 4, 10], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="cu_seqlens"):
        flashattn.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6)
    kc = randn(1, 4, 2, 16, device=device)
    with pytest.raises(ValueError, match="exceeds the cache capacity"):
        flashattn.flash_attn_with_kvcache(q[None, :2], kc, kc, k=kc[:, :2], v=kc[:, :2],
                                          cache_seqlens=3)


def test_unsupported_is_not_implemented_error(device):
    if device == "cpu":
        # a valid request the CPU backend cannot serve: it has no devices
        with pytest.raises(NotImplementedError, match="cpu backend has no devices") as e:
            flashattn.describe("cpu", device=1)
        assert isinstance(e.value, flashattn.UnsupportedError)
        if not HAVE_CUDA:
            with pytest.raises(NotImplementedError, match="cuda"):
                flashattn.describe("cuda")
    else:
        # the fp16 CUDA kernels take head dims that are multiples of 8
        q = randn(1, 8, 2, 12, dtype=torch.float16, device=device)
        with pytest.raises(NotImplementedError, match="multiples of 8"):
            flashattn.flash_attn_func(q, q, q)


def test_python_side_checks(device):
    q = randn(1, 8, 2, 16, device=device)
    with pytest.raises(ValueError, match="dtype"):
        flashattn.flash_attn_func(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="4-D"):
        flashattn.flash_attn_func(q[0], q[0], q[0])
    with pytest.raises(NotImplementedError, match="scale 0"):
        flashattn.flash_attn_func(q, q, q, softmax_scale=0.0)
    with pytest.raises(NotImplementedError, match="alibi_slopes must be 1-D"):
        flashattn.flash_attn_func(q, q, q, alibi_slopes=torch.ones(1, 2))
    with pytest.raises(TypeError, match="expected a torch tensor"):
        flashattn.flash_attn_func([1.0], q, q)
    if device == "cuda":
        with pytest.raises(ValueError, match="every tensor must be on"):
            flashattn.flash_attn_func(q, q.cpu(), q)


def test_arrays_the_c_call_would_misread(device):
    """Per-head arrays of the wrong length, index arrays of the wrong batch, mixed dtypes
    and mixed array kinds are refused before the C call (which would read past them)."""
    q = randn(1, 8, 4, 16, device=device)
    for name in ("alibi_slopes", "sinks"):
        with pytest.raises(ValueError, match=name + " must have one value per query head"):
            flashattn.flash_attn_func(q, q, q, **{name: torch.ones(3, device=device)})
    qg = q.clone().requires_grad_()
    with pytest.raises(ValueError, match="sinks must have one value per query head"):
        flashattn.flash_attn_func(qg, q, q, sinks=torch.ones(5, device=device))
    with pytest.raises(ValueError, match="k has dtype .* but q has"):
        flashattn.flash_attn_func(q, q.to(torch.bfloat16), q)
    kc = randn(1, 16, 4, 16, device=device)
    with pytest.raises(ValueError, match="cache_seqlens must hold one length per sequence"):
        flashattn.flash_attn_with_kvcache(q[:, :1], kc, kc, cache_seqlens=torch.tensor(
            [3, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match="k_cache has dtype"):
        flashattn.flash_attn_with_kvcache(q[:, :1], kc.half(), kc.half(), cache_seqlens=3)
    with pytest.raises(ValueError, match="block_table must be"):
        flashattn.flash_attn_with_kvcache(q[:, :1], kc, kc, cache_seqlens=3, block_table=(
            torch.zeros(2, 1, dtype=torch.int32)))
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q and cu_seqlens_k"):
        flashattn.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu[:2], 5, 5)
    with pytest.raises(ValueError, match="attn_mask of shape"):
        flashattn.sdpa(q, q, q, attn_mask=torch.zeros(3, 5, device=device))
    if device == "cpu":
        with pytest.raises(TypeError, match="q is a numpy array but k is a torch tensor"):
            flashattn.flash_attn_func(q.numpy(), q, q.numpy())
        with pytest.raises(TypeError, match="query is a torch tensor but value is a numpy"):
            flashattn.sdpa(q, q, q.numpy())


def test_status_mapping():
    for status, cls in [(_lib.ERR_INVALID_ARG, ValueError),
                        (_lib.ERR_UNSUPPORTED, NotImplementedError),
                        (_lib.ERR_NO_MEMORY, MemoryError), (_lib.ERR_DEVICE, RuntimeError),
                        (_lib.ERR_INTERNAL, RuntimeError)]:
        with pytest.raises(cls) as e:
            _lib.check(status, None)
        assert e.value.status == status and isinstance(e.value, flashattn.FlashAttnError)
    _lib.check(_lib.OK, None)


def test_missing_library_is_reported():
    env = dict(os.environ, FLASHATTN_LIB="/nonexistent/libflashattn.so")
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", "import flashattn"], cwd=src, env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "FLASHATTN_LIB=/nonexistent" in r.stderr
