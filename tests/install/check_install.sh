#!/usr/bin/env bash
# make test-install: `make install` into a temporary prefix, then what a C++ program that links
# peerlink relies on: the layout, the SONAME and its links, RUNPATHs that find the installed
# library (libnccl.so.2 in a directory of its own), examples/cpp/ built with pkg-config and with
# CMake and run on the host backend, and DESTDIR staging.
#   tests/install/check_install.sh MAKE BACKEND BUILD VERSION
set -euo pipefail
MAKE_CMD=$1 BACKEND=$2 BUILD=$3 VERSION=$4
MAJOR=${VERSION%%.*}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "test-install: FAILED: $*" >&2; exit 1; }
for tool in cmake pkg-config readelf; do
  command -v $tool >/dev/null || fail "$tool not found (make deps installs it)"
done

# 1. Install, and the layout.
$MAKE_CMD --no-print-directory install BACKEND="$BACKEND" BUILD="$BUILD" PREFIX="$prefix" > "$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "make install PREFIX=$prefix"; }
lib=$prefix/lib
for f in include/peerlink/peerlink.h include/peerlink/options.h "lib/libpeerlink.so.$VERSION" bin/peerlink-topo \
         lib/pkgconfig/peerlink.pc lib/cmake/peerlink/peerlinkConfig.cmake lib/cmake/peerlink/peerlinkConfigVersion.cmake; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
ls "$prefix"/bin/bench_* > /dev/null 2>&1 || fail "no benchmark in bin/"
grep -q "__version__ = \"$VERSION\"" py/peerlink/_version.py || fail "py/peerlink/_version.py does not say VERSION's $VERSION"

# 2. The SONAME and its links.
soname=$(readelf -d "$lib/libpeerlink.so.$VERSION" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libpeerlink.so.$MAJOR" ] || fail "SONAME of libpeerlink.so.$VERSION is '$soname', not libpeerlink.so.$MAJOR"
echo "test-install: libpeerlink.so.$VERSION has SONAME $soname"
[ "$(readlink "$lib/libpeerlink.so.$MAJOR")" = "libpeerlink.so.$VERSION" ] || fail "libpeerlink.so.$MAJOR does not link to libpeerlink.so.$VERSION"
[ "$(readlink "$lib/libpeerlink.so")" = "libpeerlink.so.$MAJOR" ] || fail "libpeerlink.so does not link to libpeerlink.so.$MAJOR"

# 3. Installed programs and libnccl.so.2 find the installed library.
resolves_here() {  # FILE: its libpeerlink.so.N resolves to the installed one
  local got
  got=$(ldd "$1" | sed -n "s/.*libpeerlink.so.$MAJOR => \([^ ]*\).*/\1/p")
  [ "$(readlink -f "$got")" = "$(readlink -f "$lib/libpeerlink.so.$VERSION")" ] ||
    fail "$1 loads libpeerlink.so.$MAJOR from '$got', not from $lib"
}
resolves_here "$prefix/bin/peerlink-topo"
[ ! -e "$lib/libnccl.so.2" ] || fail "libnccl.so.2 sits in $lib, where it would shadow the system's NCCL"
if [ -f "$lib/peerlink-nccl/libnccl.so.2" ]; then
  resolves_here "$lib/peerlink-nccl/libnccl.so.2"
  echo "test-install: lib/peerlink-nccl/libnccl.so.2 finds lib/libpeerlink.so.$MAJOR"
else
  echo "test-install: no libnccl.so.2 was built here (no nccl.h): its install is not checked"
fi

# 4. examples/cpp/ with pkg-config and with CMake, each run on the host backend.
export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --modversion peerlink)" = "$VERSION" ] || fail "pkg-config --modversion peerlink is not $VERSION"
mkdir -p "$tmp/pc"
$MAKE_CMD --no-print-directory -C examples/cpp OUT="$tmp/pc" > "$tmp/pc.log" 2>&1 ||
  { cat "$tmp/pc.log"; fail "the example does not build with pkg-config"; }
cmake -S examples/cpp -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$tmp/cmake.log" 2>&1 &&
  cmake --build "$tmp/cmake" >> "$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; fail "the example does not build with CMake"; }
run_tag=${PEERLINK_TEST_RUN:-t}
for how in pc cmake; do
  exe=$tmp/$how/peerlink_example
  resolves_here "$exe"
  timeout 120 "$exe" "$run_tag-example-$how-$$" > "$tmp/$how.run" 2>&1 || { cat "$tmp/$how.run"; fail "the $how build of the example"; }
  grep -q "peerlink example: PASS" "$tmp/$how.run" || { cat "$tmp/$how.run"; fail "the $how build did not pass"; }
  echo "test-install: the example built with $how: $(tail -1 "$tmp/$how.run")"
done

# 5. DESTDIR stages the tree; the prefix written into peerlink.pc is PREFIX's.
$MAKE_CMD --no-print-directory install BACKEND="$BACKEND" BUILD="$BUILD" PREFIX=/opt/peerlink DESTDIR="$tmp/stage" \
  > "$tmp/stage.log" 2>&1 || { cat "$tmp/stage.log"; fail "make install DESTDIR=..."; }
[ -f "$tmp/stage/opt/peerlink/lib/libpeerlink.so.$VERSION" ] || fail "DESTDIR: the library is not under DESTDIR/PREFIX"
grep -qx "prefix=/opt/peerlink" "$tmp/stage/opt/peerlink/lib/pkgconfig/peerlink.pc" || fail "DESTDIR leaked into peerlink.pc"
echo "test-install: make install PREFIX, DESTDIR, pkg-config and CMake: all passed"
