"""Runs peerlink.torch checks inside the ranks of a torch.distributed job (plmp.run_ranks, spawned
processes): each rank initializes torch.distributed with the job's backend string, runs the named
checks of torch_checks.py in order and reports, per check, whether it passed on that rank.

A check that fails on one rank can leave the others inside a collective: every wait is bounded
(PEERLINK_TIMEOUT_MS, set short here), and the ranks agree on each check's outcome through a gloo
group before the next one starts.
"""
from __future__ import annotations

import datetime
import os
import tempfile
import time
import traceback

from plmp import run_ranks

# Milliseconds: the bound of every peerlink wait inside the checks (a failed check must not hang a job).
CHECK_TIMEOUT_MS = "30000"


def torch_available() -> str | None:
    """None when peerlink.torch can run here, else why not."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    try:
        import peerlink.torch  # noqa: F401
    except ImportError as e:
        return f"peerlink.torch does not import: {e}"
    return None


def cuda_available() -> str | None:
    reason = torch_available()
    if reason:
        return reason
    import torch

    import peerlink

    if not torch.cuda.is_available():
        return "no CUDA device"
    if peerlink.runtime() != "cuda":
        return f"peerlink was built for {peerlink.runtime()}, not CUDA"
    return None


def _job(ctx, spec):
    os.environ.update(spec.get("env", {}))
    if spec.get("per_node"):  # simulated nodes: peerlink groups ranks by PEERLINK_HOSTID; a distinct
        # NCCL_HOSTID per rank lets the real NCCL (between nodes) take several ranks on one GPU
        os.environ["PEERLINK_HOSTID"] = f"node-{ctx.rank // spec['per_node']}"
        os.environ["NCCL_HOSTID"] = f"rank{ctx.rank}-{os.getpid()}"
    os.environ.setdefault("PEERLINK_TIMEOUT_MS", CHECK_TIMEOUT_MS)
    import torch
    import torch.distributed as dist

    import peerlink.torch  # noqa: F401
    import torch_checks

    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(spec["backend"], init_method="file://" + spec["init_file"], rank=ctx.rank,
                            world_size=ctx.world)
    ref = dist.new_group(backend="gloo")
    pg = dist.new_group(backend="peerlink") if spec.get("subgroup") else None
    c = torch_checks.Ctx(ctx.rank, ctx.world, device, pg, ref)
    results = {}
    for name in spec["checks"]:
        t0 = time.monotonic()
        try:
            torch_checks.CHECKS[name](c)
            outcome = None
        except BaseException:  # noqa: BLE001  (reported per check)
            outcome = traceback.format_exc()
        seconds = time.monotonic() - t0
        if device.type == "cuda":
            try:
                torch.cuda.synchronize()
            except BaseException:  # noqa: BLE001
                outcome = outcome or traceback.format_exc()
        everyone = [None] * ctx.world
        dist.all_gather_object(everyone, outcome is None, group=ref)
        if outcome is None and not all(everyone):
            outcome = f"passed here, failed on ranks {[r for r, ok in enumerate(everyone) if not ok]}"
        results[name] = (outcome, round(seconds, 2))
    dist.destroy_process_group()
    return results


def run_checks(checks, backend, device="cpu", world=2, subgroup=False, env=None, timeout=300.0, per_node=None):
    """{check: (None or the failure text of the first failing rank, seconds on rank 0)}. per_node: ranks
    claim nodes of that many consecutive ranks (PEERLINK_HOSTID), so peerlink groups span nodes."""
    with tempfile.TemporaryDirectory() as d:
        spec = {"checks": list(checks), "backend": backend, "device": device, "subgroup": subgroup,
                "init_file": os.path.join(d, "init"), "env": dict(env or {}), "per_node": per_node}
        per_rank = run_ranks(_job, world=world, args=(spec,), make_comm=False, timeout=timeout)
    merged = {}
    for name in checks:
        failures = [(r, res[name][0]) for r, res in enumerate(per_rank) if res[name][0] is not None]
        text = None
        if failures:
            r, tb = failures[0]
            text = f"rank {r}:\n{tb}"
        merged[name] = (text, per_rank[0][name][1])
    return merged


def _init(ctx, spec, init_file, store=None):
    import torch.distributed as dist

    if store is not None:
        dist.init_process_group(spec["backend"], store=store, rank=ctx.rank, world_size=ctx.world)
    else:
        dist.init_process_group(spec["backend"], init_method="file://" + init_file, rank=ctx.rank, world_size=ctx.world)


def _reinit_job(ctx, spec):
    """destroy_process_group and a new init, twice: on a fresh store, then on the same store again
    (whose keys of the earlier groups are still there, as in torchrun's agent store)."""
    os.environ.setdefault("PEERLINK_TIMEOUT_MS", CHECK_TIMEOUT_MS)
    import torch
    import torch.distributed as dist

    import peerlink.torch  # noqa: F401

    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    store = dist.FileStore(spec["init_file"] + ".store", ctx.world)
    sums = []
    for round_ in range(3):
        if round_ == 0:
            _init(ctx, spec, spec["init_file"])
        else:
            _init(ctx, spec, None, store=dist.PrefixStore("job", store))
        sub = dist.new_group(backend="peerlink")
        x = torch.full((5,), float(ctx.rank + round_), device=device)
        dist.all_reduce(x)
        y = torch.full((3,), 1.0 + ctx.rank, device=device)
        dist.all_reduce(y, group=sub)
        sums.append((x.cpu().tolist(), y.cpu().tolist()))
        dist.destroy_process_group()
    return sums


def run_reinit(backend, device="cpu", world=2, timeout=240.0):
    with tempfile.TemporaryDirectory() as d:
        spec = {"backend": backend, "device": device, "init_file": os.path.join(d, "init")}
        return run_ranks(_reinit_job, world=world, args=(spec,), make_comm=False, timeout=timeout)


def _failure_job(ctx, spec):
    """Rank 1 stops taking part (it sleeps past the timeout, or it is killed); rank 0's next call
    or wait() must raise DistBackendError within about the timeout. Returns rank 0's seconds."""
    os.environ["PEERLINK_TIMEOUT_MS"] = str(spec["timeout_ms"])
    import signal

    import torch
    import torch.distributed as dist

    import peerlink.torch  # noqa: F401

    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    _init(ctx, spec, spec["init_file"])
    x = torch.ones(1000, device=device)
    dist.all_reduce(x)  # both communicators exist and work
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier(device_ids=[device.index]) if device.type == "cuda" else dist.barrier()
    store = dist.distributed_c10d._get_default_store()
    if ctx.rank == 1:
        if spec["case"] == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        store.wait(["failure_seen"], datetime.timedelta(seconds=60))  # idle until rank 0 saw the error
        dist.destroy_process_group()
        return None
    t0 = time.monotonic()
    try:
        work = dist.all_reduce(x, async_op=True)
        work.wait()
        if device.type == "cuda":
            torch.cuda.synchronize()  # the kernel ends when its bounded wait runs out
        dist.all_reduce(x)
    except dist.DistBackendError as e:
        return time.monotonic() - t0, str(e)
    finally:
        store.set("failure_seen", "1")
        dist.destroy_process_group()  # closes the broken communicators (nothing left in /dev/shm)
    raise AssertionError(f"no error {time.monotonic() - t0:.1f} s after rank 1 stopped")


def run_failure(case, backend, device="cpu", timeout_ms=3000):
    with tempfile.TemporaryDirectory() as d:
        spec = {"backend": backend, "device": device, "init_file": os.path.join(d, "init"), "case": case,
                "timeout_ms": timeout_ms}
        killed = (1,) if case == "killed" else ()
        return run_ranks(_failure_job, world=2, args=(spec,), make_comm=False, timeout=120.0, expect_killed=killed,
                         allow_leftover_shm=case == "killed")


def _nodes_job(ctx, spec):
    """Ranks that say they run on different hosts: creating a peerlink group fails on every rank."""
    os.environ["PEERLINK_HOSTID"] = f"node-{ctx.rank % spec['nodes']}"
    import torch.distributed as dist

    import peerlink.torch  # noqa: F401

    dist.init_process_group("cpu:gloo", init_method="file://" + spec["init_file"], rank=ctx.rank, world_size=ctx.world)
    try:
        dist.new_group(backend="peerlink")
        outcome = "created"
    except NotImplementedError as e:
        outcome = str(e)
    dist.destroy_process_group()
    return outcome


def run_nodes(nodes, world=2):
    with tempfile.TemporaryDirectory() as d:
        spec = {"nodes": nodes, "init_file": os.path.join(d, "init")}
        return run_ranks(_nodes_job, world=world, args=(spec,), make_comm=False, timeout=120.0)
