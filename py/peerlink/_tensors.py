"""Turns user arrays (torch, CuPy, numpy, DLPack, buffer protocol) into (address, nbytes, device).

No framework is imported here unless the object came from it: torch is recognised by its type's
module, everything else through the standard interchange protocols, so the package works with
whichever of torch / CuPy / numpy is installed.

Stream ordering: the library copies on its own streams, so before an address is handed to C++ the
work that produced (or still reads) the memory must be complete. For torch tensors that is the
current torch stream of the tensor's device (or the `stream=` argument); for objects exposing
__cuda_array_interface__ v3 it is the stream they name; for DLPack the producer is asked to order
its work before the legacy default stream, which is then synchronized.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from . import _peerlink as _C

HOST = -1

# DLPack device types
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_ROCM, _DL_CUDA_MANAGED = 1, 2, 3, 10, 13
# DLPack dtype codes -> name prefix
_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}
_TYPESTR_KINDS = {"f": "float", "i": "int", "u": "uint", "b": "bool", "c": "complex"}


@dataclass
class BufferView:
    """A contiguous memory range a tensor covers, and what is needed to use it safely."""

    address: int
    nbytes: int
    itemsize: int
    device: int          # -1: host memory, else the GPU index (None when the object does not say)
    dtype: Optional[str]  # "float32", "bfloat16", ... (None when unknown)
    readonly: bool
    kind: str            # "torch", "cai", "array_interface", "dlpack", "buffer"
    owner: Any           # the object the address belongs to (kept alive by requests)

    def where(self) -> str:
        return "the host" if self.device == HOST else f"GPU {self.device}"


def _is_torch_tensor(obj) -> bool:
    mod = type(obj).__module__ or ""
    return (mod == "torch" or mod.startswith("torch.")) and hasattr(obj, "data_ptr")


def _typestr_dtype(typestr: str):
    """'<f4' -> ('float32', 4). Raises ValueError naming the typestr when it is not byte-sized."""
    try:
        kind, size = typestr[1], int(typestr[2:])
    except (IndexError, ValueError):
        raise _invalid(f"unrecognised array typestr {typestr!r}") from None
    if size <= 0:
        raise _invalid(f"element size of typestr {typestr!r} is {size} bytes")
    name = _TYPESTR_KINDS.get(kind)
    return (f"{name}{size * 8}" if name and name != "bool" else (name or None)), size


def _c_contiguous(shape, strides, itemsize) -> bool:
    if strides is None:
        return True
    expect = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expect:
            return False
        expect *= dim
    return True


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _invalid(msg: str) -> Exception:
    return _C.InvalidArgument(msg)


def sync_stream(stream) -> None:
    """Waits for a torch / CuPy stream object or a raw stream handle (int)."""
    if stream is None:
        return
    if hasattr(stream, "synchronize"):
        stream.synchronize()
    elif isinstance(stream, int):
        _C.stream_sync(stream)
    else:
        raise _invalid(f"stream must be a torch/CuPy stream or an integer handle, got {type(stream).__name__}")


def stream_handle(stream) -> int:
    """Raw handle of a torch / CuPy stream object or an int (0 = legacy default stream)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise _invalid(f"cannot get a raw handle from stream object {type(stream).__name__}")


def _torch_view(t, what: str, stream, sync: bool) -> BufferView:
    if not t.is_contiguous():
        raise _invalid(f"{what}: tensor is not contiguous (shape {tuple(t.shape)}, strides "
                       f"{tuple(t.stride())}); pass tensor.contiguous()")
    dev = t.device
    if dev.type == "cuda":
        device = dev.index if dev.index is not None else 0
        if sync:
            if stream is None:
                import torch

                stream = torch.cuda.current_stream(dev)
            sync_stream(stream)
    elif dev.type == "cpu":
        device = HOST
    else:
        raise _invalid(f"{what}: tensor is on device {dev}, peerlink handles cpu and cuda tensors")
    dtype = str(t.dtype).replace("torch.", "")
    return BufferView(t.data_ptr(), t.numel() * t.element_size(), t.element_size(), device, dtype,
                      False, "torch", t)


def _cai_view(obj, cai: dict, what: str, stream, sync: bool) -> BufferView:
    shape = tuple(cai["shape"])
    dtype, itemsize = _typestr_dtype(cai["typestr"])
    if not _c_contiguous(shape, cai.get("strides"), itemsize):
        raise _invalid(f"{what}: array is not C-contiguous (shape {shape}, strides {cai.get('strides')})")
    address, readonly = cai["data"]
    device = None
    dev_attr = getattr(obj, "device", None)  # CuPy: cupy.cuda.Device with .id
    if dev_attr is not None and isinstance(getattr(dev_attr, "id", None), int):
        device = dev_attr.id
    if sync:
        if stream is not None:
            sync_stream(stream)
        elif cai.get("stream") is not None:  # v3: the stream the producer's work runs on
            _C.stream_sync(int(cai["stream"]))
    return BufferView(int(address or 0), _numel(shape) * itemsize, itemsize, device, dtype,
                      bool(readonly), "cai", obj)


def _array_interface_view(obj, ai: dict, what: str) -> BufferView:
    shape = tuple(ai["shape"])
    dtype, itemsize = _typestr_dtype(ai["typestr"])
    if not _c_contiguous(shape, ai.get("strides"), itemsize):
        raise _invalid(f"{what}: array is not C-contiguous (shape {shape}, strides {ai.get('strides')})")
    data = ai.get("data")
    if not isinstance(data, tuple):
        raise _invalid(f"{what}: __array_interface__ without a (pointer, readonly) data tuple")
    address = int(data[0] or 0) + int(ai.get("offset", 0) or 0)
    return BufferView(address, _numel(shape) * itemsize, itemsize, HOST, dtype, bool(data[1]),
                      "array_interface", obj)


def _dlpack_view(obj, what: str, stream, sync: bool) -> BufferView:
    dev_type, dev_id = obj.__dlpack_device__()
    if dev_type in (_DL_CUDA, _DL_ROCM, _DL_CUDA_MANAGED):
        handle = stream_handle(stream) if stream is not None else 1  # 1: legacy default stream
        cap = obj.__dlpack__(stream=handle)
        if sync:
            _C.stream_sync(handle)
        device = int(dev_id)
    elif dev_type in (_DL_CPU, _DL_CUDA_HOST):
        cap = obj.__dlpack__()
        device = HOST
    else:
        raise _invalid(f"{what}: DLPack device type {dev_type} is not supported (cpu, cuda, rocm)")
    info = _C.dlpack_info(cap)
    if info["nbytes"] < 0:
        raise _invalid(f"{what}: DLPack element of {info['bits']} bits is not a whole number of bytes")
    if not info["contiguous"]:
        raise _invalid(f"{what}: DLPack tensor is not C-contiguous (shape {info['shape']})")
    bits = info["bits"]
    prefix = _DL_CODES.get(info["code"])
    dtype = None if prefix is None else ("bool" if prefix == "bool" else f"{prefix}{bits}")
    # Keep the capsule with the owner: it holds the producer's reference until the request ends.
    return BufferView(info["address"], info["nbytes"], max(bits // 8, 1), device, dtype, False,
                      "dlpack", (obj, cap))


def _buffer_view(obj, what: str) -> BufferView:
    import numpy as np

    mv = memoryview(obj)
    if not mv.c_contiguous:
        raise _invalid(f"{what}: buffer is not C-contiguous (shape {mv.shape}, strides {mv.strides})")
    arr = np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv, dtype=np.uint8)
    address = arr.__array_interface__["data"][0] if arr.size else 0
    return BufferView(int(address), mv.nbytes, mv.itemsize, HOST, None, mv.readonly, "buffer", (obj, arr))


def as_buffer(obj, what: str, stream=None, sync: bool = True) -> BufferView:
    """The contiguous memory behind `obj`; `sync` orders pending producer work first.

    Raises peerlink.InvalidArgument (a ValueError) naming the problem for non-contiguous arrays,
    unreadable dtypes and unknown objects.
    """
    if _is_torch_tensor(obj):
        return _torch_view(obj, what, stream, sync)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _cai_view(obj, cai, what, stream, sync)
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        return _array_interface_view(obj, ai, what)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_view(obj, what, stream, sync)
    try:
        return _buffer_view(obj, what)
    except TypeError:
        pass
    raise _invalid(f"{what}: {type(obj).__module__}.{type(obj).__name__} is not an array (expected a "
                   "torch tensor, CuPy/numpy array, or an object with __cuda_array_interface__, "
                   "__array_interface__, DLPack or the buffer protocol)")
