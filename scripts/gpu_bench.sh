#!/usr/bin/env bash
# Benchmarks on a GPU machine (made for 2x H200 with NVLink): transport latency and bandwidth
# (direct/relay x done_seq/ring), the p2p matrix, and allreduce peerlink vs NCCL (8 B .. 1 GB, eager
# and CUDA graph). Writes text and JSON per step to OUTDIR plus summary.txt; bounded to about four
# minutes of runs (steps that would start after BENCH_BUDGET_S are skipped and say so).
# usage: scripts/gpu_bench.sh OUTDIR        (env: BUILD=build, SKIP_BUILD=1, BENCH_BUDGET_S=240;
#        BENCH_MAX_BYTES=1G, BENCH_LAT_MAX_BYTES=64M, BENCH_MATRIX_BYTES=128M shrink a dry run)
set -u
OUT=${1:?usage: scripts/gpu_bench.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
BUDGET=${BENCH_BUDGET_S:-240}
MAXB=${BENCH_MAX_BYTES:-1G}
LATMAX=${BENCH_LAT_MAX_BYTES:-64M}
MATRIXB=${BENCH_MATRIX_BYTES:-128M}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 1
. scripts/gpu_lib.sh
export NCCL_NVLS_ENABLE=0   # never NVLink multicast on these machines

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "building benchmarks in $BUILD ..."
  make -j"$(nproc)" BUILD="$BUILD" benchmarks >"$OUT/build.log" 2>&1 || { echo "build failed, see $OUT/build.log"; tail -20 "$OUT/build.log"; exit 1; }
fi
BIN="$ROOT/$BUILD/bin"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -q . && echo '(dirty)')"
  echo "host: $(hostname)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L && nvidia-smi topo -m
  ls /usr/lib/x86_64-linux-gnu/libnccl.so.2* /usr/local/lib/libnccl.so.2* 2>/dev/null
} >"$OUT/machine.txt" 2>&1

start=$(date +%s)
summary="$OUT/summary.txt"
: >"$summary"
# step NAME LIMIT_S CMD... (scripts/gpu_lib.sh): runs CMD with a time limit, output in OUT/NAME.txt,
# one summary line; skipped once the budget is spent.
STEP_STYLE=verdict STEP_EXT=txt STEP_KILL_S=5

BT="$BIN/bench_transport"
for path in direct relay; do
  for comp in done_seq ring; do
    step "lat_${path}_${comp}" 40 "$BT" --mode latency --transport $path --completion $comp \
      -b 8 -e "$LATMAX" -f 2 -n 200 -w 20 --verify-full 4M --json "$OUT/lat_${path}_${comp}.json"
  done
done
for path in direct relay; do
  for comp in done_seq ring; do
    step "bw_${path}_${comp}" 40 "$BT" --mode bandwidth --transport $path --completion $comp \
      -b 4K -e "$MAXB" -f 4 -n 10 -w 3 --window 4 --verify-full 4M --json "$OUT/bw_${path}_${comp}.json"
  done
  step "bidir_${path}_done_seq" 40 "$BT" --mode bidir --transport $path --completion done_seq \
    -b 64K -e "$MAXB" -f 4 -n 10 -w 3 --window 4 --verify-full 4M --json "$OUT/bidir_${path}_done_seq.json"
done
step p2p_matrix 90 "$BIN/p2p_matrix" -s "$MATRIXB" -n 5 --lat-iters 100 --json "$OUT/p2p_matrix.json"
step allreduce_bf16 60 "$BIN/bench_allreduce" --impl both -b 8 -e "$MAXB" -f 2 -n 20 -w 5 -c 1 -d bfloat16 -o sum \
  --json "$OUT/allreduce_bf16.json"
step allreduce_bf16_graph 60 "$BIN/bench_allreduce" --impl both -b 8 -e "$MAXB" -f 2 -n 20 -w 5 -c 1 -G 1 -d bfloat16 -o sum \
  --json "$OUT/allreduce_bf16_graph.json"
step allreduce_f32 60 "$BIN/bench_allreduce" --impl both -b 8 -e "$MAXB" -f 2 -n 20 -w 5 -c 1 -d float -o sum \
  --json "$OUT/allreduce_f32.json"

python3 "$ROOT/benchmarks/plot.py" "$OUT"/*.json >"$OUT/plot.txt" 2>&1 || true
echo "total $(( $(date +%s) - start ))s; results in $OUT" | tee -a "$summary"
! grep -q '^FAIL' "$summary"
