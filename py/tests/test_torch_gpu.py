"""peerlink.torch on CUDA: two ranks sharing cuda:0 (the one-GPU stand-in; the real NCCL refuses two
ranks on one GPU, so references are gloo on CPU copies or exact values). Skipped without CUDA.

Job A: the NCCL default group (never used) and a peerlink group from new_group(backend="peerlink"):
every c10d method and dtype, streams, CUDA graphs, torch.ops.peerlink with opcheck, functional
collectives, torch.compile. Job B: init_process_group("cuda:peerlink,cpu:gloo"): DTensor, FSDP2 and
torch.compile on the default group. Then destroy / re-init, and failures raising within the timeout.
scripts/gpu_check.sh STEPS=torch runs this file.
"""
import pytest

pytest.importorskip("torch", reason="torch is not installed")

import torch_checks  # noqa: E402
from torch_job import cuda_available, run_checks, run_failure, run_reinit

_reason = cuda_available()
pytestmark = pytest.mark.skipif(_reason is not None, reason=str(_reason))

DEVICE = "cuda:0"
# torch.compile runs in job B only (four compilations per job cost about a minute).
SUBGROUP_CHECKS = [n for n in torch_checks.CHECKS if n not in torch_checks.DEFAULT_GROUP and n != "compile_tp_mlp"]
DEFAULT_CHECKS = list(torch_checks.DEFAULT_GROUP) + ["compile_tp_mlp", "broadcast", "objects_and_barrier"]


@pytest.fixture(scope="module")
def subgroup_results():
    return run_checks(SUBGROUP_CHECKS, "cuda:nccl,cpu:gloo", device=DEVICE, subgroup=True, timeout=240)


@pytest.fixture(scope="module")
def default_results():
    return run_checks(DEFAULT_CHECKS, "cuda:peerlink,cpu:gloo", device=DEVICE, timeout=240)


def _report(results, name):
    failure, seconds = results[name]
    print(f"{name}: {seconds} s")
    assert failure is None, failure


@pytest.mark.parametrize("name", SUBGROUP_CHECKS)
def test_gpu_new_group(subgroup_results, name):
    _report(subgroup_results, name)


@pytest.mark.parametrize("name", DEFAULT_CHECKS)
def test_gpu_default_group(default_results, name):
    _report(default_results, name)


def test_gpu_destroy_and_reinit():
    for sums in run_reinit("cuda:peerlink,cpu:gloo", device=DEVICE):
        assert sums == [([1.0] * 5, [3.0] * 3), ([3.0] * 5, [3.0] * 3), ([5.0] * 5, [3.0] * 3)], sums


@pytest.mark.parametrize("case", ["timeout", "killed"])
def test_gpu_failure_raises_within_the_timeout(case):
    rank0, _ = run_failure(case, "cuda:peerlink,cpu:gloo", device=DEVICE, timeout_ms=3000)
    seconds, text = rank0
    assert seconds < 3.0 + 10.0, (seconds, text)
    assert "timeout" in text or "peer lost" in text, text



# A default group spanning two simulated nodes of two ranks on cuda:0 (PEERLINK_HOSTID per node,
# NCCL_HOSTID per rank): peerlink inside each node, ProcessGroupNCCL between them over loopback; the
# two-level plans at every size.
NODE_CHECKS = ["node_map", "allreduce_matrix", "all_gather_into_tensor", "reduce_scatter", "broadcast", "all_to_all",
               "send_recv", "async_work_and_future"]


def test_gpu_group_spanning_nodes():
    results = run_checks(NODE_CHECKS, "cuda:peerlink,cpu:gloo", device=DEVICE, world=4, per_node=2, timeout=300,
                         env={"PEERLINK_HIER_MIN_BYTES": "1", "NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"})
    failed = {name: text for name, (text, _) in results.items() if text is not None}
    assert not failed, "\n".join(f"{name}: {text}" for name, text in failed.items())
