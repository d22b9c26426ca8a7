#!/usr/bin/env bash
# Performance sweep of the stream-ordered send/recv knobs on 2 GPUs, to pick defaults:
#   scripts/gpu_stream_sweep.sh [BUILD_DIR] [OUTDIR]      (needs BUILD_DIR/bin/bench_transport built)
# Every run is bench_transport --mode stream -G 1 (one-way = ping-pong round trip / 2 inside a CUDA
# graph; payloads verified, `wrong` must be 0) with one knob setting; NCCL runs once, in the reference
# run (default knobs). Prints one table: per size, each configuration's one-way and sendrecv times
# for the published form (pub) and the NCCL form (raw), NCCL's one-way beside them. ~2-3 minutes.
#   ll:<bytes>        Options::stream_ll_max (LL lines, multi-block, up to that size; 0 = no LL)
#   acq:<0|1>,pdl:<0|1>  stream_acquire_load / stream_pdl
#   ce:<min>x<lanes>  stream_ce_min / stream_ce_lanes (copy engine for lone published sends >= min)
set -u
BUILD=${1:-build}
OUT=${2:-/tmp/stream_sweep}
BT="$BUILD/bin/bench_transport"
[ -x "$BT" ] || { echo "no $BT: build it first (make -j lib tests benchmarks)" >&2; exit 1; }
mkdir -p "$OUT"
rm -f "$OUT"/*.log
export NCCL_NVLS_ENABLE=0
COMMON=(--mode stream -G 1 -n 50 -w 5)
status=0
run() {  # run NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$BT" "${COMMON[@]}" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '# %-22s rc=%d %3ds  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$*" >&2
  [ $rc -eq 0 ] || status=1
}
# Reference: defaults, the whole range, NCCL beside.
run ref 70 -b 8 -e 256M -f 4
# LL threshold (small and medium sizes).
for ll in 0 8K 32K 64K 128K 256K; do run "ll:$ll" 25 --no-nccl -b 8 -e 512K -f 2 --ll-max "$ll"; done
# Flag acquisition and PDL at small sizes (LL at its default).
for a in 0 1; do for p in 0 1; do run "acq:$a,pdl:$p" 15 --no-nccl -b 8 -e 8K -f 4 --acquire-load "$a" --pdl "$p"; done; done
# Copy engine for large published-form sends.
for ce in 1M/2 4M/1 4M/2 32M/2; do
  run "ce:${ce//\//x}" 40 --no-nccl -b 4M -e 256M -f 4 --ce-min "${ce%/*}" --ce-lanes "${ce#*/}"
done
# One table. Columns of bench_transport: bytes impl sendrecv_us GB/s oneway_us GB/s wrong.
printf '\n%-12s %-14s %10s %10s %10s %10s %10s %6s\n' bytes config pub_1way raw_1way pub_sr raw_sr nccl_1way wrong
for f in "$OUT"/*.log; do
  cfg=$(basename "$f" .log)
  awk -v cfg="$cfg" '
    /^#/ || NF != 7 || $1 !~ /^[0-9]+$/ { next }
    { key = $1; seen[key] = 1; wrong[key] += $7
      if ($2 == "pl-published") { p1[key] = $5; psr[key] = $3 }
      else if ($2 == "pl-nccl-form") { r1[key] = $5; rsr[key] = $3 }
      else if ($2 == "nccl") { n1[key] = $5 } }
    END { for (k in seen) printf "%-12s %-14s %10s %10s %10s %10s %10s %6d\n", k, cfg,
            (k in p1) ? p1[k] : "-", (k in r1) ? r1[k] : "-", (k in psr) ? psr[k] : "-",
            (k in rsr) ? rsr[k] : "-", (k in n1) ? n1[k] : "-", wrong[k] }' "$f"
done | sort -k1,1n -k2,2
echo "# logs: $OUT; targets: 8 B <= 3 us, 128 KB <= 5 us (pub one-way), 256 MB >= 385 GB/s (268435456 / pub_1way / 1e3)"
exit $status
