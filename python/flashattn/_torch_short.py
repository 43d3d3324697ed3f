"""The short path of the torch forward: fa_forward with as little Python as possible.

Calls that need no gradient and are not being traced by torch.compile come here (the
inference case, where the per-call cost matters most). It does what _impl.forward does
with the torch adapter, inlined: the same checks, the same outputs, the same C call.
"""
import ctypes

import torch

from . import _context
from . import _lib as L
from ._impl import per_head, same_dtype
from ._torch_adapter import TORCH, dtype_code, empty_like_layout

_pack = L._TENSOR_PACK
_from = L._tensor_from
_DTYPES = {torch.float32: L.F32, torch.float16: L.F16, torch.bfloat16: L.BF16}
_f32 = torch.float32


def _fa(t):
    try:
        return _from(_pack(t.data_ptr(), _DTYPES[t.dtype], *t.shape, *t.stride()))
    except KeyError:
        dtype_code(t)   # raises the ValueError naming the dtype
        raise


def forward(q, k, v, sinks, alibi, bias, seed, offset, scale, causal, wl, wr, softcap,
            dropout_p, det, need_lse):
    """(out, lse or None), like _impl.forward(TORCH, ...)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 4:
                raise ValueError("flashattn: %s must be 4-D [batch, seqlen, heads, head_dim], "
                                 "got shape %s" % (name, tuple(t.shape)))
    if q.stride(3) != 1:
        q = TORCH.unit_last(q)
    if k.stride(3) != 1:
        k = TORCH.unit_last(k)
    if v.stride(3) != 1:
        v = TORCH.unit_last(v)
    on_cpu = q.is_cpu and k.is_cpu and v.is_cpu
    if not on_cpu or (sinks is not None and not sinks.is_cpu) or (
            alibi is not None and not alibi.is_cpu) or (bias is not None and not bias.is_cpu):
        TORCH.same_place(q, k, v, sinks, alibi, bias)
    B, Sq, H, Dv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
    if k.dtype != q.dtype or v.dtype != q.dtype:
        same_dtype(q, k=k, v=v)
    if alibi is not None or sinks is not None:
        per_head(H, alibi, sinks)
    if Dv == q.shape[3] and q.is_contiguous():
        out = torch.empty_like(q)
    else:
        out = empty_like_layout(q, (B, Sq, H, Dv))
    lse = torch.empty((B, H, Sq), dtype=_f32, device=q.device) if need_lse else None
    o = L.FaOptions()
    if scale != 0.0:
        o.scale = scale
    if causal:
        o.causal = causal
    if wl != -1 or wr != -1:
        o.window, o.window_left, o.window_right = 1, wl, wr
    if softcap:
        o.softcap = softcap
    if alibi is not None:
        o.alibi_slopes = alibi.data_ptr()
    if sinks is not None:
        o.sinks = sinks.data_ptr()
    if bias is not None:
        bt = _fa(bias)
        o.bias = ctypes.pointer(bt)
    if dropout_p:
        o.dropout_p, o.seed, o.offset = dropout_p, seed, offset
    if det:
        o.deterministic = 1
    args = (_fa(out), None if lse is None else lse.data_ptr(), _fa(q), _fa(k), _fa(v), o)
    if on_cpu:
        ctx = _context.get(_context.cpu_backend)
        st = L.lib.fa_forward(ctx, *args)
        if st:
            L.check(st, ctx)
    else:
        TORCH.call(q, L.lib.fa_forward, *args)
    return out, lse
