"""torch.nn.functional.scaled_dot_product_attention's signature over flashattn.

Layout [..., heads, seqlen, head_dim] (torch's), causal alignment top-left (torch's
is_causal). The [B, H, S, D] tensors reach the C library as [B, S, H, D] strided views,
without copies; the output is a [B, H, S, D] view of memory laid out like the query.
"""
import math

from . import _impl
from . import _lib as L
from ._arrays import aux_t, from_dlpack, kind, rng_t, same_kind, scale_arg


class _TorchOps:
    @staticmethod
    def expand(x, shape):
        return x.expand(shape)

    @staticmethod
    def swap12(x):
        return x.transpose(1, 2)

    @staticmethod
    def as_bias(mask, q):
        import torch
        if mask.dtype == torch.bool:
            return torch.zeros(mask.shape, dtype=q.dtype, device=mask.device).masked_fill_(
                ~mask, -math.inf)
        if mask.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return mask.to(q.dtype)
        return mask

    @staticmethod
    def dense_last(x, n):
        """x with its last dimension n long and unit-strided."""
        if x.shape[-1] == n and x.stride(-1) == 1:
            return x
        return x.expand(*x.shape[:-1], n).contiguous()


class _NumpyOps:
    @staticmethod
    def expand(x, shape):
        import numpy as np
        return np.broadcast_to(x, shape)

    @staticmethod
    def swap12(x):
        return x.swapaxes(1, 2)

    @staticmethod
    def as_bias(mask, q):
        import numpy as np
        if mask.dtype == np.bool_:
            return np.where(mask, 0.0, -np.inf).astype(q.dtype)
        if mask.dtype not in (np.float32, np.float16):
            return mask.astype(q.dtype)
        return mask

    @staticmethod
    def dense_last(x, n):
        import numpy as np
        if x.shape[-1] == n and x.strides[-1] == x.itemsize:
            return x
        return np.ascontiguousarray(np.broadcast_to(x, x.shape[:-1] + (n,)))


def _broadcast_shape(*shapes):
    n = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (n - len(s)) + tuple(s) for s in shapes]):
        big = {d for d in dims if d != 1}
        if len(big) > 1:
            raise ValueError("flashattn: sdpa batch dimensions %s do not broadcast"
                             % (shapes,))
        out.append(big.pop() if big else 1)
    return tuple(out)


def _to4(x, batch):
    """[*batch, H, S, D] (batch possibly empty or several dimensions) -> [B, H, S, D]."""
    if len(batch) == 1:
        return x
    if len(batch) == 0:
        return x[None]
    return x.reshape((-1,) + tuple(x.shape[-3:]))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 sinks=None):
    """torch's scaled_dot_product_attention: query [..., H, L, E], key [..., Hkv, S, E],
    value [..., Hkv, S, Ev] -> [..., H, L, Ev].

    attn_mask broadcasts to [..., H, L, S]: a float mask is added to the scores, a bool mask
    keeps the positions that are True. is_causal is top-left aligned (query i sees keys
    j <= i) and may be combined with attn_mask. enable_gqa lets H be a multiple of Hkv;
    without it, a key or value head dimension of 1 broadcasts. A row that sees no key gives
    0, not NaN. Gradients reach query, key, value and sinks; attn_mask gets none."""
    kd = kind(query)
    same_kind(kd, "query", key=key, value=value, attn_mask=attn_mask)
    if kd == "dlpack":
        query, key, value, attn_mask, sinks = [
            from_dlpack(x)[0] if x is not None and hasattr(x, "__dlpack__") else x
            for x in (query, key, value, attn_mask, sinks)]
        kd = "torch"
    ops = _TorchOps if kd == "torch" else _NumpyOps
    if query.ndim < 3 or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ValueError("flashattn: sdpa needs query, key and value of one rank >= 3, got "
                         "shapes %s, %s, %s" % (tuple(query.shape), tuple(key.shape),
                                                tuple(value.shape)))
    if query.ndim == 3:   # [N, L, E]: one head
        query, key, value = query[:, None], key[:, None], value[:, None]
        if attn_mask is not None and attn_mask.ndim == 3:
            attn_mask = attn_mask[:, None]
        squeeze = True
    else:
        squeeze = False
    H, L_, Hkv, S = query.shape[-3], query.shape[-2], key.shape[-3], key.shape[-2]
    if enable_gqa:
        if Hkv == 0 or H % Hkv:
            raise ValueError("flashattn: sdpa with enable_gqa needs the query heads (%d) to "
                             "be a multiple of the key/value heads (%d)" % (H, Hkv))
        kv_heads = Hkv
    elif Hkv not in (H, 1) or value.shape[-3] not in (H, 1):
        raise ValueError("flashattn: sdpa key/value heads (%d) differ from query heads (%d): "
                         "pass enable_gqa=True" % (Hkv, H))
    else:
        kv_heads = H
    batch = tuple(query.shape[:-3])
    if key.shape[:-3] != batch or value.shape[:-3] != batch or key.shape[-3] != kv_heads \
            or value.shape[-3] != kv_heads:   # broadcast (stride-0 views, no copies)
        batch = _broadcast_shape(query.shape[:-3], key.shape[:-3], value.shape[:-3])
        query = ops.expand(query, batch + tuple(query.shape[-3:]))
        key = ops.expand(key, batch + (kv_heads,) + tuple(key.shape[-2:]))
        value = ops.expand(value, batch + (kv_heads,) + tuple(value.shape[-2:]))
    query, key, value = _to4(query, batch), _to4(key, batch), _to4(value, batch)
    bias = None
    if attn_mask is not None:
        if getattr(attn_mask, "requires_grad", False):
            raise NotImplementedError("flashattn: sdpa computes no gradient for attn_mask; "
                                      "pass attn_mask.detach()")
        # the shapes are compared here, before any array call: a refused expand would
        # raise from inside the array library
        want, have = batch + (H, L_, S), tuple(attn_mask.shape)
        if len(have) > len(want) or any(a != 1 and a != b for a, b in zip(have[::-1], want[::-1])):
            raise ValueError("flashattn: sdpa attn_mask of shape %s does not broadcast to "
                             "[..., H, L, S] = %s" % (have, want))
        m = ops.dense_last(ops.as_bias(attn_mask, query), S)
        m = _to4(ops.expand(m, want), batch)
        bias = ops.swap12(m)
    q, k, v = ops.swap12(query), ops.swap12(key), ops.swap12(value)
    causal = L.CAUSAL_TOP_LEFT if is_causal else L.CAUSAL_NONE
    if kd == "torch":
        from . import _torch_ops
        out, _ = _torch_ops.attention(q, k, v, aux_t(sinks, q, "sinks"), None, bias,
                                      rng_t(dropout_p), scale_arg(scale), causal, -1, -1,
                                      0.0, dropout_p, False, False)
    else:
        from . import _numpy_adapter as npa
        seed, offset = npa.draw_seed() if dropout_p else (0, 0)
        sc = scale_arg(scale)
        p = _impl.Params(sc if sc != 0.0 else None, causal, -1, -1, 0.0, None,
                         npa.aux_f32(sinks, "sinks"), bias, float(dropout_p), seed,
                         offset, False)
        out, _ = _impl.forward(npa.NUMPY, q, k, v, p, False)
    out = ops.swap12(out)
    if squeeze:
        return out[:, 0]
    return out.reshape(batch + tuple(out.shape[-3:])) if len(batch) != 1 else out


sdpa = scaled_dot_product_attention
