# python/local.mk - the Python package (python/flashattn, ctypes over libflashattn): its
# pytest suite runs under make check through python/run-tests.sh, on the library of this
# build tree (included from the top-level Makefile.am).
TESTS += python/run-tests.sh
EXTRA_DIST += python/run-tests.sh python/README.md python/pyproject.toml \
	python/.gitignore \
	python/flashattn/__init__.py python/flashattn/_lib.py python/flashattn/_context.py \
	python/flashattn/_impl.py python/flashattn/_arrays.py python/flashattn/_torch_adapter.py \
	python/flashattn/_numpy_adapter.py python/flashattn/_torch_ops.py python/flashattn/_torch_short.py \
	python/flashattn/interface.py python/flashattn/sdpa.py \
	python/tests/conftest.py python/tests/oracle.py python/tests/test_forward.py \
	python/tests/test_backward.py python/tests/test_dropout.py \
	python/tests/test_varlen_kvcache.py python/tests/test_errors.py \
	python/tests/test_numpy.py python/tests/test_sdpa.py python/tests/test_compile.py \
	python/tests/test_threads.py python/examples/train_step.py \
	python/flashattn/ring.py python/tests/test_ring.py python/tests/ring_worker.py
