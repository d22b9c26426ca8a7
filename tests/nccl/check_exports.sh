#!/usr/bin/env bash
# Every function that nccl.h declares (nccl* and pnccl*) must be a defined dynamic symbol of the
# shim, and the shim must export nothing else (no peerlink or standard-library symbol: mk/nccl.map).
#   tests/nccl/check_exports.sh NCCL_H LIBNCCL
# The header is parsed (comments stripped; declarations are `<type> [p]ncclName(`), so a newer
# nccl.h with new functions fails here until the shim implements them.
set -euo pipefail
hdr=${1:?usage: check_exports.sh NCCL_H LIBNCCL}
lib=${2:?usage: check_exports.sh NCCL_H LIBNCCL}
want=$(python3 - "$hdr" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
s = re.sub(r'//[^\n]*', '', s)
names = set()
for line in s.split('\n'):
    if line.lstrip().startswith('#'):
        continue
    for m in re.finditer(r'\b(p?nccl[A-Z]\w*)\s*\(', line):
        names.add(m.group(1))
# Anything called like a function on a non-directive line is a declaration in nccl.h (it has no
# inline code); guard against an empty parse.
if len(names) < 40:
    sys.exit(f"check_exports: parsed only {len(names)} functions from {sys.argv[1]}")
print('\n'.join(sorted(names)))
PY
)
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TW]$/ {print $3}' | sort)
missing=$(comm -23 <(echo "$want") <(echo "$have"))
extra=$(nm -D --defined-only "$lib" | awk '$2 !~ /^[A]$/ {print $3}' | grep -vE '^p?nccl' || true)
n=$(echo "$want" | wc -l)
if [ -n "$missing" ]; then
  echo "check_exports: $lib lacks $(echo "$missing" | wc -l) of the $n functions of $hdr:"
  echo "$missing"
  exit 1
fi
if [ -n "$extra" ]; then
  echo "check_exports: $lib exports symbols outside NCCL's API (mk/nccl.map):"
  echo "$extra" | head -20
  exit 1
fi
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = "libnccl.so.2" ] || { echo "check_exports: SONAME is '$soname', not libnccl.so.2"; exit 1; }
echo "check_exports: $lib exports all $n functions of $hdr (SONAME $soname), nothing else"
