"""Ping-pong between two ranks with peerlink send_direct, payload verified every round.

    torchrun --nproc-per-node 2 examples/pingpong.py            # GPUs 0 and 1, torch tensors
    python -m peerlink.launch -n 2 examples/pingpong.py         # host backend, numpy arrays

Each rank publishes one receive buffer for its peer once (notify_ipc_tensor, version 1); the
sender maps it once (wait_ipc_buffer) and then every message is a single copy into it plus a
completion the receiver waits for (irecv). Prints the round-trip time per size.
"""
import argparse
import os
import time

import numpy as np

import peerlink


def make_comm():
    """torchrun: torch.distributed + from_torch on GPU LOCAL_RANK; peerlink.launch: from_env."""
    if "PEERLINK_RANK" in os.environ:
        return peerlink.Communicator.from_env(), None
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", 0))
    use_gpu = torch.cuda.is_available()
    if use_gpu:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if use_gpu else "gloo")
    return peerlink.Communicator.from_torch(device=local if use_gpu else -1), dist


def fill_random(buf, n, seed):
    """Random non-zero bytes into buf[:n], on whatever device buf lives."""
    host = np.random.default_rng(seed).integers(1, 256, n, dtype=np.uint8)
    if isinstance(buf, np.ndarray):
        buf[:n] = host
    else:  # torch tensor
        import torch

        buf[:n].copy_(torch.from_numpy(host))
    return host


def as_numpy(buf, n):
    return buf[:n].copy() if isinstance(buf, np.ndarray) else buf[:n].cpu().numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--sizes", default="8,4096,1048576,16777216")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    comm, dist = make_comm()
    if comm.world_size != 2:
        raise SystemExit(f"pingpong needs exactly 2 ranks, got {comm.world_size}")
    peer = 1 - comm.rank
    cap = max(sizes)
    recv_buf = comm.empty(cap, "uint8")   # exportable: peers write into it
    send_buf = comm.empty(cap, "uint8")
    comm.notify_ipc_tensor(peer, 0, recv_buf, binding_version=1)
    comm.wait_ipc_buffer(peer, 0, binding_version=1)
    if comm.rank == 0:
        print(f"peerlink {peerlink.__version__}: pingpong rank 0 <-> 1, device {comm.device}, "
              f"path {comm.path_to(peer)}, completion {comm.completion_with(peer)}", flush=True)
    for n in sizes:
        payload = fill_random(send_buf, n, seed=n)
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            if comm.rank == 0:
                comm.send_direct(peer, send_buf, 0, nbytes=n)
                comm.irecv(peer, 0, n).wait()
            else:
                comm.irecv(peer, 0, n).wait()
                comm.send_direct(peer, recv_buf, 0, nbytes=n)  # echo what arrived
        rtt = (time.perf_counter() - t0) / args.iters
        got = as_numpy(recv_buf, n)
        if not np.array_equal(got, payload):
            raise SystemExit(f"rank {comm.rank}: {n}-byte payload corrupted "
                             f"({int(np.count_nonzero(got != payload))} bytes differ)")
        if comm.rank == 0:
            print(f"{n:>10} B  round trip {rtt * 1e6:9.1f} us  one way {rtt * 5e5:9.1f} us  "
                  f"{2 * n / rtt / 1e9:7.2f} GB/s  verified", flush=True)
        comm.barrier()
    comm.close()
    if dist is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
