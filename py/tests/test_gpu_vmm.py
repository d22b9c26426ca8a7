"""Caching-allocator tensors under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (VMM memory:
cuMemCreate chunks mapped back to back) published and sent with send_direct, in both directions,
at many sizes (the large ones span several chunks), republished after free. Skipped without torch,
a GPU or a CUDA/HIP build."""
import pytest

from plmp import kind_available, run_ranks

pytestmark = pytest.mark.skipif(kind_available("torch") is not None,
                                reason=f"torch GPU: {kind_available('torch')}")

EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
SIZES = [1, 4095, 1 << 20, (3 << 20) + 5, 20 << 20, (64 << 20) + 17, 200 << 20]


def _sizes(comm, ctx, fd_passing):
    import torch

    peer = 1 - ctx.rank
    dev = torch.device("cuda", ctx.device())
    version = 0
    for rnd in range(2):  # round 1: every tensor of round 0 was freed and the cache emptied
        for i, n in enumerate(SIZES):
            version += 1
            # Both ranks receive and send: into and out of expandable-segment tensors.
            recv = torch.zeros(n + 3, dtype=torch.uint8, device=dev)[3:]  # not at a chunk start
            comm.notify_ipc_tensor(peer, 1, recv, binding_version=version)
            src = torch.full((n,), (ctx.rank * 50 + i + rnd * 7) % 251, dtype=torch.uint8, device=dev)
            req = comm.irecv(peer, 1, n)
            comm.wait_ipc_buffer(peer, 1, binding_version=version)
            comm.send_direct(peer, src, 1, binding_version=version)
            req.wait()
            want = (peer * 50 + i + rnd * 7) % 251
            bad = int((recv != want).sum())
            assert bad == 0, f"size {n} round {rnd}: {bad} bytes wrong"
            comm.barrier()
            del recv, src
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # unmaps and releases the segments' chunks
    st = comm.stats()
    assert st["exports_fd"] > 0 and st["opens_fd"] > 0, st
    return st


@pytest.mark.parametrize("fd_passing", ["auto", "socket"])
def test_send_direct_expandable_segments(fd_passing):
    env = dict(EXPANDABLE, PEERLINK_FD_PASSING=fd_passing)
    run_ranks(_sizes, kind="torch", args=(fd_passing,), env=env, timeout=180.0)
