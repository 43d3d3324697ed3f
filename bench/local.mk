# bench/local.mk - flashattn-bench, the benchmark (uses only the public API), its peer
# scripts, the A/B helper and the GPU kit's scripts.
bin_PROGRAMS += bench/flashattn-bench
bench_flashattn_bench_SOURCES = \
	bench/bench.h bench/main.c bench/options.c bench/data.c bench/check.c bench/naive.c \
	bench/peak.c bench/measure.c bench/rungs.c bench/sweeps.c bench/report.c bench/plot.c \
	bench/cudrv.c bench/cudrv.h bench/gpu.c bench/decode.c bench/read_loop.h bench/decode_gpu.c
bench_flashattn_bench_CPPFLAGS = -I$(top_srcdir)/include -I$(top_srcdir)/tests/oracle
bench_flashattn_bench_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS)
bench_flashattn_bench_LDADD = libflashattn.la tests/oracle/liboracle.la -lm $(BLAS_LIBS)
EXTRA_DIST += bench/peers/torch_cpu.py bench/peers/torch_cpu_rounds.py bench/peers/torch_gpu.py \
	bench/peers/ggml_decode.c bench/ab.sh bench/gpu/build-kit.sh bench/gpu/kit-env.sh \
	bench/gpu/run-on-gpu.sh bench/gpu/reliability.sh bench/gpu/ncu.sh
# make check: flashattn-bench without CUDA (n/a rows and exit 0; the GPU sweep exits 3)
# and its command line (-h, --version, bad options).
TESTS += bench/test-cuda-absent.sh
EXTRA_DIST += bench/test-cuda-absent.sh
