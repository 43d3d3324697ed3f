"""Shared fixtures: the package from this tree, devices, random inputs.

The library comes from $FLASHATTN_LIB (python/run-tests.sh points it at the build tree's
.libs/libflashattn.so) or the system; the oracle and its rule from $FLASHATTN_ORACLE_LIB
(oracle.py). Every test runs on CPU tensors, and again on CUDA
tensors when torch sees a GPU (the CUDA cases are reported as skipped otherwise).
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HAVE_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAVE_CUDA, reason="no CUDA device visible to torch"))]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def randn(*shape, dtype=torch.float32, device="cpu", scale=1.0, grad=False):
    """Fresh random values rounded to dtype (never zeros or constants)."""
    t = (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype).to(device)
    return t.requires_grad_(grad)


@pytest.fixture(autouse=True)
def _seed(request):
    # a fixed seed per test, derived from its name, so failures reproduce
    torch.manual_seed(sum(map(ord, request.node.name)) & 0xFFFF)
