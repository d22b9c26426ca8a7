"""Stream-ordered send/recv and groups between real processes: ring exchange in a group (both
forms), a stream of messages without groups, group misuse. On GPUs (torch / CuPy) the calls are
enqueued on the current stream; the checks copy back on that stream."""
import pytest

import peerlink
from plmp import run_ranks

SIZES = [0, 1, 8, 8193, 100000]


def _ring(comm, ctx):
    nxt, prv = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world
    cap = max(SIZES)
    pub = ctx.empty(comm, cap)
    comm.notify_ipc_tensor(prv, 5, pub)
    comm.barrier()
    for i, n in enumerate(SIZES):
        src = ctx.random(max(n, 1), seed=100 * i + ctx.rank)
        dst = ctx.empty(comm, max(n, 1))
        with comm.group():
            comm.send(src, nxt, nbytes=n)
            comm.recv(dst, prv, nbytes=n)
        if n:
            ctx.expect_random(dst[:n], seed=100 * i + prv)
        with comm.group():
            comm.recv_published(prv, 5, n)
            comm.send_published(src, nxt, 5, nbytes=n)
        if n:
            ctx.expect_random(pub[:n], seed=100 * i + prv)
        comm.barrier()  # the peer checked before the next size overwrites its buffer


@pytest.mark.parametrize("world", [2, 3])
def test_ring_exchange_in_group(kind, world):
    run_ranks(_ring, world=world, kind=kind)


def _stream(comm, ctx):
    peer = 1 - ctx.rank
    for k in range(200):
        if ctx.rank == 0:
            comm.send(ctx.random(1000, seed=k), peer)
        else:
            dst = ctx.empty(comm, 1000)
            comm.recv(dst, peer)
            ctx.expect_random(dst, seed=k)
    # The sender's last messages may still sit in the staging slots when its loop ends: closing
    # then would make the receiver's next recv fail its peer check (PeerLostError, "closed its
    # communicator", seen once in CI under load), as a program must not destroy a communicator
    # with messages in flight.
    comm.barrier()


def test_stream_without_groups(kind):
    run_ranks(_stream, world=2, kind=kind)


def _large(comm, ctx):
    """NCCL-form messages above the zero-copy threshold between processes (stream_direct_ipc_min,
    16 MB: on GPUs the library exports the receive buffers' allocations and the sender writes into
    them once it mapped them): one receive buffer several times, then a buffer of the array library
    each round (torch's caching allocator hands the same block back); every payload checked."""
    n = 20 << 20
    peer = 1 - ctx.rank
    fixed = ctx.empty(comm, n)
    for k in range(8):
        if ctx.rank == 0:
            comm.send(ctx.random(n, seed=k), peer)
        else:
            dst = fixed if k < 4 else ctx.random(n, seed=1000 + k)
            comm.recv(dst, peer)
            ctx.expect_random(dst, seed=k)
        comm.barrier()


def test_large_messages_into_reused_buffers(kind):
    run_ranks(_large, world=2, kind=kind)


def _misuse(comm, ctx):
    peer = 1 - ctx.rank
    with pytest.raises(peerlink.InvalidArgument, match="do not nest"):
        with comm.group():
            with comm.group():
                pass
    buf = ctx.empty(comm, 64)
    with pytest.raises(ValueError, match="nbytes 65"):
        comm.send(buf, peer, nbytes=65)
    with pytest.raises(peerlink.InvalidArgument, match="unknown buffer id 77"):
        comm.recv_published(peer, 77, 8)
    with pytest.raises(peerlink.InvalidArgument, match="outside"):
        comm.send(buf, 9)
    comm.barrier()


def test_group_misuse_and_bad_input(kind):
    run_ranks(_misuse, world=2, kind=kind)


def _sync(ctx):
    if ctx.kind == "torch":
        import torch

        torch.cuda.current_stream().synchronize()
    elif ctx.kind == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _stall(comm, ctx):
    """Rank 1 lives but never sends: rank 0's recv ends at the timeout. On the host backend the call
    itself raises; on GPUs it returns at once, the device wait ends, and check_async_error (here from
    another thread, as a watchdog) raises it without clearing it."""
    import threading

    import time

    comm.check_async_error()  # nothing pending before any stream call
    with comm.group():  # empty: sets up this rank's stream engine, which the peer's first call maps
        pass
    comm.barrier()
    if ctx.rank == 1:
        time.sleep(5)  # alive (a dead peer would make it PeerLostError), calling nothing
        return
    dst = ctx.empty(comm, 64)
    if ctx.kind == "numpy":
        with pytest.raises(peerlink.TimeoutError, match="from rank 1: message 1 .* made no progress"):
            comm.recv(dst, 1)
        comm.check_async_error()  # reported by the call: nothing left pending
    else:
        comm.recv(dst, 1)
        _sync(ctx)  # returns after the device-side timeout
        seen = []

        def watchdog():
            try:
                comm.check_async_error()
                seen.append(None)
            except peerlink.TimeoutError as e:
                seen.append(str(e))

        t = threading.Thread(target=watchdog)
        t.start()
        t.join()
        assert seen and seen[0] and "device-side wait" in seen[0] and "rank 1" in seen[0], seen
        with pytest.raises(peerlink.TimeoutError, match="rank 1"):
            comm.check_async_error()  # not cleared by the first look
        with pytest.raises(peerlink.TimeoutError, match="rank 1"):
            comm.recv(dst, 1)  # the pair stays broken


def test_async_error_of_stalled_peer(kind):
    run_ranks(_stall, world=2, kind=kind, comm_timeout=1.5)
