# The edit-compile-test loop: `make check` builds the host backend in build-host/ (no GPU toolkit,
# no sanitizers, no fuzzing; the directory the host-only iteration uses anyway, so an edit rebuilds
# only what it touched) and runs the layer rule, the configuration docs check and every gtest but the
# few that move large buffers or soak (CHECK_SLOW). `make test` runs everything, as CI does.
# Measured (2 cores shared with other builds, 2026-12-02): 49 s after an edit of one library source
# (47 s with nothing to rebuild; the tests' run is 20 s of CPU); from an empty build-host/ the
# compile is 5.7 CPU-minutes, so about 3 minutes of build and under 4 in all on two idle cores.
CHECK_BUILD ?= build-host
# Excluded from the loop (all run in `make test`): the 64 MB sweeps, the ten-thousand-call soaks and
# the idle-CPU measurement, ~13 s of the ~52 s suite.
CHECK_SLOW ?= *Large64MB*:*TenThousand*:*IdleCommunicatorUsesNoCpu*
CHECK_FILTER ?= *-$(CHECK_SLOW)
.PHONY: check
check:
	bash scripts/check_layers.sh
	$(MAKE) --no-print-directory BACKEND=host BUILD=$(CHECK_BUILD) tests test-docs
	$(CHECK_BUILD)/bin/peerlink_tests --gtest_filter='$(CHECK_FILTER)' --gtest_brief=1
	@bash scripts/check_shm_clean.sh
	@echo "make check: passed (make test runs everything)"
