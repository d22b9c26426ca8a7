"""Packaging (version, stubs), the error hierarchy, the launcher, and Communicator.from_torch."""
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import peerlink
from plmp import run_ranks, shm_left, unique_id

REPO = Path(__file__).resolve().parents[2]


def test_version_stubs_and_typed_marker():
    assert isinstance(peerlink.__version__, str) and peerlink.__version__.count(".") >= 2
    pkg = Path(peerlink.__file__).parent
    assert (pkg / "py.typed").is_file()
    stub = (pkg / "__init__.pyi").read_text()
    for name in ("class Communicator", "def send_direct", "def isend_direct", "def irecv",
                 "def notify_ipc_tensor", "def wait_ipc_buffer", "def allreduce", "class Request",
                 "class PeerLostError"):
        assert name in stub, name
    assert peerlink.runtime() in ("none", "cuda", "hip")


def test_error_hierarchy():
    assert issubclass(peerlink.InvalidArgument, peerlink.Error)
    assert issubclass(peerlink.InvalidArgument, ValueError)
    assert issubclass(peerlink.TimeoutError, peerlink.Error)
    assert issubclass(peerlink.TimeoutError, TimeoutError)
    for cls in (peerlink.PeerLostError, peerlink.UnsupportedError):
        assert issubclass(cls, peerlink.Error) and not issubclass(cls, ValueError)
    with pytest.raises(ValueError, match="world_size|rank"):
        peerlink.Communicator("pytest-bad-rank", 3, 2, -1, timeout=1)
    with pytest.raises(ValueError, match="timeout"):
        peerlink.Communicator("pytest-bad-timeout", 0, 1, -1, timeout=-1)


def _launch(*args, timeout=60):
    cmd = [sys.executable, "-m", "peerlink.launch", *args]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def test_launch_runs_pingpong_example():
    p, _ = _launch("-n", "2", "--timeout", "100", "examples/pingpong.py", "--iters", "20",
                   "--sizes", "8,4096,262144", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "verified" in p.stdout


def test_launch_propagates_failure_and_stops_the_rest(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['PEERLINK_RANK'] == '1': sys.exit(3)\n"
                      "time.sleep(60)\n")
    p, took = _launch("-n", "3", str(script))
    assert p.returncode == 3, p.stderr
    assert took < 20, f"the sleeping ranks were not stopped ({took:.1f} s)"
    assert "rank 1 exited with status 3" in p.stderr


def test_launch_timeout_kills_everything(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(60)\n")
    p, took = _launch("-n", "2", "--timeout", "1", str(script))
    assert p.returncode == 124 and took < 15


def test_launch_timeout_lets_ranks_clean_up(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text("import time, peerlink\n"
                      "with peerlink.Communicator.from_env(timeout=20) as c:\n"
                      "    buf = c.empty(4096, 'uint8')\n"
                      "    c.barrier()\n"
                      "    print('ready', flush=True)\n"
                      "    time.sleep(60)\n")
    uid = unique_id(f"launch{os.getpid()}")
    p, took = _launch("-n", "2", "--timeout", "8", "--unique-id", uid, str(script))
    left = shm_left(uid)
    for path in left:
        os.unlink(path)
    assert p.returncode == 124 and p.stdout.count("ready") == 2, p.stdout + p.stderr
    assert not left, f"stopped ranks left SHM segments: {left}"


def test_launch_env_and_from_env(tmp_path):
    script = tmp_path / "env.py"
    script.write_text(
        "import os, peerlink\n"
        "with peerlink.Communicator.from_env(timeout=20) as c:\n"
        "    c.barrier()\n"
        "    # one write() per line: ranks share the pipe, a short write is atomic\n"
        "    os.write(1, f'rank {c.rank} of {c.world_size} device {c.device}\\n'.encode())\n")
    p, _ = _launch("-n", "4", str(script))
    assert p.returncode == 0, p.stderr
    assert sorted(line for line in p.stdout.splitlines() if line.startswith("rank")) == [
        f"rank {r} of 4 device -1" for r in range(4)]


def _from_torch(ctx, store_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=ctx.rank,
                            world_size=ctx.world)
    try:
        with peerlink.Communicator.from_torch(device=-1, timeout=20) as a, \
                peerlink.Communicator.from_torch(device="cpu", timeout=20) as b:
            assert (a.rank, a.world_size) == (ctx.rank, ctx.world)
            assert a.unique_id != b.unique_id  # a fresh id per call
            a.barrier()
            b.barrier()
            return a.unique_id
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_from_torch_shares_one_id(tmp_path):
    ids = run_ranks(_from_torch, world=2, make_comm=False, args=(str(tmp_path / "store"),))
    assert ids[0] == ids[1] and ids[0].startswith("pl-")  # an id that names its node


class _DictStore:
    """The part of torch's Store API from_torch uses, over a dict (no torch needed)."""

    def __init__(self, preset=None):
        self.d = {}
        for k, v in (preset or {}).items():
            self.set(k, v)

    def set(self, k, v):
        self.d[k] = v.encode() if isinstance(v, str) else v

    def get(self, k):
        return self.d[k]

    def wait(self, keys, timeout):
        missing = [k for k in keys if k not in self.d]
        if missing:
            raise RuntimeError(f"wait timeout: {missing}")


def test_from_torch_refuses_a_group_across_nodes():
    from peerlink._comm import _check_one_node

    node, name, _ = peerlink._peerlink.host_identity()
    key = "peerlink/unique_id/1/0,2,4"
    # Members 1 and 2 of the group published other nodes' identities: the check names every node.
    store = _DictStore({f"{key}/host/1": f"{'1' * 16} rack-b", f"{key}/host/2": f"{node} {name}"})
    with pytest.raises(peerlink.InvalidArgument, match=r"spans 2 nodes .*node 'rack-b': group ranks 1 \(global 2\)"):
        _check_one_node(store, key, 0, [0, 2, 4], timeout=1)
    same = _DictStore({f"{key}/host/1": f"{node} {name}", f"{key}/host/2": f"{node} {name}"})
    _check_one_node(same, key, 0, [0, 2, 4], timeout=1)  # one node: fine
    with pytest.raises(peerlink.TimeoutError, match="did not|not every member"):
        _check_one_node(_DictStore(), key, 0, [0, 2, 4], timeout=1)


def test_unique_id_names_its_node():
    uid = peerlink._peerlink.make_unique_id()
    assert uid.startswith("pl-") and uid != peerlink._peerlink.make_unique_id()
    # A process of another node (PEERLINK_HOSTID) handed this id fails at once, naming both hosts.
    code = ("import time, peerlink\n"
            "t0 = time.monotonic()\n"
            f"try:\n    peerlink.Communicator({uid!r}, 1, 2, -1, timeout=30)\n"
            "except peerlink.InvalidArgument as e:\n"
            "    assert 'elsewhere' in str(e) and time.monotonic() - t0 < 5, e\n    print('refused')\n")
    env = dict(os.environ, PEERLINK_HOSTID="elsewhere")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "refused" in p.stdout, p.stdout + p.stderr
