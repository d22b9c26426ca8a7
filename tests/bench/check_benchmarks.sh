#!/usr/bin/env bash
# CI checks of the benchmarks on the host backend (device -1): each runs briefly, must exit 0,
# print its columns and report #wrong 0; the --inject-error hook must make the payload checks fail
# (so they can fail), bad flags must be refused, and no benchmark segment may be left in /dev/shm.
# usage: tests/bench/check_benchmarks.sh BIN_DIR
set -u
BIN=${1:-build/bin}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TMP=$(mktemp -d /tmp/pl_bench_checks.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; [ -f "$TMP/out" ] && sed 's/^/    /' "$TMP/out" | tail -n 30; }

# run NAME EXPECTED_RC CMD... : runs with a time bound, output in $TMP/out
run() {
  local name=$1 want=$2
  shift 2
  timeout 180 "$@" >"$TMP/out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    bad "$name (exit $rc, expected $want)"
    return 1
  fi
  return 0
}
has() { grep -Eq -- "$1" "$TMP/out"; }

# Every table row's last column (#wrong) must be 0, and there must be rows.
transport_rows_clean() {
  awk -F'|' '/^ *[0-9]+ \|/ { rows++; gsub(/ /, "", $6); if ($6 != "0") badrow++ }
             END { exit !(rows > 0 && badrow == 0) }' "$TMP/out"
}

# Latency mode carries the raw anchors (a shared-memory flag and a pipe ping-pong between the same
# two processes) in every row: table columns, JSON fields, CSV columns. The other modes carry none.
anchors_ok() {
  if [ "$1" = latency ]; then
    has '#wrong \| +flag us \| +pipe us \| +x flag \| +x pipe' &&
      [ "$(grep -cE '^ +[0-9]+ \|.*\| +[0-9]+\.[0-9]+ \| +[0-9]+\.[0-9]+ \| +[0-9]+\.[0-9] \| +[0-9]+\.[0-9]+$' "$TMP/out")" = 3 ] &&
      python3 -c "import json,sys; d=json.load(open('$TMP/bt.json')); sys.exit(not all(r['flag_p50_us']>0 and r['pipe_p50_us']>0 and r['ratio_pipe']>0 for r in d['results']))" &&
      head -n 20 "$TMP/bt.csv" | grep -q '^bytes,.*,flag_p50_us,pipe_p50_us$'
  else
    ! has 'flag us' && ! grep -q flag_p50_us "$TMP/bt.json"
  fi
}

for mode in latency bandwidth bidir; do
  for path in direct relay; do
    for comp in done_seq ring; do
      name="bench_transport --mode $mode --transport $path --completion $comp"
      if run "$name" 0 "$BIN/bench_transport" --gpus -1,-1 -b 8 -e 64K -f 32 -n 3 -w 1 --mode $mode \
           --transport $path --completion $comp --json "$TMP/bt.json" --csv "$TMP/bt.csv"; then
        if has 'Size \| +p50 us \| +p99 us \| +GB/s' && transport_rows_clean &&
           has "transport=$path" && has "completion=$comp" &&
           python3 -c "import json,sys; d=json.load(open('$TMP/bt.json')); sys.exit(not(len(d['results'])==3 and all(r['wrong']==0 for r in d['results'])))" &&
           [ "$(grep -c '^[0-9]' "$TMP/bt.csv")" = 3 ] && anchors_ok $mode; then
          ok "$name"
        else
          bad "$name: columns, #wrong, json, csv or anchors"
        fi
      fi
    done
  done
done

# `make run`: the header says which backend ran, on how many cores, and where the GPU numbers are;
# anchors up to 1 MB, none ("-") above.
if run "bench_transport --demo" 0 "$BIN/bench_transport" --demo --gpus -1,-1; then
  if has '67108864 \|' && transport_rows_clean && has '^# peerlink demo: host backend' &&
     has '^# machine: [0-9]+ CPU cores? available' && has 'docs/performance\.md' &&
     has '^ +1048576 \|.*\| +[0-9]+\.[0-9]+ \| +[0-9]+\.[0-9]+ \|' && has '^ +67108864 \|.*\| +- \| +- \|'; then
    ok "bench_transport --demo"
  else
    bad "bench_transport --demo header or rows"
  fi
fi
if run "bench_transport --anchors 0" 0 "$BIN/bench_transport" --gpus -1,-1 -b 8 -e 64 -f 8 -n 3 --anchors 0; then
  if transport_rows_clean && ! has 'flag us'; then ok "bench_transport --anchors 0"; else bad "bench_transport --anchors 0 output"; fi
fi

# Launcher mode: two processes given their rank through the environment.
uid="plbench-ci-launch-$$"
PEERLINK_RANK=1 PEERLINK_WORLD_SIZE=2 PEERLINK_UNIQUE_ID=$uid timeout 120 "$BIN/bench_transport" --gpus -1,-1 \
  -b 8 -e 4K -f 8 -n 3 >"$TMP/r1" 2>&1 &
r1=$!
if run "bench_transport launcher mode" 0 env PEERLINK_RANK=0 PEERLINK_WORLD_SIZE=2 PEERLINK_UNIQUE_ID=$uid \
     "$BIN/bench_transport" --gpus -1,-1 -b 8 -e 4K -f 8 -n 3; then
  if wait $r1 && transport_rows_clean; then ok "bench_transport launcher mode"; else bad "bench_transport launcher mode (rank 1 or rows)"; fi
else
  wait $r1
fi

if run "bench_transport --inject-error is detected" 2 "$BIN/bench_transport" --gpus -1,-1 -b 8 -e 64 -f 8 -n 3 --inject-error; then
  if ! transport_rows_clean; then ok "bench_transport --inject-error is detected"; else bad "injected error not in #wrong"; fi
fi
if run "bench_transport rejects bad flags" 1 "$BIN/bench_transport" -b 1X; then
  if has "unknown suffix"; then ok "bench_transport rejects bad flags"; else bad "bad flag message"; fi
fi

for op in sum prod max min; do
  for dt in float bfloat16 half int32; do
    name="bench_allreduce -d $dt -o $op"
    if run "$name" 0 "$BIN/bench_allreduce" --gpus -1,-1 -b 8 -e 64K -f 32 -n 3 -w 1 -c 1 -d $dt -o $op --json "$TMP/ar.json"; then
      if has 'size +count +type +redop +time +algbw +busbw +#wrong' && has 'Out of bounds values : 0 OK' &&
         has '^# peerlink : available' &&
         [ "$(grep -cE "^ +[0-9]+ +[0-9]+ +$dt +$op +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 " "$TMP/out")" = 3 ] &&
         python3 -c "import json,sys; d=json.load(open('$TMP/ar.json')); sys.exit(not(len(d['results'])==3 and all(r['wrong']==0 for r in d['results'])))"; then
        ok "$name"
      else
        bad "$name: columns, availability or #wrong"
      fi
    fi
  done
done
if run "bench_allreduce -g 3" 0 "$BIN/bench_allreduce" --nranks 3 -b 4 -e 4K -f 16 -n 3 -d float; then
  if has 'nranks=3' && has 'Out of bounds values : 0 OK'; then ok "bench_allreduce -g 3"; else bad "bench_allreduce -g 3 output"; fi
fi
# The algorithm sweep (once tests/collectives/sweep): one pass per forced algorithm, each verified.
if run "bench_allreduce --algo" 0 "$BIN/bench_allreduce" --gpus -1,-1 --impl peerlink -b 8 -e 256K -f 64 -n 3 \
     --algo oneshot,twoshot,auto --json "$TMP/sweep.json"; then
  if [ "$(grep -c '^# bench_allreduce' "$TMP/out")" = 3 ] && has 'algo=oneshot' && has 'algo=twoshot' &&
     has 'algo=auto' && ! has 'Out of bounds values : [1-9]' && [ -f "$TMP/sweep.oneshot.json" ] &&
     [ -f "$TMP/sweep.twoshot.json" ] && [ -f "$TMP/sweep.auto.json" ]; then
    ok "bench_allreduce --algo"
  else
    bad "bench_allreduce --algo: one table and one json per algorithm"
  fi
fi
run "bench_allreduce --algo bad is refused" 1 "$BIN/bench_allreduce" --algo fastest && ok "bench_allreduce --algo bad is refused"
if run "bench_allreduce --inject-error is detected" 2 "$BIN/bench_allreduce" --gpus -1,-1 -b 8 -e 64 -f 8 -n 3 --inject-error; then
  if has 'Out of bounds values : [1-9].* ERROR'; then ok "bench_allreduce --inject-error is detected"; else bad "injected allreduce error not counted"; fi
fi

# bench_collectives: every op on 3 host ranks, results verified (#wrong 0 on every row), in the
# peerlink column and in peerlink-reg (the same buffers registered as windows, register_window).
cell='+[0-9.]+ +[0-9.]+ +[0-9.]+ +0 '
coll_rows() { grep -cE "^ +[0-9]+ +[0-9]+ +bfloat16 +[a-z]+ +-?[0-9]+ $cell$1" "$TMP/out"; }
for op in all_gather reduce_scatter broadcast reduce alltoall; do
  name="bench_collectives --op $op"
  if run "$name" 0 "$BIN/bench_collectives" --op $op --gpus -1,-1,-1 -b 8 -e 256K -f 32 -n 3 -w 1 -d bfloat16 -r 1; then
    if has 'size +count +type +redop +root +time +algbw +busbw +#wrong' && has 'Out of bounds values : 0 OK' &&
       has '^# peerlink : available' && has '^# peerlink-reg : available' && has "op=$op" &&
       [ "$(coll_rows "$cell")" = 4 ]; then
      ok "$name"
    else
      bad "$name output"
    fi
  fi
done
# The zero-copy path on registered host windows (Communicator::alloc memory is exportable): auto
# from 1-byte pieces, so every row of peerlink-reg takes it; peerlink (no window) must not.
for op in all_gather broadcast alltoall; do
  name="bench_collectives --op $op, peerlink-reg zero-copy"
  if run "$name" 0 env PEERLINK_COLL_ZERO_COPY_MIN=1 "$BIN/bench_collectives" --op $op --gpus -1,-1,-1 -b 8 -e 1M \
       -f 32 -n 3 -w 1 -d bfloat16 -r 2 --pl-register 1; then
    if has '^# peerlink-reg : available \(zero-copy capable' && has 'Out of bounds values : 0 OK' &&
       [ "$(coll_rows "$cell")" = 4 ]; then
      ok "$name"
    else
      bad "$name output"
    fi
  fi
done
if run "bench_collectives --pl-register 0" 0 "$BIN/bench_collectives" --op all_gather --gpus -1,-1 -b 8 -e 4K -f 32 \
     -n 3 -w 1 -d bfloat16 --pl-register 0; then
  if has '^# peerlink-reg : unavailable \(--pl-register 0\)' && has 'Out of bounds values : 0 OK'; then
    ok "bench_collectives --pl-register 0"
  else
    bad "bench_collectives --pl-register 0 output"
  fi
fi
# reduce pulling the peers' sendbufs through windows (forced): only the registered column can run.
if run "bench_collectives --op reduce, forced zero-copy, --pl-plain 0" 0 env PEERLINK_REDUCE_ALGO=zero_copy \
     "$BIN/bench_collectives" --op reduce --gpus -1,-1 -b 8 -e 64K -f 32 -n 3 -w 1 -d float -o max -r 1 --pl-plain 0; then
  if has '^# peerlink +: unavailable \(--pl-plain 0\)' && has 'Out of bounds values : 0 OK'; then
    ok "bench_collectives --op reduce, forced zero-copy, --pl-plain 0"
  else
    bad "bench_collectives --op reduce, forced zero-copy, --pl-plain 0 output"
  fi
fi
run "bench_collectives --op bad is refused" 1 "$BIN/bench_collectives" --op allreduce && ok "bench_collectives --op bad is refused"
run "bench_collectives --pl-register bad is refused" 1 "$BIN/bench_collectives" --pl-register 2 &&
  ok "bench_collectives --pl-register bad is refused"

# bench_fused: fused allreduce + residual add + RMSNorm against allreduce + add_rmsnorm, verified rows.
fused_rows() { grep -cE "^ +[0-9]+ +$1 +$2 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$" "$TMP/out"; }
if run "bench_fused" 0 "$BIN/bench_fused" --gpus -1,-1 --tokens 1,7 --hidden 1024,5128 -n 3 -w 1; then
  if has 'tokens +hidden +type +fused\(us\) +unfused\(us\) +ratio +#wrong' && has 'Out of bounds values : 0 OK' &&
     [ "$(fused_rows '(1024|5128)' bfloat16)" = 4 ]; then ok "bench_fused"; else bad "bench_fused output"; fi
fi
if run "bench_fused -g 3 -d float" 0 "$BIN/bench_fused" -g 3 --tokens 2 --hidden 4096 -n 2 -w 1 -d float; then
  if has 'nranks=3' && [ "$(fused_rows 4096 float)" = 1 ]; then ok "bench_fused -g 3 -d float"; else bad "bench_fused -g 3 output"; fi
fi
if run "bench_fused --inject-error is detected" 2 "$BIN/bench_fused" --gpus -1,-1 --tokens 1 --hidden 1024 -n 2 --inject-error; then
  if has 'Out of bounds values : [1-9].* ERROR'; then ok "bench_fused --inject-error is detected"; else bad "bench_fused injected error not counted"; fi
fi
run "bench_fused --hidden bad is refused" 1 "$BIN/bench_fused" --hidden 0 && ok "bench_fused --hidden bad is refused"

if run "p2p_matrix host 2x2" 0 "$BIN/p2p_matrix" --gpus -1,-1 -s 256K -n 3 --lat-iters 10 --json "$TMP/pm.json"; then
  if has '^#wrong 0, failed cells 0' && has 'Unidirectional bandwidth' && has 'Bidirectional bandwidth' &&
     has 'One-way latency p50' &&
     python3 -c "import json,sys; d=json.load(open('$TMP/pm.json')); c=d['cells']; sys.exit(not(len(c)==8 and all(x['ok'] and x['wrong']==0 and x['uni_gbps']>0 for x in c)))"; then
    ok "p2p_matrix host 2x2"
  else
    bad "p2p_matrix output"
  fi
fi

if [ -x "$BIN/bench_micro" ]; then
  if run "bench_micro" 0 "$BIN/bench_micro" --benchmark_min_time=0.01; then
    if has '^BM_' && ! has 'ERROR OCCURRED'; then ok "bench_micro"; else bad "bench_micro output"; fi
  fi
fi

# plot.py: turns the JSON above into PNGs, or says matplotlib is missing; must not fail either way.
cp "$ROOT/benchmarks/plot.py" "$TMP/" 2>/dev/null
if [ -f "$ROOT/benchmarks/plot.py" ]; then
  if run "plot.py" 0 python3 "$ROOT/benchmarks/plot.py" "$TMP/bt.json" "$TMP/ar.json"; then
    if has 'wrote ' || has 'matplotlib is not installed'; then ok "plot.py"; else bad "plot.py output"; fi
  fi
fi

# Only the benchmarks' own segments (their ids start with plbench-): other suites may run meanwhile.
left=$(ls /dev/shm 2>/dev/null | grep '^pl_plbench-' || true)
if [ -z "$left" ]; then ok "/dev/shm clean after the benchmarks"; else
  echo "$left" >"$TMP/out"
  bad "/dev/shm has peerlink segments left"
fi

echo "bench checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
