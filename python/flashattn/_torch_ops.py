"""Autograd for torch tensors: the forward and backward C calls as torch operators.

With torch >= 2.4 (torch.library.custom_op) they are custom operators flashattn::fwd,
flashattn::bwd, flashattn::varlen_fwd, flashattn::varlen_bwd and flashattn::kvcache, each
with a fake (meta) implementation, so torch.compile traces them without graph breaks; the
backward is registered with register_autograd. On older torch a torch.autograd.Function
runs the same calls. Calls that need no gradient and are not being compiled skip both and
call the C library directly (the short path: no autograd bookkeeping).

Flat signature shared by the ops (after the tensors): sinks, alibi, bias, rng (int64 [2]:
dropout seed and offset, CPU), scale (0.0 = 1/sqrt(d)), causal (fa_causal), window_left,
window_right, softcap, dropout_p, deterministic.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _impl, _torch_short
from ._torch_adapter import TORCH, empty_like_layout

HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")

try:
    from torch.compiler import is_compiling as _compiling
except ImportError:
    try:
        from torch._dynamo import is_compiling as _compiling
    except ImportError:
        def _compiling():
            return False


def _params(sinks, alibi, bias, rng, scale, causal, wl, wr, softcap, dropout_p, det):
    seed, offset = (0, 0) if rng is None else rng.tolist()
    return _impl.Params(scale if scale != 0.0 else None, causal, wl, wr, softcap, alibi,
                        sinks, bias, dropout_p, seed, offset, det)


def _empty(n):
    return torch.empty(n, dtype=torch.float32)


# ---- the plain calls ------------------------------------------------------------------

def fwd_call(q, k, v, sinks, alibi, bias, rng, scale, causal, wl, wr, softcap, dropout_p,
             det, need_lse=True):
    p = _params(sinks, alibi, bias, rng, scale, causal, wl, wr, softcap, dropout_p, det)
    return _impl.forward(TORCH, q, k, v, p, need_lse)


def bwd_call(dout, q, k, v, out, lse, sinks, alibi, bias, rng, scale, causal, wl, wr,
             softcap, dropout_p, det, need_dsinks):
    p = _params(sinks, alibi, bias, rng, scale, causal, wl, wr, softcap, dropout_p, det)
    dq, dk, dv, ds = _impl.backward(TORCH, dout, q, k, v, out, lse, p, need_dsinks)
    return dq, dk, dv, ds if ds is not None else _empty(0).to(q.device)


def varlen_fwd_call(q, k, v, cu_q, cu_k, max_q, max_k, sinks, alibi, rng, scale, causal,
                    wl, wr, softcap, dropout_p, det, need_lse=True):
    p = _params(sinks, alibi, None, rng, scale, causal, wl, wr, softcap, dropout_p, det)
    return _impl.forward_varlen(TORCH, q, k, v, cu_q, cu_k, max_q, max_k, p, need_lse)


def varlen_bwd_call(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, sinks, alibi, rng,
                    scale, causal, wl, wr, softcap, dropout_p, det, need_dsinks):
    p = _params(sinks, alibi, None, rng, scale, causal, wl, wr, softcap, dropout_p, det)
    dq, dk, dv, ds = _impl.backward_varlen(TORCH, dout, q, k, v, out, lse, cu_q, cu_k, max_q,
                                           max_k, p, need_dsinks)
    return dq, dk, dv, ds if ds is not None else _empty(0).to(q.device)


def kvcache_call(q, k_cache, v_cache, k, v, cache_seqlens, block_table, sinks, alibi, scale,
                 causal, wl, wr, softcap, need_lse=True):
    p = _params(sinks, alibi, None, None, scale, causal, wl, wr, softcap, 0.0, False)
    return _impl.forward_kvcache(TORCH, q, k_cache, v_cache, k, v, cache_seqlens,
                                 block_table, p, need_lse)


# ---- shapes for the fake implementations -----------------------------------------------

def _fake_fwd(q, v):
    q = TORCH.unit_last(q)
    B, Sq, H = q.shape[0], q.shape[1], q.shape[2]
    out = empty_like_layout(q, (B, Sq, H, v.shape[3]))
    return out, q.new_empty((B, H, Sq), dtype=torch.float32)


def _fake_bwd(q, k, v, sinks, need_dsinks):
    ds = q.new_empty(sinks.shape if need_dsinks else (0,), dtype=torch.float32)
    return (torch.empty_like(TORCH.unit_last(q)), torch.empty_like(TORCH.unit_last(k)),
            torch.empty_like(TORCH.unit_last(v)), ds)


def _fake_varlen_fwd(q, v):
    q = TORCH.unit_last(q)
    out = empty_like_layout(q.unsqueeze(0), (1, q.shape[0], q.shape[1], v.shape[2]))[0]
    return out, q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


# ---- torch >= 2.4: custom operators ----------------------------------------------------

if HAS_CUSTOM_OP:
    @torch.library.custom_op("flashattn::fwd", mutates_args=())
    def _fwd_op(q: Tensor, k: Tensor, v: Tensor, sinks: Optional[Tensor],
                alibi: Optional[Tensor], bias: Optional[Tensor], rng: Optional[Tensor],
                scale: float, causal: int, window_left: int, window_right: int,
                softcap: float, dropout_p: float, deterministic: bool
                ) -> Tuple[Tensor, Tensor]:
        return fwd_call(q, k, v, sinks, alibi, bias, rng, scale, causal, window_left,
                        window_right, softcap, dropout_p, deterministic)

    @_fwd_op.register_fake
    def _(q, k, v, sinks, alibi, bias, rng, *scalars):
        return _fake_fwd(q, v)

    @torch.library.custom_op("flashattn::bwd", mutates_args=())
    def _bwd_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                sinks: Optional[Tensor], alibi: Optional[Tensor], bias: Optional[Tensor],
                rng: Optional[Tensor], scale: float, causal: int, window_left: int,
                window_right: int, softcap: float, dropout_p: float, deterministic: bool,
                need_dsinks: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        return bwd_call(dout, q, k, v, out, lse, sinks, alibi, bias, rng, scale, causal,
                        window_left, window_right, softcap, dropout_p, deterministic,
                        need_dsinks)

    @_bwd_op.register_fake
    def _(dout, q, k, v, out, lse, sinks, alibi, bias, rng, *rest):
        return _fake_bwd(q, k, v, sinks, rest[-1])

    def _fwd_setup(ctx, inputs, output):
        q, k, v, sinks, alibi, bias, rng = inputs[:7]
        ctx.save_for_backward(q, k, v, output[0], output[1], sinks, alibi, bias, rng)
        ctx.scalars = inputs[7:]
        ctx.need_dsinks = sinks is not None and sinks.requires_grad
        ctx.mark_non_differentiable(output[1])

    def _fwd_backward(ctx, dout, dlse):
        q, k, v, out, lse, sinks, alibi, bias, rng = ctx.saved_tensors
        dq, dk, dv, ds = _bwd_op(dout, q, k, v, out, lse, sinks, alibi, bias, rng,
                                 *ctx.scalars, ctx.need_dsinks)
        return (dq, dk, dv, ds if ctx.need_dsinks else None) + (None,) * 10

    _fwd_op.register_autograd(_fwd_backward, setup_context=_fwd_setup)

    @torch.library.custom_op("flashattn::varlen_fwd", mutates_args=())
    def _varlen_fwd_op(q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor,
                       max_q: int, max_k: int, sinks: Optional[Tensor],
                       alibi: Optional[Tensor], rng: Optional[Tensor], scale: float,
                       causal: int, window_left: int, window_right: int, softcap: float,
                       dropout_p: float, deterministic: bool) -> Tuple[Tensor, Tensor]:
        return varlen_fwd_call(q, k, v, cu_q, cu_k, max_q, max_k, sinks, alibi, rng, scale,
                               causal, window_left, window_right, softcap, dropout_p,
                               deterministic)

    @_varlen_fwd_op.register_fake
    def _(q, k, v, *rest):
        return _fake_varlen_fwd(q, v)

    @torch.library.custom_op("flashattn::varlen_bwd", mutates_args=())
    def _varlen_bwd_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                       lse: Tensor, cu_q: Tensor, cu_k: Tensor, max_q: int, max_k: int,
                       sinks: Optional[Tensor], alibi: Optional[Tensor],
                       rng: Optional[Tensor], scale: float, causal: int, window_left: int,
                       window_right: int, softcap: float, dropout_p: float,
                       deterministic: bool, need_dsinks: bool
                       ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        return varlen_bwd_call(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, sinks,
                               alibi, rng, scale, causal, window_left, window_right,
                               softcap, dropout_p, deterministic, need_dsinks)

    @_varlen_bwd_op.register_fake
    def _(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, sinks, *rest):
        return _fake_bwd(q, k, v, sinks, rest[-1])

    def _varlen_setup(ctx, inputs, output):
        q, k, v, cu_q, cu_k, max_q, max_k, sinks, alibi, rng = inputs[:10]
        ctx.save_for_backward(q, k, v, output[0], output[1], cu_q, cu_k, sinks, alibi, rng)
        ctx.maxes = (max_q, max_k)
        ctx.scalars = inputs[10:]
        ctx.need_dsinks = sinks is not None and sinks.requires_grad
        ctx.mark_non_differentiable(output[1])

    def _varlen_backward(ctx, dout, dlse):
        q, k, v, out, lse, cu_q, cu_k, sinks, alibi, rng = ctx.saved_tensors
        dq, dk, dv, ds = _varlen_bwd_op(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.maxes,
                                        sinks, alibi, rng, *ctx.scalars, ctx.need_dsinks)
        return (dq, dk, dv, None, None, None, None, ds if ctx.need_dsinks else None) + \
            (None,) * 9

    _varlen_fwd_op.register_autograd(_varlen_backward, setup_context=_varlen_setup)

    @torch.library.custom_op("flashattn::kvcache", mutates_args=("k_cache", "v_cache"))
    def _kvcache_op(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor],
                    v: Optional[Tensor], cache_seqlens: Tensor, block_table: Optional[Tensor],
                    sinks: Optional[Tensor], alibi: Optional[Tensor], scale: float,
                    causal: int, window_left: int, window_right: int, softcap: float
                    ) -> Tuple[Tensor, Tensor]:
        return kvcache_call(q, k_cache, v_cache, k, v, cache_seqlens, block_table, sinks,
                            alibi, scale, causal, window_left, window_right, softcap)

    @_kvcache_op.register_fake
    def _(q, k_cache, v_cache, *rest):
        return _fake_fwd(q, v_cache)


# ---- older torch: autograd.Function ----------------------------------------------------

class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, alibi, bias, rng, *scalars):
        out, lse = fwd_call(q, k, v, sinks, alibi, bias, rng, *scalars)
        ctx.save_for_backward(q, k, v, out, lse, sinks, alibi, bias, rng)
        ctx.scalars = scalars
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, sinks, alibi, bias, rng = ctx.saved_tensors
        need_ds = ctx.needs_input_grad[3]
        dq, dk, dv, ds = bwd_call(dout, q, k, v, out, lse, sinks, alibi, bias, rng,
                                  *ctx.scalars, need_ds)
        return (dq, dk, dv, ds if need_ds else None) + (None,) * (3 + len(ctx.scalars))


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, sinks, alibi, rng, *scalars):
        out, lse = varlen_fwd_call(q, k, v, cu_q, cu_k, max_q, max_k, sinks, alibi, rng,
                                   *scalars)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, sinks, alibi, rng)
        ctx.maxes, ctx.scalars = (max_q, max_k), scalars
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, cu_q, cu_k, sinks, alibi, rng = ctx.saved_tensors
        need_ds = ctx.needs_input_grad[7]
        dq, dk, dv, ds = varlen_bwd_call(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.maxes,
                                         sinks, alibi, rng, *ctx.scalars, need_ds)
        return (dq, dk, dv, None, None, None, None, ds if need_ds else None) + \
            (None,) * (2 + len(ctx.scalars))


# ---- entry points ----------------------------------------------------------------------

def _wants_grad(*ts):
    if not torch.is_grad_enabled():
        return False
    for t in ts:
        if t is not None and t.requires_grad:
            return True
    return False


def attention(q, k, v, sinks, alibi, bias, rng, scale, causal, wl, wr, softcap, dropout_p,
              det, need_lse):
    """(out, lse or None) for [B, S, H, D] tensors, differentiable in q, k, v, sinks."""
    if _wants_grad(q, k, v, sinks) or _compiling():
        scalars = (float(scale), int(causal), int(wl), int(wr), float(softcap),
                   float(dropout_p), bool(det))
        if HAS_CUSTOM_OP:
            return _fwd_op(q, k, v, sinks, alibi, bias, rng, *scalars)
        return _Attention.apply(q, k, v, sinks, alibi, bias, rng, *scalars)
    seed, offset = (0, 0) if rng is None else rng.tolist()
    return _torch_short.forward(q, k, v, sinks, alibi, bias, seed, offset, scale, causal, wl,
                                wr, softcap, dropout_p, det, need_lse)


def varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k, sinks, alibi, rng, scale, causal,
                     wl, wr, softcap, dropout_p, det, need_lse):
    """(out, lse or None) for packed [total, H, D] tensors."""
    scalars = (float(scale), int(causal), int(wl), int(wr), float(softcap), float(dropout_p),
               bool(det))
    if _wants_grad(q, k, v, sinks) or _compiling():
        if HAS_CUSTOM_OP:
            return _varlen_fwd_op(q, k, v, cu_q, cu_k, int(max_q), int(max_k), sinks, alibi,
                                  rng, *scalars)
        return _VarlenAttention.apply(q, k, v, cu_q, cu_k, int(max_q), int(max_k), sinks,
                                      alibi, rng, *scalars)
    return varlen_fwd_call(q, k, v, cu_q, cu_k, int(max_q), int(max_k), sinks, alibi, rng,
                           *scalars, need_lse=need_lse)


def kvcache_attention(q, k_cache, v_cache, k, v, cache_seqlens, block_table, sinks, alibi,
                      scale, causal, wl, wr, softcap, need_lse):
    """(out, lse or None); k, v (if given) are appended to the caches in place."""
    scalars = (float(scale), int(causal), int(wl), int(wr), float(softcap))
    if HAS_CUSTOM_OP and _compiling():
        return _kvcache_op(q, k_cache, v_cache, k, v, cache_seqlens, block_table, sinks,
                           alibi, *scalars)
    return kvcache_call(q, k_cache, v_cache, k, v, cache_seqlens, block_table, sinks, alibi,
                        *scalars, need_lse=need_lse)
