"""Communicator's stream-ordered point-to-point (send / recv, the published-buffer forms, group()),
a mixin of peerlink.Communicator (_comm.py), which provides _c, device, _view and _stream_of."""
from __future__ import annotations

from typing import Optional

from . import _peerlink as _C
from ._tensors import HOST, BufferView, stream_handle


class StreamP2PMixin:
    # ---- stream-ordered point-to-point ----------------------------------------------------------
    # Enqueued on the tensor's stream (torch: the current stream of its device; CuPy: the stream its
    # __cuda_array_interface__ names; or `stream`) and return at once on GPUs: like
    # torch.distributed.send/recv with NCCL, the tensor must stay alive (and unmodified, for a send)
    # until that stream has run past the call. On the host backend they are synchronous.
    # Matching is FIFO per (sender, receiver) pair, separately for each form. Without group(), a
    # send may wait for the peer's matching recv (always in the published form): issue exchanges
    # in both directions inside `with comm.group():`.
    def send(self, tensor, dst: int, stream=None, nbytes: Optional[int] = None) -> None:
        """Sends `tensor` (or its first `nbytes`) to rank `dst`'s matching recv (any buffers)."""
        view = self._view(tensor, "send", stream, sync=False)
        length = self._length(view, nbytes, "send", dst)
        _C.stream_send(self._c, int(dst), view.address, length, self._stream_of(view, stream))

    def recv(self, tensor, src: int, stream=None, nbytes: Optional[int] = None) -> None:
        """Receives the next message of rank `src` into `tensor` (lengths must match the send)."""
        view = self._view(tensor, "recv", stream, sync=False)
        if view.readonly:
            raise _C.InvalidArgument(f"recv from rank {src}: the array is read-only")
        length = self._length(view, nbytes, "recv", src)
        _C.stream_recv(self._c, int(src), view.address, length, self._stream_of(view, stream))

    def send_published(self, tensor, dst: int, remote_ipc_id: int, binding_version: int = 1,
                       remote_offset: int = 0, nbytes: Optional[int] = None, stream=None) -> None:
        """Published-buffer form: lands in rank `dst`'s buffer `remote_ipc_id` (published with
        notify_ipc_tensor at `binding_version`) at `remote_offset`; no staging, no handshake.
        Matched by the peer's recv_published with the same (ipc_id, offset, nbytes)."""
        view = self._view(tensor, "send_published", stream, sync=False)
        length = self._length(view, nbytes, "send_published", dst)
        _C.stream_send_published(self._c, int(dst), view.address, length, int(remote_ipc_id),
                                 int(remote_offset), int(binding_version), self._stream_of(view, stream))

    def recv_published(self, src: int, ipc_id: int, nbytes: int, offset: int = 0, stream=None) -> None:
        """Published-buffer form: the stream does not run past this call before rank `src`'s
        matching send_published has landed in [buffer ipc_id + offset, + nbytes)."""
        handle = 0
        if self.device != HOST:
            if stream is None:
                try:
                    import torch

                    stream = torch.cuda.current_stream(self.device)
                except ImportError:
                    stream = None
            handle = stream_handle(stream) if stream is not None else 0
            if handle == 1:
                handle = 0
        _C.stream_recv_published(self._c, int(src), int(ipc_id), int(offset), int(nbytes), handle)

    def check_async_error(self) -> None:
        """Raises what stream-ordered send/recv recorded on the GPU and is still pending (TimeoutError,
        PeerLostError, Error for a pair the peer stopped); returns when nothing is. It only reads, so a
        watchdog thread may call it beside the owner's calls (as torch's does with NCCL's
        ncclCommGetAsyncError); the next send/recv with that peer raises the error too."""
        _C.check_async_error(self._c)

    def group(self):
        """`with comm.group(): ...` issues the sends and recvs inside together at the end of the
        block, so any pattern (ring exchange, all pairs) cannot deadlock. Groups do not nest."""
        return _Group(self)

    @staticmethod
    def _length(view: BufferView, nbytes, what: str, peer: int) -> int:
        length = view.nbytes if nbytes is None else int(nbytes)
        if length < 0 or length > view.nbytes:
            raise _C.InvalidArgument(f"{what} (rank {peer}): nbytes {length} but the tensor holds "
                                     f"{view.nbytes} bytes")
        return length


class _Group:
    """Context manager of Communicator.group(). The group is ended even when the block raised (the
    communicator stays usable); the block's exception is the one that propagates."""

    def __init__(self, comm: StreamP2PMixin):  # the Communicator using this mixin
        self._comm = comm

    def __enter__(self):
        _C.group_start(self._comm._c)
        return self._comm

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            _C.group_end(self._comm._c)
        except Exception:
            if exc_type is None:
                raise
