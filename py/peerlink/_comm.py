"""peerlink.Communicator: the send_direct API on torch tensors, CuPy arrays and numpy arrays.

Threading: every call that can block releases the GIL, and Ctrl-C raises KeyboardInterrupt promptly
from each while every wait stays bounded by the timeout (default: the communicator's,
PEERLINK_TIMEOUT_MS or 60 s). Request.wait() runs as 50 ms slices and checks for signals in between
(the request stays valid). The library's own waits (the constructor's rendezvous, barrier(),
wait_ipc_buffer(), a send waiting for a newer binding_version, allreduce() on the host backend) run
the signal handlers every ~20 ms through the C++ Options::interrupt_check. An interrupted
constructor leaves nothing behind and an interrupted publication wait can be retried; after an
interrupted barrier() or allreduce() the ranks disagree on how many ran, so later ones raise
peerlink.Error: close the communicator.

Streams: peerlink copies on its own streams. A torch tensor handed to notify_ipc_tensor, isend_direct
or send_direct is first ordered after its producer by synchronizing the current torch stream of its
device (or the `stream=` argument); CuPy arrays after the stream their __cuda_array_interface__ names.
allreduce() is stream-ordered instead: it is enqueued on that stream and does not block the host.
"""
from __future__ import annotations

import os
import uuid
from typing import Any, Dict, Optional, Tuple

from . import _peerlink as _C
from ._memory import empty_like_spec
from ._tensors import HOST, BufferView, as_buffer, stream_handle

Request = _C.Request


def _device_index(device) -> int:
    """-1 / "cpu" -> host backend; int, "cuda", "cuda:N" or torch.device -> GPU index."""
    if device is None:
        return HOST
    if isinstance(device, bool):
        raise _C.InvalidArgument(f"device must be an index, 'cpu', 'cuda[:N]' or a torch.device, got {device!r}")
    if isinstance(device, int):
        if device < HOST:
            raise _C.InvalidArgument(f"device index {device} is negative (use -1 or 'cpu' for the host backend)")
        return device
    dev_type = getattr(device, "type", None)
    if dev_type is not None and not isinstance(device, str):  # torch.device
        device = f"{dev_type}:{device.index}" if device.index is not None else dev_type
    if isinstance(device, str):
        s = device.strip().lower()
        if s == "cpu":
            return HOST
        if s in ("cuda", "hip"):
            try:
                import torch

                return torch.cuda.current_device()
            except ImportError:
                return 0
        if s.startswith(("cuda:", "hip:")) and s.split(":", 1)[1].isdigit():
            return int(s.split(":", 1)[1])
    raise _C.InvalidArgument(f"device must be an index, 'cpu', 'cuda[:N]' or a torch.device, got {device!r}")


class Communicator:
    """One per process and job: meets the other ranks of `unique_id` on this node.

    Collective: every rank must construct its communicator within the timeout (any order).
    `timeout` (seconds) bounds every wait; default PEERLINK_TIMEOUT_MS or 60 s.
    """

    def __init__(self, unique_id: str, rank: int, world_size: int, device: Any = -1,
                 timeout: Optional[float] = None):
        self._dev = _device_index(device)
        self._c = _C._Communicator(str(unique_id), int(rank), int(world_size), self._dev, timeout)
        # (peer, ipc_id) -> (version, view): what this rank published, kept alive because peers
        # write into it until it is replaced or the communicator closes.
        self._published: Dict[Tuple[int, int], Tuple[int, BufferView]] = {}

    # ---- construction helpers ---------------------------------------------------------------
    @classmethod
    def from_env(cls, device: Any = None, timeout: Optional[float] = None) -> "Communicator":
        """From PEERLINK_RANK / PEERLINK_WORLD_SIZE / PEERLINK_UNIQUE_ID (set by peerlink.launch);
        device defaults to PEERLINK_DEVICE, else the host backend."""
        try:
            rank = int(os.environ["PEERLINK_RANK"])
            world = int(os.environ["PEERLINK_WORLD_SIZE"])
            uid = os.environ["PEERLINK_UNIQUE_ID"]
        except KeyError as e:
            raise _C.InvalidArgument(f"Communicator.from_env: {e.args[0]} is not set (run under "
                                     "python -m peerlink.launch)") from None
        if device is None:
            device = int(os.environ.get("PEERLINK_DEVICE", HOST))
        return cls(uid, rank, world, device, timeout=timeout)

    @classmethod
    def from_torch(cls, group=None, device: Any = None, timeout: Optional[float] = None) -> "Communicator":
        """Rank, world size and a fresh unique id from an initialized torch.distributed group.

        The group's first rank makes a random id and sets it in the default store; the others get it
        (Store.get blocks until it is there). Collective over the group, like any communicator.
        device defaults to GPU LOCAL_RANK (torchrun) or the current CUDA device when CUDA is
        available, else the host backend.
        """
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise _C.InvalidArgument("Communicator.from_torch: torch.distributed is not initialized "
                                     "(call torch.distributed.init_process_group first)")
        from torch.distributed import distributed_c10d as c10d

        store = c10d._get_default_store()
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise _C.InvalidArgument("Communicator.from_torch: this process is not in the group")
        members = dist.get_process_group_ranks(group) if group is not None else list(range(world))
        # Every member calls from_torch in the same order, so a per-process counter names the call.
        cls._torch_calls = getattr(cls, "_torch_calls", 0) + 1
        key = f"peerlink/unique_id/{cls._torch_calls}/" + ",".join(map(str, members))
        if rank == 0:
            uid = f"torch-{uuid.uuid4().hex[:16]}"
            store.set(key, uid)
        else:
            uid = store.get(key).decode()
        if device is None:
            device = HOST
            if torch.cuda.is_available():
                # torchrun's LOCAL_RANK when it names a visible GPU, else the current device.
                local = int(os.environ.get("LOCAL_RANK", -1))
                device = local if 0 <= local < torch.cuda.device_count() else torch.cuda.current_device()
        return cls(uid, rank, world, device, timeout=timeout)

    # ---- properties ---------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def world_size(self) -> int:
        return self._c.world_size

    @property
    def device(self) -> int:
        """GPU index, or -1 for the host backend."""
        return self._c.device

    @property
    def unique_id(self) -> str:
        return self._c.unique_id

    @property
    def timeout(self) -> float:
        """Bound of every wait, seconds."""
        return self._c.timeout_ms / 1000.0

    @property
    def closed(self) -> bool:
        return self._c.closed

    # ---- memory ---------------------------------------------------------------------------------
    def empty(self, shape, dtype="float32", kind: Optional[str] = None):
        """An uninitialized exportable buffer: numpy on the host backend, on GPUs a torch tensor
        (CuPy array when torch is not importable, or kind="cupy"). The memory returns to the communicator when the
        array dies; the array keeps this communicator's core alive, but close() invalidates it."""
        return empty_like_spec(self._c, shape, dtype, kind)

    # ---- receiver side --------------------------------------------------------------------------
    def notify_ipc_tensor(self, peer: int, ipc_id: int, tensor, binding_version: int = 1,
                          stream=None) -> None:
        """Publishes `tensor` as receive buffer `ipc_id` for `peer` at `binding_version` (> 0).
        The tensor must be exportable memory of this device (comm.empty() always is; on GPUs
        any caching-allocator tensor); it is kept alive until replaced or close()."""
        view = self._view(tensor, "notify_ipc_tensor", stream)
        if view.readonly:
            raise _C.InvalidArgument(f"notify_ipc_tensor: ipc_id {ipc_id} for rank {peer}: the "
                                     "array is read-only, peers could not write into it")
        self._c.notify_ipc_buffer(int(peer), int(ipc_id), view.address, view.nbytes, int(binding_version))
        self._published[(int(peer), int(ipc_id))] = (int(binding_version), view)

    def irecv(self, peer: int, ipc_id: int, nbytes: int, offset: int = 0) -> Request:
        """Completes when the next matching send from `peer` has landed in
        [buffer ipc_id + offset, + nbytes)."""
        pub = self._published.get((int(peer), int(ipc_id)))
        if pub is not None and int(offset) + int(nbytes) > pub[1].nbytes:
            raise _C.InvalidArgument(
                f"irecv from rank {peer}: offset {offset} + nbytes {nbytes} exceeds the "
                f"{pub[1].nbytes}-byte tensor published as ipc_id {ipc_id}")
        return self._c.irecv(int(peer), int(ipc_id), int(offset), int(nbytes))

    # ---- sender side ----------------------------------------------------------------------------
    def wait_ipc_buffer(self, peer: int, ipc_id: int, binding_version: int = 1) -> None:
        """Waits until `peer` published `ipc_id` at >= binding_version and maps it ahead of time."""
        self._c.wait_ipc_buffer(int(peer), int(ipc_id), int(binding_version))

    def isend_direct(self, peer: int, tensor, remote_ipc_id: int, binding_version: int = 1,
                     remote_offset: int = 0, nbytes: Optional[int] = None, stream=None) -> Request:
        """Copies `tensor` (or its first `nbytes`) into peer's buffer `remote_ipc_id` at
        `remote_offset`. binding_version must equal the published version (older: InvalidArgument,
        stale); 0 selects the legacy path (per-message handshake with the peer's irecv).
        The tensor stays referenced by the request until it completes."""
        view = self._view(tensor, "isend_direct", stream)
        length = view.nbytes if nbytes is None else int(nbytes)
        if length < 0 or length > view.nbytes:
            raise _C.InvalidArgument(f"isend_direct to rank {peer}: nbytes {length} but the tensor "
                                     f"holds {view.nbytes} bytes")
        return self._c.isend(int(peer), view.address, length, int(remote_ipc_id), int(remote_offset),
                             int(binding_version), view.owner)

    def send_direct(self, peer: int, tensor, remote_ipc_id: int, binding_version: int = 1,
                    remote_offset: int = 0, nbytes: Optional[int] = None, stream=None,
                    timeout: Optional[float] = None) -> None:
        """Returns when the bytes have landed in the peer's buffer (`timeout` seconds at most, None:
        the communicator's). On any error, Ctrl-C included, the message is given up before the
        exception is raised: the tensor is never read again once this returned."""
        view = self._view(tensor, "send_direct", stream)
        length = view.nbytes if nbytes is None else int(nbytes)
        if length < 0 or length > view.nbytes:
            raise _C.InvalidArgument(f"send_direct to rank {peer}: nbytes {length} but the tensor "
                                     f"holds {view.nbytes} bytes")
        self._c.send_direct(int(peer), view.address, length, int(remote_ipc_id), int(remote_offset),
                            int(binding_version), timeout)

    # ---- collectives ----------------------------------------------------------------------------
    def allreduce(self, tensor, op: str = "sum", stream=None) -> None:
        """In place: tensor = op over all ranks. On GPUs it is enqueued on the current torch /
        CuPy stream (or `stream`) and returns without waiting; on the host backend it is
        synchronous. Raises UnsupportedError when the library has no collectives."""
        if not _C.has_collectives:
            raise _C.UnsupportedError("allreduce: this peerlink library was built without collectives")
        view = self._view(tensor, "allreduce", stream, sync=False)
        if view.dtype is None:
            raise _C.InvalidArgument("allreduce: cannot tell the element type of the tensor "
                                     f"({view.kind}); pass a typed array")
        if view.readonly:
            raise _C.InvalidArgument("allreduce: the array is read-only")
        handle = 0  # the legacy default stream; ignored on the host backend
        if view.device != HOST:
            if stream is None and view.kind == "torch":
                import torch

                stream = torch.cuda.current_stream(view.owner.device)
            elif stream is None and view.kind == "cai":
                stream = view.owner.__cuda_array_interface__.get("stream")
            handle = stream_handle(stream)
            if handle == 1:  # __cuda_array_interface__ spells the legacy default stream 1
                handle = 0
        count = view.nbytes // view.itemsize
        _C.allreduce(self._c, view.address, count, view.dtype, str(op).lower(), handle)

    all_reduce = allreduce  # torch.distributed's name

    # torch.distributed's collectives. Every rank calls with tensors of the same dtype and sizes
    # (all_to_all_single: matching splits). On GPUs they are enqueued on the tensors' stream (torch:
    # the current stream of the device; CuPy: the stream its __cuda_array_interface__ names; or
    # `stream`) and return at once; on the host backend (numpy) they are synchronous.
    def all_gather_into_tensor(self, output, input, stream=None) -> None:
        """output = the inputs of ranks 0..n-1 concatenated (output holds world_size x input).
        In place when input is output's slice of this rank."""
        out = self._coll_view(output, "all_gather_into_tensor", stream, writable=True)
        inp = self._coll_view(input, "all_gather_into_tensor", stream)
        self._same_dtype(out, inp, "all_gather_into_tensor")
        if out.nbytes != inp.nbytes * self.world_size:
            raise _C.InvalidArgument(f"all_gather_into_tensor: output holds {out.nbytes} bytes, want world_size "
                                     f"({self.world_size}) x input's {inp.nbytes}")
        _C.collective(self._c, "all_gather", inp.address, out.address, inp.nbytes // inp.itemsize, inp.dtype,
                      "sum", 0, self._stream_of(out, stream))

    def reduce_scatter_tensor(self, output, input, op: str = "sum", stream=None) -> None:
        """output = op over ranks of this rank's slice of input (input holds world_size x output)."""
        out = self._coll_view(output, "reduce_scatter_tensor", stream, writable=True)
        inp = self._coll_view(input, "reduce_scatter_tensor", stream)
        self._same_dtype(out, inp, "reduce_scatter_tensor")
        if inp.nbytes != out.nbytes * self.world_size:
            raise _C.InvalidArgument(f"reduce_scatter_tensor: input holds {inp.nbytes} bytes, want world_size "
                                     f"({self.world_size}) x output's {out.nbytes}")
        _C.collective(self._c, "reduce_scatter", inp.address, out.address, out.nbytes // out.itemsize, out.dtype,
                      str(op).lower(), 0, self._stream_of(out, stream))

    def broadcast(self, tensor, src: int, stream=None) -> None:
        """In place: tensor = rank src's tensor on every rank."""
        v = self._coll_view(tensor, "broadcast", stream, writable=True)
        _C.collective(self._c, "broadcast", v.address, v.address, v.nbytes // v.itemsize, v.dtype, "sum",
                      int(src), self._stream_of(v, stream))

    def reduce(self, tensor, dst: int, op: str = "sum", stream=None) -> None:
        """In place: rank dst's tensor = op over all ranks' tensors; the others' are left unchanged."""
        v = self._coll_view(tensor, "reduce", stream, writable=True)
        _C.collective(self._c, "reduce", v.address, v.address, v.nbytes // v.itemsize, v.dtype, str(op).lower(),
                      int(dst), self._stream_of(v, stream))

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None,
                          stream=None) -> None:
        """Rank r's input rows for rank q land in rank q's output rows for r, in rank order.
        Split sizes count rows of dimension 0 (torch semantics); None = equal splits."""
        what = "all_to_all_single"
        out = self._coll_view(output, what, stream, writable=True)
        inp = self._coll_view(input, what, stream)
        self._same_dtype(out, inp, what)
        n = self.world_size
        if output_split_sizes is None and input_split_sizes is None:
            if inp.nbytes != out.nbytes or (inp.nbytes // inp.itemsize) % n:
                raise _C.InvalidArgument(f"{what}: input ({inp.nbytes} bytes) and output ({out.nbytes} bytes) must "
                                         f"match and split evenly over {n} ranks")
            _C.collective(self._c, "all_to_all", inp.address, out.address, inp.nbytes // inp.itemsize // n,
                          inp.dtype, "sum", 0, self._stream_of(out, stream))
            return

        def splits(view, obj, sizes, name):
            elems = view.nbytes // view.itemsize
            shape = tuple(getattr(obj, "shape", (elems,))) or (1,)
            row = elems // shape[0] if shape[0] else 0
            if sizes is None:
                if shape[0] % n:
                    raise _C.InvalidArgument(f"{what}: {name} has {shape[0]} rows, not divisible by {n} ranks")
                sizes = [shape[0] // n] * n
            sizes = [int(x) for x in sizes]
            if len(sizes) != n or min(sizes) < 0 or sum(sizes) > shape[0]:
                raise _C.InvalidArgument(f"{what}: {name}_split_sizes {sizes} must be {n} non-negative row counts "
                                         f"summing to at most {shape[0]}")
            counts = [s * row for s in sizes]
            displs = [sum(counts[:i]) for i in range(n)]
            return counts, displs

        sc, sd = splits(inp, input, input_split_sizes, "input")
        rc, rd = splits(out, output, output_split_sizes, "output")
        _C.all_to_all_v(self._c, inp.address, sc, sd, out.address, rc, rd, inp.dtype, self._stream_of(out, stream))

    def _coll_view(self, tensor, what: str, stream, writable: bool = False) -> BufferView:
        if not _C.has_collectives:
            raise _C.UnsupportedError(f"{what}: this peerlink library was built without collectives")
        view = self._view(tensor, what, stream, sync=False)
        if view.dtype is None:
            raise _C.InvalidArgument(f"{what}: cannot tell the element type of the tensor ({view.kind}); "
                                     "pass a typed array")
        if writable and view.readonly:
            raise _C.InvalidArgument(f"{what}: the output array is read-only")
        return view

    @staticmethod
    def _same_dtype(a: BufferView, b: BufferView, what: str) -> None:
        if a.dtype != b.dtype:
            raise _C.InvalidArgument(f"{what}: output is {a.dtype} but input is {b.dtype}")

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

    def group(self):
        """`with comm.group(): ...` issues the sends and recvs inside together at the end of the
        block, so any pattern (ring exchange, all pairs) cannot deadlock. Groups do not nest."""
        return _Group(self)

    def _stream_of(self, view: BufferView, stream) -> int:
        if view.device == HOST:
            return 0  # ignored on the host backend
        if stream is None and view.kind == "torch":
            import torch

            stream = torch.cuda.current_stream(view.owner.device)
        elif stream is None and view.kind == "cai":
            stream = view.owner.__cuda_array_interface__.get("stream")
        handle = stream_handle(stream)
        return 0 if handle == 1 else handle  # __cuda_array_interface__ spells the legacy default 1

    @staticmethod
    def _length(view: BufferView, nbytes, what: str, peer: int) -> int:
        length = view.nbytes if nbytes is None else int(nbytes)
        if length < 0 or length > view.nbytes:
            raise _C.InvalidArgument(f"{what} (rank {peer}): nbytes {length} but the tensor holds "
                                     f"{view.nbytes} bytes")
        return length

    def barrier(self) -> None:
        """Waits for every rank. After KeyboardInterrupt here the ranks disagree on how many
        barriers ran, so later barriers and allreduces raise peerlink.Error: close()."""
        self._c.barrier()

    # ---- diagnostics ----------------------------------------------------------------------------
    def path_to(self, peer: int) -> str:
        return self._c.path_to(int(peer))

    def completion_with(self, peer: int) -> str:
        return self._c.completion_with(int(peer))

    def stats(self) -> dict:
        return self._c.stats()

    # ---- teardown -------------------------------------------------------------------------------
    def close(self) -> None:
        """Collective teardown; pending requests fail, later calls raise InvalidArgument.
        Arrays from empty() must not be used afterwards (their memory is released)."""
        if self._c.closed:
            return
        self._c.close()
        self._published.clear()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        dev = "host" if self.device == HOST else f"cuda:{self.device}"
        state = " closed" if self.closed else ""
        return f"<peerlink.Communicator rank {self.rank}/{self.world_size} {dev}{state}>"

    # ---- helpers --------------------------------------------------------------------------------
    def _view(self, tensor, what: str, stream, sync: bool = True) -> BufferView:
        if self._c.closed:
            raise _C.InvalidArgument(f"{what}: the communicator is closed")
        view = as_buffer(tensor, what, stream=stream, sync=sync)
        mine = self._c.device
        if view.device is None and mine == HOST:  # __cuda_array_interface__ without a device id
            raise _C.InvalidArgument(f"{what}: tensor is GPU memory ({view.kind}) but the "
                                     "communicator uses the host backend (device -1)")
        if view.device is not None and view.device != mine:
            want = "the host backend (device -1)" if mine == HOST else f"GPU {mine}"
            raise _C.InvalidArgument(f"{what}: tensor is on {view.where()} but the communicator "
                                     f"uses {want}")
        return view


class _Group:
    """Context manager of Communicator.group(). The group is ended even when the block raised (the
    communicator stays usable); the block's exception is the one that propagates."""

    def __init__(self, comm: Communicator):
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
