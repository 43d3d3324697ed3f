# tests/local.mk - the Check suites (included from the top-level Makefile.am).
# Every program runs each case on the backends in FA_TEST_BACKENDS (default
# reference,cpu). FA_TEST_SLOW=1 adds the full cross-product sweeps; FA_TEST_BIG=1 the
# > 2^31-element test. See tests/testutil.h.
# test_cuda's parts besides test_cuda.c (built on the GPU machine, bench/gpu/build-kit.sh)
EXTRA_DIST += tests/cuda/cuda_test.h tests/cuda/cuda_util.c tests/cuda/cuda_dense.c \
	tests/cuda/cuda_varlen.c tests/cuda/cuda_decode.c
# stress_cuda (built the same way): its parts
EXTRA_DIST += tests/cuda/stress_cuda.h tests/cuda/stress_cuda.c tests/cuda/stress_cases.c \
	tests/cuda/stress_check.c tests/cuda/stress_bad.c tests/cuda/stress_big.c
# libFuzzer targets (not built by make; tests/fuzz/run.sh, docs/reliability.md)
EXTRA_DIST += tests/fuzz/run.sh tests/fuzz/fuzz_args.c tests/fuzz/fuzz_args.h \
	tests/fuzz/fuzz_args_input.c tests/fuzz/fuzz_args_spec.c tests/fuzz/fuzz_diff.c tests/fuzz/corpus

# liboracle: the double-precision oracle, the naive models and the tolerance rule, the one
# correctness rule of the suites, fuzz_diff, tests/cuda/test_cuda.c and flashattn-bench's
# check column (tests/oracle/oracle.h). Built whether or not Check is there (the bench
# links it).
noinst_LTLIBRARIES += tests/oracle/liboracle.la
tests_oracle_liboracle_la_SOURCES = tests/oracle/oracle.h tests/oracle/models.h \
	tests/oracle/models.c tests/oracle/problem.c tests/oracle/check.c tests/oracle/rule.c
tests_oracle_liboracle_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests/oracle
tests_oracle_liboracle_la_CFLAGS = $(AM_CFLAGS)
# The same, as a module the Python tests load (python/tests/oracle.py; python/run-tests.sh
# names it in FLASHATTN_ORACLE_LIB): built by make check, never installed.
check_LTLIBRARIES += tests/oracle/liboracle_py.la
tests_oracle_liboracle_py_la_SOURCES = tests/oracle/pyglue.c
tests_oracle_liboracle_py_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests/oracle
tests_oracle_liboracle_py_la_CFLAGS = $(AM_CFLAGS)
tests_oracle_liboracle_py_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
tests_oracle_liboracle_py_la_LIBADD = tests/oracle/liboracle.la $(OPENMP_CFLAGS) -lm

if HAVE_CHECK
TESTS_COMMON = tests/testutil.c tests/buffers.c tests/runner.c tests/testutil.h tests/tu_main.h \
	tests/cases.h
TESTS_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests -I$(top_srcdir)/tests/oracle
TESTS_LDADD = libflashattn.la tests/oracle/liboracle.la $(CHECK_LIBS) -lm

check_PROGRAMS += tests/test_oracle tests/test_api tests/test_forward tests/test_backward \
	tests/test_varlen_kvcache tests/test_bad_input tests/test_bad_context tests/test_edge_calls \
	tests/test_determinism tests/test_combine tests/test_big tests/test_decode
# Slowest first so that make -j2 check overlaps them best.
TESTS += tests/test_forward tests/test_backward tests/test_varlen_kvcache tests/test_decode \
	tests/test_determinism tests/test_bad_input tests/test_edge_calls tests/test_combine tests/test_api \
	tests/test_bad_context tests/test_oracle tests/test_big tests/amx_emulated.sh
EXTRA_DIST += tests/amx_emulated.sh

tests_test_oracle_SOURCES = tests/test_oracle.c $(TESTS_COMMON)
tests_test_oracle_CFLAGS = $(TESTS_CFLAGS)
tests_test_oracle_LDADD = $(TESTS_LDADD)
tests_test_api_SOURCES = tests/test_api.c $(TESTS_COMMON)
tests_test_api_CFLAGS = $(TESTS_CFLAGS)
tests_test_api_LDADD = $(TESTS_LDADD)
tests_test_forward_SOURCES = tests/test_forward.c $(TESTS_COMMON)
tests_test_forward_CFLAGS = $(TESTS_CFLAGS)
tests_test_forward_LDADD = $(TESTS_LDADD)
tests_test_backward_SOURCES = tests/test_backward.c $(TESTS_COMMON)
tests_test_backward_CFLAGS = $(TESTS_CFLAGS)
tests_test_backward_LDADD = $(TESTS_LDADD)
tests_test_varlen_kvcache_SOURCES = tests/test_varlen_kvcache.c $(TESTS_COMMON)
tests_test_varlen_kvcache_CFLAGS = $(TESTS_CFLAGS)
tests_test_varlen_kvcache_LDADD = $(TESTS_LDADD)
tests_test_decode_SOURCES = tests/test_decode.c $(TESTS_COMMON)
tests_test_decode_CFLAGS = $(TESTS_CFLAGS)
tests_test_decode_LDADD = $(TESTS_LDADD)
# The bad-argument suites: the operations' arguments, and the context functions'; one
# fixture (tests/bad_fixture.h).
tests_test_bad_input_SOURCES = tests/test_bad_input.c tests/bad_fixture.c tests/bad_fixture.h \
	$(TESTS_COMMON)
tests_test_bad_input_CFLAGS = $(TESTS_CFLAGS)
tests_test_bad_input_LDADD = $(TESTS_LDADD)
tests_test_bad_context_SOURCES = tests/test_bad_context.c tests/bad_fixture.c tests/bad_fixture.h \
	$(TESTS_COMMON)
tests_test_bad_context_CFLAGS = $(TESTS_CFLAGS)
tests_test_bad_context_LDADD = $(TESTS_LDADD)
tests_test_edge_calls_SOURCES = tests/test_edge_calls.c $(TESTS_COMMON)
tests_test_edge_calls_CFLAGS = $(TESTS_CFLAGS)
tests_test_edge_calls_LDADD = $(TESTS_LDADD)
tests_test_determinism_SOURCES = tests/test_determinism.c $(TESTS_COMMON)
tests_test_determinism_CFLAGS = $(TESTS_CFLAGS)
tests_test_determinism_LDADD = $(TESTS_LDADD)
tests_test_combine_SOURCES = tests/test_combine.c $(TESTS_COMMON)
tests_test_combine_CFLAGS = $(TESTS_CFLAGS)
tests_test_combine_LDADD = $(TESTS_LDADD)
# > 2^31-element k/v (8 GiB): skipped with a note unless FA_TEST_BIG=1.
tests_test_big_SOURCES = tests/test_big.c $(TESTS_COMMON)
tests_test_big_CFLAGS = $(TESTS_CFLAGS)
tests_test_big_LDADD = $(TESTS_LDADD)
# Embedding: the default thread count (with lib/topology.c linked in for its internals),
# concurrent contexts, the log callback, versions, fa_options' reserved slots.
check_PROGRAMS += tests/test_threads tests/test_embedding
TESTS += tests/test_threads tests/test_embedding
tests_test_threads_SOURCES = tests/test_threads.c lib/topology.c $(TESTS_COMMON)
tests_test_threads_CFLAGS = $(TESTS_CFLAGS) $(HWLOC_CFLAGS)
tests_test_threads_LDADD = $(TESTS_LDADD) $(HWLOC_LIBS)
tests_test_embedding_SOURCES = tests/test_embedding.c $(TESTS_COMMON)
tests_test_embedding_CFLAGS = $(TESTS_CFLAGS)
tests_test_embedding_LDADD = $(TESTS_LDADD)
# The kernel sets' pieces, called directly: the tests link the ISA convenience libraries
# themselves (their symbols are hidden in libflashattn) and kernels_generic.c. test_kernels:
# the softmax pieces and the AMX packing; test_masked_products: the products over partly
# masked tiles; tests/kernel_sets.h what they share.
check_PROGRAMS += tests/test_kernels tests/test_masked_products
TESTS += tests/test_kernels tests/test_masked_products
KERNEL_TESTS_SOURCES = tests/kernel_sets.c tests/kernel_sets.h tests/tu_main.h \
	backends/cpu/kernels_generic.c backends/cpu/kernels_amx_emu.c
KERNEL_TESTS_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/backends/cpu -I$(top_srcdir)/lib
KERNEL_TESTS_LDADD = $(CHECK_LIBS) -lm
if HAVE_AVX2
KERNEL_TESTS_LDADD += backends/cpu/libfa_cpu_avx2.la
endif
if HAVE_AVX512
KERNEL_TESTS_LDADD += backends/cpu/libfa_cpu_avx512.la
endif
if HAVE_AMX
KERNEL_TESTS_LDADD += backends/cpu/libfa_cpu_amx.la
endif
tests_test_kernels_SOURCES = tests/test_kernels.c $(KERNEL_TESTS_SOURCES)
tests_test_kernels_CFLAGS = $(KERNEL_TESTS_CFLAGS)
tests_test_kernels_LDADD = $(KERNEL_TESTS_LDADD)
tests_test_masked_products_SOURCES = tests/test_masked_products.c $(KERNEL_TESTS_SOURCES)
tests_test_masked_products_CFLAGS = $(KERNEL_TESTS_CFLAGS)
tests_test_masked_products_LDADD = $(KERNEL_TESTS_LDADD)
endif
