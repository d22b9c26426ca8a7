"""Array protocols (DLPack, buffer protocol, numpy views), empty() lifetime, allreduce."""
import pytest

from plmp import run_ranks


class _DLPackOnly:
    """Exposes an array only through DLPack, as JAX or other frameworks would."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, stream=None):
        return self._arr.__dlpack__() if stream is None else self._arr.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def _host_source(name, rank):
    """The host bytes of source `name` as rank `rank` builds it (so the receiver can check)."""
    import numpy as np

    rng = np.random.default_rng(100 + rank)
    if name == "float32":
        return rng.standard_normal(250).astype(np.float32)
    if name == "2-d uint16":
        return rng.integers(1, 60000, (20, 50)).astype(np.uint16)
    return rng.integers(1, 256, 777, dtype=np.uint8)  # dlpack, bytearray, memoryview


def _make_source(ctx, name):
    host = _host_source(name, ctx.rank)
    if name == "dlpack":
        return _DLPackOnly(ctx.from_numpy(host))
    if name == "bytearray":
        return bytearray(host.tobytes())
    if name == "memoryview":
        return memoryview(host.tobytes())
    return ctx.from_numpy(host)


def _protocols(comm, ctx):
    import numpy as np

    peer = 1 - ctx.rank
    buf = ctx.empty(comm, 4096)
    comm.notify_ipc_tensor(peer, 1, buf)
    comm.wait_ipc_buffer(peer, 1)
    names = ["dlpack", "float32", "2-d uint16"] + (["bytearray", "memoryview"] if ctx.kind == "numpy" else [])
    for name in names:
        want = _host_source(name, peer).view(np.uint8).reshape(-1)
        req = comm.irecv(peer, 1, want.size)
        comm.send_direct(peer, _make_source(ctx, name), 1)
        req.wait()
        got = ctx.to_numpy(buf[:want.size]).view(np.uint8)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{name}: {bad.size} of {want.size} bytes differ"
        comm.barrier()  # both checked before the next source overwrites the buffers
    return names


def test_array_protocols(kind):
    names = run_ranks(_protocols, kind=kind)[0]
    assert "dlpack" in names


def _empty_lifetime(comm, ctx):
    import gc
    import glob

    import numpy as np

    import os
    import struct

    def segments():
        """This process's host allocations: named SHM segments whose header names this pid
        (common/shm_segment.h), and the memfd chunk mappings of the descriptor-passed host memory
        (Options.host_fd, the default: gpu/host_fd_memory.cpp names them "peerlink-host")."""
        mine = set()
        for path in glob.glob("/dev/shm/pl_*"):
            try:
                with open(path, "rb") as f:
                    magic, _, pid = struct.unpack("<QQi", f.read(20))
            except (OSError, struct.error):
                continue
            if magic == 0x31534B4E494C5250 and pid == os.getpid():
                mine.add(path)
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "/memfd:peerlink-host" in line:
                    mine.add(line.split()[0])  # the mapping's address range
        return mine

    before = segments()
    a = comm.empty((3, 5), np.float64)
    assert a.shape == (3, 5) and a.dtype == np.float64 and a.flags.writeable
    a[:] = 1.5
    made = segments() - before
    view = a[1]  # a view keeps the memory alive after `a` itself is gone
    del a
    gc.collect()
    assert (view == 1.5).all()
    assert segments() - before == made
    del view
    gc.collect()
    freed = made - segments()
    z = comm.empty(0, np.uint8)
    assert z.size == 0
    comm.barrier()
    return len(made), len(freed)


def test_empty_numpy_lifetime():
    made, freed = run_ranks(_empty_lifetime)[0]
    # The host backend backs alloc with memfd chunks (or SHM); the array's death must return it.
    assert made >= 1 and freed == made


def _allreduce(comm, ctx, dtype, op):
    import numpy as np

    import peerlink

    n = 1000
    x = ctx.empty(comm, n, dtype)
    mine = (np.random.default_rng(ctx.rank).integers(-50, 50, n)).astype(dtype)
    x[:] = ctx.from_numpy(mine)
    if not peerlink.has_collectives:
        with pytest.raises(peerlink.UnsupportedError):
            comm.allreduce(x, op=op)
        return None
    comm.allreduce(x, op=op)
    if ctx.kind == "torch":
        import torch

        torch.cuda.synchronize()
    elif ctx.kind == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    every = [np.random.default_rng(r).integers(-50, 50, n).astype(dtype) for r in range(ctx.world)]
    want = {"sum": np.sum, "max": np.max, "min": np.min}[op](np.stack(every), axis=0)
    got = ctx.to_numpy(x)
    assert np.array_equal(got, want), f"rank {ctx.rank}: allreduce {op} {dtype} wrong"
    return True


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dtype,op", [("float32", "sum"), ("int64", "max"), ("float64", "min")])
def test_allreduce(kind, world, dtype, op):
    run_ranks(_allreduce, world=world, kind=kind, args=(dtype, op))
