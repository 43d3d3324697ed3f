"""flash-attn compatible entry points over the flashattn C library.

Layout [batch, seqlen, heads, head_dim] (packed [total_tokens, heads, head_dim] for varlen),
causal alignment bottom-right (flash-attn >= 2.1). Every function also takes `sinks=`: one
fp32 sink logit per query head, which joins each row's softmax denominator (its gradient
is returned to a `sinks` tensor that requires grad).

torch tensors (CPU or CUDA) are differentiable in q, k, v and sinks; numpy arrays (host,
forward only) give numpy results; other DLPack arrays are read with torch.from_dlpack and
give torch tensors.
"""
import numbers

from . import _impl
from ._arrays import (aux_t, causal_arg, from_dlpack, index_t, kind, rng_t, same_kind,
                      scale_arg, window_arg)


_ops = None


def _torch_ops():
    global _ops
    if _ops is None:
        from . import _torch_ops as ops
        _ops = ops
    return _ops


def _numpy():
    from . import _numpy_adapter
    return _numpy_adapter


def _dl(*xs):
    """DLPack arrays as torch tensors; anything else as it is."""
    return [from_dlpack(x)[0] if x is not None and hasattr(x, "__dlpack__") else x
            for x in xs]


def _np_params(npa, scale, causal, window_size, softcap, alibi_slopes, sinks, dropout_p,
               deterministic, bottom_right=True, bias=None):
    seed, offset = npa.draw_seed() if dropout_p else (0, 0)
    wl, wr = window_arg(window_size)
    sc = scale_arg(scale)
    return _impl.Params(sc if sc != 0.0 else None, causal_arg(causal, bottom_right), wl, wr,
                        float(softcap), npa.aux_f32(alibi_slopes, "alibi_slopes"),
                        npa.aux_f32(sinks, "sinks"), bias, float(dropout_p), seed,
                        offset, deterministic)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False, *, sinks=None):
    """Attention over q [B, Sq, H, d], k [B, Sk, Hkv, d], v [B, Sk, Hkv, d_v] (H % Hkv == 0).

    Returns out [B, Sq, H, d_v], or (out, softmax_lse [B, H, Sq] fp32, None) with
    return_attn_probs (the probabilities themselves are never formed). window_size =
    (left, right), -1 unbounded; causal is bottom-right aligned. Dropout draws its Philox
    seed from torch's default generator (numpy's for numpy arrays)."""
    kd = kind(q)
    same_kind(kd, k=k, v=v)
    if kd == "numpy":
        npa = _numpy()
        p = _np_params(npa, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks,
                       dropout_p, deterministic)
        out, lse = _impl.forward(npa.NUMPY, q, k, v, p, return_attn_probs)
        return (out, lse, None) if return_attn_probs else out
    if kd == "dlpack":
        q, k, v, alibi_slopes, sinks = _dl(q, k, v, alibi_slopes, sinks)
    wl, wr = window_arg(window_size)
    out, lse = (_ops or _torch_ops()).attention(
        q, k, v, None if sinks is None else aux_t(sinks, q, "sinks"),
        None if alibi_slopes is None else aux_t(alibi_slopes, q, "alibi_slopes"), None,
        rng_t(dropout_p) if dropout_p else None,
        0.0 if softmax_scale is None else scale_arg(softmax_scale),
        causal_arg(causal) if causal else 0, wl, wr, softcap, dropout_p, deterministic,
        return_attn_probs)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, *, sinks=None):
    """flash_attn_func on qkv [B, S, 3, H, d], read as three strided views (no copies)."""
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p,
                           softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, sinks=sinks)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, *, sinks=None):
    """flash_attn_func on q [B, Sq, H, d] and kv [B, Sk, 2, Hkv, d] (strided views)."""
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                           window_size, softcap, alibi_slopes, deterministic,
                           return_attn_probs, sinks=sinks)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None,
                           *, sinks=None):
    """Packed batches: q [total_q, H, d], k/v [total_k, Hkv, d]; cu_seqlens_* int32 [B + 1]
    prefix sums; max_seqlen_* upper bounds of the lengths. Returns out [total_q, H, d_v],
    or (out, softmax_lse [H, total_q], None). Masks and windows apply per sequence."""
    if block_table is not None:
        raise NotImplementedError("flashattn: flash_attn_varlen_func with block_table (paged "
                                  "keys) is not supported; flash_attn_with_kvcache takes one")
    kd = kind(q)
    same_kind(kd, k=k, v=v)
    if kd == "numpy":
        npa = _numpy()
        p = _np_params(npa, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks,
                       dropout_p, deterministic)
        out, lse = _impl.forward_varlen(npa.NUMPY, q, k, v, npa.index_i32(cu_seqlens_q),
                                        npa.index_i32(cu_seqlens_k), int(max_seqlen_q),
                                        int(max_seqlen_k), p, return_attn_probs)
        return (out, lse, None) if return_attn_probs else out
    if kd == "dlpack":
        q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks = _dl(
            q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks)
    wl, wr = window_arg(window_size)
    out, lse = _torch_ops().varlen_attention(
        q, k, v, index_t(cu_seqlens_q, q), index_t(cu_seqlens_k, q), max_seqlen_q,
        max_seqlen_k, aux_t(sinks, q, "sinks"), aux_t(alibi_slopes, q, "alibi_slopes"),
        rng_t(dropout_p), scale_arg(softmax_scale), causal_arg(causal), wl, wr, softcap,
        dropout_p, deterministic, return_attn_probs)
    return (out, lse, None) if return_attn_probs else out


def _unsupported(**kw):
    for name, value in kw.items():
        if value is not None:
            raise NotImplementedError("flashattn: flash_attn_with_kvcache(%s=...) is not "
                                      "supported" % name)


def _cache_seqlens(cache_seqlens, q, k_cache, k, block_table, full):
    """cache_seqlens as [B] int32: an int is broadcast; None means the caches are full."""
    if cache_seqlens is None:
        if k is not None:
            raise ValueError("flashattn: flash_attn_with_kvcache with new k/v needs "
                             "cache_seqlens (where to append them)")
        cap = k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
        cache_seqlens = cap
    if isinstance(cache_seqlens, numbers.Integral):   # int, numpy integers
        return full(q.shape[0], int(cache_seqlens))
    return cache_seqlens


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False, *, sinks=None):
    """Decoding over a KV cache (inference: no gradient).

    q [B, Sq, H, d]; k_cache/v_cache [B, S_cache, Hkv, d], or paged [num_pages, page_size,
    Hkv, d] with block_table int32 [B, max_pages]. cache_seqlens (int or int32 [B]): tokens
    already cached. k/v [B, S_new, Hkv, d], when given, are written into the caches at
    cache_seqlens first (in place), then attention runs over cache_seqlens + S_new keys.
    Returns out, or (out, softmax_lse [B, H, Sq]). num_splits is accepted and ignored (the
    library chooses its own split)."""
    _unsupported(rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                 cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad)
    if (k is None) != (v is None):
        raise ValueError("flashattn: flash_attn_with_kvcache needs both k and v, or neither")
    kd = kind(q)
    same_kind(kd, k_cache=k_cache, v_cache=v_cache, k=k, v=v)
    if kd == "numpy":
        npa = _numpy()
        import numpy as np
        seqlens = _cache_seqlens(cache_seqlens, q, k_cache, k, block_table,
                                 lambda n, x: np.full(n, x, dtype=np.int32))
        p = _np_params(npa, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks,
                       0.0, False)
        out, lse = _impl.forward_kvcache(npa.NUMPY, q, k_cache, v_cache, k, v,
                                         npa.index_i32(seqlens), npa.index_i32(block_table),
                                         p, return_softmax_lse)
        return (out, lse) if return_softmax_lse else out
    if kd == "dlpack":
        q, k_cache, v_cache, k, v, cache_seqlens, block_table, alibi_slopes, sinks = _dl(
            q, k_cache, v_cache, k, v, cache_seqlens, block_table, alibi_slopes, sinks)
    import torch
    seqlens = _cache_seqlens(cache_seqlens, q, k_cache, k, block_table,
                             lambda n, x: torch.full((n,), x, dtype=torch.int32))
    wl, wr = window_arg(window_size)
    out, lse = _torch_ops().kvcache_attention(
        q, k_cache, v_cache, k, v, index_t(seqlens, q), index_t(block_table, q),
        aux_t(sinks, q, "sinks"), aux_t(alibi_slopes, q, "alibi_slopes"),
        scale_arg(softmax_scale), causal_arg(causal), wl, wr, softcap, return_softmax_lse)
    return (out, lse) if return_softmax_lse else out


__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_with_kvcache"]
