# A tag for this test run: test ids start with it (tests/support/mp.h), so the leak check
# (scripts/check_shm_clean.sh) counts only this run's segments and never another peerlink job's.
# Computed once by the top-level make; sub-makes and test processes inherit it from the environment.
ifndef PEERLINK_TEST_RUN
  PEERLINK_TEST_RUN := r$(shell od -An -N4 -tx4 /dev/urandom | tr -d ' \n')
endif
export PEERLINK_TEST_RUN
