#!/usr/bin/env bash
# Installs what the build and tests need when it is missing (Debian packages, pip packages).
set -euo pipefail
need_apt=()
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need_apt+=(libbenchmark-dev)
[ -d /usr/include/fmt ] || need_apt+=(libfmt-dev)
command -v g++ >/dev/null || need_apt+=(g++)
command -v make >/dev/null || need_apt+=(make)
# make test-install: examples/cpp/ against an installed tree, by pkg-config and by CMake
command -v cmake >/dev/null || need_apt+=(cmake)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v readelf >/dev/null || need_apt+=(binutils)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian packages: ${need_apt[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "missing Debian packages (need root to install): ${need_apt[*]}" >&2
    exit 1
  fi
fi
PY=${PYTHON:-python3}
if command -v "$PY" >/dev/null; then
  missing=$("$PY" - <<'PYEOF'
import importlib.util
mods = {"pytest": "pytest", "numpy": "numpy", "pybind11": "pybind11"}
print(" ".join(p for m, p in mods.items() if importlib.util.find_spec(m) is None))
PYEOF
)
  if [ -n "$missing" ]; then
    echo "installing pip packages: $missing"
    "$PY" -m pip install -q $missing
  fi
fi
