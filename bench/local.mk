# bench/local.mk - flashattn-bench, the teaching-ladder benchmark (uses only the public API).
bin_PROGRAMS += bench/flashattn-bench
bench_flashattn_bench_SOURCES = \
	bench/bench.h bench/main.c bench/data.c bench/check.c bench/naive.c \
	bench/peak.c bench/measure.c bench/rungs.c bench/sweeps.c bench/report.c bench/plot.c \
	bench/cudrv.c bench/cudrv.h
bench_flashattn_bench_CPPFLAGS = -I$(top_srcdir)/include -I$(top_srcdir)/tests/oracle
bench_flashattn_bench_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS)
bench_flashattn_bench_LDADD = libflashattn.la tests/oracle/liboracle.la -lm $(BLAS_LIBS)
EXTRA_DIST += bench/peers/torch_sdpa.py
# make check: --backend cuda where CUDA cannot be used is an n/a row and exit status 0.
TESTS += bench/test-cuda-absent.sh
EXTRA_DIST += bench/test-cuda-absent.sh
