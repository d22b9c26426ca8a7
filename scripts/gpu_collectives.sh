#!/usr/bin/env bash
# GPU checks of the allreduce (run on a node with 2 GPUs, e.g. 2x H200):
#   scripts/gpu_collectives.sh OUTDIR [BUILD_DIR]     (ALGOS=oneshot,twoshot,bandwidth,auto)
# 1. builds the CUDA library and tests (build-dev), 2. runs the Allreduce* gtests on the GPUs
# (correctness of every dtype/op/algorithm vs a float64 reference, bitwise agreement across ranks,
# back-to-back and two-stream runs, graph capture, device timeout), 3. compute-sanitizer racecheck on
# small allreduce and other-collective cases, 4. the timing sweep (bench_allreduce --algo, bf16, graph and eager) per algorithm.
# Every step writes OUTDIR/<step>.log; the script's exit status is non-zero if any step failed.
set -u
OUT=${1:?usage: scripts/gpu_collectives.sh OUTDIR [BUILD_DIR]}
BUILD=${2:-${BUILD:-build-dev}}
ALGOS=${ALGOS:-oneshot,twoshot,bandwidth,auto}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
. scripts/gpu_lib.sh  # step NAME SECONDS CMD... (log in OUT/NAME.log, OUT/summary.txt), CUDA_HOME, GT
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true
gtest_flags  # googletest: the system's, else a copy carried in .gtest/{include,lib}
TESTBIN="$BUILD/bin/peerlink_tests"
if ! step build 240 make BACKEND=cuda BUILD="$BUILD" -j"$(nproc)" "${GT[@]}" lib tests "$BUILD/bin/bench_allreduce"; then
  # Someone else's test may not compile right now: build the library and only our tests.
  step build_lib 240 make BACKEND=cuda BUILD="$BUILD" -j"$(nproc)" lib || { tail -30 "$OUT/build_lib.log"; exit 1; }
  TESTBIN="$BUILD/bin/allreduce_tests"
  step build_own_tests 120 g++ -std=c++17 -O2 -DPEERLINK_CUDA -Iinclude -Isrc -Itests -I"$CUDA_HOME/include" \
    -I.gtest/include tests/collectives/*.cpp -o "$TESTBIN" -L.gtest/lib -L"$BUILD/lib" -lpeerlink \
    -Wl,-rpath,"$(pwd)/$BUILD/lib" -L"$CUDA_HOME/lib64" -lcudart -lgtest -lgtest_main -pthread || exit 1
fi
step sweep_build 120 make BACKEND=cuda BUILD="$BUILD" -j"$(nproc)" "$BUILD/bin/bench_allreduce"
# The sweep: bench_allreduce, one pass per algorithm (Options::allreduce_algo), bf16 sum, 2 GPUs.
SWEEP=("$BUILD/bin/bench_allreduce" --impl peerlink -g 2 -d bfloat16 -o sum -f 2 -n 40 -w 5)
export PEERLINK_TEST_GPUS=2
step gtest ${GTEST_SECS:-150} "$TESTBIN" --gtest_filter="${GTEST_FILTER:-AllreduceGpu*}"
step sweep ${SWEEP_SECS:-120} "${SWEEP[@]}" -G 1 --algo "$ALGOS" -b 8 -e 268435456
step sweep_eager ${SWEEP_SECS:-120} "${SWEEP[@]}" --algo "$ALGOS" -b 8 -e 268435456
# Tuning variants: SWEEP_VARIANTS="algo:lo:hi:VAR=val ..." (e.g. bandwidth:16777216:268435456:PEERLINK_ALLREDUCE_BLOCKS=64)
i=0
for v in ${SWEEP_VARIANTS:-}; do
  IFS=: read -r algo lo hi kv <<< "$v"
  i=$((i + 1))
  echo "variant $v" > "$OUT/variant$i.txt"
  step sweep_v$i 60 env "$kv" "${SWEEP[@]}" -G 1 --algo "$algo" -b "$lo" -e "$hi"
done
# Same-machine NCCL reference (torch), when NCCL_REF=1.
if [ "${NCCL_REF:-0}" = 1 ] && python3 -c 'import torch' 2> /dev/null; then
  step nccl_ref 120 env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 python3 -m torch.distributed.run \
    --nproc_per_node=2 benchmarks/allreduce_nccl_ref.py
fi
if command -v compute-sanitizer > /dev/null || [ -x "$CUDA_HOME/bin/compute-sanitizer" ]; then
  CS=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
  step racecheck ${RACECHECK_SECS:-120} "$CS" --tool racecheck --target-processes all --error-exitcode 9 \
    "$TESTBIN" --gtest_filter='AllreduceGpu.SanitizerSmall'
  step racecheck_colls ${RACECHECK_SECS:-120} "$CS" --tool racecheck --target-processes all --error-exitcode 9 \
    "$TESTBIN" --gtest_filter='CollectivesGpu.SanitizerSmall'
fi
for f in "$OUT"/sweep*.log "$OUT"/nccl_ref.log; do echo "== $f"; grep -E "^# bench_allreduce|^ +[0-9]|^nccl " "$f"; done > "$OUT/sweep_table.txt" 2>/dev/null || true
exit $status
