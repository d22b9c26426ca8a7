#!/usr/bin/env bash
# Fails when this test run left peerlink segments in /dev/shm (a leak).
#
# `make test` exports PEERLINK_TEST_RUN (a random tag, see mk/extra/fuzz.mk); test ids start with it
# (tests/support/mp.h), so their segments are named "pl_<tag>-...". Only those are checked: other
# peerlink jobs on the machine (another user's run, a second checkout) cannot fail this check.
# Without PEERLINK_TEST_RUN (run by hand) every "pl_" segment whose owner process is dead counts:
# segments of live jobs are theirs, not leaks.
set -u
if [ -n "${PEERLINK_TEST_RUN:-}" ]; then
  left=$(ls /dev/shm 2>/dev/null | grep -F "pl_${PEERLINK_TEST_RUN}-" || true)
  what="of test run ${PEERLINK_TEST_RUN}"
else
  left=""
  for f in /dev/shm/pl_*; do
    [ -e "$f" ] || continue
    # Segment header: magic (8 bytes), payload size (8), owner pid (4). Temporary files carry the pid
    # in their name (".tmp.<pid>.<n>").
    case "$f" in
      *.tmp.*) pid=${f##*.tmp.}; pid=${pid%%.*} ;;
      *) pid=$(od -An -t d4 -j 16 -N 4 "$f" 2>/dev/null | tr -d ' ') ;;
    esac
    if [ -z "$pid" ] || [ "$pid" -le 0 ] 2>/dev/null || [ ! -d "/proc/$pid" ]; then
      left+="${f#/dev/shm/}"$'\n'
    fi
  done
  left=${left%$'\n'}
  what="whose owner is dead"
fi
if [ -n "$left" ]; then
  echo "LEAK: peerlink segments ${what} left in /dev/shm:" >&2
  echo "$left" >&2
  exit 1
fi
echo "/dev/shm: no peerlink segments ${what} left"
