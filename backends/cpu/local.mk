# backends/cpu/local.mk - the CPU backend (included from the top-level Makefile.am; paths
# are relative to the top directory). Each ISA kernel set is its own convenience library
# so that only its file sees the ISA flags (no -march=native anywhere).
libflashattn_la_SOURCES += \
	backends/cpu/cpu.c backends/cpu/state.h backends/cpu/threads.c backends/cpu/threads.h \
	backends/cpu/tiles.c backends/cpu/tiles.h backends/cpu/forward.c backends/cpu/forward.h \
	backends/cpu/forward_task.c backends/cpu/forward_task.h \
	backends/cpu/decode.c backends/cpu/decode.h backends/cpu/decode_kernels.h \
	backends/cpu/backward.c backends/cpu/backward.h backends/cpu/backward_qside.c \
	backends/cpu/backward_qside.h backends/cpu/backward_task.c backends/cpu/backward_task.h \
	backends/cpu/scratch.h \
	backends/cpu/vecops.h backends/cpu/scores.h backends/cpu/masked.h backends/cpu/kernels.h \
	backends/cpu/kernels_generic.c backends/cpu/kernels_amx_emu.c

EXTRA_DIST += backends/cpu/kernels_simd.h backends/cpu/kernels_exp.h

if HAVE_AVX2
noinst_LTLIBRARIES += backends/cpu/libfa_cpu_avx2.la
backends_cpu_libfa_cpu_avx2_la_SOURCES = backends/cpu/kernels_avx2.c backends/cpu/kernels_simd.h \
	backends/cpu/kernels_exp.h
backends_cpu_libfa_cpu_avx2_la_CFLAGS = $(AM_CFLAGS) $(FA_AVX2_CFLAGS)
libflashattn_la_LIBADD += backends/cpu/libfa_cpu_avx2.la
endif

if HAVE_AVX512
noinst_LTLIBRARIES += backends/cpu/libfa_cpu_avx512.la
backends_cpu_libfa_cpu_avx512_la_SOURCES = backends/cpu/kernels_avx512.c backends/cpu/kernels_simd.h \
	backends/cpu/kernels_exp.h backends/cpu/kernels_shared512.h backends/cpu/decode_avx512.c \
	backends/cpu/decode_kernels.h
backends_cpu_libfa_cpu_avx512_la_CFLAGS = $(AM_CFLAGS) $(FA_AVX512_CFLAGS)
libflashattn_la_LIBADD += backends/cpu/libfa_cpu_avx512.la
endif

# AMX bf16 tiles: its own convenience library; configure's HAVE_AMX says the compiler
# knows -mamx-tile -mamx-bf16 (config.h FA_HAVE_AMX tells cpu.c / forward.c it is linked).
if HAVE_AMX
noinst_LTLIBRARIES += backends/cpu/libfa_cpu_amx.la
backends_cpu_libfa_cpu_amx_la_SOURCES = backends/cpu/kernels_amx.c backends/cpu/kernels_shared512.h
backends_cpu_libfa_cpu_amx_la_CFLAGS = $(AM_CFLAGS) $(FA_AMX_CFLAGS)
libflashattn_la_LIBADD += backends/cpu/libfa_cpu_amx.la
endif
