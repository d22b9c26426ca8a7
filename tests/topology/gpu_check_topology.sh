#!/usr/bin/env bash
# Topology on a real GPU machine: builds the CUDA (or HIP) backend, prints peerlink-topo next to
# nvidia-smi topo -m, checks the JSON, that every direct pair passed the live pattern copy, that
# PEERLINK_P2P_DISABLE=1 relays everything, and times the first (uncached) probe.
# Usage (repository root): bash tests/topology/gpu_check_topology.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build-topo-gpu}
make -s BUILD="$BUILD" -j"$(nproc)" lib tools tests >/dev/null
BIN="$BUILD/bin/peerlink-topo"
fail() { echo "gpu_check_topology: FAIL: $*" >&2; exit 1; }

echo "== nvidia-smi topo -m"; (nvidia-smi topo -m 2>/dev/null || rocm-smi --showtopo 2>/dev/null || echo "(no smi tool)")
echo "== peerlink-topo (first probe, timed)"
start=$(date +%s%N); "$BIN" | tee /tmp/peerlink_topo.txt; end=$(date +%s%N)
echo "peerlink-topo wall time: $(( (end - start) / 1000000 )) ms (NVML probe + live copy checks + runtime init)"
"$BIN" --json > /tmp/peerlink_topo.json
python3 - /tmp/peerlink_topo.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert list(d) == ["cpu", "p2p_level", "gpus", "pairs"], list(d)
n = len(d["gpus"])
assert len(d["pairs"]) == n * (n - 1) // 2
for p in d["pairs"]:
    assert p["path"] in ("NVL", "PIX", "PXB", "PHB", "SYS") and p["transport"] in ("direct", "relay")
    if p["transport"] == "direct":
        assert "live P2P copy check passed" in p["reason"], p
print("json ok: %d GPUs, %d pairs, %d direct; cpu %s %s" % (n, len(d["pairs"]),
      sum(p["transport"] == "direct" for p in d["pairs"]), d["cpu"]["vendor"], d["cpu"]["generation"]))
PY
PEERLINK_P2P_DISABLE=1 "$BIN" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert all(p["transport"]=="relay" for p in d["pairs"])' \
  || fail "PEERLINK_P2P_DISABLE=1 left a direct pair"
echo "== PEERLINK_P2P_LEVEL=PIX (NVLink pairs stay direct, PCIe pairs above PIX relay)"
PEERLINK_P2P_LEVEL=PIX "$BIN" --no-live-check | sed -n '/<->/p'
echo "== gtests"
"$BUILD/bin/peerlink_tests" --gtest_filter='Topology*' | tail -3
echo "gpu_check_topology: passed"
