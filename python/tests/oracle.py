"""The one correctness rule, from the C suites: liboracle (tests/oracle) loaded with ctypes.

python/run-tests.sh names the module make check builds (tests/oracle/liboracle_py.so) in
$FLASHATTN_ORACLE_LIB. A call's oracle is computed in double precision by the C code from
CPU copies of the inputs as the library received them, and every result is checked with
or_check, the rule of the C suites and of the CUDA test (per-term floors included).

    o = oracle.dense(q, k, v, dtype=..., causal="br", ...)   # [B, S, H, D] inputs
    o.check("out", oracle.OUT, out)
    o.check("lse", oracle.LSE, oracle.lse_rows(lse))          # [B, H, S] -> [H, B * S]

Layouts (the oracle's: nq query rows, nk key rows over all sequences):
    out [nq][H][Dv]  lse [H][nq]  dq [nq][H][D]  dk [nk][Hkv][D]  dv [nk][Hkv][Dv]  dsinks [H]
"""
import ctypes
import math
import os

import numpy as np
import torch

OUT, LSE, DQ, DK, DV, DSINKS = range(6)
CAUSAL = {None: 0, "br": 1, "tl": 2}
DTYPE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_P = ctypes.POINTER(ctypes.c_double)


class SeqData(ctypes.Structure):
    _fields_ = [("q", _P), ("k", _P), ("v", _P), ("dout", _P), ("bias", _P),
                ("sq", ctypes.c_int64), ("sk", ctypes.c_int64), ("q_row", ctypes.c_int64),
                ("k_row", ctypes.c_int64), ("drop_b", ctypes.c_int64),
                ("drop_i0", ctypes.c_int64)]


class Problem(ctypes.Structure):
    _fields_ = [("nseq", ctypes.c_int64), ("nq", ctypes.c_int64), ("nk", ctypes.c_int64),
                ("hq", ctypes.c_int64), ("hkv", ctypes.c_int64), ("dqk", ctypes.c_int64),
                ("dv", ctypes.c_int64), ("dt", ctypes.c_int), ("odt", ctypes.c_int),
                ("scale", ctypes.c_double), ("causal", ctypes.c_int), ("window", ctypes.c_int),
                ("wl", ctypes.c_int64), ("wr", ctypes.c_int64), ("softcap", ctypes.c_double),
                ("alibi", _P), ("sinks", _P), ("dropout_p", ctypes.c_float),
                ("seed", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("large_logits", ctypes.c_int), ("seqs", ctypes.POINTER(SeqData))]


class Result(ctypes.Structure):
    _fields_ = [("pass_", ctypes.c_int), ("exact", ctypes.c_int), ("err", ctypes.c_double),
                ("bound", ctypes.c_double), ("factor", ctypes.c_double),
                ("nerr", ctypes.c_double), ("mag", ctypes.c_double),
                ("term_floor", ctypes.c_double), ("worst", ctypes.c_int64),
                ("ours_w", ctypes.c_double), ("orc_w", ctypes.c_double)]


def _load():
    path = os.environ.get("FLASHATTN_ORACLE_LIB")
    if not path:
        raise RuntimeError("FLASHATTN_ORACLE_LIB is not set: it names liboracle_py.so, which "
                           "make check builds in tests/oracle/.libs (python/run-tests.sh sets it)")
    lib = ctypes.CDLL(path)
    lib.or_py_compute.restype = ctypes.c_void_p
    lib.or_py_compute.argtypes = [ctypes.POINTER(Problem), ctypes.c_int]
    lib.or_py_free.argtypes = [ctypes.c_void_p]
    lib.or_py_count.restype = ctypes.c_int64
    lib.or_py_count.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.or_py_check.argtypes = [ctypes.c_void_p, ctypes.c_int, _P, ctypes.POINTER(Result)]
    lib.or_py_result_str.argtypes = [ctypes.POINTER(Result), ctypes.c_int, ctypes.c_char_p,
                                     ctypes.c_size_t]
    sizes = (ctypes.c_size_t * 3)()
    lib.or_py_sizes(sizes)
    want = (ctypes.sizeof(Problem), ctypes.sizeof(SeqData), ctypes.sizeof(Result))
    if tuple(sizes) != want:
        raise RuntimeError("oracle.py's mirrors of or_problem, or_seq_data, or_result %s do "
                           "not match the C sizes %s" % (want, tuple(sizes)))
    return lib


_LIB = _load()


def _f64(x):
    """A C-contiguous float64 numpy copy of a tensor or array (None stays None)."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=np.float64))


def _ptr(a):
    return None if a is None else a.ctypes.data_as(_P)


class Oracle:
    """The oracle of one call. seqs: one dict per sequence with q [sq, H, D], k [sk, Hkv, D],
    v [sk, Hkv, Dv], optionally dout like q's rows with Dv, bias [H, sq, sk], drop_b (the
    Philox batch index, default the sequence's index) and drop_i0 (position of its first
    query, default 0). dtype: of q, k, v; out_dtype: of the results checked (out, or the
    gradients). scale None: 1/sqrt(D); otherwise what the library is given (a float)."""

    def __init__(self, seqs, dtype, out_dtype=None, scale=None, causal=None,
                 window=(-1, -1), softcap=0.0, alibi=None, sinks=None, dropout_p=0.0,
                 seed=0, offset=0, backward=False):
        self._keep = []
        arr = (SeqData * max(len(seqs), 1))()
        nq = nk = 0
        for i, s in enumerate(seqs):
            q, k, v = _f64(s["q"]), _f64(s["k"]), _f64(s["v"])
            dout, bias = _f64(s.get("dout")), _f64(s.get("bias"))
            self._keep += [q, k, v, dout, bias]
            a = arr[i]
            a.q, a.k, a.v, a.dout, a.bias = _ptr(q), _ptr(k), _ptr(v), _ptr(dout), _ptr(bias)
            a.sq, a.sk, a.q_row, a.k_row = q.shape[0], k.shape[0], nq, nk
            a.drop_b, a.drop_i0 = s.get("drop_b", i), s.get("drop_i0", 0)
            nq += q.shape[0]
            nk += k.shape[0]
        q0, k0, v0 = seqs[0]["q"], seqs[0]["k"], seqs[0]["v"]
        p = Problem()
        p.nseq, p.nq, p.nk = len(seqs), nq, nk
        p.hq, p.hkv, p.dqk, p.dv = q0.shape[1], k0.shape[1], q0.shape[2], v0.shape[2]
        p.dt, p.odt = DTYPE[dtype], DTYPE[out_dtype or dtype]
        p.scale = 1.0 / math.sqrt(p.dqk) if scale is None else float(np.float32(scale))
        p.causal = CAUSAL[causal]
        if tuple(window) != (-1, -1):
            p.window, p.wl, p.wr = 1, int(window[0]), int(window[1])
        p.softcap = float(np.float32(softcap))
        al, sk = _f64(alibi), _f64(sinks)
        self._keep += [al, sk, arr]
        p.alibi, p.sinks = _ptr(al), _ptr(sk)
        p.dropout_p = dropout_p
        p.seed, p.offset = seed, offset
        p.seqs = arr
        self.backward = backward
        self._o = _LIB.or_py_compute(ctypes.byref(p), 1 if backward else 0)
        if not self._o:
            raise MemoryError("or_compute: out of memory")

    def __del__(self):
        if getattr(self, "_o", None):
            _LIB.or_py_free(self._o)
            self._o = None

    def check(self, name, t, ours):
        """Asserts or_check of ours (its elements in the layout of tensor t); returns the
        or_result (err, bound, ...)."""
        n = _LIB.or_py_count(self._o, t)
        a = _f64(ours).reshape(-1)
        assert a.size == n, "%s: %d elements, the oracle's layout has %d" % (name, a.size, n)
        r = Result()
        ok = _LIB.or_py_check(self._o, t, _ptr(a), ctypes.byref(r))
        if not ok:
            buf = ctypes.create_string_buffer(512)
            _LIB.or_py_result_str(ctypes.byref(r), t, buf, len(buf))
            raise AssertionError("[%s] %s" % (name, buf.value.decode()))
        return r


def dense(q, k, v, dout=None, bias=None, **kw):
    """The Oracle of a [B, S, H, D] call: batch entry b is sequence b (Philox batch b).
    bias broadcasts to [B, H, Sq, Sk]."""
    B, Sq, H = q.shape[0], q.shape[1], q.shape[2]
    if bias is not None:
        bias = torch.as_tensor(bias).double().expand(B, H, Sq, k.shape[1])
    seqs = [dict(q=q[b], k=k[b], v=v[b], dout=None if dout is None else dout[b],
                 bias=None if bias is None else bias[b]) for b in range(B)]
    return Oracle(seqs, **kw)


def varlen(q, k, v, cu_q, cu_k, dout=None, **kw):
    """The Oracle of a packed call: q [Tq, H, D] with sequence b in rows cu_q[b]..cu_q[b+1]
    (k, v likewise with cu_k)."""
    cq, ck = [int(x) for x in cu_q], [int(x) for x in cu_k]
    seqs = [dict(q=q[cq[b]:cq[b + 1]], k=k[ck[b]:ck[b + 1]], v=v[ck[b]:ck[b + 1]],
                 dout=None if dout is None else dout[cq[b]:cq[b + 1]])
            for b in range(len(cq) - 1)]
    return Oracle(seqs, **kw)


def lse_rows(lse):
    """lse [B, H, S] as the oracle's [H, B * S]."""
    lse = torch.as_tensor(lse).detach().cpu()
    return lse.permute(1, 0, 2).reshape(lse.shape[1], -1)
