# backends/cuda/local.mk: the CUDA module flashattn_cuda.so (see configure's BUILD_CUDA).
# A libtool module (dlopen'ed by lib/context.c, never linked into libflashattn), its .cu
# files compiled by nvcc through libtool (nvcc-lt.sh turns libtool's -fPIC into
# --compiler-options=-fPIC), linked against the static CUDA runtime so that the module needs
# only the driver (libcuda.so) at run time.
# Host side: module.cu, plan_forward.cu, plan_backward.cu, checks.cu, tmaps.cu (impl.h);
# kernels: sm80/, sm90/, fp32/ with device/ shared by all (module.cu's header has the map).
# The kernels are instantiated by stubs, one per kernel family and head-dim class, written
# into the build tree by gen-stubs.sh (build outputs, never distributed): per arch in
# NVCC_GENCODE 12 sm80 forward (fast and general) and 6 sm80 backward kernels (fp16/bf16 x
# classes 64/128/256), 6 fp32 FMA and 2 3xTF32 kernels, 6 decode kernels (decode/); for sm_90a alone 12 Hopper forward
# and 10 Hopper backward kernels. One file per family and class so that make -j2 compiles
# two at once; the longest first.
FA_CUDA_STUBS = backends/cuda/gen/sm80_forward_fast_d256.cu backends/cuda/gen/sm80_forward_fast_d128.cu \
	backends/cuda/gen/sm80_forward_fast_d64.cu \
	backends/cuda/gen/sm80_backward_d256.cu backends/cuda/gen/sm80_forward_d256.cu \
	backends/cuda/gen/sm80_backward_d128.cu backends/cuda/gen/sm80_forward_d128.cu \
	backends/cuda/gen/sm80_backward_d64.cu backends/cuda/gen/sm80_forward_d64.cu \
	backends/cuda/gen/fp32_simt_fwd_d256.cu backends/cuda/gen/fp32_simt_fwd_d128.cu backends/cuda/gen/fp32_simt_fwd_d64.cu \
	backends/cuda/gen/fp32_simt_bwd_d256.cu backends/cuda/gen/fp32_simt_bwd_d128.cu backends/cuda/gen/fp32_simt_bwd_d64.cu \
	backends/cuda/gen/fp32_tf32x3_fwd_d128.cu backends/cuda/gen/fp32_tf32x3_fwd_d64.cu \
	backends/cuda/gen/decode_d256.cu backends/cuda/gen/decode_d128.cu backends/cuda/gen/decode_d64.cu
# The Hopper kernels: compiled for sm_90a only (NVCC_SM90A_FLAGS, from configure).
FA_CUDA_SM90_STUBS = backends/cuda/gen/sm90_forward_d256.cu backends/cuda/gen/sm90_forward_d128.cu \
	backends/cuda/gen/sm90_forward_d64.cu \
	backends/cuda/gen/sm90_forward_ws_d256.cu backends/cuda/gen/sm90_forward_ws_d128.cu backends/cuda/gen/sm90_forward_ws_d64.cu \
	backends/cuda/gen/sm90_backward_d256.cu backends/cuda/gen/sm90_backward_d128.cu backends/cuda/gen/sm90_backward_d64.cu \
	backends/cuda/gen/sm90_backward_ws_d128.cu backends/cuda/gen/sm90_backward_ws_d64.cu
FA_CUDA_SRC = backends/cuda/module.cu backends/cuda/plan_forward.cu backends/cuda/plan_backward.cu \
	backends/cuda/checks.cu backends/cuda/tmaps.cu backends/cuda/combine.cu backends/cuda/backward_aux.cu \
	backends/cuda/decode/merge.cu
FA_CUDA_HDR = backends/cuda/impl.h backends/cuda/kernels.h backends/cuda/params.h \
	backends/cuda/device/ptx.cuh backends/cuda/device/wgmma_ops.cuh backends/cuda/device/problem.cuh \
	backends/cuda/device/tiles.cuh \
	backends/cuda/sm80/tiles.h backends/cuda/sm80/forward.cuh backends/cuda/sm80/forward_fast.cuh \
	backends/cuda/sm80/backward.cuh \
	backends/cuda/sm90/tiles.h backends/cuda/sm90/forward_parts.cuh backends/cuda/sm90/forward.cuh \
	backends/cuda/sm90/forward_ws.cuh backends/cuda/sm90/backward_parts.cuh backends/cuda/sm90/backward.cuh \
	backends/cuda/sm90/backward_ws.cuh \
	backends/cuda/fp32/tiles.h backends/cuda/fp32/common.cuh backends/cuda/fp32/simt.cuh backends/cuda/fp32/tf32x3.cuh
# The decode kernel's headers: only its stubs and plan_forward.cu depend on them.
FA_CUDA_DECODE_HDR = backends/cuda/decode/decode.h backends/cuda/decode/decode.cuh
EXTRA_DIST += $(FA_CUDA_SRC) $(FA_CUDA_HDR) $(FA_CUDA_DECODE_HDR) backends/cuda/gen-stubs.sh backends/cuda/gen_wgmma.py \
	backends/cuda/nvcc-lt.sh tests/cuda/test_cuda.c
CLEANFILES += $(FA_CUDA_STUBS) $(FA_CUDA_SM90_STUBS)

$(FA_CUDA_STUBS) $(FA_CUDA_SM90_STUBS): $(top_srcdir)/backends/cuda/gen-stubs.sh
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/backends/cuda/gen-stubs.sh $@

SUFFIXES = .cu
FA_NVCCFLAGS_COMMON = -std=c++17 -O3 --compiler-options=-fvisibility=hidden \
	-I$(top_srcdir)/include -I$(top_srcdir)/lib -I$(top_srcdir)/backends/cuda -I$(top_builddir) $(NVCCFLAGS)
FA_NVCCFLAGS = $(NVCC_GENCODE) $(FA_SM90A_DEF) $(FA_NVCCFLAGS_COMMON)
FA_NVCC_LT = $(LIBTOOL) $(AM_V_lt) --tag=CC --mode=compile $(SHELL) \
	$(top_srcdir)/backends/cuda/nvcc-lt.sh "$(NVCC)"
.cu.lo:
	$(AM_V_CC)$(FA_NVCC_LT) $(FA_NVCCFLAGS) -c -o $@ $<

if BUILD_CUDA
pkglib_LTLIBRARIES = backends/cuda/flashattn_cuda.la
backends_cuda_flashattn_cuda_la_SOURCES = $(FA_CUDA_SRC) $(FA_CUDA_HDR) $(FA_CUDA_DECODE_HDR)
nodist_backends_cuda_flashattn_cuda_la_SOURCES = $(FA_CUDA_STUBS) $(FA_CUDA_SM90_STUBS)
backends_cuda_flashattn_cuda_la_LDFLAGS = -module -avoid-version -shared -no-undefined
backends_cuda_flashattn_cuda_la_LIBADD = -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -ldl -lpthread -lstdc++
backends_cuda_flashattn_cuda_la_LINK = $(LIBTOOL) $(AM_V_lt) --tag=CC $(AM_LIBTOOLFLAGS) \
	$(LIBTOOLFLAGS) --mode=link $(CC) $(AM_CFLAGS) $(CFLAGS) \
	$(backends_cuda_flashattn_cuda_la_LDFLAGS) $(LDFLAGS) -o $@
# The Hopper stubs: sm_90a code only (the suffix rule's NVCC_GENCODE does not name it).
$(FA_CUDA_SM90_STUBS:.cu=.lo): $(FA_CUDA_SM90_STUBS)
	$(AM_V_CC)$(FA_NVCC_LT) $(NVCC_SM90A_FLAGS) $(FA_NVCCFLAGS_COMMON) -c -o $@ $(@:.lo=.cu)
# No automatic dependency tracking for .cu: every object depends on every CUDA header.
$(FA_CUDA_SRC:.cu=.lo) $(FA_CUDA_STUBS:.cu=.lo) $(FA_CUDA_SM90_STUBS:.cu=.lo): $(FA_CUDA_HDR) \
	$(top_srcdir)/lib/problem.h $(top_srcdir)/lib/philox.h $(top_srcdir)/lib/backend.h $(top_srcdir)/include/flashattn.h
backends/cuda/plan_forward.lo backends/cuda/decode/merge.lo backends/cuda/gen/decode_d256.lo backends/cuda/gen/decode_d128.lo \
	backends/cuda/gen/decode_d64.lo: $(FA_CUDA_DECODE_HDR)
endif
