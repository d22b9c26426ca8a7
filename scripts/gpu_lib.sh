# Shared helpers of the GPU scripts (scripts/gpu_*.sh); sourced, not run:
#   . "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
# Each script keeps its own variables (OUT, LOG, BUDGET, ...) and picks how step() reports.
# shellcheck shell=bash

status=0  # set to 1 by every failed step; the scripts exit with it

# note MSG...: a time-stamped line, printed and appended to $LOG.
note() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

# step NAME SECONDS CMD...: runs CMD under `timeout SECONDS` (`timeout -k $STEP_KILL_S` when set),
# stdout and stderr in $OUT/NAME.$STEP_EXT (default log), and reports it as $STEP_STYLE says:
#   summary (default): "NAME rc=N  Ss", printed and appended to $OUT/summary.txt;
#   noted:   "== NAME: CMD" and "== NAME: rc=N" through note(), the log's last 30 lines between;
#   verdict: "OK NAME (Ss)" or "FAIL(rc=N) NAME (Ss)", printed and appended to $summary; once
#            $BUDGET seconds have passed since $start the step does not run: "SKIP  NAME (...)".
# A failed CMD sets status=1; step returns CMD's exit status (0 for a skipped step).
step() {
  local name=$1 secs=$2
  shift 2
  local style=${STEP_STYLE:-summary}
  local log="$OUT/$name.${STEP_EXT:-log}"
  if [ "$style" = verdict ]; then
    local now=$(($(date +%s) - start))
    if [ "$now" -ge "$BUDGET" ]; then
      echo "SKIP  $name (budget of ${BUDGET}s spent)" | tee -a "$summary"
      return 0
    fi
  fi
  [ "$style" = noted ] && note "== $name: $*"
  local t0=$SECONDS
  if [ -n "${STEP_KILL_S:-}" ]; then
    timeout -k "$STEP_KILL_S" "$secs" "$@" >"$log" 2>&1
  else
    timeout "$secs" "$@" >"$log" 2>&1
  fi
  local rc=$?
  case $style in
    noted)
      tail -n 30 "$log" | tee -a "$LOG"
      note "== $name: rc=$rc"
      ;;
    verdict)
      local verdict=OK
      [ "$rc" -ne 0 ] && verdict="FAIL(rc=$rc)"
      echo "$verdict $name ($((SECONDS - t0))s)" | tee -a "$summary"
      ;;
    *) printf '%-12s rc=%d  %ds\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$OUT/summary.txt" ;;
  esac
  [ $rc -eq 0 ] || status=1
  return $rc
}

# gtest_flags: GT=(make arguments) for googletest: none when the system has it, else the copy
# carried in .gtest/{include,lib} (the GPU image has none). Run from the repository root.
gtest_flags() {
  GT=()
  if ! echo '#include <gtest/gtest.h>' | g++ -x c++ -E - >/dev/null 2>&1 && [ -d .gtest ]; then
    GT=(SAN="-I$(pwd)/.gtest/include -L$(pwd)/.gtest/lib")
  fi
}

# The CUDA toolkit: $CUDA_HOME, else the one whose nvcc is on PATH, else /usr/local/cuda.
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
