# Rules shared by every backend. Sources are found by directory so that adding a file needs no edit.
SAN ?=
OPT ?= -O2 -g
# fmt's headers (src/common/format.h): the system's (scripts/install_deps.sh installs libfmt-dev),
# else a copy carried in .fmt/include (machines without the package, such as the GPU machine).
FMT_INC := $(if $(wildcard /usr/include/fmt/core.h /usr/local/include/fmt/core.h),,$(if $(wildcard .fmt/include/fmt/core.h),-I$(abspath .fmt/include)))
CXXFLAGS_BASE := -std=c++17 $(OPT) -fPIC -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc -Itests $(FMT_INC) $(SAN)
CXXFLAGS_ALL = $(CXXFLAGS_BASE) $(BACKEND_CXXFLAGS) $(EXTRA_CXXFLAGS)
# Tools and benchmarks see the public headers only: no -Isrc, and they link the .so, which exports
# nothing else.
CXXFLAGS_PUBLIC = $(filter-out -Isrc -Itests,$(CXXFLAGS_ALL))
LDFLAGS_ALL = $(SAN) -pthread
# The library's version (the VERSION file; py/peerlink/_version.py says the same): the file is
# libpeerlink.so.$(VERSION), its SONAME libpeerlink.so.$(SOVERSION) (the major number: what an
# incompatible ABI bumps), and libpeerlink.so the name programs link with.
VERSION := $(shell cat VERSION)
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
LIB_SONAME := libpeerlink.so.$(SOVERSION)
LIB_REAL := $(BUILD)/lib/libpeerlink.so.$(VERSION)
LIB := $(BUILD)/lib/libpeerlink.so
# The same objects as a static archive, for what tests internals (unit tests, micro benchmarks):
# libpeerlink.so exports the public API only (mk/libpeerlink.map, checked by test-exports).
LIB_INTERNAL := $(BUILD)/lib/libpeerlink_internal.a
# Programs in bin/ find the library in ../lib, in the build tree and in an installed tree alike.
LIB_RPATH := -Wl,-rpath,'$$ORIGIN/../lib'

# In layer order (scripts/check_layers.sh): common/shm -> gpu -> config -> bootstrap -> topology ->
# transport -> stream -> collectives -> hier.
LIB_DIRS := src/common src/shm src/config src/bootstrap src/topology src/transport src/stream src/collectives \
            src/hier
LIB_SRCS := $(sort $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cpp))) \
            $(filter-out src/gpu/runtime_%.cpp,$(wildcard src/gpu/*.cpp)) $(GPU_RUNTIME_SRC)
LIB_OBJS := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(GPU_DEVICE_SRCS))

TEST_SRCS := $(sort $(wildcard tests/unit/*.cpp tests/mp/*.cpp tests/topology/*.cpp tests/collectives/*.cpp))
TEST_OBJS := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(TEST_SRCS))
TEST_BIN := $(BUILD)/bin/peerlink_tests
TOOL_BINS := $(patsubst tools/%.cpp,$(BUILD)/bin/%,$(wildcard tools/*.cpp))
BENCH_BINS := $(patsubst benchmarks/%.cpp,$(BUILD)/bin/%,$(wildcard benchmarks/*.cpp))
MICRO_SRCS := $(wildcard benchmarks/micro/*.cpp)

.PHONY: all lib tests tools benchmarks run test deps test-cpp test-sanitizers test-asan test-tsan clean \
        test-layers test-exports
all: lib tools benchmarks
lib: $(LIB)
tests: $(TEST_BIN)
tools: $(TOOL_BINS)
benchmarks: $(BENCH_BINS) $(if $(MICRO_SRCS),$(BUILD)/bin/bench_micro)

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -MMD -MP -c $< -o $@
$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(DEVICE_COMPILE)
# mk/libpeerlink.map exports only peerlink's own symbols. Standard-library template instances that
# the compiler emits into libpeerlink.so stay local: exported, they would interpose on the process's
# libstdc++ for every other library (seen on the GPU machine: torch crashed inside std::ostream once
# libpeerlink.so, built by a newer g++ than the system libstdc++, was loaded before it).
$(LIB_REAL): $(LIB_OBJS) mk/libpeerlink.map VERSION
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $(LIB_OBJS) $(LDFLAGS_ALL) -Wl,-soname,$(LIB_SONAME) -Wl,--version-script=mk/libpeerlink.map \
	  $(BACKEND_LDLIBS) -ldl -lrt
$(LIB): $(LIB_REAL)
	ln -sfn $(notdir $(LIB_REAL)) $(BUILD)/lib/$(LIB_SONAME)
	ln -sfn $(LIB_SONAME) $@
$(LIB_INTERNAL): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $(LIB_OBJS)
# Tests reach internals (transport/, collectives/, ...): they link the archive, not the .so.
$(TEST_BIN): $(TEST_OBJS) $(LIB_INTERNAL)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $(TEST_OBJS) $(LIB_INTERNAL) $(LDFLAGS_ALL) $(BACKEND_LDLIBS) -ldl -lrt -lgtest -lgtest_main
$(BUILD)/bin/%: tools/%.cpp $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_PUBLIC) -o $@ $< -L$(BUILD)/lib -lpeerlink $(LIB_RPATH) $(LDFLAGS_ALL) $(BACKEND_LDLIBS)
$(BUILD)/bin/%: benchmarks/%.cpp $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_PUBLIC) -o $@ $< -L$(BUILD)/lib -lpeerlink $(LIB_RPATH) $(LDFLAGS_ALL) $(BACKEND_LDLIBS) -ldl
# Micro benchmarks time internal structures (rings, registry, request state): the archive.
$(BUILD)/bin/bench_micro: $(MICRO_SRCS) $(LIB_INTERNAL)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -o $@ $(MICRO_SRCS) $(LIB_INTERNAL) $(LDFLAGS_ALL) $(BACKEND_LDLIBS) -ldl -lrt -lbenchmark

deps:
	@bash scripts/install_deps.sh

# The demo: a transfer sweep between two local processes.
run: deps all
	$(BUILD)/bin/bench_transport --demo

# Everything CI runs. Each step leaves /dev/shm without peerlink segments (checked). The steps run
# one after the other (tests that measure time or wait for peers never share the machine with
# another step's tests), each building its prerequisites on every core: CI calls a plain
# `make test`, whose builds ran on one core of two. A caller's own -j (jobserver) is kept.
# (TEST_J is expanded in the recipe, where MAKEFLAGS shows a caller's -j.)
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TEST_J = $(if $(filter -j% --jobserver%,$(MAKEFLAGS)),,-j$(TEST_JOBS))
test: deps
	@set -e; for step in test-layers test-exports test-cpp test-asan test-tsan $(EXTRA_TESTS); do \
	  echo "== make $$step ($$(date +%T))"; $(MAKE) --no-print-directory $(TEST_J) $$step; \
	done
	@bash scripts/check_shm_clean.sh
	@echo "make test: all steps passed"

# Layering and getenv rule; the script's self-test proves it can fail.
test-layers:
	bash scripts/check_layers.sh --self-test
	bash scripts/check_layers.sh

# libpeerlink.so exports the public API only: no internal namespace in its dynamic
# symbol table.
test-exports: lib
	bash scripts/check_layers.sh --exports $(LIB)

GTEST_FILTER ?= *
test-cpp: tests tools benchmarks
	$(TEST_BIN) --gtest_filter='$(GTEST_FILTER)'
	@bash scripts/check_shm_clean.sh

test-sanitizers: test-asan test-tsan
# Sanitizer builds carry line tables only (-g1): their reports name functions, files and lines as
# with -g, and a test file compiles in 4.5 s instead of 7.3 under ASan+UBSan (g++ 12, measured on
# tests/collectives/collectives_host_test.cpp). SAN_OPT="-O1 -g" for a build to debug in gdb.
SAN_OPT ?= -O1 -g1
test-asan:
	$(MAKE) BACKEND=host BUILD=build-asan OPT="$(SAN_OPT)" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 build-asan/bin/peerlink_tests --gtest_filter='$(GTEST_FILTER)'
	@bash scripts/check_shm_clean.sh
# TSan: the threaded transport paths (workers, requests); fork-heavy kill tests are skipped there,
# and so is the in-process pair: its two communicators map the same SHM at two addresses, and TSan
# tracks synchronization by address, so it cannot see the registry's release/acquire across them.
TSAN_FILTER ?= Transport*:Ring*:Channel*:Request*:Mp*-*Kill*:*Crash*:*InProcess*
# The TSan binary is built from the test files that define a suite (or an instantiation prefix)
# the filter's positive patterns can select, not from every test file: the others would be compiled
# with TSan only to be filtered out (16 of 68 files).
empty :=
space := $(empty) $(empty)
lparen := (
TSAN_PREFIXES := $(subst *,,$(subst :,$(space),$(firstword $(subst -,$(space),$(TSAN_FILTER)))))
TSAN_TEST_SRCS = $(shell grep -lE '^\s*(TEST|TEST_F|TEST_P|TYPED_TEST|INSTANTIATE_TEST_SUITE_P)\$(lparen)\s*($(subst $(space),|,$(TSAN_PREFIXES)))' $(TEST_SRCS))
test-tsan:
	$(MAKE) BACKEND=host BUILD=build-tsan OPT="$(SAN_OPT)" SAN="-fsanitize=thread" TEST_SRCS="$(TSAN_TEST_SRCS)" tests
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 setarch $$(uname -m) -R build-tsan/bin/peerlink_tests --gtest_filter='$(TSAN_FILTER)'
	@bash scripts/check_shm_clean.sh

# Every build directory the makefiles, scripts and setup.py use (fixed names only: an overridden
# BUILD=... is the caller's to remove, never an rm -rf of whatever it names).
clean:
	rm -rf build build-host build-asan build-tsan build-cuda build-hip build-fuzz build-py

-include $(LIB_OBJS:.o=.d) $(TEST_OBJS:.o=.d)
