"""Runs a test body in n real processes (multiprocessing, start method "spawn"), one communicator
each, and collects per-rank results or tracebacks. Every run uses a fresh unique id and checks that
the job left no SHM segment behind.

Array kinds: "numpy" (host backend, device -1), "torch" and "cupy" (GPU rank % device_count).
"""
from __future__ import annotations

import glob
import multiprocessing as mp
import os
import time
import traceback
import uuid

KINDS = ("numpy", "torch", "cupy")


def kind_available(kind: str):
    """None when the kind can run here, else the reason to skip."""
    if kind == "numpy":
        return None
    import importlib.util

    import peerlink

    if peerlink.runtime() == "none":
        return "peerlink built without a GPU runtime"
    if peerlink.device_count() < 1:
        return "no GPU"
    if importlib.util.find_spec(kind) is None:
        return f"{kind} is not installed"
    return None


class Ctx:
    """What a test body gets besides the communicator: rank, world, kind and array helpers."""

    def __init__(self, rank, world, kind, uid):
        self.rank, self.world, self.kind, self.uid = rank, world, kind, uid

    def device(self):
        if self.kind == "numpy":
            return -1
        import peerlink

        return self.rank % peerlink.device_count()

    def empty(self, comm, nbytes, dtype="uint8"):
        return comm.empty(nbytes, dtype, kind=None if self.kind == "numpy" else self.kind)

    def random(self, nbytes, seed):
        """Random bytes (never all zeros) as an array of this kind on this rank's device."""
        import numpy as np

        host = np.random.default_rng(seed).integers(1, 256, nbytes, dtype=np.uint8)
        return self.from_numpy(host)

    def from_numpy(self, host):
        if self.kind == "torch":
            import torch

            return torch.from_numpy(host.copy()).to(f"cuda:{self.device()}")
        if self.kind == "cupy":
            import cupy

            with cupy.cuda.Device(self.device()):
                return cupy.asarray(host)
        return host.copy()

    def to_numpy(self, x):
        if self.kind == "torch":
            return x.cpu().numpy()
        if self.kind == "cupy":
            import cupy

            return cupy.asnumpy(x)
        import numpy as np

        return np.asarray(x)

    def expect_random(self, x, seed):
        import numpy as np

        got = self.to_numpy(x).view(np.uint8).reshape(-1)
        want = np.random.default_rng(seed).integers(1, 256, got.size, dtype=np.uint8)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"rank {self.rank}: {bad.size} of {got.size} bytes differ, first at {bad[0]}"


def _entry(fn, rank, world, kind, uid, comm_timeout, make_comm, env, args, conn):
    os.environ.update(env or {})
    ctx = Ctx(rank, world, kind, uid)
    try:
        if kind == "cupy":
            import cupy

            cupy.cuda.Device(ctx.device()).use()
        elif kind == "torch":
            import torch

            torch.cuda.set_device(ctx.device())
        if make_comm:
            import peerlink

            with peerlink.Communicator(uid, rank, world, ctx.device(), timeout=comm_timeout) as comm:
                result = fn(comm, ctx, *args)
        else:
            result = fn(ctx, *args)
        conn.send(("ok", result))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


class sigint_raises:
    """Within it, SIGINT raises KeyboardInterrupt in this process, whatever it inherited: a shell
    runs background commands (`cmd &` without job control) with SIGINT ignored, the ignore survives
    exec into every spawned rank, and Python then installs no handler (a Ctrl-C test started that
    way sees no KeyboardInterrupt; `timeout` hides it, as it catches SIGINT and its child starts
    with the default)."""

    def __enter__(self):
        import signal

        self._old = signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def __exit__(self, *exc):
        import signal

        signal.signal(signal.SIGINT, self._old)
        return False


def unique_id(name: str) -> str:
    """A fresh unique id that starts with the test run's tag ($PEERLINK_TEST_RUN, exported by
    `make test`; "t" by hand), as tests/support/mp.h's unique_test_id: the leak check
    (scripts/check_shm_clean.sh) then covers the segments of Python tests too, and only this run's.
    The tag comes first because SHM names keep only the id's first 32 characters."""
    tag = os.environ.get("PEERLINK_TEST_RUN") or "t"
    return f"{tag}-{name}-{uuid.uuid4().hex[:12]}"


def shm_left(uid: str):
    clean = "".join(c if (c.isalnum() or c == "-") else "-" for c in uid)[:32]
    return sorted(glob.glob(f"/dev/shm/pl_{clean}_*"))


def run_ranks(fn, world=2, kind="numpy", args=(), timeout=60.0, comm_timeout=20.0, make_comm=True,
              env=None, expect_killed=(), allow_leftover_shm=False):
    """Runs fn(comm, ctx, *args) (or fn(ctx, *args) without make_comm) on `world` ranks.

    Returns the list of per-rank return values. Fails with every rank's traceback when one raised,
    and kills everything when `timeout` runs out. Ranks in expect_killed must die by SIGKILL.
    """
    uid = unique_id("py")
    mpc = mp.get_context("spawn")
    pipes, procs = [], []
    for rank in range(world):
        parent, child = mpc.Pipe(duplex=False)
        p = mpc.Process(target=_entry, args=(fn, rank, world, kind, uid, comm_timeout, make_comm,
                                             env, args, child), daemon=True)
        p.start()
        child.close()
        pipes.append(parent)
        procs.append(p)
    results = [None] * world
    deadline = time.monotonic() + timeout
    pending = set(range(world))
    try:
        while pending and time.monotonic() < deadline:
            for r in list(pending):
                if pipes[r].poll(0.02):
                    try:
                        results[r] = pipes[r].recv()
                    except EOFError:
                        results[r] = ("died", None)
                    pending.discard(r)
                elif not procs[r].is_alive() and not pipes[r].poll(0):
                    results[r] = ("died", procs[r].exitcode)
                    pending.discard(r)
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
    finally:
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    left = shm_left(uid)
    for path in left:  # never leave them to the next test, even when this one fails
        os.unlink(path)
    errors = []
    for r in range(world):
        status = results[r][0] if results[r] else "hung"
        if r in expect_killed:
            if procs[r].exitcode != -9:
                errors.append(f"rank {r}: expected death by SIGKILL, exit code {procs[r].exitcode}")
            continue
        if status == "error":
            errors.append(f"rank {r} raised:\n{results[r][1]}")
        elif status != "ok":
            errors.append(f"rank {r}: {status} (exit code {procs[r].exitcode})")
    if hung:
        errors.append(f"ranks {hung} still running after {timeout} s (killed)")
    if left and not allow_leftover_shm:
        errors.append(f"SHM segments left behind: {left}")
    assert not errors, "\n".join(errors)
    return [res[1] if res and res[0] == "ok" else None for res in results]
