# backends/cuda/local.mk: the CUDA module (see configure's BUILD_CUDA)
