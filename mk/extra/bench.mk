# Benchmarks in CI: each runs briefly on the host backend and must verify its payloads (#wrong 0).
EXTRA_TESTS += test-bench
.PHONY: test-bench
test-bench: benchmarks
	bash tests/bench/check_benchmarks.sh $(BUILD)/bin

# The benchmark binaries are built without dependency files: rebuild them when a shared helper
# header (benchmarks/common) changes.
$(BENCH_BINS) $(if $(MICRO_SRCS),$(BUILD)/bin/bench_micro): $(wildcard benchmarks/common/*.h)
