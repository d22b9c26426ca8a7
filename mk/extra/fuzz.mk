# libFuzzer targets for every parser of shared memory: each tests/fuzz/<name>_fuzz.cpp (picked up by
# wildcard: adding a target needs no edit here) is built with clang++ under
# -fsanitize=fuzzer,address,undefined against the host-backend library sources, and run by
# `make test` for FUZZ_SECONDS each, seeded from tests/fuzz/corpus/<name>/ when that exists.
# New inputs go to $(FUZZ_BUILD)/corpus/<name> and crash reproducers to $(FUZZ_BUILD)/artifacts/,
# never into the source tree. Without clang++ the step is skipped with a message.
#   make test-fuzz                     build and run every target
#   make fuzz FUZZ_SECONDS=300         the same, longer
#   make test-fuzz FUZZ_TARGETS=ring   only some targets (names without _fuzz)
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 15
FUZZ_BUILD ?= build-fuzz
FUZZ_HAVE_CXX := $(shell command -v $(FUZZ_CXX) 2>/dev/null)
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/*_fuzz.cpp))
FUZZ_TARGETS ?= $(patsubst tests/fuzz/%_fuzz.cpp,%,$(FUZZ_SRCS))
FUZZ_BINS := $(patsubst %,$(FUZZ_BUILD)/bin/%_fuzz,$(FUZZ_TARGETS))
# The library as the host backend builds it (no GPU runtime), whatever BACKEND this make uses. Line
# tables only, as the sanitizer builds (mk/common.mk SAN_OPT): crash reports keep files and lines.
# The host-only library's sources, as mk/common.mk's LIB_SRCS with the runtime of mk/host.mk.
FUZZ_LIB_SRCS := $(sort $(foreach d,$(LIB_DIRS) src/config,$(wildcard $(d)/*.cpp)) \
                   $(filter-out src/gpu/runtime_%.cpp,$(wildcard src/gpu/*.cpp)) $(wildcard src/gpu/runtime_none.cpp))
FUZZ_LIB_OBJS := $(patsubst %.cpp,$(FUZZ_BUILD)/obj/%.o,$(FUZZ_LIB_SRCS))
FUZZ_LIB := $(FUZZ_BUILD)/lib/libpeerlink_fuzz.a
FUZZ_CXXFLAGS := -std=c++17 -O1 -gline-tables-only -fno-omit-frame-pointer -Iinclude -Isrc -Itests $(FMT_INC) -DPEERLINK_HOST_ONLY \
                 -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_RUN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

EXTRA_TESTS += test-fuzz
.PHONY: test-fuzz fuzz fuzz-build
# One rule per target, so that `make -j2 test-fuzz` runs two fuzzers at once (each is one process on
# one core for FUZZ_SECONDS: the same executions in half the wall time on two idle cores).
FUZZ_RUNS := $(patsubst %,fuzz-run-%,$(FUZZ_TARGETS))
.PHONY: $(FUZZ_RUNS)

$(FUZZ_BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(FUZZ_LIB): $(FUZZ_LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
# A static archive: each target pulls in only the objects it references.
$(FUZZ_BUILD)/bin/%_fuzz: tests/fuzz/%_fuzz.cpp $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer -MMD -MP -MF $@.d $< $(FUZZ_LIB) -o $@ -pthread -ldl -lrt

fuzz-build: $(FUZZ_BINS)

ifeq ($(FUZZ_HAVE_CXX),)
test-fuzz fuzz:
	@echo "test-fuzz: $(FUZZ_CXX) not found, skipping the libFuzzer targets ($(FUZZ_TARGETS)); install clang to run them"
else
test-fuzz fuzz: $(FUZZ_RUNS)
	@bash scripts/check_shm_clean.sh
$(FUZZ_RUNS): fuzz-run-%: $(FUZZ_BUILD)/bin/%_fuzz
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/artifacts
	@seeds=tests/fuzz/corpus/$*; [ -d $$seeds ] || seeds=; \
	log=$(FUZZ_BUILD)/$*.log; \
	echo "fuzz: $* for $(FUZZ_SECONDS) s (seeds: $${seeds:-none})"; \
	if ! $(FUZZ_RUN_ENV) $< -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	     -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/artifacts/$*- \
	     $(FUZZ_BUILD)/corpus/$* $$seeds > $$log 2>&1; then \
	  tail -60 $$log; echo "fuzz: $* FAILED (log $$log, reproducer under $(FUZZ_BUILD)/artifacts/)"; exit 1; \
	fi; \
	grep -E "stat::number_of_executed_units|Done [0-9]+ runs" $$log | tail -1 | sed "s/^/fuzz: $*: /"
endif

-include $(FUZZ_LIB_OBJS:.o=.d) $(FUZZ_BINS:=.d)
