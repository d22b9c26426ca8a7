#!/usr/bin/env bash
# One call on the GPU machine: build the CUDA library, run the transport suite on device memory
# (two processes on one GPU, and one process per GPU when there are two or more), then whatever
# GPU steps the other parts provide. Everything goes under $OUT: a summary log plus one tarball
# (the device tool returns at most 8 files).
#   STEPS="build pyquick contract quick hostlat arvariants arbench lat stream colls fused topo bench coll nccl multinode py torch" (default:
#   build contract stream colls vmm topo bench coll py); steps run in that order. DEADLINE=S skips steps after S seconds.
set -u
OUT=${OUT:-/tmp/peerlink-gpu-out}
mkdir -p "$OUT/r"
R="$OUT/r"
LOG="$OUT/gpu_check.log"
STEPS=${STEPS:-"build contract stream colls vmm topo bench coll py"}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
BUILD=build-cuda
. "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"  # note, gtest_flags (status=0)
DEADLINE=${DEADLINE:-100000}  # seconds after start: later steps are skipped, so results come back
run_step() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  if [ "$SECONDS" -ge "$DEADLINE" ]; then note "== $name: SKIPPED (deadline ${DEADLINE}s reached)"; return 0; fi
  local left=$((DEADLINE - SECONDS)); [ "$left" -lt "$limit" ] && limit=$left
  note "== $name: $*"
  timeout "$limit" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$R/$name.log" >> "$LOG"
  note "== $name: rc=$rc"
  [ $rc -eq 0 ] || status=1
  return $rc
}
has() { [[ " $STEPS " == *" $1 "* ]]; }

note "date $(date -u +%F) host $(hostname)"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv > "$R/gpus.csv" 2>&1
nvidia-smi topo -m > "$R/nvidia-topo.txt" 2>&1
cat "$R/gpus.csv" >> "$LOG"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
note "GPUs: $NGPU"

gtest_flags  # googletest: the system's, else a copy carried in .gtest/{include,lib}
if has build; then
  run_step build 400 make BACKEND=cuda BUILD=$BUILD -j16 "${GT[@]}" lib tests tools benchmarks || { tar -czf "$OUT/results.tgz" -C "$OUT" r; exit 1; }
fi
if has pyquick; then
  run_step py_env 60 python3 -c 'import torch, cupy, pybind11; print(torch.__version__, cupy.__version__, pybind11.__version__, torch.cuda.device_count())'  # the Python suite's GPU cases (torch CUDA tensors, CuPy) and a torchrun ping-pong
  run_step py_install 120 env PEERLINK_BUILD_DIR=$PWD/$BUILD python3 -m pip install -q --no-build-isolation ./py
  run_step py_gpu 300 python3 -m pytest py/tests -q -rs -p no:cacheprovider -k "(torch or cupy or gpu) and not test_torch_"
  run_step py_pingpong 60 python3 -m torch.distributed.run --nproc-per-node 2 examples/pingpong.py
fi
T=$BUILD/bin/peerlink_tests
if has contract; then
  PEERLINK_TEST_DEVICES=0,0 run_step contract_1gpu 240 $T --gtest_filter='*Contract*'
  [ "$NGPU" -ge 2 ] && PEERLINK_TEST_DEVICES=0,1 run_step contract_2gpu 240 $T --gtest_filter='*Contract*'
  [ "${CONTRACT_HOST:-1}" = 1 ] && run_step host_suite 300 $T --gtest_filter='*Mp*:Segment*:Ring*:Registry*:IpcCache*'
fi
if has quick; then  # a short latency / bandwidth probe of the transport (striping on and off)
  B=$BUILD/bin/bench_transport
  run_step lat 60 $B --mode latency --transport direct --completion done_seq -b 8 -e 4M -f 4 -n 300 -w 30
  PEERLINK_KERNEL_COPY_MAX=0 run_step lat_ce 60 $B --mode latency --transport direct --completion done_seq -b 8 -e 256K -f 8 -n 300 -w 30
  run_step lat_ring 60 $B --mode latency --transport direct --completion ring -b 8 -e 64K -f 8 -n 300 -w 30
  PEERLINK_STRIPE_STREAMS=1 run_step bw_stripe1 90 $B --mode bandwidth --transport direct -b 64M -e 1G -f 4 -n 20 -w 3
  PEERLINK_STRIPE_STREAMS=2 run_step bw_stripe2 90 $B --mode bandwidth --transport direct -b 64M -e 1G -f 4 -n 20 -w 3
  PEERLINK_STRIPE_STREAMS=4 run_step bw_stripe4 90 $B --mode bandwidth --transport direct -b 64M -e 1G -f 4 -n 20 -w 3
fi
if has hostlat; then  # host-API send -> irecv latency, two processes on one GPU, with the raw anchors; the transport's gtests
  B=$BUILD/bin/bench_transport
  for c in done_seq ring; do
    run_step hostlat_$c 180 $B --gpus 0,0 --mode latency --transport direct --completion $c -b 8 -e 4K -f 8 -n 2000 -w 100 \
      --json "$R/hostlat_$c.json"
  done
  PEERLINK_TEST_DEVICES=0,0 run_step hostlat_gtest 400 $T --gtest_filter='*Contract*:*Mp*'
fi
if has arvariants; then  # allreduce tuning knobs, one bench_allreduce --algo sweep per setting
  run_step sweep_build 120 make BACKEND=cuda BUILD=$BUILD -j16 $BUILD/bin/bench_allreduce
  i=0
  for v in ${AR_VARIANTS:-"PEERLINK_ALLREDUCE_PDL=1"}; do  # "VAR=val,VAR=val ALGO:LO:HI" words
    i=$((i + 1))
    IFS=: read -r kvs algo lo hi <<< "$v"
    run_step "arv$i" 60 env ${kvs//,/ } $BUILD/bin/bench_allreduce --impl peerlink -g 2 -d bfloat16 -o sum -G 1 \
      -n 40 -w 5 --algo "${algo:-auto}" -b "${lo:-8}" -e "${hi:-8388608}"
    sed -i "1i # variant: $v" "$R/arv$i.log"
  done
fi
if has arbench; then  # allreduce, peerlink and NCCL side by side (nccl-tests columns)
  A=$BUILD/bin/bench_allreduce
  # -n: calls per timed loop (nccl-tests' default 20 lets one host hiccup of a rank dominate a row)
  N=${AR_ITERS:-20}
  run_step ar_bf16_graph 120 $A --impl both -b 8 -e 256M -f 2 -n $N -w 5 -c 1 -G 1 -d bfloat16 -o sum
  run_step ar_bf16 120 $A --impl both -b 8 -e 256M -f 2 -n $N -w 5 -c 1 -d bfloat16 -o sum
  for dt in ${AR_MORE_TYPES:-}; do  # e.g. "float half": graph and eager for other types
    run_step ar_${dt}_graph 120 $A --impl both -b 8 -e 256M -f 2 -n $N -w 5 -c 1 -G 1 -d $dt -o sum
    run_step ar_${dt} 120 $A --impl both -b 8 -e 256M -f 2 -n $N -w 5 -c 1 -d $dt -o sum
  done
fi
if has lat; then
  run_step lat 60 $BUILD/bin/bench_transport --mode latency --transport direct --completion done_seq -b 8 -e 64M -f 4 -n 300 -w 30
  run_step bw 60 $BUILD/bin/bench_transport --mode bandwidth --transport direct -b 16M -e 1G -f 4 -n 20 -w 3
fi
if has stream && [ -f scripts/gpu_stream.sh ]; then  # stream-ordered send/recv: gtests, racecheck, bench vs NCCL
  run_step stream ${STREAM_SECS:-420} env STREAM_STEPS="${STREAM_STEPS:-}" bash scripts/gpu_stream.sh "$R/stream" "$BUILD"
fi
if has colls; then  # the other collectives: GPU tests (2 ranks; 4 ranks on 2 GPUs; 4 GPUs), peerlink vs NCCL per op
  PEERLINK_TEST_GPUS=2 run_step colls_gtest 300 $T --gtest_filter='CollectivesGpu.*:CollZcGpu.*:CollCeGpu.*:CollOneThreadGpu.*'
  # One rank per GPU on 3+ GPUs: the relay broadcast and the pushes dealt over peers (zc_kernels.cu)
  [ "$NGPU" -ge 4 ] && PEERLINK_TEST_GPUS=4 PEERLINK_TEST_DEVICES=0,1,2,3 \
    run_step colls_gtest_4gpu 300 $T --gtest_filter='CollectivesGpu.*:CollZcGpu.*:CollCeGpu.*'
  PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0,1,0,1 run_step colls_gtest4 240 $T --gtest_filter='CollectivesGpu.*'
  # Two ranks as threads of one process on GPU 0, and one rank alone (its collectives are copies)
  PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0 run_step colls_gtest_1gpu 120 $T \
    --gtest_filter='CollThreadsGpu.*:CollectivesGpu.Correctness:CollectivesGpu.GraphCaptureAndReplays'
  [ "${COLLS8:-1}" = 1 ] && PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0,1,0,1,0,1,0,1 \
    run_step colls_gtest8 300 $T --gtest_filter='CollectivesGpu.*'  # 8 ranks, 4 processes per GPU
  for op in ${COLL_OPS:-all_gather reduce_scatter broadcast reduce alltoall}; do
    run_step colls_$op 90 $BUILD/bin/bench_collectives --op $op --gpus 0,1 -b 8 -e 256M -f 4 -n 20 -w 5 -d bfloat16 -G 1
  done
fi
if has fused; then  # allreduce + residual add + RMSNorm (+ FP8): GPU tests (2 processes on GPU 0; threads), bench vs unfused
  has build || run_step fused_build 900 make BACKEND=cuda BUILD=$BUILD -j16 "${GT[@]}" lib tests benchmarks
  run_step fused_unit 60 $T --gtest_filter='FusedPlan.*:FusedMath.*:FusedHost.OneRank'
  PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0,0 run_step fused_gtest 600 $T --gtest_filter='FusedGpu.*'
  PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0 CUDA_MODULE_LOADING=EAGER run_step fused_gtest_threads 300 $T \
    --gtest_filter='FusedThreadsGpu.*'
  [ "$NGPU" -ge 2 ] && PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=0,1 run_step fused_gtest_2gpu 300 $T --gtest_filter='FusedGpu.*'
  # fused vs allreduce + add_rmsnorm, bf16, tokens 1-512, hidden 4096 and 8192, each in one CUDA graph
  CUDA_MODULE_LOADING=EAGER run_step fused_bench 300 $BUILD/bin/bench_fused --threads --gpus 0,0 -n 50 -w 10 -G 1
  [ "$NGPU" -ge 2 ] && run_step fused_bench_2gpu 300 $BUILD/bin/bench_fused --gpus 0,1 -n 50 -w 10 -G 1
  if [ "${FUSED_TORCH:-1}" = 1 ] && python3 -c 'import torch, peerlink' 2>/dev/null; then  # the installed package (pyquick)
    CUDA_MODULE_LOADING=EAGER run_step fused_bench_torch 300 python3 benchmarks/bench_fused_torch.py
  fi
fi
if has vmm; then  # memory exported by descriptor: capture, two communicators, first-use cost
  D=0,1; [ "$NGPU" -ge 2 ] || D=0,0
  PEERLINK_TEST_GPUS=2 PEERLINK_TEST_DEVICES=$D run_step vmm_gtest 180 $T --gtest_filter='*Vmm*:MpFdTwoComms*'
  PEERLINK_BENCH_DEVICES=$D run_step vmm_first_use 120 $BUILD/bin/bench_micro --benchmark_filter='FirstUse|Steady'
fi
if has topo && [ -x $BUILD/bin/peerlink-topo ]; then
  run_step topo 60 bash -c "$BUILD/bin/peerlink-topo && $BUILD/bin/peerlink-topo --json"
  # The same explanation in the log of a communicator's creation (ranks on GPUs 0,1 or twice on 0).
  run_step topo_info 60 env PEERLINK_DEBUG=INFO $BUILD/bin/bench_transport --mode latency -b 8 -e 8 -n 20 -w 2
fi
if has bench && [ -f scripts/gpu_bench.sh ]; then BUILD=$BUILD SKIP_BUILD=1 run_step bench 420 bash scripts/gpu_bench.sh "$R/bench"; fi
if has coll && [ -f scripts/gpu_collectives.sh ]; then BUILD=$BUILD run_step coll 420 bash scripts/gpu_collectives.sh "$R/coll" "$BUILD"; fi
if has nccl && [ -f scripts/gpu_nccl.sh ]; then run_step nccl 400 bash scripts/gpu_nccl.sh "$R/nccl" "$BUILD"; fi  # libnccl.so.2 under torch (STEPS+=nccl)
# Simulated nodes on one GPU (PEERLINK_HOSTID per node, NCCL_HOSTID per rank): the two-level plans
# against the real NCCL, and torch.distributed through the preloaded shim (STEPS=multinode).
if has multinode && [ -f scripts/gpu_multinode.sh ]; then run_step multinode 420 bash scripts/gpu_multinode.sh "$R/multinode" "$BUILD"; fi
if has py && [ -f scripts/gpu_python.sh ]; then run_step py 420 bash scripts/gpu_python.sh "$R/py"; fi
if has torch; then  # peerlink.torch: c10d backend + torch.ops.peerlink, 2 ranks sharing GPU 0; 8 B all_reduce vs the shim
  WHL=$(python3 -c "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')")
  run_step torch_build 400 make BACKEND=cuda BUILD=$BUILD -j16 "${GT[@]}" lib nccl ${WHL:+NCCL_HOME=$WHL}
  run_step torch_install 400 env PEERLINK_BACKEND=cuda PEERLINK_BUILD_DIR=$PWD/$BUILD PEERLINK_MAKE_JOBS=16 \
    python3 -m pip install --no-build-isolation ./py
  run_step torch_import 60 bash -c "cd /tmp && python3 -c 'import torch, peerlink, peerlink.torch as pt; print(torch.__version__, peerlink.runtime(), pt._C.torch_version, torch.ops.peerlink.all_reduce)'"
  run_step torch_tests 420 python3 -m pytest py/tests/test_torch_gpu.py py/tests/test_torch_cpu.py py/tests/test_torch_import.py \
    -v -rs -p no:cacheprovider --durations=15
  run_step torch_bench 180 python3 benchmarks/bench_torch_allreduce.py --shim "$PWD/$BUILD/lib/libnccl.so.2" \
    ${WHL:+--nccl "$WHL/lib/libnccl.so.2"}
fi
ls /dev/shm | grep '^pl_' > "$R/shm_left.txt" && { note "LEAK: $(cat $R/shm_left.txt | head)"; status=1; }
tar -czf "$OUT/results.tgz" -C "$OUT" r
rm -rf "$R"
note "gpu_check status=$status"
exit $status
