#!/usr/bin/env bash
# Layering checks, run by `make test` (targets test-layers, test-exports).
#
#   scripts/check_layers.sh [--root DIR]   the include and getenv rules on the tree at DIR (default: repo)
#   scripts/check_layers.sh --self-test    builds fixture trees with one violation each and requires
#                                          the check to reject every one (and to accept a clean one),
#                                          so the check cannot pass silently
#   scripts/check_layers.sh --exports LIB  no internal namespace in LIB's dynamic symbol table
#
# Rules (by directory, so new files need no edit here):
#  1. Layers, each using only those before it:
#       0 common   src/common src/shm            include/peerlink/{errors,log_level}.h
#       1 gpu      src/gpu                       include/peerlink/device.h
#       2 config   src/config                    include/peerlink/options.h
#       3 bootstrap src/bootstrap
#       4 topology src/topology                  include/peerlink/topology.h
#       5 transport src/transport                include/peerlink/{communicator,request}.h
#       6 stream   src/stream
#       7 collectives src/collectives            include/peerlink/{collectives,windows}.h
#       8 hier     src/hier                      include/peerlink/multinode.h
#       9 top      src/nccl py tools benchmarks  include/peerlink/peerlink.h (umbrella)
#     A file may include a header of its own layer or a lower one, never a higher one. A public
#     header not in the map above is an error (add it here when adding it).
#  2. py/, tools/, benchmarks/ and src/nccl/ (the NCCL-compatible library links libpeerlink.so,
#     which exports the public API only) (not benchmarks/micro, which times internal structures and links
#     the internal archive) include public headers (peerlink/...) and their own local files only.
#  3. getenv: nowhere in src/ except src/config/ (Options::from_env is the only reader of the
#     environment). Tests, benchmarks and tools may read their own variables (a benchmark's
#     PEERLINK_RANK, a test's PEERLINK_TEST_DEVICES): they are not library configuration.
set -euo pipefail

check_tree() {  # check_tree ROOT: prints violations, exit status 1 when there are any
  python3 - "$1" <<'PY'
import os, re, sys

root = sys.argv[1]
LAYERS = ["common", "gpu", "config", "bootstrap", "topology", "transport", "stream", "collectives", "hier", "top"]
DIR_LAYER = {"src/common": 0, "src/shm": 0, "src/gpu": 1, "src/config": 2, "src/bootstrap": 3,
             "src/topology": 4, "src/transport": 5, "src/stream": 6, "src/collectives": 7, "src/hier": 8,
             "src/nccl": 9, "py": 9, "tools": 9, "benchmarks": 9}
PUBLIC = {"errors.h": 0, "log_level.h": 0, "device.h": 1, "options.h": 2, "topology.h": 4,
          "communicator.h": 5, "request.h": 5, "collectives.h": 7, "windows.h": 7, "fused.h": 7,
          "multinode.h": 8, "peerlink.h": 9}
SRC_FIRST = {"common": 0, "shm": 0, "gpu": 1, "config": 2, "bootstrap": 3, "topology": 4,
             "transport": 5, "stream": 6, "collectives": 7, "hier": 8, "nccl": 9}
PUBLIC_ONLY = ("py/", "tools/", "benchmarks/", "src/nccl/")
PUBLIC_ONLY_EXEMPT = ("benchmarks/micro/", "benchmarks/results/")
EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
GETENV = re.compile(r'\b(secure_)?getenv\s*\(')

def layer_of_path(rel):
    if rel.startswith("include/peerlink/"):
        return PUBLIC.get(rel[len("include/peerlink/"):], None)
    best = None
    for d, l in DIR_LAYER.items():
        if rel == d or rel.startswith(d + "/"):
            if best is None or len(d) > len(best[0]):
                best = (d, l)
    return best[1] if best else None

errors = []
def err(rel, line, msg):
    errors.append(f"{rel}:{line}: {msg}")

files = []
for top in ["src", "include", "py", "tools", "benchmarks"]:
    base = os.path.join(root, top)
    for dp, dn, fn in os.walk(base):
        dn[:] = sorted(d for d in dn if d not in ("results", "_vendor", "build"))
        for f in sorted(fn):
            if f.endswith(EXTS):
                files.append(os.path.relpath(os.path.join(dp, f), root))

for rel in files:
    if rel.startswith("include/peerlink/") and rel[len("include/peerlink/"):] not in PUBLIC:
        err(rel, 1, "public header without a layer: map it in scripts/check_layers.sh")
        continue
    mine = layer_of_path(rel)
    if mine is None:
        continue  # outside the layered tree (e.g. src/<new dir>): reported below
    public_only = rel.startswith(PUBLIC_ONLY) and not rel.startswith(PUBLIC_ONLY_EXEMPT)
    here = os.path.dirname(rel)
    with open(os.path.join(root, rel), errors="replace") as fh:
        for n, text in enumerate(fh, 1):
            code = text.split("//", 1)[0]
            if rel.startswith("src/") and not rel.startswith("src/config/") and GETENV.search(code):
                err(rel, n, "getenv outside src/config/: make it a field of Options (Options::from_env)")
            m = INCLUDE.match(text)
            if not m:
                continue
            kind, inc = m.groups()
            if inc.startswith("peerlink/"):
                name = inc[len("peerlink/"):]
                if name not in PUBLIC:
                    err(rel, n, f"includes {inc}, a public header without a layer")
                    continue
                theirs, what = PUBLIC[name], inc
            elif kind == "<":
                continue  # system and third-party headers
            elif os.path.isfile(os.path.join(root, here, inc)):
                target = os.path.normpath(os.path.join(here, inc))
                theirs, what = layer_of_path(target), target
                if theirs is None:
                    continue
                if public_only:
                    continue  # the tool's / benchmark's own local files
            else:
                first = inc.split("/", 1)[0]
                if first not in SRC_FIRST:
                    if rel.startswith("src/"):
                        err(rel, n, f"includes {inc}: not a header of any layer")
                    continue
                theirs, what = SRC_FIRST[first], "src/" + inc
                if public_only:
                    err(rel, n, f"includes private header {inc}: {rel.split('/')[0]}/ uses public headers only")
                    continue
            if theirs > mine:
                err(rel, n, f"layer {LAYERS[mine]} includes {what} of the higher layer {LAYERS[theirs]}")

# Every directory under src/ must belong to a layer.
src = os.path.join(root, "src")
if os.path.isdir(src):
    for d in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, d)) and f"src/{d}" not in DIR_LAYER:
            err(f"src/{d}", 0, "directory without a layer: map it in scripts/check_layers.sh")

for e in errors:
    print(e)
print(f"check_layers: {len(files)} files, {len(errors)} violation(s)", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
}

self_test() {
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  # A clean tree: every layer includes downward, config reads the environment.
  mk_clean() {
    local t=$1
    mkdir -p "$t"/{src/common,src/gpu,src/config,src/bootstrap,src/topology,src/transport,src/stream,src/collectives,include/peerlink,tools,benchmarks/common,py/src}
    echo '#pragma once' > "$t/include/peerlink/log_level.h"
    printf '#pragma once\n#include "peerlink/log_level.h"\n' > "$t/include/peerlink/options.h"
    printf '#pragma once\n#include "peerlink/options.h"\n' > "$t/include/peerlink/communicator.h"
    printf '#pragma once\n#include "peerlink/log_level.h"\n' > "$t/src/common/log.h"
    printf '#include "common/log.h"\n#include <cstdlib>\nconst char* v = std::getenv("PEERLINK_X");\n' > "$t/src/config/options.cpp"
    printf '#include "config/../common/log.h"\n#include "peerlink/options.h"\n' > "$t/src/bootstrap/b.cpp"
    printf '#pragma once\n#include "bootstrap/b.h"\n#include "common/log.h"\n' > "$t/src/transport/t.h"
    echo '#pragma once' > "$t/src/bootstrap/b.h"
    printf '#include "transport/t.h"\n#include "peerlink/communicator.h"\n// getenv( in a comment is fine\n' > "$t/src/collectives/c.cpp"
    printf '#include "peerlink/communicator.h"\n#include "common/cli.h"\n#include <vector>\n' > "$t/benchmarks/b.cpp"
    echo '#pragma once' > "$t/benchmarks/common/cli.h"
    printf '#include "peerlink/communicator.h"\n#include <cstdlib>\nint main() { return std::getenv("X") != nullptr; }\n' > "$t/tools/tool.cpp"
  }
  local pass=0 fail=0
  expect() {  # expect pass|fail NAME SETUP...
    local want=$1 name=$2; shift 2
    local t="$tmp/$name"
    mk_clean "$t"
    (cd "$t" && eval "$@")
    local got=fail
    if check_tree "$t" > "$t.out" 2>&1; then got=pass; fi
    if [ "$got" = "$want" ]; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1))
      echo "self-test $name: expected $want, got $got"; cat "$t.out"
    fi
  }
  expect pass clean true
  expect fail common_includes_config "echo '#include \"peerlink/options.h\"' >> src/common/log.h"
  expect fail common_includes_transport "echo '#include \"transport/t.h\"' >> src/common/log.h"
  expect fail config_includes_topology "echo '#include \"topology/system.h\"' >> src/config/options.cpp"
  expect fail transport_includes_collectives "echo '#include \"collectives/coll_state.h\"' >> src/transport/t.h"
  expect fail transport_includes_stream "echo '#include \"stream/stream_p2p.h\"' >> src/transport/t.h"
  expect fail stream_includes_collectives "echo '#include \"collectives/coll_state.h\"' > src/stream/s.cpp"
  expect pass collectives_includes_stream "echo '#include \"stream/s.h\"' >> src/collectives/c.cpp; printf '#pragma once\\n#include \"transport/t.h\"\\n' > src/stream/s.h"
  expect fail collectives_includes_hier "echo '#include \"hier/node_map.h\"' >> src/collectives/c.cpp"
  expect fail transport_includes_collectives_public "echo '#include <peerlink/collectives.h>' > include/peerlink/collectives.h.tmp; mv include/peerlink/collectives.h.tmp include/peerlink/collectives.h; echo '#include \"peerlink/collectives.h\"' >> src/transport/t.h"
  expect fail new_transport_file_upward "printf '#include \"collectives/x.h\"\n' > src/transport/new_link.cpp"
  expect fail relative_upward "printf '#include \"../collectives/c.h\"\n' > src/transport/rel.cpp; touch src/collectives/c.h"
  expect fail public_options_includes_communicator "echo '#include \"peerlink/communicator.h\"' >> include/peerlink/options.h"
  expect fail unmapped_public_header "echo '#pragma once' > include/peerlink/newthing.h"
  expect fail unmapped_src_dir "mkdir -p src/extra && touch src/extra/x.cpp"
  expect fail getenv_in_transport "echo 'const char* e = getenv(\"PEERLINK_Y\");' >> src/transport/t.h"
  expect fail secure_getenv_in_collectives "echo 'auto e = ::secure_getenv(\"Y\");' >> src/collectives/c.cpp"
  expect fail tool_includes_private "echo '#include \"topology/policy.h\"' >> tools/tool.cpp"
  expect fail benchmark_includes_private "echo '#include \"transport/comm_impl.h\"' >> benchmarks/common/cli.h"
  expect fail python_includes_gpu "echo '#include \"gpu/runtime.h\"' > py/src/extras.cpp"
  expect pass micro_benchmark_may_include_internals "mkdir -p benchmarks/micro && echo '#include \"transport/registry.h\"' > benchmarks/micro/r.cpp"
  # The export check, on two tiny libraries: the public names only, then one internal name more.
  if command -v "${CXX:-g++}" > /dev/null; then
    local pub='namespace peerlink { struct Error { virtual ~Error(); }; Error::~Error() {}
      struct Options { static Options from_env(); }; Options Options::from_env() { return {}; }
      struct Communicator { void barrier(); }; void Communicator::barrier() {} }'
    echo "$pub" > "$tmp/pub.cpp"
    printf '%s\nnamespace peerlink::detail { void leak() {} }\n' "$pub" > "$tmp/leak.cpp"
    "${CXX:-g++}" -shared -fPIC -o "$tmp/libpub.so" "$tmp/pub.cpp"
    "${CXX:-g++}" -shared -fPIC -o "$tmp/libleak.so" "$tmp/leak.cpp"
    if check_exports "$tmp/libpub.so" > "$tmp/exp.out" 2>&1; then pass=$((pass + 1)); else
      fail=$((fail + 1)); echo "self-test exports_clean: expected pass"; cat "$tmp/exp.out"; fi
    if check_exports "$tmp/libleak.so" > "$tmp/exp.out" 2>&1; then
      fail=$((fail + 1)); echo "self-test exports_leak: expected fail"; cat "$tmp/exp.out"; else pass=$((pass + 1)); fi
  fi
  echo "check_layers self-test: $pass as expected, $fail not"
  [ "$fail" -eq 0 ]
}

check_exports() {  # check_exports LIB
  local lib=$1 bad syms
  [ -f "$lib" ] || { echo "check_layers --exports: $lib does not exist"; return 1; }
  # Demangled names of the defined dynamic symbols; anything of an internal namespace is a leak.
  # (Collected once: grep -q on a pipe would end it early, and pipefail would call that a miss.)
  syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt)
  bad=$(echo "$syms" |
        grep -E 'peerlink::(detail|gpu|coll|common|bootstrap|config|shm|hier|stream|py_binding)::|peerlink::topology::(System|Level|Decision|LiveChecks|Probe|probe_|load_system|render_|p2p_level|decide_all\b|system_from|parse_level|path_name|cached_live)' || true)
  local count
  count=$(nm -D --defined-only "$lib" | grep -c ' [TDBRVW] ' || true)
  if [ -n "$bad" ]; then
    echo "check_layers --exports: $lib exports internal symbols (mk/libpeerlink.map):"
    echo "$bad" | head -40
    return 1
  fi
  # The public API must be there (a map that exported nothing would pass the test above).
  for must in 'peerlink::Communicator::barrier()' 'peerlink::Options::from_env()' 'typeinfo for peerlink::Error'; do
    grep -qF "$must" <<< "$syms" ||
      { echo "check_layers --exports: $lib lacks $must"; return 1; }
  done
  echo "check_layers --exports: $lib exports $count public symbols, no internal ones"
}

case "${1:-}" in
  --self-test) self_test ;;
  --exports) check_exports "${2:?usage: check_layers.sh --exports LIB}" ;;
  --root) check_tree "${2:?usage: check_layers.sh --root DIR}" ;;
  "") check_tree "$(cd "$(dirname "$0")/.." && pwd)" ;;
  *) echo "usage: check_layers.sh [--root DIR | --self-test | --exports LIB]"; exit 2 ;;
esac
