"""flashattn: exact attention through the flashattn C library (ctypes, no build step).

The library is found through $FLASHATTN_LIB (a path to libflashattn.so), else the system's
library search (ctypes.util.find_library, then libflashattn.so.0 / libflashattn.so).

Entry points:
  flash_attn_func, flash_attn_qkvpacked_func, flash_attn_kvpacked_func,
  flash_attn_varlen_func, flash_attn_with_kvcache   flash-attn's signatures, [B, S, H, D]
  scaled_dot_product_attention (alias sdpa)          torch's signature, [B, H, S, D]
  ring_attention                                     context parallel over torch.distributed
Each also takes sinks= (fp32 [heads] sink logits). Failures raise the C library's message
as ValueError (invalid argument), NotImplementedError (unsupported), MemoryError or
RuntimeError; the classes below let callers tell them from other errors.
"""
from ._lib import (DeviceError, FlashAttnError, InternalError, InvalidArgumentError,
                   OutOfMemoryError, UnsupportedError)
from ._lib import path as library_path
from ._lib import version as library_version
from ._context import describe, get_num_threads, set_num_threads
from .interface import (flash_attn_func, flash_attn_kvpacked_func,
                        flash_attn_qkvpacked_func, flash_attn_varlen_func,
                        flash_attn_with_kvcache)
from .sdpa import scaled_dot_product_attention, sdpa

__version__ = "0.1.0"


def __getattr__(name):
    if name == "ring_attention":   # imported on first use: it needs torch.distributed
        from .ring import ring_attention
        return ring_attention
    raise AttributeError("module 'flashattn' has no attribute %r" % (name,))


__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "scaled_dot_product_attention", "sdpa", "ring_attention", "describe", "set_num_threads",
           "get_num_threads", "library_path",
           "library_version", "FlashAttnError", "InvalidArgumentError", "UnsupportedError",
           "OutOfMemoryError", "DeviceError", "InternalError"]
