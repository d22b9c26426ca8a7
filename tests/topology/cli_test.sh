#!/usr/bin/env bash
# End-to-end checks of the peerlink-topo CLI on the fixtures: exit codes, zero GPUs, the JSON
# schema (parsed with python3) and the answers for every fixture. Usage: cli_test.sh BIN_DIR
set -euo pipefail
BIN="${1:?usage: cli_test.sh BIN_DIR}/peerlink-topo"
FIX="$(cd "$(dirname "$0")" && pwd)/fixtures"
fail() { echo "cli_test: FAIL: $*" >&2; exit 1; }
unset PEERLINK_P2P_LEVEL PEERLINK_P2P_DISABLE PEERLINK_TOPO_FILE PEERLINK_TRANSPORT

"$BIN" --help | grep -q -- "--sysfs-root" || fail "--help"
rc=0; "$BIN" --bogus 2>/dev/null || rc=$?; [ "$rc" = 2 ] || fail "bad argument exits $rc, not 2"
rc=0; PEERLINK_P2P_LEVEL=9 "$BIN" --xml "$FIX/xml/flat_vm.xml" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "bad PEERLINK_P2P_LEVEL exits $rc, not 2"

empty=$(mktemp -d /tmp/peerlink_topo_cli_XXXXXX)
trap 'rm -rf "$empty"' EXIT
"$BIN" --sysfs-root "$empty" | grep -q "no GPUs found" || fail "zero GPUs text"
"$BIN" --sysfs-root "$empty" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["gpus"]==[] and d["pairs"]==[]' \
  || fail "zero GPUs json"
"$BIN" --xml "$empty/missing.xml" --json 2>"$empty/err" >/dev/null || fail "missing XML must still exit 0"
grep -q "warning" "$empty/err" || fail "missing XML gives no warning"

# expected: fixture  number-of-GPUs  "a-b:path:transport ..." for a few pairs
check() {
  local how="$1" src="$2" n="$3" want="$4"
  "$BIN" "$how" "$src" --json | python3 -c '
import json, sys
n, want = int(sys.argv[1]), sys.argv[2].split()
d = json.load(sys.stdin)
assert list(d) == ["cpu", "p2p_level", "gpus", "pairs"], list(d)
assert list(d["cpu"]) == ["vendor", "family", "model", "generation", "inter_socket_gbps"], list(d["cpu"])
assert d["p2p_level"] in ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
assert len(d["gpus"]) == n, len(d["gpus"])
for g in d["gpus"]:
    assert list(g) == ["index", "bus_id", "numa"], list(g)
assert len(d["pairs"]) == n * (n - 1) // 2
pairs = {}
for p in d["pairs"]:
    assert list(p) == ["a", "b", "path", "transport", "reason"], list(p)
    assert p["path"] in ("NVL", "PIX", "PXB", "PHB", "SYS") and p["transport"] in ("direct", "relay") and p["reason"]
    pairs["%d-%d" % (p["a"], p["b"])] = "%s:%s" % (p["path"], p["transport"])
for w in want:
    k, v = w.split(":", 1)
    assert pairs[k] == v, (k, pairs[k], v)
' "$n" "$want" || fail "$how $src"
}
check --xml "$FIX/xml/dgx_h100.xml" 8 "0-7:NVL:direct 3-4:NVL:direct"
check --xml "$FIX/xml/turin_8gpu.xml" 8 "0-1:PHB:direct 0-3:PHB:direct 0-4:SYS:relay 6-7:PHB:direct"
check --xml "$FIX/xml/turin_2gpu.xml" 2 "0-1:SYS:direct"
check --xml "$FIX/xml/intel_2switch.xml" 5 "0-1:PIX:direct 0-2:PXB:direct 0-4:PHB:relay"
check --xml "$FIX/xml/nvlink_pairs_2socket.xml" 4 "0-1:NVL:direct 2-3:NVL:direct 1-2:SYS:relay"
check --xml "$FIX/xml/flat_vm.xml" 2 "0-1:PHB:relay"
check --sysfs-root "$FIX/turin_8gpu" 8 "0-2:PHB:direct 3-4:SYS:relay"
check --sysfs-root "$FIX/turin_2gpu" 2 "0-1:SYS:direct"
check --sysfs-root "$FIX/intel_2switch" 5 "2-3:PIX:direct 1-3:PXB:direct 3-4:PHB:relay"
check --sysfs-root "$FIX/dgx_h100" 8 "0-1:PHB:relay 0-4:SYS:relay"
check --sysfs-root "$FIX/flat_vm" 2 "0-1:PHB:relay"
PEERLINK_P2P_LEVEL=PHB check --xml "$FIX/xml/flat_vm.xml" 2 "0-1:PHB:direct"
PEERLINK_P2P_DISABLE=1 check --xml "$FIX/xml/dgx_h100.xml" 8 "0-7:NVL:relay"
PEERLINK_TOPO_FILE="$FIX/xml/intel_2switch.xml" "$BIN" | grep -q "GPU0 <-> GPU4  PHB  relay" || fail "PEERLINK_TOPO_FILE"
echo "cli_test: all peerlink-topo checks passed"
