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
