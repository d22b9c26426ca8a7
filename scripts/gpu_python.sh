#!/usr/bin/env bash
# Python package on the GPU machine: install it offline, run py/tests with torch CUDA tensors and
# CuPy arrays (device = rank; CuPy cases skip when CuPy is absent), then the examples and
# benchmarks/bench_p2p.py under torchrun on 2 GPUs. Logs and the benchmark table go under $1 (or $OUT).
#   bash scripts/gpu_python.sh OUTDIR [LIB_BUILD_DIR]
# LIB_BUILD_DIR: an existing CUDA build of the library to reuse (default build-cuda when it has
# lib/libpeerlink.so, as scripts/gpu_check.sh leaves it), else setup.py builds build-py/cuda.
set -u
OUT=${1:-${OUT:-/tmp/peerlink-gpu-python}}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG="$OUT/gpu_python.log"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
. scripts/gpu_lib.sh  # note, step NAME SECONDS CMD... (log in OUT/NAME.log, its tail in LOG)
STEP_STYLE=noted STEP_KILL_S=10
TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc-per-node 2)

step env 60 bash -c "nvidia-smi -L; $PY -c 'import sys, numpy; print(sys.version); print(\"numpy\", numpy.__version__)';
  $PY -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"gpus\", torch.cuda.device_count())';
  $PY -c 'import cupy; print(\"cupy\", cupy.__version__)' || echo 'cupy: not installed (CuPy cases will skip)';
  $PY -c 'import pybind11; print(\"pybind11\", pybind11.__version__)' || echo 'pybind11 missing: setup.py uses the copy inside torch';
  $PY -c 'import wheel' || echo 'wheel missing: needs setuptools >= 70.1 for --no-build-isolation'"

LIB_BUILD=${2:-build-cuda}
if [ -f "$LIB_BUILD/lib/libpeerlink.so" ]; then export PEERLINK_BUILD_DIR=$(cd "$LIB_BUILD" && pwd); fi
export PEERLINK_BACKEND=cuda
step install 300 "$PY" -m pip install --no-build-isolation ./py || { note "install failed"; exit 1; }
step import 60 bash -c "cd /tmp && $PY -c 'import peerlink as p; print(p.__version__, p.__file__, p.runtime(), \"devices\", p.device_count(), \"collectives\", p.has_collectives)'"

# The GPU array kinds (and from_torch); the numpy-only cases are what CI already runs.
step pytest_gpu 300 "$PY" -m pytest py/tests -v -rs -p no:cacheprovider -k "(torch or cupy or gpu) and not test_torch_"
step pingpong 180 "${TORCHRUN[@]}" examples/pingpong.py --iters 200
step allreduce 180 "${TORCHRUN[@]}" examples/allreduce_torch.py --iters 50
step bench_p2p 300 "${TORCHRUN[@]}" benchmarks/bench_p2p.py
grep '^|' "$OUT/bench_p2p.log" > "$OUT/bench_p2p_table.md" 2>/dev/null
step launch_host 120 "$PY" -m peerlink.launch -n 2 examples/pingpong.py --iters 50
ls /dev/shm | grep '^pl_' > "$OUT/shm_left.txt" && { note "LEAK: $(head -5 "$OUT/shm_left.txt")"; status=1; }
note "gpu_python status=$status"
exit $status
