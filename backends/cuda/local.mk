# backends/cuda/local.mk: the CUDA module flashattn_cuda.so (see configure's BUILD_CUDA).
# A libtool module (dlopen'ed by lib/context.c, never linked into libflashattn), its .cu
# files compiled by nvcc through libtool (nvcc-lt.sh turns libtool's -fPIC into
# --compiler-options=-fPIC), linked against the static CUDA runtime so that the module needs only
# the driver (libcuda.so) at run time.
# Compile cost, per arch in NVCC_GENCODE: 12 forward (fast and general) and 12 backward (lean
# and general) kernels (fp16/bf16 x head-dim classes 64/128/256), plus the 12 Hopper forward (first and warp-specialized)
# and 10 Hopper backward kernels (first and warp-specialized) for sm_90a alone, the 6 fp32 FMA kernels (simt_f32_*.cu) and the 2 3xTF32 forward kernels (tf32x3_fwd.cu); one file per class, kernel and direction so that make -j2
# compiles two at once.
FA_CUDA_SRC = backends/cuda/cuda.cu backends/cuda/combine.cu backends/cuda/backward_aux.cu \
	backends/cuda/forward_fast_d256.cu backends/cuda/forward_fast_d128.cu backends/cuda/forward_fast_d64.cu \
	backends/cuda/backward_sm80_d256.cu backends/cuda/forward_sm80_d256.cu \
	backends/cuda/backward_sm80_d128.cu backends/cuda/forward_sm80_d128.cu \
	backends/cuda/backward_sm80_d64.cu backends/cuda/forward_sm80_d64.cu \
	backends/cuda/simt_f32_fwd.cu backends/cuda/simt_f32_bwd.cu backends/cuda/tf32x3_fwd.cu
# The Hopper forward: compiled for sm_90a only (NVCC_SM90A_FLAGS, from configure).
FA_CUDA_SM90_SRC = backends/cuda/forward_sm90_d256.cu backends/cuda/forward_sm90_d128.cu backends/cuda/forward_sm90_d64.cu \
	backends/cuda/forward_sm90ws_d256.cu backends/cuda/forward_sm90ws_d128.cu backends/cuda/forward_sm90ws_d64.cu \
	backends/cuda/backward_sm90_d256.cu backends/cuda/backward_sm90_d128.cu backends/cuda/backward_sm90_d64.cu \
	backends/cuda/backward_sm90ws_d128.cu backends/cuda/backward_sm90ws_d64.cu
FA_CUDA_HDR = backends/cuda/backward_sm90ws.cuh backends/cuda/forward_sm90ws.cuh backends/cuda/simt_f32.cuh backends/cuda/tf32x3_fwd.cuh backends/cuda/backward_sm90.cuh backends/cuda/forward_sm90.cuh backends/cuda/wgmma_ops.cuh backends/cuda/common.cuh backends/cuda/forward_sm80.cuh backends/cuda/forward_fast.cuh backends/cuda/backward_sm80.cuh \
	backends/cuda/kernels.h backends/cuda/params.h
EXTRA_DIST += $(FA_CUDA_SRC) $(FA_CUDA_SM90_SRC) $(FA_CUDA_HDR) backends/cuda/gen_wgmma.py backends/cuda/nvcc-lt.sh \
	tests/cuda/test_cuda.c

SUFFIXES = .cu
FA_NVCCFLAGS_COMMON = -std=c++17 -O3 --compiler-options=-fvisibility=hidden \
	-I$(top_srcdir)/include -I$(top_srcdir)/lib -I$(top_builddir) $(NVCCFLAGS)
FA_NVCCFLAGS = $(NVCC_GENCODE) $(FA_SM90A_DEF) $(FA_NVCCFLAGS_COMMON)
FA_NVCC_LT = $(LIBTOOL) $(AM_V_lt) --tag=CC --mode=compile $(SHELL) \
	$(top_srcdir)/backends/cuda/nvcc-lt.sh "$(NVCC)"
.cu.lo:
	$(AM_V_CC)$(FA_NVCC_LT) $(FA_NVCCFLAGS) -c -o $@ $<

if BUILD_CUDA
pkglib_LTLIBRARIES = backends/cuda/flashattn_cuda.la
backends_cuda_flashattn_cuda_la_SOURCES = $(FA_CUDA_SRC) $(FA_CUDA_SM90_SRC) $(FA_CUDA_HDR)
backends_cuda_flashattn_cuda_la_LDFLAGS = -module -avoid-version -shared -no-undefined
backends_cuda_flashattn_cuda_la_LIBADD = -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -ldl -lpthread -lstdc++
backends_cuda_flashattn_cuda_la_LINK = $(LIBTOOL) $(AM_V_lt) --tag=CC $(AM_LIBTOOLFLAGS) \
	$(LIBTOOLFLAGS) --mode=link $(CC) $(AM_CFLAGS) $(CFLAGS) \
	$(backends_cuda_flashattn_cuda_la_LDFLAGS) $(LDFLAGS) -o $@
# No automatic dependency tracking for .cu: every object depends on every CUDA header.
backends/cuda/backward_sm90ws_d128.lo: backends/cuda/backward_sm90ws_d128.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/backward_sm90ws_d128.cu' || echo '$(srcdir)/'`backends/cuda/backward_sm90ws_d128.cu
backends/cuda/backward_sm90ws_d64.lo: backends/cuda/backward_sm90ws_d64.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/backward_sm90ws_d64.cu' || echo '$(srcdir)/'`backends/cuda/backward_sm90ws_d64.cu
backends/cuda/backward_sm90_d256.lo: backends/cuda/backward_sm90_d256.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/backward_sm90_d256.cu' || echo '$(srcdir)/'`backends/cuda/backward_sm90_d256.cu
backends/cuda/backward_sm90_d128.lo: backends/cuda/backward_sm90_d128.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/backward_sm90_d128.cu' || echo '$(srcdir)/'`backends/cuda/backward_sm90_d128.cu
backends/cuda/backward_sm90_d64.lo: backends/cuda/backward_sm90_d64.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/backward_sm90_d64.cu' || echo '$(srcdir)/'`backends/cuda/backward_sm90_d64.cu
backends/cuda/forward_sm90_d256.lo: backends/cuda/forward_sm90_d256.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/forward_sm90_d256.cu' || echo '$(srcdir)/'`backends/cuda/forward_sm90_d256.cu
backends/cuda/forward_sm90_d128.lo: backends/cuda/forward_sm90_d128.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/forward_sm90_d128.cu' || echo '$(srcdir)/'`backends/cuda/forward_sm90_d128.cu
backends/cuda/forward_sm90_d64.lo: backends/cuda/forward_sm90_d64.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/forward_sm90_d64.cu' || echo '$(srcdir)/'`backends/cuda/forward_sm90_d64.cu
backends/cuda/forward_sm90ws_d256.lo: backends/cuda/forward_sm90ws_d256.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/forward_sm90ws_d256.cu' || echo '$(srcdir)/'`backends/cuda/forward_sm90ws_d256.cu
backends/cuda/forward_sm90ws_d128.lo: backends/cuda/forward_sm90ws_d128.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/forward_sm90ws_d128.cu' || echo '$(srcdir)/'`backends/cuda/forward_sm90ws_d128.cu
backends/cuda/forward_sm90ws_d64.lo: backends/cuda/forward_sm90ws_d64.cu
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ `test -f 'backends/cuda/forward_sm90ws_d64.cu' || echo '$(srcdir)/'`backends/cuda/forward_sm90ws_d64.cu
$(FA_CUDA_SRC:.cu=.lo) $(FA_CUDA_SM90_SRC:.cu=.lo): $(FA_CUDA_HDR) $(top_srcdir)/lib/problem.h $(top_srcdir)/lib/philox.h \
	$(top_srcdir)/lib/backend.h $(top_srcdir)/include/flashattn.h
endif
