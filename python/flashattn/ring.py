"""Context-parallel ("ring") attention over torch.distributed, with autograd.

Every rank of a process group holds a shard of the sequence ([B, S_local, H, D], flash-attn's
layout). The K/V shards travel around the ring (rank r sends to r + 1 and receives from
r - 1) while each rank runs its queries against the block it holds; the partial results
are merged with the log-sum-exp rule in fp32. The backward runs the ring again, recomputing
each block with fa_backward from the saved global lse and output; dq stays on its rank and
each block's dK/dV accumulator (fp32) travels behind the block's K/V, so that after R steps
it arrives back at its owner.

The block geometry mirrors the C ring library (ring/ring_calls.c, ring_calls): each
(query chunk, key chunk) pair is one call whose window bounds are the global mask's lines
shifted into the call's own bottom-right alignment, over the keys its rows see (blocks no
row sees are skipped). With ALiBi the rows whose position falls among the block's keys run
aligned with the global sequence; the others see keys on one side only, and their bias
splits into a per-key bias tensor and a per-row shift of the call's lse.
"""
import collections
import ctypes

import torch
import torch.distributed as dist

from . import _impl
from . import _lib as L
from ._arrays import scale_arg, window_arg
from ._torch_adapter import TORCH

_TAG_KV, _TAG_DKV = 100, 200
_LAYOUTS = {"contiguous": 0, "zigzag": 1}
_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


# ---- geometry ------------------------------------------------------------------------------

class _Geometry:
    """The global layout: lens[r] = (q chunk 0, q chunk 1, kv chunk 0, kv chunk 1) of rank r
    (chunk 1 is empty for the contiguous layout)."""

    def __init__(self, lens, rank, zigzag, causal, window=(-1, -1), alibi=False):
        self.lens, self.rank, self.zigzag, self.R = lens, rank, zigzag, len(lens)
        self.Sq = sum(x[0] + x[1] for x in lens)
        self.Sk = sum(x[2] + x[3] for x in lens)
        self.causal = causal
        self.off = self.Sk - self.Sq   # flash-attn's bottom-right alignment, global
        bound = lambda x: x if 0 <= x < 1 << 62 else -1   # noqa: E731
        self.wl = bound(window[0])
        self.wr = 0 if causal else bound(window[1])
        self.alibi = alibi

    def nk(self, r):
        return self.lens[r][2] + self.lens[r][3]

    def _chunk_len(self, c, part):
        if not self.zigzag:
            return self.lens[c][part]
        return self.lens[c][part] if c < self.R else self.lens[2 * self.R - 1 - c][part + 1]

    def segments(self, r, part):
        """[(global start, length, local row)] of rank r's two chunks (part 0: q, 2: kv)."""
        R = self.R
        mine = (r, 2 * R - 1 - r) if self.zigzag else (r, -1)
        seg = [[0, 0, 0], [0, 0, self.lens[r][part]]]
        pos = 0
        for c in range(2 * R if self.zigzag else R):
            n = self._chunk_len(c, part)
            for i in (0, 1):
                if c == mine[i]:
                    seg[i][0], seg[i][1] = pos, n
            pos += n
        return seg

    def calls(self, kr):
        """The fa_forward/fa_backward calls of this rank's queries against rank kr's block
        (_Call tuples: rows, keys, the call's own causal flag, window and ALiBi form)."""
        out = []
        for qs, qn, qrow in self.segments(self.rank, 0):
            for ks, kn, krow in self.segments(kr, 2):
                if qn and kn:
                    self._pair(out, qrow, krow, qs + self.off - ks, qn, kn)
        return out

    def _pair(self, out, qrow, krow, D, qn, kn):
        """Row i of the query chunk sits at key i + D of the key chunk."""
        wl, wr = self.wl, self.wr
        ia = 0 if wr < 0 else min(max(-D - wr, 0), qn)   # rows that see some key
        ib = qn if wl < 0 else min(max(kn - D + wl, 0), qn)
        if ia >= ib:
            return
        emit = lambda *a: self._emit(out, qrow, krow, D, *a)   # noqa: E731
        if not self.alibi:
            emit(ia, ib, 0, kn, _NO_ALIBI)
            return
        s0, s1 = min(max(-D, ia), ib), min(max(kn - D, ia), ib)
        emit(ia, s0, 0, kn, _SPLIT)             # every key ahead of the row
        emit(s0, s1, 0, s1 + D, _EXACT)         # the row's position among the keys
        emit(s0, s1, s1 + D, kn, _SPLIT)        # the keys ahead of those rows
        emit(s1, ib, 0, kn, _SPLIT)             # every key behind the row

    def _emit(self, out, qrow, krow, D, r0, r1, kmin, kmax, alibi):
        wl, wr = self.wl, self.wr
        if wl >= 0:
            r1 = min(r1, kmax - D + wl)
        if wr >= 0:
            r0 = max(r0, kmin - D - wr)
        if r0 >= r1 or kmin >= kmax:
            return
        klo = kmin if wl < 0 else max(kmin, r0 + D - wl)
        khi = kmax if wr < 0 else min(kmax, r1 + D + wr)
        if klo >= khi:
            return
        m, n = r1 - r0, khi - klo
        Dc, off = khi - r1, n - m
        lc = -1 if wl < 0 else Dc - D + wl
        rc = -1 if wr < 0 else D + wr - Dc
        left = lc >= 0 and m - 1 + off - lc > 0
        right = rc >= 0 and off + rc < n - 1
        causal = right and rc == 0
        win = (lc if left else -1, -1 if causal or not right else rc)
        if causal and left:
            win = (lc, 0)
        kink = r0 + D - klo if alibi == _SPLIT else 0
        jref = (n - 1 if khi - 1 <= r0 + D else 0) if alibi == _SPLIT else 0
        out.append(_Call(qrow + r0, m, krow + klo, n, causal, win, alibi, kink, jref))


_NO_ALIBI, _EXACT, _SPLIT = 0, 1, 2
_Call = collections.namedtuple("_Call", "q0 n k0 nk causal window alibi kink jref")


def _split(n, zigzag):
    return ((n + 1) // 2, n // 2) if zigzag else (n, 0)


# ---- point-to-point around the ring --------------------------------------------------------

def _global_rank(group, r):
    if group is None or group is dist.GroupMember.WORLD:
        return r
    if hasattr(dist, "get_global_rank"):
        return dist.get_global_rank(group, r)
    return dist.distributed_c10d._get_global_rank(group, r)


class _Ring:
    """The group's neighbours and where messages live: the tensors' own CUDA device under
    NCCL, host memory (staged copies) under any other backend (gloo)."""

    def __init__(self, group, device):
        self.group = group
        self.R, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.next = _global_rank(group, (self.rank + 1) % self.R)
        self.prev = _global_rank(group, (self.rank - 1) % self.R)
        self.device = device
        backend = str(dist.get_backend(group))   # "nccl", "gloo", "cpu:gloo,cuda:nccl"...
        nccl = backend == "nccl" or (device.type == "cuda" and "cuda:nccl" in backend)
        if nccl and (device.type != "cuda" or device.index != torch.cuda.current_device()):
            raise ValueError("flashattn: ring_attention over NCCL needs the tensors on the "
                             "current CUDA device (cuda:%d), got %s"
                             % (torch.cuda.current_device(), device))
        self.comm = device if nccl else torch.device("cpu")

    def exchange(self, sends, recvs, tag):
        """Posts sends (to next) and receives of (shape, dtype) (from prev); empty tensors
        are not sent (both ends know their sizes). Returns the pending exchange."""
        ops, bufs = [], []
        for i, t in enumerate(sends):
            if t.numel():
                t = t.to(self.comm).contiguous()
                bufs.append(t)   # kept alive until the send completes
                ops.append(dist.P2POp(dist.isend, t, self.next, self.group, tag + i))
        got = []
        for i, (shape, dtype) in enumerate(recvs):
            b = torch.empty(shape, dtype=dtype, device=self.comm)
            got.append(b)
            if b.numel():
                ops.append(dist.P2POp(dist.irecv, b, self.prev, self.group, tag + i))
        return _Pending(dist.batch_isend_irecv(ops) if ops else [], bufs, got, self.device)


class _Pending:
    def __init__(self, works, sent, got, device):
        self.works, self.sent, self.got, self.device = works, sent, got, device

    def wait(self):
        for w in self.works:
            w.wait()
        self.sent = None
        return [b.to(self.device) for b in self.got]


def _probe(cfg, q, k, v):
    """Whether this rank's library serves its block calls (fa_query, and fa_query_backward
    when a gradient is wanted) on one-row stand-ins: 0 or (fa_status, message)."""
    B, H, Hkv, D, Dv = q.shape[0], q.shape[2], k.shape[2], q.shape[3], v.shape[3]
    f32 = torch.float32
    shapes = [((B, 1, H, D), q.dtype), ((B, 1, Hkv, D), q.dtype), ((B, 1, Hkv, Dv), q.dtype),
              ((B, 1, H, Dv), f32), ((B, 1, H, D), f32), ((B, 1, Hkv, D), f32),
              ((B, 1, Hkv, Dv), f32), ((B, 1, H, Dv), q.dtype)]
    ts = [torch.zeros(sh, dtype=dt, device=q.device) for sh, dt in shapes]
    q1, k1, v1, o1, dq1, dk1, dv1, oq1 = [TORCH.fa(x) for x in ts]
    lse = torch.zeros((B, H, 1), dtype=f32, device=q.device)
    name = ctypes.c_char_p()
    try:
        for c in _probe_calls(cfg):
            opt = _params(cfg, c).options(TORCH)
            TORCH.call(q, L.lib.fa_query, ctypes.byref(name), o1, lse.data_ptr(), q1, k1, v1,
                       opt)
            if cfg.need_grad:
                TORCH.call(q, _query_backward(), ctypes.byref(name), dq1, dk1, dv1, None, oq1,
                           q1, k1, v1, oq1, lse.data_ptr(), opt)
    except L.FlashAttnError as e:
        return (e.status, str(e))
    return 0


def _probe_calls(cfg):
    """One-row stand-ins of the kinds of calls the ring makes with these settings."""
    calls = [None]
    if cfg.causal:
        calls.append(_Call(0, 1, 0, 1, True, (-1, 0), _NO_ALIBI, 0, 0))
    if cfg.window != (-1, -1):
        calls.append(_Call(0, 1, 0, 1, False, (1, 1), _NO_ALIBI, 0, 0))
    if cfg.slopes is not None:
        calls += [_Call(0, 1, 0, 1, False, (-1, -1), a, 0, 0) for a in (_EXACT, _SPLIT)]
    return calls


def _query_backward():
    fn = L.lib.fa_query_backward
    if fn.restype is not ctypes.c_int or fn.argtypes is None:
        T = ctypes.POINTER(L.FaTensor)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), T, T, T,
                       ctypes.c_void_p, T, T, T, T, T, ctypes.c_void_p,
                       ctypes.POINTER(L.FaOptions)]
    return fn


def _bits(x):
    return int(torch.tensor(float(x), dtype=torch.float32).view(torch.int32))


_AGREE = ["batch", "heads", "kv heads", "head_dim", "v head_dim", "dtype", "causal",
          "sinks (None or not)", "layout", "softmax_scale", "softcap", "window_size[0]",
          "window_size[1]", "alibi_slopes (None or not)"]


def _gather_setup(cfg, ring, q, k, v, sinks):
    """All-gathers every rank's shard lengths, settings and verdict on its block calls; a
    mismatch or a refusal raises on every rank alike (ValueError for a mismatch)."""
    zig = cfg.layout == "zigzag"
    verdict = _probe(cfg, q, k, v)
    meta = [*_split(q.shape[1], zig), *_split(k.shape[1], zig), q.shape[0], q.shape[2],
            k.shape[2], q.shape[3], v.shape[3], _DTYPES.get(q.dtype, -1), int(cfg.causal),
            int(sinks is not None), _LAYOUTS[cfg.layout], _bits(cfg.scale or 0.0),
            _bits(cfg.softcap), cfg.window[0], cfg.window[1], int(cfg.slopes is not None),
            verdict[0] if verdict else 0]
    mine = torch.tensor(meta, dtype=torch.int64, device=ring.comm)
    table = [torch.empty_like(mine) for _ in range(ring.R)]
    dist.all_gather(table, mine, group=ring.group)
    table = [t.tolist() for t in table]
    for r in range(1, ring.R):
        for i, name in enumerate(_AGREE):
            if table[r][4 + i] != table[0][4 + i]:
                raise ValueError("flashattn: ring_attention: rank %d's %s differs from rank "
                                 "0's" % (r, name))
    if verdict:
        raise L._ERRORS.get(verdict[0], L.InternalError)(verdict[1])
    for r in range(ring.R):
        if table[r][-1]:
            raise L._ERRORS.get(table[r][-1], L.InternalError)(
                "flashattn: ring_attention: rank %d's library refuses its block calls "
                "(its own error says why)" % r)
    return _Geometry([tuple(t[:4]) for t in table], ring.rank, zig, bool(cfg.causal),
                     cfg.window, cfg.slopes is not None)


# ---- one block: the C calls with fp32 results ----------------------------------------------

def _params(cfg, c=None):
    """The options of call c (None: a plain, unmasked call)."""
    causal = c is not None and c.causal
    p = _impl.Params(cfg.scale, L.CAUSAL_BOTTOM_RIGHT if causal else L.CAUSAL_NONE,
                     softcap=cfg.softcap, deterministic=cfg.deterministic)
    if c is not None:
        p.window_left, p.window_right = c.window
        if c.alibi == _EXACT:
            p.alibi = cfg.slopes
        elif c.alibi == _SPLIT:   # -slope |j - jref| per key, the same for every row
            j = torch.arange(c.nk, device=cfg.slopes.device, dtype=torch.float32)
            b = -cfg.slopes.view(-1, 1) * (j - c.jref).abs()
            p.bias = b.view(1, 1, -1, c.nk).expand(1, c.n, -1, c.nk)
    return p


def _lse_shift(cfg, c, like):
    """What a split-ALiBi call's lse lacks: -slope |i + kink - jref| [1, H, n] (0 else)."""
    if c.alibi != _SPLIT:
        return 0.0
    i = torch.arange(c.n, device=like.device, dtype=torch.float32)
    return (-cfg.slopes.view(-1, 1) * (i + (c.kink - c.jref)).abs()).unsqueeze(0)


def _block_forward(q, k, v, p):
    B, n, H = q.shape[0], q.shape[1], q.shape[2]
    out = torch.empty((B, n, H, v.shape[3]), dtype=torch.float32, device=q.device)
    lse = torch.empty((B, H, n), dtype=torch.float32, device=q.device)
    TORCH.call(q, L.lib.fa_forward, TORCH.fa(out), lse.data_ptr(), TORCH.fa(q), TORCH.fa(k),
               TORCH.fa(v), p.options(TORCH))
    return out, lse


def _block_backward(dout, q, k, v, out, lse, p):
    f32 = torch.float32
    dq = torch.empty(q.shape, dtype=f32, device=q.device)
    dk = torch.empty(k.shape, dtype=f32, device=q.device)
    dv = torch.empty(v.shape, dtype=f32, device=q.device)
    lse = lse.contiguous()   # held here while the C call reads it
    TORCH.call(q, L.lib.fa_backward, TORCH.fa(dq), TORCH.fa(dk), TORCH.fa(dv), None,
               TORCH.fa(dout), TORCH.fa(q), TORCH.fa(k), TORCH.fa(v), TORCH.fa(out),
               lse.data_ptr(), p.options(TORCH))
    return dq, dk, dv


def _merge(acc, acc_lse, part, plse, r0, n):
    """acc[:, r0:r0+n] and acc_lse[..., r0:r0+n] (fp32) absorb the partial (part, plse)."""
    a = acc_lse[:, :, r0:r0 + n]
    m = torch.maximum(a, plse)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)   # both -inf: weights 0
    wa, wp = torch.exp(a - m), torch.exp(plse - m)
    s = wa + wp
    inv = torch.where(s > 0, 1.0 / s, torch.zeros_like(s))
    ca = (wa * inv).transpose(1, 2).unsqueeze(-1)
    cp = (wp * inv).transpose(1, 2).unsqueeze(-1)
    acc[:, r0:r0 + n] = acc[:, r0:r0 + n] * ca + part * cp
    acc_lse[:, :, r0:r0 + n] = m + torch.log(s)


# ---- the ring forward and backward ---------------------------------------------------------

def _kv_shapes(g, k, v, r):
    n = g.nk(r)
    return ((k.shape[0], n, k.shape[2], k.shape[3]), k.dtype), \
        ((v.shape[0], n, v.shape[2], v.shape[3]), v.dtype)


def _ring_forward(cfg, ring, g, q, k, v, sinks):
    B, nq, H, Dv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
    acc = torch.zeros((B, nq, H, Dv), dtype=torch.float32, device=q.device)
    acc_lse = torch.full((B, H, nq), float("-inf"), dtype=torch.float32, device=q.device)
    kb, vb = k, v
    for t in range(ring.R):
        owner = (ring.rank - t) % ring.R
        pend = None
        if t < ring.R - 1:   # the next block is on its way while this one is computed
            pend = ring.exchange([kb, vb], _kv_shapes(g, k, v, (owner - 1) % ring.R), _TAG_KV)
        for c in g.calls(owner):
            q0, n, k0, nk = c.q0, c.n, c.k0, c.nk
            part, plse = _block_forward(q[:, q0:q0 + n], kb[:, k0:k0 + nk], vb[:, k0:k0 + nk],
                                        _params(cfg, c))
            _merge(acc, acc_lse, part, plse + _lse_shift(cfg, c, plse), q0, n)
        if pend is not None:
            kb, vb = pend.wait()
    if sinks is not None and nq:   # the sink: one more partial, no value rows
        sl = sinks.float().view(1, H, 1).expand(B, H, nq)
        _merge(acc, acc_lse, torch.zeros_like(acc), sl, 0, nq)
    return acc.to(q.dtype), acc_lse


def _local_dsinks(sinks, dout, out, lse):
    """d loss / d sinks over this rank's rows: -sum_rows exp(sink - lse) * rowsum(dO * O)."""
    if out.shape[1] == 0:
        return torch.zeros(sinks.shape, dtype=torch.float32, device=sinks.device)
    D = (dout.float() * out.float()).sum(-1).transpose(1, 2)     # [B, H, nq]
    p = torch.exp(sinks.float().view(1, -1, 1) - lse)
    return -(p * D).sum(dim=(0, 2))


def _ring_backward(cfg, ring, g, dout, q, k, v, out, lse, sinks):
    f32 = torch.float32
    dq = torch.zeros(q.shape, dtype=f32, device=q.device)
    acc = [torch.zeros(k.shape, dtype=f32, device=q.device),
           torch.zeros(v.shape, dtype=f32, device=q.device)]
    kb, vb, acc_pend = k, v, None
    R = ring.R
    for t in range(R):
        owner = (ring.rank - t) % R
        incoming = (owner - 1) % R   # the block of step t + 1 (of this rank at t = R - 1)
        kv_pend = None
        if t < R - 1:
            kv_pend = ring.exchange([kb, vb], _kv_shapes(g, k, v, incoming), _TAG_KV)
        pk = torch.zeros(kb.shape, dtype=f32, device=q.device)
        pv = torch.zeros(vb.shape, dtype=f32, device=q.device)
        for c in g.calls(owner):
            q0, n, k0, nk = c.q0, c.n, c.k0, c.nk
            clse = lse[:, :, q0:q0 + n] - _lse_shift(cfg, c, lse)
            dqc, dkc, dvc = _block_backward(
                dout[:, q0:q0 + n], q[:, q0:q0 + n], kb[:, k0:k0 + nk], vb[:, k0:k0 + nk],
                out[:, q0:q0 + n], clse, _params(cfg, c))
            dq[:, q0:q0 + n] += dqc
            pk[:, k0:k0 + nk] += dkc
            pv[:, k0:k0 + nk] += dvc
        if acc_pend is not None:   # the owner's accumulator, sent on by rank r - 1
            acc = acc_pend.wait()
        acc = [acc[0] + pk, acc[1] + pv]
        if R > 1:
            shapes = [((s[0], g.nk(incoming), s[2], s[3]), f32) for s in (k.shape, v.shape)]
            acc_pend = ring.exchange(acc, shapes, _TAG_DKV)
        if kv_pend is not None:
            kb, vb = kv_pend.wait()
    if acc_pend is not None:
        acc = acc_pend.wait()   # this rank's own block, back from its trip
    ds = None
    if sinks is not None:   # every rank joins the sum, whatever its rows
        ds = _local_dsinks(sinks, dout, out, lse).to(ring.comm)
        dist.all_reduce(ds, group=ring.group)
        ds = ds.to(sinks.device)
    return dq.to(q.dtype), acc[0].to(k.dtype), acc[1].to(v.dtype), ds


class _Config:
    __slots__ = ("group", "layout", "causal", "scale", "softcap", "deterministic",
                 "need_grad", "window", "slopes")

    def __init__(self, group, layout, causal, scale, softcap, deterministic, window, slopes):
        self.group, self.layout, self.causal = group, layout, causal
        self.scale, self.softcap, self.deterministic = scale, softcap, deterministic
        self.window, self.slopes = window, slopes
        self.need_grad = False


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, cfg):
        q, k, v = (TORCH.unit_last(x).contiguous() for x in (q, k, v))
        ring = _Ring(cfg.group, q.device)
        g = _gather_setup(cfg, ring, q, k, v, sinks)
        out, lse = _ring_forward(cfg, ring, g, q, k, v, sinks)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.cfg, ctx.ring, ctx.geom = cfg, ring, g
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, sinks = ctx.saved_tensors
        dout = TORCH.unit_last(dout).to(out.dtype)
        dq, dk, dv, ds = _ring_backward(ctx.cfg, ctx.ring, ctx.geom, dout, q, k, v, out,
                                        lse, sinks)
        return dq, dk, dv, ds, None


def ring_attention(q, k, v, group=None, causal=False, softmax_scale=None, layout="contiguous",
                   sinks=None, softcap=0.0, deterministic=False, *, window_size=(-1, -1),
                   alibi_slopes=None, dropout_p=0.0, return_lse=False):
    """Attention of this rank's queries over the whole sequence, sharded over `group`.

    q [B, Sq_local, H, d], k [B, Sk_local, Hkv, d], v [B, Sk_local, Hkv, d_v]: this rank's
    shard (torch tensors, CPU or CUDA; shards may differ in length, even be empty).
    layout "contiguous": rank r holds chunk r of R; "zigzag": chunks r and 2R-1-r of 2R
    (causal load balance), the local shard being the first chunk's ceil(n/2) tokens then
    the second chunk's floor(n/2), for q and for k/v alike. causal is flash-attn's
    bottom-right alignment over the global sequence (query i sees keys up to
    i + Sk_total - Sq_total). sinks: fp32 [H], counted once per row; dsinks is summed over
    the ranks. Returns out [B, Sq_local, H, d_v] (and lse [B, H, Sq_local] with return_lse),
    differentiable in q, k, v and sinks. Every rank of the group must call it with the same
    settings (checked: ValueError on every rank); a call the library refuses on one rank
    raises on every rank. window_size (left, right) and alibi_slopes (fp32 [H]) apply at
    global positions, as flash_attn_func over the whole sequence; no gradient flows into
    the slopes. Dropout raises NotImplementedError (its keep-mask is keyed by positions
    within one call, which no option shifts to global positions)."""
    window = window_arg(window_size)
    if window[0] < -1 or window[1] < -1:
        raise ValueError("flashattn: ring_attention's window_size entries must be -1 or >= 0, "
                         "got %r" % (window_size,))
    if dropout_p:
        raise NotImplementedError("flashattn: ring_attention does not support dropout")
    if layout not in _LAYOUTS:
        raise ValueError("flashattn: ring_attention layout must be 'contiguous' or "
                         "'zigzag', got %r" % (layout,))
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError("flashattn: ring_attention's %s must be a 4-D torch tensor "
                             "[batch, seqlen, heads, head_dim]" % name)
    if sinks is not None and (sinks.dtype != torch.float32 or sinks.shape != (q.shape[2],)):
        raise ValueError("flashattn: sinks must be fp32 [heads] (%d), got %s %s"
                         % (q.shape[2], sinks.dtype, tuple(sinks.shape)))
    if alibi_slopes is not None:
        alibi_slopes = torch.as_tensor(alibi_slopes)
        if alibi_slopes.dtype != torch.float32 or tuple(alibi_slopes.shape) != (q.shape[2],):
            raise ValueError("flashattn: alibi_slopes must be fp32 [heads] (%d), got %s %s"
                             % (q.shape[2], alibi_slopes.dtype, tuple(alibi_slopes.shape)))
        alibi_slopes = alibi_slopes.detach().to(q.device).contiguous()
    scale = None if softmax_scale is None else scale_arg(softmax_scale)
    cfg = _Config(group, layout, bool(causal), scale, float(softcap), bool(deterministic),
                  window, alibi_slopes)
    cfg.need_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, sinks))
    out, lse = _RingAttention.apply(q, k, v, sinks, cfg)
    return (out, lse) if return_lse else out


__all__ = ["ring_attention"]
