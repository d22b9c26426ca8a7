"""Caching-allocator tensors under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (VMM memory:
cuMemCreate chunks of 2 MB (small pool) or 20 MB (large pool) mapped back to back) published and
sent with send_direct, in both directions, at many sizes (the large ones span several chunks, some
small ones straddle a 2 MB chunk boundary), republished after free and reallocation. Two
placements: both processes on GPU 0, and one process per GPU (skipped with fewer than 2 GPUs).
Skipped without torch, a GPU or a CUDA/HIP build.

GPU machine: python3 -m pytest py/tests/test_gpu_vmm.py -v -rs -p no:cacheprovider"""
import pytest

from plmp import kind_available, run_ranks

pytestmark = pytest.mark.skipif(kind_available("torch") is not None,
                                reason=f"torch GPU: {kind_available('torch')}")

EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
SIZES = [1, 4095, 1 << 20, (3 << 20) + 5, 20 << 20, (64 << 20) + 17, 200 << 20]
SMALL_CHUNK = 2 << 20  # the small pool's expandable-segment page
PLACEMENTS = ("same_gpu", "per_gpu")


def _device(ctx, placement):
    import peerlink

    return 0 if placement == "same_gpu" else ctx.rank % peerlink.device_count()


def _exchange(comm, ctx, recv, src, n, version, value_of):
    """Both ranks publish `recv` at `version` and send `src` into the peer's; checks the bytes."""
    peer = 1 - ctx.rank
    comm.notify_ipc_tensor(peer, 1, recv, binding_version=version)
    req = comm.irecv(peer, 1, n)
    comm.wait_ipc_buffer(peer, 1, binding_version=version)
    comm.send_direct(peer, src, 1, binding_version=version)
    req.wait()
    want = value_of(peer)
    bad = int((recv != want).sum())
    assert bad == 0, f"version {version}, {n} bytes: {bad} bytes are not {want}"
    comm.barrier()  # the peer is done writing before either side frees or republishes


def _body(ctx, placement, fd_passing):
    import torch

    import peerlink

    dev_index = _device(ctx, placement)
    torch.cuda.set_device(dev_index)
    dev = torch.device("cuda", dev_index)
    version = 0
    with peerlink.Communicator(ctx.uid, ctx.rank, ctx.world, dev_index, timeout=60) as comm:
        # 1. Many sizes, both directions, twice: each publication replaces (releases) the previous
        # tensor, and round 1 runs after round 0's were freed and the cache emptied (their chunks
        # unmapped and released), so its buffers are new memory, often at addresses freed ones had.
        for rnd in range(2):
            for i, n in enumerate(SIZES):
                version += 1
                recv = torch.zeros(n + 3, dtype=torch.uint8, device=dev)[3:]  # not at a chunk start
                value = lambda r: (r * 50 + i + rnd * 7) % 251 + 1  # noqa: E731 (never 0)
                src = torch.full((n,), value(ctx.rank), dtype=torch.uint8, device=dev)
                _exchange(comm, ctx, recv, src, n, version, value)
                del recv, src
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

        # 2. Small-pool tensors packed into 2 MB chunks: with 700 KB blocks every third one straddles
        # a chunk boundary, so the receiver's range is two chunks of one segment.
        n = 700 << 10
        blocks = [torch.zeros(n, dtype=torch.uint8, device=dev) for _ in range(6)]
        straddling = sum(1 for b in blocks
                         if b.data_ptr() // SMALL_CHUNK != (b.data_ptr() + n - 1) // SMALL_CHUNK)
        for k, recv in enumerate(blocks):
            version += 1
            value = lambda r: (r * 3 + k) % 251 + 1  # noqa: E731
            src = torch.full((n,), value(ctx.rank), dtype=torch.uint8, device=dev)
            _exchange(comm, ctx, recv, src, n, version, value)
            del src
        del blocks, recv
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

        # 3. Republish after free and reallocation of the same size: the published tensor is
        # replaced by a placeholder (the communicator drops its reference), freed and the cache
        # emptied; a new tensor of the same size (often at the old address, on new physical chunks)
        # is published and must receive the data; a write through the freed mapping would leave it 0.
        n = (40 << 20) + 11
        first = torch.zeros(n, dtype=torch.uint8, device=dev)
        old_ptr = first.data_ptr()
        version += 1
        src = torch.full((n,), 201 + ctx.rank, dtype=torch.uint8, device=dev)
        _exchange(comm, ctx, first, src, n, version, lambda r: 201 + r)
        version += 1
        comm.notify_ipc_tensor(1 - ctx.rank, 1, torch.zeros(16, dtype=torch.uint8, device=dev),
                               binding_version=version)
        del first
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        again = torch.zeros(n, dtype=torch.uint8, device=dev)
        same_address = again.data_ptr() == old_ptr
        version += 1
        src.fill_(211 + ctx.rank)
        _exchange(comm, ctx, again, src, n, version, lambda r: 211 + r)

        st = comm.stats()
        assert st["exports_fd"] > 0 and st["opens_fd"] > 0, \
            f"expandable-segment tensors did not take the descriptor path: {st}"
        return {"straddling": straddling, "same_address": same_address, "stats": st}


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("fd_passing", ["auto", "socket"])
def test_send_direct_expandable_segments(placement, fd_passing):
    import peerlink

    if placement == "per_gpu" and peerlink.device_count() < 2:
        pytest.skip("one process per GPU needs 2 GPUs")
    env = dict(EXPANDABLE, PEERLINK_FD_PASSING=fd_passing)
    results = run_ranks(_body, kind="torch", args=(placement, fd_passing), env=env, timeout=300.0,
                        make_comm=False)
    for r, res in enumerate(results):
        print(f"rank {r}: {res['straddling']} small blocks straddle a 2 MB chunk, realloc at the same "
              f"address: {res['same_address']}, exports_fd {res['stats']['exports_fd']}, "
              f"opens_fd {res['stats']['opens_fd']}")
