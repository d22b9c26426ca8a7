# Host-only backend: no GPU runtime; the host-memory backend (POSIX SHM) serves every path.
CXX ?= g++
GPU_RUNTIME_SRC := src/gpu/runtime_none.cpp
GPU_DEVICE_SRCS :=
BACKEND_CXXFLAGS := -DPEERLINK_HOST_ONLY
BACKEND_LDLIBS :=
