#!/usr/bin/env bash
# Fails when peerlink segments are left in /dev/shm (a leak). Segments of live processes that are
# not ours (another job) would also show; tests use unique ids of their own.
left=$(ls /dev/shm 2>/dev/null | grep '^pl_' || true)
if [ -n "$left" ]; then
  echo "LEAK: peerlink segments left in /dev/shm:" >&2
  echo "$left" >&2
  exit 1
fi
echo "/dev/shm: no peerlink segments left"
