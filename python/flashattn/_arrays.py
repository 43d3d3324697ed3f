"""What kind of array a call got, and the small conversions every entry point shares."""
from . import _lib as L

try:
    import torch
except ImportError:   # numpy-only installs
    torch = None
try:
    import numpy as np
except ImportError:
    np = None


def kind(x):
    """'torch', 'numpy' or 'dlpack' (any other object with __dlpack__)."""
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    if np is not None and isinstance(x, np.ndarray):
        return "numpy"
    if hasattr(x, "__dlpack__"):
        if torch is None:
            raise TypeError("flashattn: DLPack arrays are read through torch.from_dlpack, "
                            "and torch is not installed")
        return "dlpack"
    raise TypeError("flashattn: expected a torch tensor, a numpy array or a DLPack array, "
                    "got %s" % (type(x).__name__,))


_KIND_NAMES = {"torch": "a torch tensor", "numpy": "a numpy array", "dlpack": "a DLPack array"}


def same_kind(kd, q_name="q", **arrays):
    """Raise TypeError unless every array given is of kind kd (q's): a call takes torch
    tensors only or numpy arrays only (DLPack calls convert every array first)."""
    if kd == "dlpack":
        return
    for name, a in arrays.items():
        if a is None:
            continue
        try:
            ka = kind(a)
        except TypeError:
            ka = None
        if ka != kd:
            raise TypeError("flashattn: %s is %s but %s is %s: the arrays of one call are "
                            "all torch tensors or all numpy arrays"
                            % (q_name, _KIND_NAMES[kd], name,
                               _KIND_NAMES.get(ka, type(a).__name__)))


def from_dlpack(*xs):
    """torch views of DLPack arrays (None stays None)."""
    return [None if x is None else torch.from_dlpack(x) for x in xs]


def scale_arg(scale):
    """softmax scale for the ops layer: 0.0 stands for 'default' there."""
    if scale is None:
        return 0.0
    scale = float(scale)
    if scale == 0.0:
        raise NotImplementedError("flashattn: softmax scale 0 is not supported (the C "
                                  "library reads 0 as the default 1/sqrt(head_dim))")
    return scale


def window_arg(window_size):
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise ValueError("flashattn: window_size must be a pair (left, right), got %r"
                         % (window_size,)) from None
    return int(left), int(right)


# ---- torch ---------------------------------------------------------------------------

def aux_t(x, q, name):
    """A per-head fp32 tensor on q's device (alibi slopes, sinks), or None. Differentiable
    (sinks keep their autograd history through the conversion)."""
    if x is None:
        return None
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x, dtype=torch.float32)
    if x.dim() != 1:
        raise NotImplementedError("flashattn: %s must be 1-D [heads]; got shape %s (per-batch "
                                  "values are not supported)" % (name, tuple(x.shape)))
    return x.to(device=q.device, dtype=torch.float32).contiguous()


def index_t(x, q):
    """An int32 contiguous tensor on q's device (cu_seqlens, cache_seqlens, block_table)."""
    if x is None:
        return None
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    return x.to(device=q.device, dtype=torch.int32).contiguous()


def rng_t(dropout_p):
    """(seed, offset) for dropout as an int64 CPU tensor drawn from torch's default
    generator (torch.manual_seed makes it reproducible), or None without dropout."""
    if dropout_p == 0.0:
        return None
    return torch.randint(0, 2 ** 62, (2,), dtype=torch.int64)


def causal_arg(causal, bottom_right=True):
    if not causal:
        return L.CAUSAL_NONE
    return L.CAUSAL_BOTTOM_RIGHT if bottom_right else L.CAUSAL_TOP_LEFT
