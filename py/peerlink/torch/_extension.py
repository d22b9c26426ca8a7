"""Loads peerlink._peerlink_torch after checking it was built against the running torch.

A C++ extension of torch only works inside the torch version it was compiled against (its ABI is
not stable across versions): loading it into another one can crash, so the version is compared
first, from the build record, and the load is refused with an ImportError that says what to do.
"""
import torch

_REBUILD = "reinstall peerlink under this torch: `pip install --no-build-isolation ./py`"


def load():
    try:
        from .. import _build_info
    except ImportError:  # a source tree without a build
        _build_info = None
    built = getattr(_build_info, "torch_version", None)
    if built is None:
        raise ImportError("peerlink.torch: this peerlink was built without its torch extension (torch was not "
                          "importable when it was installed, or PEERLINK_TORCH=0); " + _REBUILD)
    if built != torch.__version__:
        raise ImportError(f"peerlink.torch: peerlink's torch extension was built against torch {built}, this "
                          f"process runs torch {torch.__version__}; " + _REBUILD)
    try:
        from .. import _peerlink_torch as ext
    except ImportError as e:
        raise ImportError(f"peerlink.torch: the torch extension failed to load ({e}); " + _REBUILD) from e
    if ext.torch_version != torch.__version__:
        raise ImportError(f"peerlink.torch: the torch extension was built against torch {ext.torch_version}, this "
                          f"process runs torch {torch.__version__}; " + _REBUILD)
    return ext
