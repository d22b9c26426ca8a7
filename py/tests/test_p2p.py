"""send_direct / irecv between real processes: payloads, offsets, versions, legacy path, 4 ranks."""
import pytest

from plmp import run_ranks

SIZES = [1, 8, 4093, 65536, 1 << 20]


def _pair_roundtrip(comm, ctx, sizes):
    """Each rank publishes one buffer for its peer, then both send every size into each other."""
    peer = 1 - ctx.rank
    cap = max(sizes)
    buf = ctx.empty(comm, cap)
    comm.notify_ipc_tensor(peer, 3, buf)
    comm.wait_ipc_buffer(peer, 3)
    for i, n in enumerate(sizes):
        src = ctx.random(n, seed=1000 * i + ctx.rank)
        req = comm.irecv(peer, 3, n)
        comm.send_direct(peer, src, 3)
        req.wait()
        assert req.test() and req.done
        ctx.expect_random(buf[:n], seed=1000 * i + peer)
        comm.barrier()  # the peer has checked before the next size overwrites the buffer
    return comm.path_to(peer), comm.completion_with(peer), comm.shares_process(peer)


def test_send_direct_random_payloads(kind):
    out = run_ranks(_pair_roundtrip, world=2, kind=kind, args=(SIZES,))
    assert all(o[0] in ("direct", "relay") for o in out)
    assert not any(o[2] for o in out)  # one process per rank


def _isend_poll_offsets(comm, ctx):
    peer = 1 - ctx.rank
    buf = ctx.empty(comm, 4096)
    comm.notify_ipc_tensor(peer, 9, buf, binding_version=5)
    comm.wait_ipc_buffer(peer, 9, binding_version=5)
    # Four 1 KiB pieces into four offsets, all in flight; completion polled with test().
    recvs = [comm.irecv(peer, 9, 1024, offset=k * 1024) for k in range(4)]
    srcs = [ctx.random(1024, seed=ctx.rank * 10 + k) for k in range(4)]
    sends = [comm.isend_direct(peer, s, 9, binding_version=5, remote_offset=k * 1024)
             for k, s in enumerate(srcs)]
    import time

    deadline = time.monotonic() + 20
    while not all(r.test() for r in recvs + sends):
        assert time.monotonic() < deadline, "requests not complete after 20 s of test()"
        time.sleep(0.001)
    for k in range(4):
        ctx.expect_random(buf[k * 1024:(k + 1) * 1024], seed=peer * 10 + k)
    comm.barrier()


def test_isend_test_polling_and_offsets(kind):
    run_ranks(_isend_poll_offsets, kind=kind)


def _versions(comm, ctx):
    import peerlink

    if ctx.rank == 1:  # receiver
        a = ctx.empty(comm, 256)
        comm.notify_ipc_tensor(0, 1, a, binding_version=1)
        comm.notify_ipc_tensor(0, 1, a, binding_version=1)  # same triple again: a no-op
        comm.irecv(0, 1, 256).wait()
        ctx.expect_random(a, seed=1)
        comm.barrier()  # 1: first send checked
        b = ctx.empty(comm, 256)
        comm.notify_ipc_tensor(0, 1, b, binding_version=2)  # republish on a new buffer
        comm.barrier()  # 2: sender may use version 2
        comm.irecv(0, 1, 256).wait()
        ctx.expect_random(b, seed=2)
        ctx.expect_random(a, seed=1)  # the old buffer was not written again
        comm.barrier()  # 3
        return None
    src1 = ctx.random(256, seed=1)
    comm.wait_ipc_buffer(1, 1, binding_version=1)
    comm.send_direct(1, src1, 1, binding_version=1)
    comm.barrier()  # 1
    comm.barrier()  # 2
    comm.wait_ipc_buffer(1, 1, binding_version=2)
    with pytest.raises(peerlink.InvalidArgument) as stale:
        comm.send_direct(1, src1, 1, binding_version=1)
    assert isinstance(stale.value, ValueError)
    comm.send_direct(1, ctx.random(256, seed=2), 1, binding_version=2)
    comm.barrier()  # 3
    return str(stale.value)


def test_versions_republish_and_stale(kind):
    out = run_ranks(_versions, kind=kind)
    assert "1" in out[0]  # the stale message names the version


def _legacy(comm, ctx):
    peer = 1 - ctx.rank
    buf = ctx.empty(comm, 5000)
    comm.notify_ipc_tensor(peer, 4, buf)
    for i in range(3):
        n = 5000 - i * 7
        if ctx.rank == 0:
            comm.send_direct(1, ctx.random(n, seed=i), 4, binding_version=0)
        else:
            comm.irecv(0, 4, n).wait()
            ctx.expect_random(buf[:n], seed=i)
    comm.barrier()


def test_legacy_version0_handshake(kind):
    run_ranks(_legacy, kind=kind)


def _all_pairs(comm, ctx):
    n = 3 * 1024 + 5
    bufs = {}
    for p in range(ctx.world):
        if p != ctx.rank:
            bufs[p] = ctx.empty(comm, n)
            comm.notify_ipc_tensor(p, 100 + p, bufs[p])
    reqs = [comm.irecv(p, 100 + p, n) for p in bufs]
    for p in bufs:
        comm.wait_ipc_buffer(p, 100 + ctx.rank)
    sends = [comm.isend_direct(p, ctx.random(n, seed=ctx.rank * 100 + p), 100 + ctx.rank)
             for p in bufs]
    for r in reqs + sends:
        r.wait()
    for p, b in bufs.items():
        ctx.expect_random(b, seed=p * 100 + ctx.rank)
    comm.barrier()
    return ctx.rank


def test_four_ranks_all_pairs(kind):
    assert run_ranks(_all_pairs, world=4, kind=kind) == [0, 1, 2, 3]


def _properties(comm, ctx):
    assert (comm.rank, comm.world_size, comm.device) == (ctx.rank, ctx.world, ctx.device())
    assert comm.unique_id == ctx.uid and not comm.closed and comm.timeout > 0
    assert repr(comm).startswith("<peerlink.Communicator rank")
    comm.barrier()
    stats = comm.stats()
    assert set(stats) >= {"exports", "opens", "closes", "sends_done_seq", "sends_ring", "sends_relay"}
    return True


def test_properties_barrier_stats(kind):
    run_ranks(_properties, world=2, kind=kind)


def _dropped_send_requests(comm, ctx):
    import gc

    piece, count = 64 * 1024, 16
    if ctx.rank == 1:
        buf = ctx.empty(comm, piece * count)
        comm.notify_ipc_tensor(0, 2, buf)
        for k in range(count):
            comm.irecv(0, 2, piece, offset=k * piece).wait()
        for k in range(count):
            ctx.expect_random(buf[k * piece:(k + 1) * piece], seed=500 + k)
    else:
        comm.wait_ipc_buffer(1, 2)
        for k in range(count):
            # Neither the request nor the source is kept: the package must keep the source alive
            # until the copy is done, even with the garbage collector running in between.
            comm.isend_direct(1, ctx.random(piece, seed=500 + k), 2, remote_offset=k * piece)
            gc.collect()
    comm.barrier()


def test_dropped_send_requests_keep_their_source(kind):
    run_ranks(_dropped_send_requests, kind=kind)
