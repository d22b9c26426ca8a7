#!/usr/bin/env bash
# GPU checks of stream-ordered send/recv, on a node with 2 GPUs (e.g. nvidia-h200-x2):
#   scripts/gpu_stream.sh OUTDIR [BUILD_DIR]
# 1. builds the CUDA library, tests and benchmarks; 2. the StreamGpu* gtests (both forms up to 64 MB,
# 2,000 messages in flight, a group captured once and replayed 1,000 times with changing payloads,
# mismatch / stall / killed peer; StreamGpuDirect*: two ranks of one process, zero-copy and self
# copies); 3. compute-sanitizer racecheck on small cases; 4. bench_transport
# --mode stream eager and -G, peerlink and NCCL side by side; 5. the single-GPU stand-in (both ranks
# as threads on GPU 0, -G), which compares kernel changes on any one-GPU machine. Every step logs to
# OUTDIR/<step>.log.
set -u
OUT=${1:?usage: scripts/gpu_stream.sh OUTDIR [BUILD_DIR]}
BUILD=${2:-${BUILD:-build-dev}}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
. scripts/gpu_lib.sh  # step NAME SECONDS CMD... (log in OUT/NAME.log, OUT/summary.txt), CUDA_HOME, GT
gtest_flags  # googletest: the system's, else a copy carried in .gtest/{include,lib}
has() { [ -z "${STREAM_STEPS:-}" ] || [[ " $STREAM_STEPS " == *" $1 "* ]]; }  # STREAM_STEPS="gtest bench_graph"
step build 300 make BACKEND=cuda BUILD="$BUILD" -j"$(nproc)" "${GT[@]}" lib tests benchmarks || { tail -30 "$OUT/build.log"; exit 1; }
export PEERLINK_TEST_GPUS=2
has gtest && step gtest 300 "$BUILD/bin/peerlink_tests" --gtest_filter='StreamGpu*'
CS=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
if [ -x "$CS" ] && has racecheck; then
  step racecheck 180 "$CS" --tool racecheck --target-processes all --error-exitcode 9 \
    "$BUILD/bin/peerlink_tests" --gtest_filter='StreamGpu.SanitizerSmall:StreamGpuDirect.SanitizerSmall:StreamGpuZeroCopy.SanitizerSmall'
fi
has bench_eager && step bench_eager 180 "$BUILD/bin/bench_transport" --mode stream -b 8 -e 256M -f 4 -n 50 -w 5
has bench_graph && step bench_graph 180 "$BUILD/bin/bench_transport" --mode stream -b 8 -e 256M -f 4 -n 50 -w 5 -G 1
has bench_proxy && step bench_proxy 120 "$BUILD/bin/bench_transport" --threads --gpus 0,0 --mode stream --no-nccl \
  -b 8 -e 1M -f 4 -n 300 -w 30 -G 1
exit $status
