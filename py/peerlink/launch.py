"""Runs n local processes of a script as one peerlink job (host backend, no torch needed).

    python -m peerlink.launch -n 2 examples/pingpong.py [args...]
    python -m peerlink.launch -n 4 --device-per-rank -m mypkg.worker      # device = rank

Each process gets PEERLINK_RANK, PEERLINK_WORLD_SIZE, PEERLINK_UNIQUE_ID (fresh per launch) and,
with --device-per-rank, PEERLINK_DEVICE=rank; Communicator.from_env() reads them. The launcher
exits with the first non-zero exit status (a process killed by signal S counts as 128+S), stops the
other processes when one fails (SIGINT, then SIGKILL after a grace period) and kills all of them
when --timeout runs out (exit status 124). Ctrl-C stops them all.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import List, Optional

GRACE_S = 3.0


def _status(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # Popen reports death by signal S as -S


def _stop(procs: List[subprocess.Popen]) -> None:
    # SIGINT first: Python raises KeyboardInterrupt, `with Communicator(...)` blocks close and the
    # SHM segments get unlinked (a SIGTERM'd Python dies without cleanup). SIGKILL after a grace.
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(nprocs: int, argv: List[str], timeout: float, module: bool = False,
           device_per_rank: bool = False, unique_id: Optional[str] = None) -> int:
    # An id that names this node: every rank runs here, and a copy used elsewhere fails at once.
    from . import _peerlink

    uid = unique_id or _peerlink.make_unique_id()
    cmd = [sys.executable] + (["-m"] if module else []) + argv
    procs: List[subprocess.Popen] = []
    try:
        for rank in range(nprocs):
            env = dict(os.environ, PEERLINK_RANK=str(rank), PEERLINK_WORLD_SIZE=str(nprocs),
                       PEERLINK_UNIQUE_ID=uid)
            if device_per_rank:
                env["PEERLINK_DEVICE"] = str(rank)
            procs.append(subprocess.Popen(cmd, env=env))
        deadline = time.monotonic() + timeout
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                print(f"peerlink.launch: rank {rank} exited with status {_status(code)}; stopping "
                      "the others", file=sys.stderr, flush=True)
                _stop(procs)
                return _status(code)
            if all(c == 0 for c in codes):
                return 0
            if time.monotonic() > deadline:
                print(f"peerlink.launch: timeout after {timeout:g} s; killing all ranks",
                      file=sys.stderr, flush=True)
                _stop(procs)
                return 124
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop(procs)
        return 130


def main(args: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m peerlink.launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--nprocs", type=int, required=True, help="number of ranks")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before every rank is killed")
    ap.add_argument("-m", dest="module", action="store_true", help="run a module (like python -m)")
    ap.add_argument("--device-per-rank", action="store_true", help="set PEERLINK_DEVICE=rank (GPUs)")
    ap.add_argument("--unique-id", default=None, help="job id (default: fresh)")
    ap.add_argument("target", help="script path (or module with -m)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    ns = ap.parse_args(args)
    if ns.nprocs < 1:
        ap.error(f"-n must be >= 1, got {ns.nprocs}")
    return launch(ns.nprocs, [ns.target] + ns.args, ns.timeout, ns.module, ns.device_per_rank,
                  ns.unique_id)


if __name__ == "__main__":
    sys.exit(main())
