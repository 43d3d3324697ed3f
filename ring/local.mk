# ring/local.mk - libflashattn_ring: context-parallel (ring) attention over MPI, on top of
# libflashattn's public API (include/flashattn_ring.h). Built when configure finds MPI.
EXTRA_DIST += ring/tests/ring-np.sh.in ring/tests/ring-bench.sh flashattn-ring.pc.in
if HAVE_MPI
lib_LTLIBRARIES += libflashattn_ring.la
libflashattn_ring_la_SOURCES = ring/ring_internal.h ring/ring_common.c ring/ring_calls.c \
	ring/ring_device.h ring/ring_device.c ring/ring_forward.c ring/ring_backward.c
libflashattn_ring_la_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
libflashattn_ring_la_LDFLAGS = -version-info $(FA_LT_VERSION) -no-undefined
libflashattn_ring_la_LIBADD = libflashattn.la $(MPI_LIBS) $(PTHREAD_LIBS)
include_HEADERS += include/flashattn_ring.h
pkgconfig_DATA += flashattn-ring.pc

# Per-rank compute, wait and overlap times, for scaling tables (docs in its header).
bin_PROGRAMS += ring/flashattn-ring-bench
ring_flashattn_ring_bench_SOURCES = ring/ring-bench.c
ring_flashattn_ring_bench_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
ring_flashattn_ring_bench_LDADD = libflashattn_ring.la libflashattn.la $(MPI_LIBS) -lm

# The oracle comparison on 1 to 4 ranks (ring-np.sh runs mpirun).
check_PROGRAMS += ring/tests/test_ring
ring_tests_test_ring_SOURCES = ring/tests/test_ring.c ring/tests/ring_check.c \
	ring/tests/ring_check.h ring/tests/rc_device.c
ring_tests_test_ring_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests/oracle
ring_tests_test_ring_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
ring_tests_test_ring_LDADD = libflashattn_ring.la libflashattn.la tests/oracle/liboracle.la $(MPI_LIBS) -lm
TESTS += ring/tests/ring-np.sh
# flashattn-ring-bench's rows, placement and summary lines, and its command line.
TESTS += ring/tests/ring-bench.sh
endif
