"""GPU-only behaviour with torch: stream ordering of sends, caching-allocator tensors as receive
buffers, torch.device arguments. Skipped without torch, a GPU or a CUDA/HIP build."""
import pytest

from plmp import kind_available, run_ranks

pytestmark = pytest.mark.skipif(kind_available("torch") is not None,
                                reason=f"torch GPU: {kind_available('torch')}")

N = 8 << 20  # large enough that an unsynchronized copy would overtake the fill


def _stream_ordering(comm, ctx):
    import torch

    peer = 1 - ctx.rank
    dev = torch.device("cuda", ctx.device())
    # A plain caching-allocator tensor as the receive buffer (not comm.empty).
    recv = torch.zeros(N, dtype=torch.uint8, device=dev)
    comm.notify_ipc_tensor(peer, 1, recv)
    comm.wait_ipc_buffer(peer, 1)
    side = torch.cuda.Stream(device=dev)
    for round_, how in enumerate(("current stream", "stream= argument")):
        value = 10 + round_ * 10 + ctx.rank
        src = torch.empty(N, dtype=torch.uint8, device=dev)
        req = comm.irecv(peer, 1, N)
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time before the fill
            src.fill_(value)
            if how == "current stream":
                comm.send_direct(peer, src, 1)  # must wait for `side`, the current stream
        if how == "stream= argument":
            comm.send_direct(peer, src, 1, stream=side)
        req.wait()
        want = 10 + round_ * 10 + peer
        bad = int((recv != want).sum())
        assert bad == 0, f"{how}: {bad} bytes not yet written by the producer stream"
        comm.barrier()
    return True


def test_sends_wait_for_the_producer_stream():
    run_ranks(_stream_ordering, kind="torch")


def _torch_device_arg(ctx):
    import torch

    import peerlink

    with peerlink.Communicator(ctx.uid, ctx.rank, ctx.world, torch.device("cuda", ctx.device()),
                               timeout=20) as comm:
        assert comm.device == ctx.device()
        buf = comm.empty((4, 256), torch.bfloat16)
        assert buf.dtype == torch.bfloat16 and buf.device.index == ctx.device() and buf.shape == (4, 256)
        comm.barrier()
    return True


def test_torch_device_argument_and_bf16_empty():
    run_ranks(_torch_device_arg, kind="torch", make_comm=False)
