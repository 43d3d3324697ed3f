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
_cpu_threads = 0   # fa_context_set_threads for host backends; 0 = the library's default


class _Context:
    """Owns one fa_context pointer."""
    __slots__ = ("ptr", "_destroy")

    def __init__(self, backend, device, threads):
        self.ptr = None
        self._destroy = L.lib.fa_context_destroy
        p = ctypes.c_void_p()
        L.check(L.lib.fa_context_create(ctypes.byref(p), backend), None)
        self.ptr = p.value
        st = L.OK
        if device is not None:
            st = L.lib.fa_context_set_device(self.ptr, device)
        if st == L.OK and threads:
            st = L.lib.fa_context_set_threads(self.ptr, threads)
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
    """This thread's context pointer for (backend, device), created on first use (with
    the thread count of set_num_threads for host backends)."""
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = {}
    threads = _cpu_threads if device is None else 0
    key = (backend, device, threads)
    c = cache.get(key)
    if c is None:
        c = cache[key] = _Context(backend, device, threads)
    return c.ptr


def set_num_threads(n):
    """Threads for CPU and reference calls from now on, in every Python thread
    (fa_context_set_threads); 0 restores the library's default (OMP_NUM_THREADS, else the
    CPUs this process may use)."""
    global _cpu_threads
    n = int(n)
    if n < 0:
        raise ValueError("flashattn: set_num_threads(%d): n must be >= 0" % n)
    _cpu_threads = n


def get_num_threads():
    """The value of the last set_num_threads (0: the library's default)."""
    return _cpu_threads


def describe(backend="cpu", device=None):
    """fa_context_describe of this thread's context for backend ("reference", "cpu",
    "cuda" or "auto") and device (CUDA index, None elsewhere)."""
    if backend == "cuda" and device is None:
        device = 0
    ptr = get(_BACKEND_NAMES[backend], device)
    return L._text(L.lib.fa_context_describe(ptr))
