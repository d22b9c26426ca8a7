# Benchmarks in CI: each runs briefly on the host backend and must verify its payloads (#wrong 0).
EXTRA_TESTS += test-bench
.PHONY: test-bench
test-bench: benchmarks
	bash tests/bench/check_benchmarks.sh $(BUILD)/bin
