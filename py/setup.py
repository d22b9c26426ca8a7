"""Builds the peerlink Python package.

Normal case (a checkout of the repository): `make -C <repo root> lib BACKEND=<b> BUILD=<dir>` builds
libpeerlink.so with the repository's own build system, the library is copied into the package under
its SONAME (libpeerlink.so.N, the name the extension records as needed) and the pybind11 extension
links to it with rpath $ORIGIN, so the installed package is self-contained.

Fallback (an sdist, or no `make`): the library sources (the repository's, or a vendored copy made by
`setup.py sdist` under _vendor/) are compiled straight into the extension with the host-only
backend; GPUs then need a build from the repository.

PyTorch: when torch is importable here (`pip install --no-build-isolation ./py`, so that the build
sees the environment's torch), a second extension, peerlink._peerlink_torch (the c10d backend and
torch.ops.peerlink, sources in torch_src/), is compiled against that torch and linked to
libpeerlink.so; peerlink.torch refuses to load it under another torch version. It needs the
repository build (not the host-only fallback) and nothing of CUDA: it reaches the GPU through
torch's device-generic stream and event interface and through libpeerlink.

Environment: PEERLINK_BACKEND=cuda|hip|host (default: cuda when nvcc exists, else hip when hipcc
exists, else host, as the Makefile decides), PEERLINK_BUILD_DIR (default <root>/build-py/<backend>),
MAKEFLAGS / PEERLINK_MAKE_JOBS for parallelism (also of the extensions' compiles),
PEERLINK_TORCH=0 to skip the torch extension.
"""
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENDOR = HERE / "_vendor"
# In layer order (scripts/check_layers.sh); the fallback compiles them all into the extension.
LIB_DIRS = ["src/common", "src/shm", "src/config", "src/bootstrap", "src/topology", "src/transport", "src/stream",
            "src/collectives", "src/hier"]


def library_soname():
    """libpeerlink.so.<major> of the repository's VERSION file (mk/common.mk: LIB_SONAME)."""
    major = (ROOT / "VERSION").read_text().strip().split(".")[0]
    return f"libpeerlink.so.{major}"


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


def torch_config():
    """What the torch extension is built against, or None (torch absent, or PEERLINK_TORCH=0)."""
    if os.environ.get("PEERLINK_TORCH", "").strip() == "0":
        return None
    try:
        import torch
        import torch.distributed
        from torch.utils import cpp_extension
    except Exception as e:  # any failure to import torch means: build without it
        print(f"peerlink: torch is not importable ({type(e).__name__}: {e}); peerlink.torch is not built")
        return None
    if not torch.distributed.is_available():
        print("peerlink: this torch has no torch.distributed; peerlink.torch is not built")
        return None
    return {
        "version": torch.__version__,
        "include": cpp_extension.include_paths("cpu"),
        "libdir": str(Path(torch.__file__).parent / "lib"),
        "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


def make_jobs():
    return int(os.environ.get("PEERLINK_MAKE_JOBS") or os.cpu_count() or 1)


def compile_in_parallel(compiler, jobs):
    """The compiler's compile(), its sources compiled by `jobs` threads (setuptools runs one at a time;
    the torch extension's sources take ~30 s each against torch's headers)."""
    def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=0, extra_preargs=None,
                extra_postargs=None, depends=None):
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj):
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            list(pool.map(one, objects))
        return objects

    compiler.compile = compile


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
        compile_in_parallel(self.compiler, make_jobs())
        ext = self.extensions[0]
        torch_ext = next((e for e in self.extensions if e.name == TORCH_EXT), None)
        ext.include_dirs.insert(0, pybind11_include())
        ext.extra_compile_args += ["-std=c++17", "-O2", "-fvisibility=hidden", "-Wall"]
        pkg_dir = self._package_dirs()
        torch_version = None
        if repo_available() and shutil.which("make") and os.environ.get("PEERLINK_PY_VENDORED") != "1":
            self._link_against_make_build(ext, pkg_dir)
            if torch_ext is not None:
                self._configure_torch_extension(torch_ext, ext)
                torch_version = TORCH["version"]
        else:
            self._compile_sources_in(ext, VENDOR if not repo_available() else ROOT)
            if torch_ext is not None:
                print("peerlink: peerlink.torch needs the repository build of libpeerlink.so; not built")
                self.extensions.remove(torch_ext)
        for d in pkg_dir:
            with open(d / "_build_info.py", "a") as f:
                f.write(f"torch_version = {torch_version!r}\n")
        super().build_extensions()

    def _configure_torch_extension(self, ext, main):
        """peerlink._peerlink_torch: torch's headers and libraries, linked to libpeerlink.so beside it."""
        ext.include_dirs += TORCH["include"] + [str(ROOT / "include")]
        ext.define_macros += [("PEERLINK_TORCH_VERSION", f'"{TORCH["version"]}"'),
                              ("_GLIBCXX_USE_CXX11_ABI", str(TORCH["cxx11_abi"])),
                              ("TORCH_EXTENSION_NAME", "_peerlink_torch")]
        # -g0: Python's CFLAGS ask for -g, which doubles the compile time of torch's headers.
        # C++20: torch's headers need it from torch 2.12 on (std::strong_ordering, std::bit_width),
        # and torch builds its own extensions with it.
        ext.extra_compile_args += ["-std=c++20", "-O2", "-g0", "-fvisibility=hidden", "-Wall", "-Wno-unused-parameter"]
        ext.library_dirs += main.library_dirs + [TORCH["libdir"]]
        # torch's libraries are loaded by `import torch` before this module (peerlink.torch does it).
        ext.libraries += ["peerlink", "c10", "torch", "torch_cpu", "torch_python"]
        # torch's libraries use the process's libstdc++.so.6; this module passes std::strings and
        # streams to them (c10::str, c10d's Store), so it must use the same one. A toolchain that
        # links libstdc++ statically by default (-static-libstdc++ in its specs or in Python's
        # LDSHARED) gave the module a private copy whose iostreams were never initialised: the
        # first c10::str of an integer crashed. Naming the shared library first binds every
        # libstdc++ symbol to it, whatever the driver appends after.
        ext.extra_link_args += ["-Wl,-rpath,$ORIGIN"]
        ext.libraries.insert(0, ":libstdc++.so.6")

    def _link_against_make_build(self, ext, pkg_dir):
        backend = detect_backend()
        build = Path(os.environ.get("PEERLINK_BUILD_DIR") or ROOT / "build-py" / backend).resolve()
        jobs = os.environ.get("PEERLINK_MAKE_JOBS") or str(os.cpu_count() or 1)
        cmd = ["make", "-C", str(ROOT), "lib", f"BACKEND={backend}", f"BUILD={build}", f"-j{jobs}"]
        print("peerlink: " + " ".join(cmd), flush=True)
        subprocess.check_call(cmd)
        # The extension records the SONAME as needed (libpeerlink.so.N): that is the file the
        # package carries (a copy of the versioned library, the symlink followed).
        soname = library_soname()
        lib = build / "lib" / soname
        for d in pkg_dir:
            for old in d.glob("libpeerlink.so*"):  # a library of another version or name
                old.unlink()
            shutil.copy2(lib, d / soname)
        # Public headers only: the binding uses the library's public API (libpeerlink.so exports
        # nothing else, mk/libpeerlink.map).
        ext.include_dirs += [str(ROOT / "include")]
        ext.library_dirs.append(str(build / "lib"))
        ext.libraries.append("peerlink")
        ext.extra_link_args += ["-Wl,-rpath,$ORIGIN"]
        self._write_build_info(pkg_dir, backend, soname)

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
        built_dir = Path(self.build_lib) / "peerlink"
        for built in list(built_dir.glob("libpeerlink.so*")) + [built_dir / "_build_info.py"]:
            if built.is_file():
                shutil.copy2(built, HERE / "peerlink" / built.name)

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
            shutil.copy2(ROOT / "VERSION", VENDOR / "VERSION")
        super().run()


TORCH_EXT = "peerlink._peerlink_torch"
TORCH = torch_config()
EXTENSIONS = [Extension("peerlink._peerlink", sources=sorted(str(p.relative_to(HERE)) for p in (HERE / "src").glob("*.cpp")),
                        language="c++")]
if TORCH is not None:
    EXTENSIONS.append(Extension(TORCH_EXT, sources=sorted(str(p.relative_to(HERE)) for p in (HERE / "torch_src").glob("*.cpp")),
                                language="c++"))

setup(
    ext_modules=EXTENSIONS,
    cmdclass={"build_ext": BuildExt, "sdist": SDist},
)
