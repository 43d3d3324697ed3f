"""The C library through ctypes: loading it, its structs, prototypes and error mapping.

Nothing here knows about torch or numpy: callers hand in addresses, shapes and strides.
"""
import ctypes
import ctypes.util
import os
import struct

# fa_status
OK, ERR_INVALID_ARG, ERR_UNSUPPORTED, ERR_NO_MEMORY, ERR_DEVICE, ERR_INTERNAL = range(6)
# fa_dtype
F32, F16, BF16 = range(3)
# fa_backend
BACKEND_AUTO, BACKEND_REFERENCE, BACKEND_CPU, BACKEND_CUDA = range(4)
# fa_causal
CAUSAL_NONE, CAUSAL_BOTTOM_RIGHT, CAUSAL_TOP_LEFT = range(3)

_i64x4 = ctypes.c_int64 * 4


class FaTensor(ctypes.Structure):
    """fa_tensor: a 4-D strided view [batch, seqlen, heads, head_dim], strides in elements."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("shape", _i64x4), ("stride", _i64x4)]


class FaOptions(ctypes.Structure):
    """fa_options, field for field. `reserved` stays zero: a later library gives new
    options those slots, and their zero value is the old behaviour."""
    _fields_ = [("scale", ctypes.c_float), ("causal", ctypes.c_int), ("window", ctypes.c_int),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
                ("softcap", ctypes.c_float), ("alibi_slopes", ctypes.c_void_p),
                ("sinks", ctypes.c_void_p), ("bias", ctypes.POINTER(FaTensor)),
                ("dropout_p", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("offset", ctypes.c_uint64), ("deterministic", ctypes.c_int),
                ("reserved", ctypes.c_uint64 * 8)]


class FlashAttnError(Exception):
    """Base of the errors raised for a failed flashattn call; `status` is the fa_status."""
    status = ERR_INTERNAL


class InvalidArgumentError(FlashAttnError, ValueError):
    status = ERR_INVALID_ARG


class UnsupportedError(FlashAttnError, NotImplementedError):
    status = ERR_UNSUPPORTED


class OutOfMemoryError(FlashAttnError, MemoryError):
    status = ERR_NO_MEMORY


class DeviceError(FlashAttnError, RuntimeError):
    status = ERR_DEVICE


class InternalError(FlashAttnError, RuntimeError):
    status = ERR_INTERNAL


for _cls in (FlashAttnError, InvalidArgumentError, UnsupportedError, OutOfMemoryError,
             DeviceError, InternalError):
    _cls.__module__ = "flashattn"

_ERRORS = {ERR_INVALID_ARG: InvalidArgumentError, ERR_UNSUPPORTED: UnsupportedError,
           ERR_NO_MEMORY: OutOfMemoryError, ERR_DEVICE: DeviceError,
           ERR_INTERNAL: InternalError}


def _candidates():
    env = os.environ.get("FLASHATTN_LIB")
    if env:
        return [env], True
    names = []
    found = ctypes.util.find_library("flashattn")
    if found:
        names.append(found)
    names += ["libflashattn.so.0", "libflashattn.so", "libflashattn.dylib"]
    return names, False


def _load():
    names, from_env = _candidates()
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append("%s: %s" % (name, e))
    if from_env:
        hint = "FLASHATTN_LIB=%s does not load" % names[0]
    else:
        hint = ("install the C library (./configure && make && make install, then ldconfig) "
                "or set FLASHATTN_LIB to the path of libflashattn.so")
    raise ImportError("flashattn: cannot load libflashattn (%s). Tried: %s"
                      % (hint, "; ".join(errors)))


lib = _load()
path = getattr(lib, "_name", "")

_P = ctypes.c_void_p
_T = ctypes.POINTER(FaTensor)
_O = ctypes.POINTER(FaOptions)
_I64 = ctypes.c_int64
_PROTOS = {
    "fa_context_create": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.c_int]),
    "fa_context_destroy": (None, [_P]),
    "fa_context_backend": (ctypes.c_int, [_P]),
    "fa_context_describe": (ctypes.c_char_p, [_P]),
    "fa_context_set_threads": (ctypes.c_int, [_P, ctypes.c_int]),
    "fa_context_set_device": (ctypes.c_int, [_P, ctypes.c_int]),
    "fa_context_set_stream": (ctypes.c_int, [_P, _P]),
    "fa_last_error": (ctypes.c_char_p, [_P]),
    "fa_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "fa_version_string": (ctypes.c_char_p, []),
    "fa_forward": (ctypes.c_int, [_P, _T, _P, _T, _T, _T, _O]),
    "fa_backward": (ctypes.c_int, [_P, _T, _T, _T, _P, _T, _T, _T, _T, _T, _P, _O]),
    "fa_forward_varlen": (ctypes.c_int, [_P, _T, _P, _T, _T, _T, _P, _P, _I64, _I64, _I64,
                                         _O]),
    "fa_backward_varlen": (ctypes.c_int, [_P, _T, _T, _T, _P, _T, _T, _T, _T, _T, _P, _P, _P,
                                          _I64, _I64, _I64, _O]),
    "fa_forward_kvcache": (ctypes.c_int, [_P, _T, _P, _T, _T, _T, _T, _T, _P, _P, _I64, _O]),
    "fa_query": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_char_p), _T, _P, _T, _T, _T, _O]),
}
for _name, (_res, _args) in _PROTOS.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


def last_error(ctx):
    return _text(lib.fa_last_error(ctx))


def check(status, ctx):
    """Raise the Python exception for a failed call, carrying fa_last_error's message."""
    if status == OK:
        return
    msg = last_error(ctx) or _text(lib.fa_status_string(status))
    raise _ERRORS.get(status, InternalError)(msg)


def version():
    return _text(lib.fa_version_string())


# fa_tensor's bytes, packed in one step (about half the time of filling the fields)
_TENSOR_PACK = struct.Struct("@Pi8q").pack
_tensor_from = FaTensor.from_buffer_copy
assert struct.calcsize("@Pi8q") == ctypes.sizeof(FaTensor)


def tensor(data, dtype, shape, stride):
    """An FaTensor from an address, an fa_dtype and two 4-sequences."""
    return _tensor_from(_TENSOR_PACK(data or 0, dtype, *shape, *stride))


def options(scale=None, causal=CAUSAL_NONE, window_size=(-1, -1), softcap=0.0,
            alibi_slopes=None, sinks=None, bias=None, dropout_p=0.0, seed=0, offset=0,
            deterministic=False):
    """An FaOptions from Python values; pointers as integer addresses (or None)."""
    o = FaOptions()
    if scale is not None:
        if scale == 0.0:
            raise NotImplementedError("flashattn: softmax scale 0 is not supported (the C "
                                      "library reads 0 as the default 1/sqrt(head_dim))")
        o.scale = scale
    o.causal = causal
    left, right = int(window_size[0]), int(window_size[1])
    if left != -1 or right != -1:
        o.window, o.window_left, o.window_right = 1, left, right
    o.softcap = softcap
    o.alibi_slopes = alibi_slopes
    o.sinks = sinks
    if bias is not None:
        o.bias = ctypes.pointer(bias)
    o.dropout_p = dropout_p
    o.seed, o.offset = seed, offset
    o.deterministic = 1 if deterministic else 0
    return o
