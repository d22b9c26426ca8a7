# The NCCL-compatible library: $(BUILD)/lib/libnccl.so.2 (+ libnccl.so) from src/nccl/, compiled
# against the system's nccl.h and linked to libpeerlink.so (public API only).
#   make nccl                      build it (skipped with a message when no nccl.h is found)
#   make test-nccl                 the exports check (every function of nccl.h) + the C API tests
#   make nccl NCCL_HOME=/path      nccl.h from /path/include (e.g. the pip wheel's nvidia/nccl)
# nccl.h includes cuda_runtime.h: the CUDA headers are needed even for the host backend (types only;
# the shim itself calls no CUDA function, libpeerlink does).
PYTHON ?= python3
NCCL_HOME ?=
ifneq ($(NCCL_HOME),)
  NCCL_INC := $(NCCL_HOME)/include
else
  # Autodetect: the usual include dirs, then the pip wheel (site-packages/nvidia/nccl/include),
  # asked of python only when no usual dir has nccl.h.
  NCCL_INC := $(firstword $(foreach d,/usr/local/include /usr/include $(CUDA_HOME)/include /usr/local/cuda/include,\
                 $(if $(wildcard $(d)/nccl.h),$(d))))
  ifeq ($(NCCL_INC),)
    NCCL_INC := $(shell $(PYTHON) -c "import importlib.util as u, os; s = u.find_spec('nvidia.nccl'); \
                  print(next((os.path.join(p, 'include') for p in (s.submodule_search_locations or []) \
                  if os.path.isfile(os.path.join(p, 'include', 'nccl.h'))), ''))" 2>/dev/null)
  endif
endif
NCCL_CUDA_INC := $(firstword $(foreach d,$(CUDA_HOME)/include /usr/local/cuda/include /usr/local/include /usr/include,\
                   $(if $(wildcard $(d)/cuda_runtime.h),$(d))))
NCCL_SHIM := $(BUILD)/lib/libnccl.so.2
NCCL_SHIM_SRCS := $(sort $(wildcard src/nccl/*.cpp))
NCCL_SHIM_OBJS := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(NCCL_SHIM_SRCS))
# Public headers only (no -Isrc): the shim's own headers are included relative to src/nccl/.
NCCL_SHIM_CXXFLAGS = $(CXXFLAGS_PUBLIC) -fvisibility=hidden -I$(NCCL_INC) $(if $(NCCL_CUDA_INC),-I$(NCCL_CUDA_INC))
NCCL_TEST_BIN := $(BUILD)/bin/nccl_api_tests

.PHONY: nccl test-nccl
EXTRA_TESTS += test-nccl

ifeq ($(wildcard $(NCCL_INC)/nccl.h),)
nccl:
	@echo "nccl: no nccl.h found (set NCCL_HOME); skipping libnccl.so.2"
test-nccl:
	@echo "test-nccl: no nccl.h found (set NCCL_HOME); skipping"
else
nccl: $(NCCL_SHIM) $(BUILD)/lib/libnccl.so
all: nccl

$(BUILD)/obj/src/nccl/%.o: src/nccl/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(NCCL_SHIM_CXXFLAGS) -MMD -MP -c $< -o $@

# Exports exactly nccl* / pnccl* (mk/nccl.map): standard-library template instances stay local
# (the libpeerlink.map lesson). -Bsymbolic-functions: our pnccl* and internal calls bind to our own
# nccl*, whatever a profiler interposes. RUNPATH: $ORIGIN finds libpeerlink.so.N beside it in the
# build tree, $ORIGIN/.. in an installed tree (<prefix>/lib/peerlink-nccl/libnccl.so.2, a directory
# of its own so that it never shadows the system's NCCL, next to <prefix>/lib/libpeerlink.so.N).
$(NCCL_SHIM): $(NCCL_SHIM_OBJS) $(LIB) mk/nccl.map
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $(NCCL_SHIM_OBJS) -Wl,-soname,libnccl.so.2 -Wl,--version-script=mk/nccl.map \
	  -Wl,-Bsymbolic-functions -L$(BUILD)/lib -lpeerlink -Wl,-rpath,'$$ORIGIN:$$ORIGIN/..' $(LDFLAGS_ALL) -ldl
$(BUILD)/lib/libnccl.so: $(NCCL_SHIM)
	ln -sf libnccl.so.2 $@

# The C API test links the shim (as an NCCL program would) and nothing internal.
NCCL_TEST_SRCS := $(sort $(wildcard tests/nccl/*_test.cpp))
$(NCCL_TEST_BIN): $(NCCL_TEST_SRCS) $(wildcard tests/nccl/*.h) $(NCCL_SHIM) $(BUILD)/lib/libnccl.so
	@mkdir -p $(dir $@)
	$(CXX) $(NCCL_SHIM_CXXFLAGS) -o $@ $(NCCL_TEST_SRCS) -L$(BUILD)/lib -lnccl -lpeerlink $(LIB_RPATH) $(LDFLAGS_ALL) -lgtest -lgtest_main

# Communicator creation time through the C API (benchmarks/nccl/init_bench.cpp; not part of `make
# benchmarks`, which links libpeerlink only): make nccl-init-bench, then run $(BUILD)/bin/nccl_init_bench.
NCCL_INIT_BENCH := $(BUILD)/bin/nccl_init_bench
.PHONY: nccl-init-bench
nccl-init-bench: $(NCCL_INIT_BENCH)
$(NCCL_INIT_BENCH): benchmarks/nccl/init_bench.cpp $(NCCL_SHIM) $(BUILD)/lib/libnccl.so
	@mkdir -p $(dir $@)
	$(CXX) $(NCCL_SHIM_CXXFLAGS) -o $@ $< -L$(BUILD)/lib -lnccl -lpeerlink $(LIB_RPATH) $(LDFLAGS_ALL)

# Simulated nodes on one GPU against the real NCCL (tests/nccl/multinode_gpu_check.cpp, run by
# scripts/gpu_multinode.sh): CUDA builds only (it allocates device memory itself).
NCCL_MN_GPU := $(BUILD)/bin/nccl_multinode_gpu
.PHONY: nccl-multinode-gpu
nccl-multinode-gpu: $(NCCL_MN_GPU)
$(NCCL_MN_GPU): tests/nccl/multinode_gpu_check.cpp $(NCCL_SHIM) $(BUILD)/lib/libnccl.so
	@mkdir -p $(dir $@)
	$(CXX) $(NCCL_SHIM_CXXFLAGS) -o $@ $< -L$(BUILD)/lib -lnccl $(LIB_RPATH) $(LDFLAGS_ALL) $(BACKEND_LDLIBS)

test-nccl: $(NCCL_SHIM) $(NCCL_TEST_BIN)
	bash tests/nccl/check_exports.sh $(NCCL_INC)/nccl.h $(NCCL_SHIM)
	PEERLINK_NCCL_HOST_BACKEND=1 $(NCCL_TEST_BIN)
	@bash scripts/check_shm_clean.sh

-include $(NCCL_SHIM_OBJS:.o=.d)
endif
