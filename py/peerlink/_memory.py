"""Communicator.empty(): arrays over exportable memory from Communicator::alloc.

The C++ Allocation frees its memory when it dies; every array built here holds it (numpy through
the array base chain, torch through the deleter of a __cuda_array_interface__ import, CuPy through
UnownedMemory's owner), so the memory lives exactly as long as the last view of it.
"""
from __future__ import annotations

from . import _peerlink as _C

_TORCH_NAMES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32"}


class _HostMemory:
    """numpy imports this through __array_interface__ and keeps it as the array's base."""

    def __init__(self, alloc):
        self._alloc = alloc
        self.__array_interface__ = {"shape": (alloc.nbytes,), "typestr": "|u1",
                                    "data": (alloc.address, False), "version": 3}


class _DeviceMemory:
    """torch.as_tensor imports this through __cuda_array_interface__ and holds it until freed."""

    def __init__(self, alloc):
        self._alloc = alloc
        self.__cuda_array_interface__ = {"shape": (alloc.nbytes,), "typestr": "|u1",
                                         "data": (alloc.address, False), "version": 2,
                                         "strides": None}


def _shape_tuple(shape):
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise _C.InvalidArgument(f"empty: negative dimension in shape {shape}")
    return shape


def _dtype_name(dtype) -> str:
    """A dtype spelled as numpy / torch / CuPy / string -> 'float32', 'bfloat16', ..."""
    mod = type(dtype).__module__ or ""
    if mod.startswith("torch"):
        return str(dtype).replace("torch.", "")
    if isinstance(dtype, str):
        return _TORCH_NAMES.get(dtype, dtype)
    import numpy as np

    return np.dtype(dtype).name


def _alloc(core, nbytes):
    # A zero-byte request still gets a real (1-byte) allocation so the address is exportable.
    return core.alloc(max(nbytes, 1))


def empty_like_spec(core, shape, dtype, kind=None):
    shape = _shape_tuple(shape)
    n = 1
    for d in shape:
        n *= d
    name = _dtype_name(dtype)
    if kind not in (None, "numpy", "torch", "cupy"):
        raise _C.InvalidArgument(f"empty: kind {kind!r} is not one of 'numpy', 'torch', 'cupy'")
    if (core.device == -1) != (kind in (None, "numpy")) and kind is not None:
        where = "the host backend" if core.device == -1 else f"GPU {core.device}"
        raise _C.InvalidArgument(f"empty: kind {kind!r} does not hold memory of {where}")
    if core.device == -1:
        import numpy as np

        try:
            np_dtype = np.dtype(name)
        except TypeError:
            raise _C.InvalidArgument(f"empty: dtype {dtype!r} has no numpy equivalent "
                                     "(the host backend returns numpy arrays)") from None
        alloc = _alloc(core, n * np_dtype.itemsize)
        raw = np.asarray(_HostMemory(alloc))
        return raw[: n * np_dtype.itemsize].view(np_dtype).reshape(shape)
    torch = None
    if kind in (None, "torch"):
        try:
            import torch
        except ImportError:
            if kind == "torch":
                raise _C.UnsupportedError("empty: kind 'torch' but torch is not importable") from None
    if torch is not None:
        t_dtype = getattr(torch, name, None)
        if not isinstance(t_dtype, torch.dtype):
            raise _C.InvalidArgument(f"empty: dtype {dtype!r} is not a torch dtype")
        itemsize = torch.empty((), dtype=t_dtype).element_size()
        alloc = _alloc(core, n * itemsize)
        raw = torch.as_tensor(_DeviceMemory(alloc), device=f"cuda:{core.device}")
        return raw[: n * itemsize].view(t_dtype).view(shape)
    try:
        import cupy
    except ImportError:
        raise _C.UnsupportedError("empty: GPU buffers need torch or CuPy, neither is importable") from None
    c_dtype = cupy.dtype(name)
    alloc = _alloc(core, n * c_dtype.itemsize)
    mem = cupy.cuda.UnownedMemory(alloc.address, alloc.nbytes, alloc, core.device)
    return cupy.ndarray(shape, c_dtype, cupy.cuda.MemoryPointer(mem, 0))
