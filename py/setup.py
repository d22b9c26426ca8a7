"""Builds the peerlink Python package.

Normal case (a checkout of the repository): `make -C <repo root> lib BACKEND=<b> BUILD=<dir>` builds
libpeerlink.so with the repository's own build system, the .so is copied into the package and the
pybind11 extension links to it with rpath $ORIGIN, so the installed package is self-contained.

Fallback (an sdist, or no `make`): the library sources (the repository's, or a vendored copy made by
`setup.py sdist` under _vendor/) are compiled straight into the extension with the host-only
backend; GPUs then need a build from the repository.

Environment: PEERLINK_BACKEND=cuda|hip|host (default: cuda when nvcc exists, else hip when hipcc
exists, else host, as the Makefile decides), PEERLINK_BUILD_DIR (default <root>/build-py/<backend>),
MAKEFLAGS / PEERLINK_MAKE_JOBS for parallelism.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENDOR = HERE / "_vendor"
# In layer order (scripts/check_layers.sh); the fallback compiles them all into the extension.
LIB_DIRS = ["src/common", "src/shm", "src/config", "src/bootstrap", "src/topology", "src/transport", "src/collectives",
            "src/hier"]


def repo_available():
    return (ROOT / "Makefile").is_file() and (ROOT / "include" / "peerlink" / "peerlink.h").is_file()


def detect_backend():
    forced = os.environ.get("PEERLINK_BACKEND", "").strip().lower()
    if forced:
        if forced not in ("cuda", "hip", "host"):
            sys.exit(f"PEERLINK_BACKEND={forced!r} is not one of cuda, hip, host")
        return forced
    if shutil.which("nvcc") or os.access("/usr/local/cuda/bin/nvcc", os.X_OK):
        return "cuda"
    if shutil.which("hipcc"):
        return "hip"
    return "host"


def pybind11_include():
    """pybind11's headers: the pybind11 package, else the copy torch ships (offline GPU boxes)."""
    try:
        import pybind11

        return pybind11.get_include()
    except ImportError:
        pass
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec and spec.origin:
            inc = Path(spec.origin).parent / "include"
            if (inc / "pybind11" / "pybind11.h").is_file():
                return str(inc)
    except Exception:
        pass
    sys.exit("pybind11 headers not found: pip install pybind11")


def host_only_sources(base):
    srcs = []
    for d in LIB_DIRS:
        srcs += sorted(str(p) for p in (base / d).glob("*.cpp"))
    srcs += sorted(str(p) for p in (base / "src" / "gpu").glob("*.cpp") if not p.name.startswith("runtime_"))
    srcs.append(str(base / "src" / "gpu" / "runtime_none.cpp"))
    # A host-only build has no device kernels: keep only the host stand-ins of *_none.cpp pairs.
    return [s for s in srcs if not s.endswith(".cu")]


class BuildExt(build_ext):
    def build_extensions(self):
        # Always recompile the binding: it includes the library's public headers, which setuptools
        # does not track, and a binding object older than a changed struct (Options) crashed in
        # Communicator() when a build directory was reused (2026-11-26).
        self.force = True
        ext = self.extensions[0]
        ext.include_dirs.insert(0, pybind11_include())
        ext.extra_compile_args += ["-std=c++17", "-O2", "-fvisibility=hidden", "-Wall"]
        pkg_dir = self._package_dirs()
        if repo_available() and shutil.which("make") and os.environ.get("PEERLINK_PY_VENDORED") != "1":
            self._link_against_make_build(ext, pkg_dir)
        else:
            self._compile_sources_in(ext, VENDOR if not repo_available() else ROOT)
        super().build_extensions()

    def _link_against_make_build(self, ext, pkg_dir):
        backend = detect_backend()
        build = Path(os.environ.get("PEERLINK_BUILD_DIR") or ROOT / "build-py" / backend).resolve()
        jobs = os.environ.get("PEERLINK_MAKE_JOBS") or str(os.cpu_count() or 1)
        cmd = ["make", "-C", str(ROOT), "lib", f"BACKEND={backend}", f"BUILD={build}", f"-j{jobs}"]
        print("peerlink: " + " ".join(cmd), flush=True)
        subprocess.check_call(cmd)
        lib = build / "lib" / "libpeerlink.so"
        for d in pkg_dir:
            shutil.copy2(lib, d / "libpeerlink.so")
        # Public headers only: the binding uses the library's public API (libpeerlink.so exports
        # nothing else, mk/libpeerlink.map).
        ext.include_dirs += [str(ROOT / "include")]
        ext.library_dirs.append(str(build / "lib"))
        ext.libraries.append("peerlink")
        ext.extra_link_args += ["-Wl,-rpath,$ORIGIN"]
        self._write_build_info(pkg_dir, backend, "libpeerlink.so")

    def _compile_sources_in(self, ext, base):
        if not (base / "include" / "peerlink" / "peerlink.h").is_file():
            sys.exit(f"peerlink sources not found under {base} (build from the repository checkout)")
        print(f"peerlink: compiling the library sources from {base} into the extension (host-only)")
        ext.sources += host_only_sources(base)
        ext.include_dirs += [str(base / "include"), str(base / "src")]
        if (ROOT / ".fmt" / "include").is_dir():  # fmt's headers carried where the system has none
            ext.include_dirs.append(str(ROOT / ".fmt" / "include"))
        ext.define_macros.append(("PEERLINK_HOST_ONLY", None))
        ext.libraries += ["rt", "dl"]
        ext.extra_link_args += ["-pthread"]
        self._write_build_info(self._package_dirs(), "host", "static sources")

    def _package_dirs(self):
        """Where the package is assembled (build_lib)."""
        dirs = [Path(self.build_lib) / "peerlink"]
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        return dirs

    def copy_extensions_to_source(self):
        # --inplace (development): the library and build info go beside the extension too.
        super().copy_extensions_to_source()
        for name in ("libpeerlink.so", "_build_info.py"):
            built = Path(self.build_lib) / "peerlink" / name
            if built.is_file():
                shutil.copy2(built, HERE / "peerlink" / name)

    @staticmethod
    def _write_build_info(dirs, backend, linked):
        for d in dirs:
            (d / "_build_info.py").write_text(f'backend = "{backend}"\nlinked = "{linked}"\n')


class SDist(sdist):
    """Vendors the library sources so an sdist builds without the repository around it."""

    def run(self):
        if repo_available():
            shutil.rmtree(VENDOR, ignore_errors=True)
            for sub in ["include"] + LIB_DIRS + ["src/gpu"]:
                if (ROOT / sub).is_dir():
                    shutil.copytree(ROOT / sub, VENDOR / sub)
        super().run()


setup(
    ext_modules=[Extension("peerlink._peerlink", sources=sorted(str(p.relative_to(HERE)) for p in (HERE / "src").glob("*.cpp")), language="c++")],
    cmdclass={"build_ext": BuildExt, "sdist": SDist},
)
