"""Every error the API promises: argument checks, timeouts, a killed peer, close; and the
threading guarantees (GIL released during waits, Ctrl-C interrupts a wait)."""
import pytest

from plmp import run_ranks, sigint_raises


class _FakeGpuArray:
    """An object that looks like GPU memory to the interop layer (never dereferenced)."""

    def __init__(self, nbytes=64, device=None):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (0x7f0000000000, False),
                                         "version": 3, "strides": None, "stream": None}
        if device is not None:
            self.device = type("Dev", (), {"id": device})()


def _argument_errors(comm, ctx):
    import numpy as np

    import peerlink

    peer = 1 - ctx.rank
    buf = ctx.empty(comm, 1024)
    comm.notify_ipc_tensor(peer, 1, buf)
    comm.wait_ipc_buffer(peer, 1)
    checks = {}

    def expect(name, fn, *words):
        with pytest.raises(peerlink.InvalidArgument) as e:
            fn()
        assert isinstance(e.value, ValueError)
        for w in words:
            assert w in str(e.value), f"{name}: {w!r} not in {e.value}"
        checks[name] = str(e.value)

    big = ctx.random(4096, seed=1)
    expect("non-contiguous", lambda: comm.send_direct(peer, big[::2], 1), "contiguous")
    expect("nbytes > tensor", lambda: comm.send_direct(peer, big[:16], 1, nbytes=32), "32", "16")
    expect("irecv past tensor", lambda: comm.irecv(peer, 1, 1000, offset=100), "1000", "1024")
    expect("bad peer", lambda: comm.send_direct(7, big[:16], 1), "7")
    expect("unknown object", lambda: comm.send_direct(peer, object(), 1), "object")
    expect("bad device string", lambda: peerlink.Communicator("x", 0, 1, "tpu:0"), "tpu")
    if ctx.kind == "numpy":
        # Host backend: GPU memory is the wrong device; exportable memory must come from alloc.
        expect("gpu tensor on host comm", lambda: comm.send_direct(peer, _FakeGpuArray(device=0), 1),
               "GPU 0", "host")
        expect("gpu cai on host comm", lambda: comm.send_direct(peer, _FakeGpuArray(), 1), "GPU", "host")
        expect("not exportable", lambda: comm.notify_ipc_tensor(peer, 2, np.ones(64, np.uint8)))
        ro = np.frombuffer(bytes(64), dtype=np.uint8)
        expect("read-only receive buffer", lambda: comm.notify_ipc_tensor(peer, 2, ro), "read-only")
        expect("bad empty dtype", lambda: comm.empty(4, "bfloat16"), "bfloat16")
    else:
        expect("host array on gpu comm", lambda: comm.send_direct(peer, np.ones(8, np.uint8), 1),
               "host", f"GPU {comm.device}")
        other = _FakeGpuArray(device=comm.device + 1)
        expect("other gpu", lambda: comm.send_direct(peer, other, 1), f"GPU {comm.device + 1}")
    if peerlink.has_collectives:
        expect("allreduce dtype", lambda: comm.allreduce(ctx.empty(comm, 16, "uint8")), "uint8")
        expect("allreduce op", lambda: comm.allreduce(ctx.empty(comm, 16, "float32"), op="xor"), "xor")
    comm.barrier()
    return sorted(checks)


def test_argument_errors(kind):
    names = run_ranks(_argument_errors, kind=kind)[0]
    assert "non-contiguous" in names and "bad peer" in names


def _timeouts(comm, ctx):
    import time

    import peerlink

    if ctx.rank == 0:
        buf = ctx.empty(comm, 64)
        comm.notify_ipc_tensor(1, 1, buf)
        req = comm.irecv(1, 1, 64)  # nobody sends
        t0 = time.monotonic()
        with pytest.raises(peerlink.TimeoutError) as e:
            req.wait(timeout=0.3)
        took = time.monotonic() - t0
        assert 0.25 <= took < 2.0, took
        assert isinstance(e.value, TimeoutError) and isinstance(e.value, peerlink.Error)
        t0 = time.monotonic()
        with pytest.raises(peerlink.TimeoutError):
            req.wait()  # the communicator's bound (1 s here)
        assert 0.9 <= time.monotonic() - t0 < 3.0
        assert not req.test()
    else:
        with pytest.raises(peerlink.TimeoutError):
            comm.wait_ipc_buffer(0, 77)  # never published
    comm.barrier()


def test_timeouts():
    run_ranks(_timeouts, comm_timeout=1.0)


def _peer_killed(comm, ctx):
    import os
    import signal
    import time

    import peerlink

    buf = ctx.empty(comm, 256)
    comm.notify_ipc_tensor(1 - ctx.rank, 1, buf)
    req = comm.irecv(1 - ctx.rank, 1, 256)  # pending when the peer dies
    comm.barrier()
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(peerlink.PeerLostError) as e:
        req.wait()
    took = time.monotonic() - t0
    assert took < 5.0, f"PeerLostError after {took:.2f} s"
    with pytest.raises(peerlink.PeerLostError):
        comm.send_direct(1, ctx.random(16, seed=0), 1)
    return str(e.value)


def test_killed_peer_raises_peer_lost(kind):
    # The killed rank cannot unlink what it created; run_ranks removes it after the job.
    msg = run_ranks(_peer_killed, kind=kind, comm_timeout=30.0, expect_killed={1},
                    allow_leftover_shm=True)[0]
    assert "1" in msg


def _gil_released(comm, ctx):
    import threading
    import time

    if ctx.rank == 1:
        buf = ctx.empty(comm, 64)
        comm.notify_ipc_tensor(0, 1, buf)
        req = comm.irecv(0, 1, 64)
        ticks = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                ticks[0] += 1

        results = {}
        calls = (("Request.wait", req.wait), ("barrier", comm.barrier),
                 ("wait_ipc_buffer", lambda: comm.wait_ipc_buffer(0, 2)))
        for name, call in calls:
            t = threading.Thread(target=spin)
            ticks[0] = 0
            stop.clear()
            t.start()
            call()  # completes about 1 s later, when rank 0 acts
            stop.set()
            t.join()
            results[name] = ticks[0]
        for name, n in results.items():
            # Holding the GIL for the whole wait would leave the thread at ~0 ticks.
            assert n > 10000, f"{name}: second thread made only {n} steps during a 1 s wait"
        ctx.expect_random(buf, seed=5)
        comm.barrier()
        return results
    comm.wait_ipc_buffer(1, 1)
    time.sleep(1.0)
    comm.send_direct(1, ctx.random(64, seed=5), 1)
    time.sleep(1.0)
    comm.barrier()
    time.sleep(1.0)
    comm.notify_ipc_tensor(1, 2, ctx.empty(comm, 64))
    comm.barrier()


def test_gil_released_during_waits():
    run_ranks(_gil_released)


def _ctrl_c(comm, ctx):
    import os
    import signal
    import threading
    import time

    if ctx.rank == 0:
        buf = ctx.empty(comm, 64)
        comm.notify_ipc_tensor(1, 1, buf)
        req = comm.irecv(1, 1, 64)  # rank 1 sends only after the barrier below
        with sigint_raises():
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                req.wait(timeout=30)
            took = time.monotonic() - t0
        assert took < 1.5, f"KeyboardInterrupt after {took:.2f} s"
        comm.barrier()
        req.wait()  # the request survived the interrupt and still completes
        ctx.expect_random(buf, seed=9)
        return took
    comm.wait_ipc_buffer(0, 1)
    comm.barrier()
    comm.send_direct(0, ctx.random(64, seed=9), 1)


def test_ctrl_c_interrupts_wait():
    took = run_ranks(_ctrl_c, comm_timeout=30.0)[0]
    assert took < 1.5


def _closed(comm, ctx):
    import peerlink

    buf = ctx.empty(comm, 64)
    comm.barrier()
    comm.close()
    comm.close()  # idempotent
    assert comm.closed
    for call in (lambda: comm.barrier(), lambda: comm.irecv(0, 1, 8),
                 lambda: comm.send_direct(1 - ctx.rank, buf, 1),
                 lambda: comm.notify_ipc_tensor(1 - ctx.rank, 1, buf)):
        with pytest.raises(peerlink.InvalidArgument):
            call()
    del buf


def test_calls_after_close_raise(kind):
    run_ranks(_closed, kind=kind)


def _ctor_timeout(ctx):
    import time

    import peerlink

    t0 = time.monotonic()
    with pytest.raises(peerlink.TimeoutError):
        peerlink.Communicator(ctx.uid, 0, 2, -1, timeout=0.5)  # rank 1 never comes
    return time.monotonic() - t0


def test_constructor_times_out_without_peers():
    # Also checks (in run_ranks) that the failed rendezvous left no SHM segment behind.
    took = run_ranks(_ctor_timeout, world=1, make_comm=False)[0]
    assert took < 5.0
