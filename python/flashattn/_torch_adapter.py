"""torch tensors for _impl: views, allocation, and the context of a tensor's device."""
import torch

from . import _context
from . import _lib as L

_DTYPES = {torch.float32: L.F32, torch.float16: L.F16, torch.bfloat16: L.BF16}
_lib_tensor = L.tensor


def dtype_code(t):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise ValueError("flashattn: dtype %s is not supported (float32, float16, bfloat16)"
                         % (t.dtype,)) from None


class TorchAdapter:
    """The array operations _impl needs, for torch tensors on CPU or CUDA."""

    @staticmethod
    def fa(t):
        return _lib_tensor(t.data_ptr(), dtype_code(t), t.shape, t.stride())

    @staticmethod
    def fa_opt(t):
        return None if t is None else TorchAdapter.fa(t)

    @staticmethod
    def ptr(t):
        return None if t is None else t.data_ptr()

    @staticmethod
    def ndim(t):
        return t.dim()

    @staticmethod
    def stride(t, d):
        return t.stride(d)

    @staticmethod
    def strides(t):
        return t.stride()

    @staticmethod
    def unit_last(t):
        """t itself when its last stride is 1 (the C API's one layout rule), else a copy."""
        st = t.stride()
        if st[-1] == 1:
            return t
        if t.shape[-1] == 1:   # a size-1 dimension's stride is never used: restate it
            return t.as_strided(t.shape, st[:-1] + (1,))
        return t.contiguous()

    @staticmethod
    def unsqueeze0(t):
        return t.unsqueeze(0)

    @staticmethod
    def empty_like_layout(t, shape):
        return empty_like_layout(t, shape)

    @staticmethod
    def empty_like(t):
        return torch.empty_like(t)

    @staticmethod
    def empty_f32(shape, like):
        return torch.empty(shape, dtype=torch.float32, device=like.device)

    @staticmethod
    def zero_(t):
        return t.zero_()

    @staticmethod
    def same_place(first, *others):
        dev = first.device
        for t in others:
            if t is not None and t.device != dev:
                raise ValueError("flashattn: every tensor must be on %s (one is on %s)"
                                 % (dev, t.device))

    @staticmethod
    def call(t, fn, *args):
        """fn(ctx, *args) on the context of t's device; raises on failure."""
        dev = t.device
        if dev.type == "cpu":
            ctx = _context.get(_context.cpu_backend)
            L.check(fn(ctx, *args), ctx)
            return
        if dev.type != "cuda":
            raise NotImplementedError("flashattn: tensors on %s are not supported (CPU and "
                                      "CUDA only)" % (dev,))
        ctx = _context.get(L.BACKEND_CUDA, dev.index)
        L.check(L.lib.fa_context_set_stream(ctx, torch.cuda.current_stream(dev).cuda_stream),
                ctx)
        if dev.index != torch.cuda.current_device():
            # the library makes its device current; keep torch's current device as it was
            with torch.cuda.device(dev):
                st = fn(ctx, *args)
        else:
            st = fn(ctx, *args)
        L.check(st, ctx)


TORCH = TorchAdapter()


def empty_like_layout(t, shape):
    """An uninitialised tensor of `shape` whose dimensions are laid out in the order of
    t's strides (outermost first; the last dimension innermost). A [B, S, H, D] view of a
    [B, H, S, D] tensor thus gets an output that is a contiguous [B, H, S, D] underneath."""
    if t.is_contiguous():
        return torch.empty(shape, dtype=t.dtype, device=t.device)
    st = t.stride()
    order = sorted(range(3), key=lambda d: (-st[d], d)) + [3]
    base = torch.empty([shape[d] for d in order], dtype=t.dtype, device=t.device)
    if order == [0, 1, 2, 3]:
        return base
    return base.permute([order.index(d) for d in range(4)])
