"""numpy arrays for _impl (host memory, forward only): views, allocation, context."""
import numpy as np

from . import _context
from . import _lib as L

_DTYPES = {np.dtype(np.float32): L.F32, np.dtype(np.float16): L.F16}


def dtype_code(a):
    try:
        return _DTYPES[a.dtype]
    except KeyError:
        raise ValueError("flashattn: dtype %s is not supported for numpy arrays (float32, "
                         "float16)" % (a.dtype,)) from None


def _elem_strides(a):
    item = a.itemsize
    return tuple(s // item for s in a.strides)


class NumpyAdapter:
    """The array operations _impl needs, for numpy arrays."""

    @staticmethod
    def fa(a):
        return L.tensor(a.ctypes.data, dtype_code(a), a.shape, _elem_strides(a))

    @staticmethod
    def fa_opt(a):
        return None if a is None else NumpyAdapter.fa(a)

    @staticmethod
    def ptr(a):
        return None if a is None else a.ctypes.data

    @staticmethod
    def ndim(a):
        return a.ndim

    @staticmethod
    def stride(a, d):
        return a.strides[d] // a.itemsize

    @staticmethod
    def strides(a):
        return _elem_strides(a)

    @staticmethod
    def unit_last(a):
        """a itself when its strides suit the C API (last stride 1 element, none negative,
        each a whole number of elements), else a contiguous copy."""
        item, st = a.itemsize, a.strides
        if all(s >= 0 and s % item == 0 for s in st):
            if st[-1] == item:
                return a
            if a.shape[-1] == 1:   # a size-1 dimension's stride is never used
                return np.lib.stride_tricks.as_strided(a, a.shape, st[:-1] + (item,))
        return np.ascontiguousarray(a)

    @staticmethod
    def unsqueeze0(a):
        return a[None]

    @staticmethod
    def empty_like_layout(a, shape):
        return np.empty(shape, dtype=a.dtype)

    @staticmethod
    def empty_like(a):
        return np.empty(a.shape, dtype=a.dtype)

    @staticmethod
    def empty_f32(shape, like):
        return np.empty(shape, dtype=np.float32)

    @staticmethod
    def zero_(a):
        a.fill(0)
        return a

    @staticmethod
    def same_place(first, *others):
        pass   # host memory, always

    @staticmethod
    def call(a, fn, *args):
        ctx = _context.get(_context.cpu_backend)
        L.check(fn(ctx, *args), ctx)


NUMPY = NumpyAdapter()


def aux_f32(x, name):
    """A per-head fp32 array ([heads]) from any sequence, or None."""
    if x is None:
        return None
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if a.ndim != 1:
        raise NotImplementedError("flashattn: %s must be 1-D [heads], got shape %s"
                                  % (name, a.shape))
    return a


def index_i32(x):
    """An int32 contiguous index array (cu_seqlens, cache_seqlens, block_table), or None."""
    if x is None:
        return None
    return np.ascontiguousarray(np.asarray(x), dtype=np.int32)


def draw_seed():
    """(seed, offset) for dropout from numpy's global generator (np.random.seed)."""
    s = np.random.randint(0, 2 ** 62, size=2, dtype=np.int64)
    return int(s[0]), int(s[1])
