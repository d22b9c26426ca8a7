#!/usr/bin/env bash
# Sweep of the collectives' selection knobs on 2 GPUs (estimated ~3 minutes on 2x H200, not yet timed), to set the
# defaults from measurements:
#   scripts/gpu_coll_sweep.sh OUTDIR [BUILD_DIR]        (GPUS=0,1)
#  A. LL range (PEERLINK_COLL_LL_MAX 64K/256K/512K) for broadcast, reduce, reduce_scatter, 64 KB-1 MB,
#     and the push kernel with 16 blocks (PEERLINK_ALLREDUCE_BLOCKS; its auto grid is a guess)
#  B. copy engines vs push kernels, 2-128 MB, every op: push, ce (1 lane), ce 2 lanes, ce 2 lanes
#     with 4 MB chunks (PEERLINK_<OP>_ALGO, PEERLINK_COLL_CE_LANES, PEERLINK_COLL_CE_CHUNK_BYTES;
#     reduce / reduce_scatter: copies in, a reduction kernel per step)
#  C. allreduce 8 B-1 MB by threads per block (PEERLINK_ALLREDUCE_THREADS 0=default 512, 128, 256)
# NCCL (plain and window-registered) runs once per op and size range (the "push"/first row), the
# other rows peerlink only (--nccl 0). bf16, CUDA graph (-G 1). One table at the end:
#   sweep config op size(B) peerlink_us nccl_us nccl_reg_us #wrong
# SMALL, LARGE, ARSIZES override the size/iteration flags of A, B, C (GPUS=-1,-1 SMALL=.. LARGE=..
# ARSIZES=.. with tiny sizes runs the plumbing on the host backend). Raw logs in OUTDIR/*.log. Non-zero exit if any run failed or any #wrong was not 0.
set -u
OUT=${1:?usage: scripts/gpu_coll_sweep.sh OUTDIR [BUILD_DIR]}
BUILD=${2:-${BUILD:-build}}
GPUS=${GPUS:-0,1}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
make BACKEND=cuda BUILD="$BUILD" -j"$(nproc)" "$BUILD/bin/bench_collectives" "$BUILD/bin/bench_allreduce" \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
BC="$BUILD/bin/bench_collectives"
BA="$BUILD/bin/bench_allreduce"
TABLE="$OUT/table.txt"
: > "$TABLE"
status=0

# run SWEEP CONFIG OP RANGE NCCL ENV... : one bench_collectives process; rows appended to the table.
run() {
  local sweep=$1 cfg=$2 op=$3 range=$4 nccl=$5; shift 5
  local log="$OUT/$sweep-$op-$cfg.log"
  # shellcheck disable=SC2086
  if ! env "$@" timeout 60 "$BC" --op "$op" --gpus "$GPUS" $range -d bfloat16 -G 1 --nccl "$nccl" > "$log" 2>&1; then
    echo "FAILED: $sweep $cfg $op (see $log)" | tee -a "$TABLE"
    status=1
  fi
  awk -v s="$sweep" -v c="$cfg" -v o="$op" '!/^#/ && NF >= 17 {
      w = $9; if ($10 != "n/a") w += $13; if ($14 != "n/a") w += $17;
      printf "%-3s %-14s %-14s %11s %10s %10s %10s %6s\n", s, c, o, $1, $6, $10, $14, w }' "$log" >> "$TABLE"
}

SMALL=${SMALL:-"-b 64K -e 1M -f 2 -n 50 -w 10"}
for op in broadcast reduce reduce_scatter; do
  first=1
  for ll in 65536 262144 524288; do
    run A "ll_max=$ll" "$op" "$SMALL" "$first" PEERLINK_COLL_LL_MAX=$ll
    first=0
  done
  var=PEERLINK_$(echo "$op" | tr a-z A-Z)_ALGO
  run A push-blocks16 "$op" "$SMALL" 0 "$var=push" PEERLINK_ALLREDUCE_BLOCKS=16
done

LARGE=${LARGE:-"-b 2M -e 128M -f 4 -n 10 -w 3"}
for op in all_gather broadcast alltoall reduce reduce_scatter; do
  var=PEERLINK_$(echo "$op" | tr a-z A-Z | sed 's/ALLTOALL/ALL_TO_ALL/')_ALGO
  run B push "$op" "$LARGE" 1 "$var=push"
  run B ce "$op" "$LARGE" 0 "$var=ce" PEERLINK_COLL_CE_LANES=1
  run B ce-2lanes "$op" "$LARGE" 0 "$var=ce" PEERLINK_COLL_CE_LANES=2
  run B ce-2l-4M "$op" "$LARGE" 0 "$var=ce" PEERLINK_COLL_CE_LANES=2 PEERLINK_COLL_CE_CHUNK_BYTES=4194304
done

ARSIZES=${ARSIZES:-"-b 8 -e 1M -f 4 -n 100 -w 20"}
# C: bench_allreduce (its own table format: kept raw in the logs, the time column summarised).
for th in 0 128 256; do
  log="$OUT/C-allreduce-threads$th.log"
  # shellcheck disable=SC2086
  if ! env PEERLINK_ALLREDUCE_THREADS=$th timeout 60 "$BA" --gpus "$GPUS" $ARSIZES -d bfloat16 -G 1 --impl peerlink \
       > "$log" 2>&1; then
    echo "FAILED: C threads=$th (see $log)" | tee -a "$TABLE"
    status=1
  fi
  awk -v c="threads=$th" '!/^#/ && NF >= 8 {
      printf "%-3s %-14s %-14s %11s %10s %10s %10s %6s\n", "C", c, "allreduce", $1, $5, "-", "-", $8 }' "$log" >> "$TABLE"
done

echo "sweep config         op                 size(B) peerlink_us    nccl_us nccl_reg_us #wrong"
cat "$TABLE"
if awk 'NF == 8 && $8 != "0" { bad = 1 } END { exit !bad }' "$TABLE"; then
  echo "#wrong != 0 in some rows"
  status=1
fi
exit $status
