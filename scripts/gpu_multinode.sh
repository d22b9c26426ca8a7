#!/usr/bin/env bash
# Multi-node communicators on one GPU, simulated (docs/multi-node.md, "Check it on one machine"):
#   scripts/gpu_multinode.sh OUTDIR [BUILD_DIR]
# PEERLINK_HOSTID groups ranks into nodes (peerlink inside each), a distinct NCCL_HOSTID per rank lets
# the real NCCL (the torch wheel's) accept several ranks on one GPU and carry what crosses nodes,
# over loopback sockets. Steps (each under a timeout; the whole runs in about 3-5 minutes):
#   build       libpeerlink, libnccl.so.2 (against the wheel's nccl.h) and nccl_multinode_gpu
#   real_2x2    the real NCCL alone, 4 ranks with distinct NCCL_HOSTIDs (baseline: a FAIL here is the setup's)
#   gpu_2x2     nccl_multinode_gpu --nodes 2 --per-node 2: every op, a captured graph, splits
#   gpu_2x1     the same, one rank per node (everything between nodes on the real NCCL)
#   torch_2x2   tests/nccl/torch_multinode_check.py on 4 ranks, the shim preloaded
#   torch_2x1   the same on 2 ranks
#   paths       the INFO lines of every run, counted (two-level plans, peerlink inside nodes)
# summary.txt says rc and seconds per step, PASS/FAIL counts, and the path lines.
set -u
OUT=${1:?usage: scripts/gpu_multinode.sh OUTDIR [BUILD_DIR]}
BUILD=${2:-${BUILD:-build-cuda}}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
. scripts/gpu_lib.sh
export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 PYTHONUNBUFFERED=1
export PEERLINK_TIMEOUT_MS=${PEERLINK_TIMEOUT_MS:-60000}
gtest_flags
WHL=$(python3 -c "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')")
[ -n "$WHL" ] || { echo "no nvidia.nccl wheel (torch's NCCL)" | tee -a "$OUT/summary.txt"; exit 1; }
REAL=$WHL/lib/libnccl.so.2
step build 300 make BACKEND=cuda BUILD="$BUILD" -j"$(nproc)" "${GT[@]}" lib nccl nccl-multinode-gpu NCCL_HOME="$WHL" || exit 1
SHIM=$PWD/$BUILD/lib/libnccl.so.2
MN=$PWD/$BUILD/bin/nccl_multinode_gpu

# The real NCCL alone on the same simulated layout (torch's own libnccl, no shim): proves the GPU
# and the loopback network take 4 ranks of distinct NCCL_HOSTIDs on one GPU.
cat > "$OUT/real_2x2.py" <<'EOF'
import os, datetime, torch, torch.distributed as dist
r = int(os.environ["RANK"]); os.environ["NCCL_HOSTID"] = f"realrank{r}-{os.environ.get('MASTER_PORT')}"
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0), timeout=datetime.timedelta(seconds=90))
x = torch.full((1 << 20,), float(r + 1), device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
ok = bool((x == sum(range(1, dist.get_world_size() + 1))).all())
g = dist.new_group([0, 1]); y = torch.ones(1024, device="cuda")
if r < 2: dist.all_reduce(y, group=g)
torch.cuda.synchronize(); print(f"rank {r}: real NCCL 2x2 world+group allreduce: {'PASS' if ok and (r >= 2 or bool((y == 2).all())) else 'FAIL'}", flush=True)
dist.destroy_process_group()
EOF
step real_2x2 120 python3 -m torch.distributed.run --nproc-per-node 4 "$OUT/real_2x2.py"

MNENV=(env PEERLINK_NCCL_LIBRARY="$REAL" PEERLINK_DEBUG=INFO PEERLINK_HIER_MIN_BYTES=1)
step gpu_2x2 200 "${MNENV[@]}" "$MN" --nodes 2 --per-node 2 --device 0 --timeout 180
step gpu_2x1 150 "${MNENV[@]}" "$MN" --nodes 2 --per-node 1 --device 0 --timeout 140
TENV=(env LD_PRELOAD="$SHIM" PEERLINK_NCCL_LIBRARY="$REAL" PEERLINK_DEBUG=INFO PEERLINK_HIER_MIN_BYTES=1)
step torch_2x2 240 "${TENV[@]}" python3 -m torch.distributed.run --nproc-per-node 4 tests/nccl/torch_multinode_check.py --per-node 2
step torch_2x1 180 "${TENV[@]}" python3 -m torch.distributed.run --nproc-per-node 2 tests/nccl/torch_multinode_check.py --per-node 1 --dtypes float32

for f in real_2x2 gpu_2x2 gpu_2x1 torch_2x2 torch_2x1; do
  [ -f "$OUT/$f.log" ] || continue
  echo "-- $f: $(grep -c ': PASS' "$OUT/$f.log") PASS, $(grep -cE ': FAIL|HUNG' "$OUT/$f.log") FAIL" >> "$OUT/summary.txt"
  grep -E ': FAIL|HUNG|ALL PASS|FAILED|libnccl loaded' "$OUT/$f.log" | head -20 >> "$OUT/summary.txt"
done
# Which path each communicator and op took (PEERLINK_DEBUG=INFO lines), counted: the node maps,
# "two-level" plans, "peerlink (all ranks on one node)" for the node groups and one-node splits.
grep -hE 'NCCL (INFO|WARN) peerlink: ' "$OUT"/gpu_2x*.log "$OUT"/torch_2x*.log 2>/dev/null |
  sed 's/^[^ ]* //; s/comm 0x[0-9a-f]*/comm/; s/rank [0-9]*\/[0-9]*/rank/; s/rank [0-9]*:/rank:/; s/pid [0-9]*/pid/g' |
  sed 's/rendezvous at [^)]*/rendezvous at ADDR/' | sort | uniq -c | sort -rn > "$OUT/paths.txt"
{
  echo "-- path lines (of $(wc -l < "$OUT/paths.txt") distinct):"
  grep -cE 'two-level' "$OUT/paths.txt" | sed 's/^/   distinct two-level op lines: /'
  grep -E 'peerlink \(all ranks on one node\)|inside the node: peerlink' "$OUT/paths.txt" | head -6
} >> "$OUT/summary.txt"
step paths 10 bash -c "grep -q 'two-level' '$OUT/paths.txt' && grep -q 'peerlink (all ranks on one node)' '$OUT/paths.txt'"
exit $status
