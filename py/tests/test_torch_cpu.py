"""peerlink.torch on CPU tensors (the host backend, "cpu:peerlink"), across real processes: every
c10d method against gloo or the exact reference, torch.ops.peerlink (with opcheck), functional
collectives, DTensor, FSDP2, re-initialization, failures, and groups spanning nodes. Skipped where
torch or peerlink's torch extension is missing (CI has no torch)."""
import pytest

pytest.importorskip("torch", reason="torch is not installed")

import torch_checks  # noqa: E402
from torch_job import run_checks, run_failure, run_nodes, run_reinit, torch_available

_reason = torch_available()
pytestmark = pytest.mark.skipif(_reason is not None, reason=str(_reason))

# Inductor's C++ code generation takes minutes on a small CPU: compilation is covered on CUDA
# (test_torch_gpu.py) and traced with aot_eager here (functional_collectives).
CPU_CHECKS = [n for n in torch_checks.CHECKS if n not in torch_checks.CUDA_ONLY and n != "compile_tp_mlp"]


@pytest.fixture(scope="module")
def results():
    return run_checks(CPU_CHECKS, "cpu:peerlink", device="cpu", world=2, timeout=600)


@pytest.fixture(scope="module")
def results_3ranks():
    names = ["allreduce_matrix", "reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "ops"]
    return run_checks(names, "cpu:peerlink", device="cpu", world=3, timeout=600)


@pytest.mark.parametrize("name", CPU_CHECKS)
def test_cpu_two_ranks(results, name):
    failure, _ = results[name]
    assert failure is None, failure


@pytest.mark.parametrize("name", ["allreduce_matrix", "reduce", "all_gather", "reduce_scatter", "all_to_all",
                                  "send_recv", "ops"])
def test_cpu_three_ranks(results_3ranks, name):
    failure, _ = results_3ranks[name]
    assert failure is None, failure


def test_backend_registration():
    import torch.distributed as dist

    import peerlink.torch

    assert "peerlink" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["peerlink"] == ["cuda", "cpu"]
    assert dist.Backend._plugins["PEERLINK"].extended_api
    peerlink.torch.register_backend()  # again: harmless
    assert dist.Backend.backend_list.count("peerlink") == 1


def test_destroy_and_reinit():
    per_rank = run_reinit("cpu:peerlink")
    for sums in per_rank:
        assert sums == [([1.0] * 5, [3.0] * 3), ([3.0] * 5, [3.0] * 3), ([5.0] * 5, [3.0] * 3)], sums


def test_group_on_one_node_is_created():
    assert run_nodes(1) == ["created", "created"]


# Groups spanning simulated nodes: peerlink inside each node, gloo between nodes (CPU tensors).
NODE_CHECKS = ["node_map", "allreduce_matrix", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "coalesced", "all_to_all", "gather_scatter", "send_recv", "objects_and_barrier",
               "async_work_and_future", "non_contiguous_and_empty"]


# PEERLINK_HIER_MIN_BYTES=1: the two-level plans at every size; 0 (the default): whole on gloo.
@pytest.mark.parametrize("world,per_node,hier_min", [(4, 2, "1"), (4, 2, "0"), (3, 2, "1"), (2, 1, "1")],
                         ids=["2x2", "2x2-whole", "2+1", "2x1"])
def test_group_spanning_nodes(world, per_node, hier_min):
    results = run_checks(NODE_CHECKS, "cpu:peerlink", world=world, per_node=per_node, timeout=400,
                         env={"PEERLINK_HIER_MIN_BYTES": hier_min})
    failed = {name: text for name, (text, _) in results.items() if text is not None}
    assert not failed, "\n".join(f"{name}: {text}" for name, text in failed.items())


@pytest.mark.parametrize("case", ["timeout", "killed"])
def test_failure_raises_within_the_timeout(case):
    rank0, _ = run_failure(case, "cpu:peerlink", timeout_ms=3000)
    seconds, text = rank0
    assert seconds < 3.0 + 10.0, (seconds, text)
    assert ("timeout" if case == "timeout" else "peer lost") in text, text
