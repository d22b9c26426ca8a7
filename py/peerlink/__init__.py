"""peerlink: userspace GPU IPC transport for one-process-per-GPU jobs on one node.

    comm = peerlink.Communicator(unique_id, rank, world_size, device)   # device -1/"cpu": host
    comm.notify_ipc_tensor(peer, ipc_id, tensor, binding_version=1)     # publish a receive buffer
    comm.send_direct(peer, tensor, remote_ipc_id, binding_version=1)    # write into the peer's
    comm.irecv(peer, ipc_id, nbytes).wait()                             # ... and see it landed

See Communicator for the full API, peerlink.launch for running n local processes.
"""
from ._version import __version__

try:
    from . import _peerlink
except ImportError as _e:  # a source tree without its extension, or a broken install
    raise ImportError(f"peerlink: the compiled extension could not be loaded ({_e}); install the "
                      "package with `pip install ./py` (or build it in place with "
                      "`python setup.py build_ext --inplace` in py/)") from _e
from ._peerlink import (
    Error,
    InvalidArgument,
    PeerLostError,
    Request,
    TimeoutError,
    UnsupportedError,
)
from ._comm import Communicator

HOST_DEVICE = _peerlink.HOST_DEVICE
has_collectives = bool(_peerlink.has_collectives)


def runtime() -> str:
    """GPU runtime of the library build: 'cuda', 'hip' or 'none' (host-only)."""
    return _peerlink.runtime_name()


def device_count() -> int:
    """GPUs the library sees (0 without a driver or device)."""
    return _peerlink.device_count()


__all__ = [
    "__version__", "Communicator", "Request", "Error", "InvalidArgument", "TimeoutError",
    "PeerLostError", "UnsupportedError", "HOST_DEVICE", "has_collectives", "runtime", "device_count",
]
