# peerlink top-level build. Picks the backend: nvcc present -> CUDA, else hipcc -> HIP, else host-only.
#   make            build build/lib/libpeerlink.so, tools, benchmarks
#   make run        demo transfer sweep between two local processes (GPUs when present)
#   make test       install what is missing, build, run every CI test (host backend, sanitizers)
# Override with BACKEND=cuda|hip|host and BUILD=<dir>.
ifndef BACKEND
  ifneq ($(shell command -v nvcc 2>/dev/null || test -x /usr/local/cuda/bin/nvcc && echo y),)
    BACKEND := cuda
  else ifneq ($(shell command -v hipcc 2>/dev/null),)
    BACKEND := hip
  else
    BACKEND := host
  endif
endif
BUILD ?= build

ifeq ($(BACKEND),cuda)
  include Makefile.cuda
else ifeq ($(BACKEND),hip)
  include Makefile.rocm
else
  include mk/host.mk
endif
include mk/common.mk
-include $(sort $(wildcard mk/extra/*.mk))
