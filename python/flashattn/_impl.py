"""The C calls, written once for every array kind.

`A` is an adapter (_torch_adapter.TORCH or _numpy_adapter.NUMPY): it turns arrays into
fa_tensor views, allocates outputs, and runs a call on the right context. Inputs are 4-D
[batch, seqlen, heads, head_dim] views; nothing is copied unless the last dimension is
strided (the C API needs stride[3] = 1).
"""
from . import _lib as L


class Params:
    """The scalar and auxiliary-array settings of one attention call (fa_options)."""
    __slots__ = ("scale", "causal", "window_left", "window_right", "softcap", "alibi",
                 "sinks", "bias", "dropout_p", "seed", "offset", "deterministic")

    def __init__(self, scale=None, causal=L.CAUSAL_NONE, window_left=-1, window_right=-1,
                 softcap=0.0, alibi=None, sinks=None, bias=None, dropout_p=0.0, seed=0,
                 offset=0, deterministic=False):
        self.scale, self.causal = scale, causal
        self.window_left, self.window_right = window_left, window_right
        self.softcap, self.alibi, self.sinks, self.bias = softcap, alibi, sinks, bias
        self.dropout_p, self.seed, self.offset = dropout_p, seed, offset
        self.deterministic = deterministic

    def options(self, A):
        return L.options(self.scale, self.causal, (self.window_left, self.window_right),
                         self.softcap, A.ptr(self.alibi), A.ptr(self.sinks),
                         None if self.bias is None else A.fa(self.bias), self.dropout_p,
                         self.seed, self.offset, self.deterministic)

    def arrays(self):
        return [x for x in (self.alibi, self.sinks, self.bias) if x is not None]


def _need4(A, **arrays):
    for name, a in arrays.items():
        if a is not None and A.ndim(a) != 4:
            raise ValueError("flashattn: %s must be 4-D [batch, seqlen, heads, head_dim], "
                             "got shape %s" % (name, tuple(a.shape)))


def same_dtype(q, **arrays):
    """The inputs the C API takes in q's dtype (k, v, dout, the caches) have it."""
    for name, a in arrays.items():
        if a is not None and a.dtype != q.dtype:
            raise ValueError("flashattn: %s has dtype %s but q has %s: q, k, v (and dout, the "
                             "caches) share one dtype" % (name, a.dtype, q.dtype))


def per_head(H, alibi, sinks):
    """alibi_slopes and sinks hold one fp32 value per query head: the C call reads H."""
    for name, a in (("alibi_slopes", alibi), ("sinks", sinks)):
        if a is not None and tuple(a.shape) != (H,):
            raise ValueError("flashattn: %s must have one value per query head, shape (%d,); "
                             "got shape %s" % (name, H, tuple(a.shape)))


def forward(A, q, k, v, p, need_lse=True):
    """fa_forward: (out, lse or None)."""
    _need4(A, q=q, k=k, v=v)
    same_dtype(q, k=k, v=v)
    per_head(q.shape[2], p.alibi, p.sinks)
    q, k, v = A.unit_last(q), A.unit_last(k), A.unit_last(v)
    A.same_place(q, k, v, *p.arrays())
    B, Sq, H = q.shape[0], q.shape[1], q.shape[2]
    out = A.empty_like_layout(q, (B, Sq, H, v.shape[3]))
    lse = A.empty_f32((B, H, Sq), q) if need_lse else None
    A.call(q, L.lib.fa_forward, A.fa(out), A.ptr(lse), A.fa(q), A.fa(k), A.fa(v),
           p.options(A))
    return out, lse


def backward(A, dout, q, k, v, out, lse, p, need_dsinks):
    """fa_backward: (dq, dk, dv, dsinks or None)."""
    _need4(A, dout=dout, q=q, k=k, v=v, out=out)
    same_dtype(q, k=k, v=v, dout=dout)
    per_head(q.shape[2], p.alibi, p.sinks)
    dout, q, k, v = A.unit_last(dout), A.unit_last(q), A.unit_last(k), A.unit_last(v)
    A.same_place(q, dout, k, v, out, lse, *p.arrays())
    dq, dk, dv = A.empty_like(q), A.empty_like(k), A.empty_like(v)
    dsinks = A.empty_f32(p.sinks.shape, q) if need_dsinks else None
    A.call(q, L.lib.fa_backward, A.fa(dq), A.fa(dk), A.fa(dv), A.ptr(dsinks), A.fa(dout),
           A.fa(q), A.fa(k), A.fa(v), A.fa(out), A.ptr(lse), p.options(A))
    return dq, dk, dv, dsinks


def _packed(A, name, x):
    """A [total, heads, dim] varlen array as the [1, total, heads, dim] view the C takes."""
    if A.ndim(x) != 3:
        raise ValueError("flashattn: %s must be 3-D [total_tokens, heads, head_dim], got "
                         "shape %s" % (name, tuple(x.shape)))
    return A.unsqueeze0(A.unit_last(x))


def _cu_seqlens(cu_q, cu_k):
    """cu_seqlens_q and cu_seqlens_k: 1-D, batch + 1 >= 1 entries each, the same count."""
    if len(cu_q.shape) != 1 or len(cu_k.shape) != 1 or cu_q.shape[0] < 1 \
            or cu_q.shape != cu_k.shape:
        raise ValueError("flashattn: cu_seqlens_q and cu_seqlens_k must be 1-D with batch + 1 "
                         "entries each; got shapes %s and %s"
                         % (tuple(cu_q.shape), tuple(cu_k.shape)))


def forward_varlen(A, q, k, v, cu_q, cu_k, max_q, max_k, p, need_lse=True):
    """fa_forward_varlen on [total, heads, dim] arrays: (out [total_q, H, d_v], lse)."""
    q4, k4, v4 = _packed(A, "q", q), _packed(A, "k", k), _packed(A, "v", v)
    same_dtype(q, k=k, v=v)
    per_head(q4.shape[2], p.alibi, p.sinks)
    _cu_seqlens(cu_q, cu_k)
    A.same_place(q, k, v, cu_q, cu_k, *p.arrays())
    T, H = q4.shape[1], q4.shape[2]
    # rows past cu_seqlens[batch] are not written by the C call: zeros there
    out = A.zero_(A.empty_like_layout(q4, (1, T, H, v4.shape[3])))
    lse = A.zero_(A.empty_f32((H, T), q)) if need_lse else None
    A.call(q, L.lib.fa_forward_varlen, A.fa(out), A.ptr(lse), A.fa(q4), A.fa(k4), A.fa(v4),
           A.ptr(cu_q), A.ptr(cu_k), cu_q.shape[0] - 1, max_q, max_k, p.options(A))
    return out[0], lse


def backward_varlen(A, dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, p, need_dsinks):
    d4, q4, k4, v4 = (_packed(A, "dout", dout), _packed(A, "q", q), _packed(A, "k", k),
                      _packed(A, "v", v))
    o4 = _packed(A, "out", out)
    same_dtype(q, k=k, v=v, dout=dout)
    per_head(q4.shape[2], p.alibi, p.sinks)
    _cu_seqlens(cu_q, cu_k)
    A.same_place(q, dout, k, v, out, lse, cu_q, cu_k, *p.arrays())
    dq, dk, dv = A.zero_(A.empty_like(q4)), A.zero_(A.empty_like(k4)), A.zero_(A.empty_like(v4))
    dsinks = A.empty_f32(p.sinks.shape, q) if need_dsinks else None
    A.call(q, L.lib.fa_backward_varlen, A.fa(dq), A.fa(dk), A.fa(dv), A.ptr(dsinks),
           A.fa(d4), A.fa(q4), A.fa(k4), A.fa(v4), A.fa(o4), A.ptr(lse), A.ptr(cu_q),
           A.ptr(cu_k), cu_q.shape[0] - 1, max_q, max_k, p.options(A))
    return dq[0], dk[0], dv[0], dsinks


def forward_kvcache(A, q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, p,
                    need_lse=True):
    """fa_forward_kvcache; k_new/v_new are written into the caches in place."""
    _need4(A, q=q, k_cache=k_cache, v_cache=v_cache, k=k_new, v=v_new)
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if A.stride(c, 3) != 1:
            raise ValueError("flashattn: %s must have a unit last stride (it is written in "
                             "place), got strides %s" % (name, tuple(A.strides(c))))
    same_dtype(q, k_cache=k_cache, v_cache=v_cache, k=k_new, v=v_new)
    per_head(q.shape[2], p.alibi, p.sinks)
    B = q.shape[0]
    if tuple(cache_seqlens.shape) != (B,):
        raise ValueError("flashattn: cache_seqlens must hold one length per sequence, shape "
                         "(%d,); got shape %s" % (B, tuple(cache_seqlens.shape)))
    if block_table is not None and (len(block_table.shape) != 2 or block_table.shape[0] != B):
        raise ValueError("flashattn: block_table must be [batch, max_pages] with batch = %d; "
                         "got shape %s" % (B, tuple(block_table.shape)))
    q = A.unit_last(q)
    if k_new is not None:
        k_new = A.unit_last(k_new)
    if v_new is not None:
        v_new = A.unit_last(v_new)
    A.same_place(q, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, *p.arrays())
    B, Sq, H = q.shape[0], q.shape[1], q.shape[2]
    out = A.empty_like_layout(q, (B, Sq, H, v_cache.shape[3]))
    lse = A.empty_f32((B, H, Sq), q) if need_lse else None
    pages = 0 if block_table is None else block_table.shape[1]
    A.call(q, L.lib.fa_forward_kvcache, A.fa(out), A.ptr(lse), A.fa(q), A.fa(k_cache),
           A.fa(v_cache), A.fa_opt(k_new), A.fa_opt(v_new), A.ptr(cache_seqlens),
           A.ptr(block_table), pages, p.options(A))
    return out, lse
