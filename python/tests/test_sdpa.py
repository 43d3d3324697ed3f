"""flashattn.sdpa against torch's scaled_dot_product_attention: its signature, and its
values (always against liboracle (oracle.py) given torch's documented semantics; torch's
own function, where the installed torch has it, against the same oracle and rule)."""
import inspect
import re

import pytest
import torch
import torch.nn.functional as F

import flashattn
import oracle as O
from conftest import randn

TORCH_SDPA = getattr(F, "scaled_dot_product_attention", None)
TORCH_GQA = TORCH_SDPA is not None and "enable_gqa" in (TORCH_SDPA.__doc__ or "")
# torch's documented signature (torch >= 2.5)
DOCUMENTED = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
              "enable_gqa"]
DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None,
            "enable_gqa": False}


def sdpa_oracle(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                dout=None):
    """The oracle of torch SDPA's semantics for [..., H, L, E] inputs: the batch dimensions
    broadcast and flatten, a single key head serves every query head, is_causal is
    top-left, a boolean mask is a bias of 0 / -inf, a float mask is added. enable_gqa needs
    nothing more (the oracle's key heads are grouped)."""
    del enable_gqa
    batch = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3])

    def rows(x):   # [..., H, S, E] -> [B, S, H, E]
        return x.detach().cpu().expand(*batch, *x.shape[-3:]).reshape(
            -1, *x.shape[-3:]).transpose(1, 2)

    bias = None
    if attn_mask is not None:
        m = attn_mask.detach().cpu()
        bias = torch.zeros(m.shape, dtype=torch.float64).masked_fill(~m, float("-inf")) \
            if m.dtype == torch.bool else m.double()
    return O.dense(rows(q), rows(k), rows(v), dout=None if dout is None else rows(dout),
                   bias=bias, dtype=torch.float32, scale=scale,
                   causal="tl" if is_causal else None, backward=dout is not None)


def out_rows(x):
    """An SDPA result [..., H, L, E] in the oracle's layout [B * L, H, E]."""
    return x.detach().cpu().reshape(-1, *x.shape[-3:]).transpose(1, 2)


def test_signature():
    params = inspect.signature(flashattn.sdpa).parameters
    names = [p for p in params if params[p].kind != inspect.Parameter.KEYWORD_ONLY]
    assert names == DOCUMENTED
    for name, default in DEFAULTS.items():
        assert params[name].default == default


@pytest.mark.skipif(TORCH_SDPA is None, reason="torch %s has no scaled_dot_product_attention"
                    % torch.__version__)
def test_signature_matches_torch():
    # torch's is a builtin without a signature object: its docstring opens with it
    head = re.match(r"\s*scaled_dot_product_attention\((.*?)\)", TORCH_SDPA.__doc__, re.S)
    args = [a.strip().split("=") for a in head.group(1).split(",") if a.strip()]
    assert [a[0] for a in args] == DOCUMENTED[:len(args)]
    for a in args[3:]:
        assert eval(a[1]) == DEFAULTS[a[0]], a


def _cases():
    return [
        dict(name="plain", L=13, S=13),
        dict(name="causal L<S (top-left)", L=7, S=19, is_causal=True),
        dict(name="causal L>S (top-left)", L=19, S=7, is_causal=True),
        dict(name="bool mask [L, S]", L=11, S=17, mask="bool2"),
        dict(name="float mask [B, 1, L, S]", L=11, S=17, mask="float4"),
        dict(name="float mask [L, 1]", L=11, S=17, mask="col"),
        dict(name="gqa + scale", L=9, S=12, H=6, Hkv=2, enable_gqa=True, scale=0.2),
        dict(name="mask + causal", L=10, S=10, mask="bool2", is_causal=True),
    ]


def _mask(kind, B, H, L, S, device):
    if kind == "bool2":
        m = torch.rand(L, S) > 0.3
        m[:, 0] = True   # every row keeps a key (torch gives NaN for an empty row)
        return m.to(device)
    if kind == "float4":
        return randn(B, 1, L, S, device=device)
    if kind == "col":
        return randn(L, 1, device=device)
    return None


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_values_and_grads(device, case):
    B, H = 2, case.get("H", 3)
    Hkv, L, S, E = case.get("Hkv", H), case["L"], case["S"], 16
    q = randn(B, H, L, E, device=device, grad=True)
    k = randn(B, Hkv, S, E, device=device, grad=True)
    v = randn(B, Hkv, S, E, device=device, grad=True)
    mask = _mask(case.get("mask"), B, H, L, S, device)
    kw = dict(attn_mask=mask, is_causal=case.get("is_causal", False),
              scale=case.get("scale"), enable_gqa=case.get("enable_gqa", False))
    out = flashattn.sdpa(q, k, v, **kw)
    assert out.shape == (B, H, L, E) and out.is_contiguous()
    dout = randn(B, H, L, E, device=device)
    ours = [out] + list(torch.autograd.grad(out, (q, k, v), dout))

    o = sdpa_oracle(q, k, v, dout=dout, **kw)
    for name, t, g in zip(["out", "dq", "dk", "dv"], [O.OUT, O.DQ, O.DK, O.DV], ours):
        o.check(name, t, out_rows(g))
    if TORCH_SDPA is not None and not (kw["is_causal"] and mask is not None) and (
            TORCH_GQA or not kw["enable_gqa"]):
        args = {a: b for a, b in kw.items() if b is not None and b is not False}
        if "attn_mask" in args:   # torch's CUDA kernels want a mask with unit last stride:
            # broadcast to [B, H, L, S] first ([L, 1] would keep a 0 last stride)
            args["attn_mask"] = torch.broadcast_to(args["attn_mask"], (B, H, L, S)).contiguous()
        theirs = TORCH_SDPA(q.detach(), k.detach(), v.detach(), **args)
        o.check("torch's own out", O.OUT, out_rows(theirs))


def test_three_and_five_dims(device):
    q, k, v = (randn(4, 9, 16, device=device) for _ in range(3))
    out = flashattn.sdpa(q, k, v, is_causal=True)
    assert out.shape == (4, 9, 16)
    sdpa_oracle(q[:, None], k[:, None], v[:, None], is_causal=True).check(
        "3-D", O.OUT, out_rows(out[:, None]))
    q = randn(2, 3, 2, 5, 16, device=device)
    k = randn(1, 3, 2, 7, 16, device=device)   # batch dimensions broadcast
    out = flashattn.sdpa(q, k, k)
    assert out.shape == (2, 3, 2, 5, 16)
    sdpa_oracle(q, k, k).check("5-D", O.OUT, out_rows(out))


def test_heads_must_match_without_gqa(device):
    q = randn(1, 4, 5, 16, device=device)
    k = randn(1, 2, 5, 16, device=device)
    with pytest.raises(ValueError, match="enable_gqa"):
        flashattn.sdpa(q, k, k)
    one = randn(1, 1, 5, 16, device=device)   # a single key head broadcasts, as in torch
    out = flashattn.sdpa(q, one, one)
    sdpa_oracle(q, one, one).check("broadcast head", O.OUT, out_rows(out))


def test_mask_gradient_is_refused(device):
    q = randn(1, 2, 5, 16, device=device)
    mask = randn(5, 5, device=device, grad=True)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        flashattn.sdpa(q, q, q, attn_mask=mask)


def test_dropout_reproducible(device):
    q = randn(1, 2, 16, 16, device=device)
    torch.manual_seed(5)
    a = flashattn.sdpa(q, q, q, dropout_p=0.4)
    torch.manual_seed(5)
    b = flashattn.sdpa(q, q, q, dropout_p=0.4)
    assert torch.equal(a, b) and not torch.equal(a, flashattn.sdpa(q, q, q))
