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
from typing import Any, Dict, Optional, Tuple

from . import _peerlink as _C
from ._collectives import CollectivesMixin
from ._memory import empty_like_spec
from ._stream_p2p import StreamP2PMixin
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


def _check_one_node(store, key: str, rank: int, members, timeout: Optional[float]) -> None:
    """Every member's node identity through the torch store; InvalidArgument naming the nodes when
    the group spans several (the same answer on every member, at once)."""
    import datetime

    node, name, default_ms = _C.host_identity()
    store.set(f"{key}/host/{rank}", f"{node} {name}")
    keys = [f"{key}/host/{r}" for r in range(len(members))]
    wait_s = timeout if timeout is not None else default_ms / 1000.0
    try:
        store.wait(keys, datetime.timedelta(seconds=wait_s))
    except Exception as e:  # torch raises its own error types for a store timeout
        raise _C.TimeoutError(f"Communicator.from_torch: not every member of the group published its "
                              f"node within {wait_s:g} s ({e})") from None
    hosts = [store.get(k).decode().split(" ", 1) for k in keys]
    nodes = describe_nodes(hosts, members)
    if len(nodes) > 1:
        raise _C.InvalidArgument(
            f"Communicator.from_torch: the group spans {len(nodes)} nodes ({'; '.join(nodes)}); a peerlink "
            "Communicator is one node's (its ranks meet through shared memory). Across nodes use torch's "
            "NCCL backend with peerlink's libnccl.so.2, which runs peerlink inside each node "
            "(docs/multi-node.md), or one Communicator per node.")


def describe_nodes(hosts, members):
    """["node 'a': group ranks 0,1 (global 0,1)", ...] from each member's (node id, name), nodes in
    order of their first member."""
    order, by_node = [], {}
    for r, (node, name) in enumerate(hosts):
        if node not in by_node:
            order.append(node)
            by_node[node] = (name, [])
        by_node[node][1].append(r)
    return [f"node '{by_node[n][0]}': group ranks {','.join(map(str, by_node[n][1]))} (global "
            f"{','.join(str(members[r]) for r in by_node[n][1])})" for n in order]


class Communicator(CollectivesMixin, StreamP2PMixin):
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

        A Communicator is one node's: every member first puts its node identity (PEERLINK_HOSTID,
        else NCCL_HOSTID, else hostname + boot id) in the default store and reads the others', and
        a group that spans nodes raises InvalidArgument at once, naming the nodes and their ranks
        (across nodes, torch's NCCL backend with peerlink's libnccl.so.2 runs peerlink inside each
        node: docs/multi-node.md). Then the group's first rank makes an id (which names its node)
        and sets it in the store; the others get it. Collective over the group, like any
        communicator. device defaults to GPU LOCAL_RANK (torchrun) or the current CUDA device when
        CUDA is available, else the host backend.
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
        _check_one_node(store, key, rank, members, timeout)
        if rank == 0:
            uid = _C.make_unique_id()
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

    # ---- collectives and stream-ordered point-to-point -----------------------------------------
    # allreduce, all_gather_into_tensor, ...: CollectivesMixin (_collectives.py); send, recv, their
    # published forms and group(): StreamP2PMixin (_stream_p2p.py).
    def barrier(self) -> None:
        """Waits for every rank. After KeyboardInterrupt here the ranks disagree on how many
        barriers ran, so later barriers and allreduces raise peerlink.Error: close()."""
        self._c.barrier()

    # ---- diagnostics ----------------------------------------------------------------------------
    def path_to(self, peer: int) -> str:
        return self._c.path_to(int(peer))

    def completion_with(self, peer: int) -> str:
        return self._c.completion_with(int(peer))

    def shares_process(self, peer: int) -> bool:
        """True when rank `peer` runs in this process (several GPUs driven by one process)."""
        return self._c.shares_process(int(peer))

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

    # ---- helpers (the mixins' too) ------------------------------------------------------------
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

