#!/usr/bin/env bash
# GPU checks of the NCCL-compatible library, on a node with 2 GPUs and the torch wheel:
#   scripts/gpu_nccl.sh OUTDIR [BUILD_DIR]
# 1. builds libpeerlink and libnccl.so.2 against the torch wheel's nccl.h; 2. every nccl* symbol
# libtorch_cuda.so imports is exported by the shim (with LD_PRELOAD its NEEDED libnccl.so.2 is the
# shim); 3. tests/nccl/torch_nccl_check.py on the real NCCL (baseline: a FAIL there is torch's) and
# through the preloaded shim (PEERLINK_DEBUG=INFO: which path each communicator and op took).
# nccl-tests is not built here (outside code, DEVELOPERS.md): it is run by hand on the device.
set -u
OUT=${1:?usage: scripts/gpu_nccl.sh OUTDIR [BUILD_DIR]}
BUILD=${2:-${BUILD:-build-cuda}}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
status=0
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-14s rc=%d  %ds\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || status=1
  return $rc
}
GT=()
if ! echo '#include <gtest/gtest.h>' | g++ -x c++ -E - > /dev/null 2>&1 && [ -d .gtest ]; then
  GT=(SAN="-I$(pwd)/.gtest/include -L$(pwd)/.gtest/lib")
fi
WHL=$(python3 -c "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')")
[ -n "$WHL" ] || { echo "no nvidia.nccl wheel (torch's NCCL)" | tee -a "$OUT/summary.txt"; exit 1; }
step build 300 make BACKEND=cuda BUILD="$BUILD" -j"$(nproc)" "${GT[@]}" lib nccl NCCL_HOME="$WHL" || exit 1
SHIM=$PWD/$BUILD/lib/libnccl.so.2
TL=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cuda.so'))")
nm -D --undefined-only "$TL" | awk '$1 == "U" && $2 ~ /^p?nccl/ {sub(/@.*/, "", $2); print $2}' | sort -u > "$OUT/torch_imports.txt"
nm -D --defined-only "$SHIM" | awk '{sub(/@.*/, "", $3); print $3}' | sort -u > "$OUT/shim_exports.txt"
comm -23 "$OUT/torch_imports.txt" "$OUT/shim_exports.txt" > "$OUT/missing_exports.txt"
echo "libtorch_cuda.so imports $(wc -l < "$OUT/torch_imports.txt") nccl symbols" >> "$OUT/summary.txt"
step torch_symbols 10 bash -c "cat '$OUT/missing_exports.txt'; [ ! -s '$OUT/missing_exports.txt' ]"
step torch_real 150 python3 -m torch.distributed.run --nproc-per-node 2 tests/nccl/torch_nccl_check.py
step torch_shim 180 env LD_PRELOAD="$SHIM" PEERLINK_NCCL_LIBRARY="$WHL/lib/libnccl.so.2" PEERLINK_DEBUG=INFO \
  python3 -m torch.distributed.run --nproc-per-node 2 tests/nccl/torch_nccl_check.py
for f in torch_real torch_shim; do
  echo "-- $f: $(grep -c ': PASS' "$OUT/$f.log") PASS, $(grep -c ': FAIL' "$OUT/$f.log") FAIL" >> "$OUT/summary.txt"
  grep -E ': FAIL|ALL PASS|FAILED:|libnccl loaded' "$OUT/$f.log" >> "$OUT/summary.txt"
done
grep -E 'NCCL (INFO|WARN) peerlink: ' "$OUT/torch_shim.log" | sed 's/^[^ ]* //; s/comm 0x[0-9a-f]*/comm/' | sort | uniq -c \
  > "$OUT/torch_shim_paths.txt"
exit $status
