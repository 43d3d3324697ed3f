"""One fa_context per (backend, device, thread).

The C library lets one thread at a time use a context and keeps per-context state (the
last error, CUDA workspaces), so each Python thread gets its own contexts, created on
first use and destroyed when the thread ends (or at interpreter exit).
"""
import ctypes
import os
import threading

from . import _lib as L

_local = threading.local()

_BACKEND_NAMES = {"reference": L.BACKEND_REFERENCE, "cpu": L.BACKEND_CPU,
                  "cuda": L.BACKEND_CUDA, "auto": L.BACKEND_AUTO}


def _cpu_backend_from_env():
    # FA_BACKEND=reference makes CPU arrays run on the reference backend (the C library's
    # own variable; it only affects AUTO there, so it is read here for host memory).
    name = os.environ.get("FA_BACKEND", "")
    return L.BACKEND_REFERENCE if name == "reference" else L.BACKEND_CPU


cpu_backend = _cpu_backend_from_env()


class _Context:
    """Owns one fa_context pointer."""
    __slots__ = ("ptr", "_destroy")

    def __init__(self, backend, device):
        self.ptr = None
        self._destroy = L.lib.fa_context_destroy
        p = ctypes.c_void_p()
        L.check(L.lib.fa_context_create(ctypes.byref(p), backend), None)
        self.ptr = p.value
        if device is not None:
            st = L.lib.fa_context_set_device(self.ptr, device)
            if st != L.OK:
                try:
                    L.check(st, self.ptr)
                finally:
                    self.close()

    def close(self):
        if self.ptr:
            self._destroy(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


def get(backend, device=None):
    """This thread's context pointer for (backend, device), created on first use."""
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = {}
    key = (backend, device)
    c = cache.get(key)
    if c is None:
        c = cache[key] = _Context(backend, device)
    return c.ptr


def describe(backend="cpu", device=None):
    """fa_context_describe of this thread's context for backend ("reference", "cpu",
    "cuda" or "auto") and device (CUDA index, None elsewhere)."""
    if backend == "cuda" and device is None:
        device = 0
    ptr = get(_BACKEND_NAMES[backend], device)
    return L._text(L.lib.fa_context_describe(ptr))
