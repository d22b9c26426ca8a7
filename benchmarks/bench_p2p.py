"""One-way point-to-point sweep: peerlink send_direct vs NCCL send/recv (torch.distributed).

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 benchmarks/bench_p2p.py      # 2 GPUs: both columns
    python -m peerlink.launch -n 2 benchmarks/bench_p2p.py                      # host backend: peerlink

Rank 0 sends `iters` messages of each size back to back into rank 1's buffer; rank 1 times from a
common start (barrier) until the last message has landed (irecv.wait for peerlink; recv + stream
sync for NCCL) and reports time per message and size / time. Every size's payload is random
(seeded by size) and verified on rank 1 after the timed loop, for both libraries.
"""
import argparse
import os
import sys
import time

import numpy as np  # noqa: E402

import peerlink  # noqa: E402

DEFAULT_SIZES = [8, 1 << 10, 1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 26, 1 << 28]


def payload(n: int) -> np.ndarray:
    return np.random.default_rng(n).integers(1, 256, n, dtype=np.uint8)


def iters_for(n: int, base: int) -> int:
    return max(5, min(base, (4 << 30) // max(n, 1)))  # ~4 GB per size at most


class Ops:
    """What differs between the host backend (numpy) and GPUs (torch)."""

    def __init__(self, comm, torch_mod):
        self.comm, self.torch = comm, torch_mod

    def to_device(self, host: np.ndarray, out):
        if self.torch is None:
            out[: host.size] = host
        else:
            out[: host.size].copy_(self.torch.from_numpy(host))

    def to_host(self, buf, n):
        return buf[:n].copy() if self.torch is None else buf[:n].cpu().numpy()

    def sync(self):
        if self.torch is not None:
            self.torch.cuda.synchronize()


def check(ops, buf, n, what):
    got = ops.to_host(buf, n)
    want = payload(n)
    bad = int(np.count_nonzero(got != want))
    if bad:
        raise SystemExit(f"{what}: {bad} of {n} bytes wrong")


def bench_peerlink(comm, ops, recv_buf, send_buf, n, iters):
    ops.to_device(payload(n), send_buf)
    ops.sync()
    if comm.rank == 1:
        ops.to_device(np.zeros(n, np.uint8), recv_buf)  # a stale buffer cannot pass the check
        ops.sync()
    for _ in range(3):  # warm-up (first-use costs: mappings, streams)
        if comm.rank == 0:
            comm.send_direct(1, send_buf, 0, nbytes=n)
        else:
            comm.irecv(0, 0, n).wait()
    comm.barrier()
    t0 = time.perf_counter()
    if comm.rank == 0:
        reqs = [comm.isend_direct(1, send_buf, 0, nbytes=n) for _ in range(iters)]
        for r in reqs:
            r.wait()
    else:
        reqs = [comm.irecv(0, 0, n) for _ in range(iters)]
        for r in reqs:
            r.wait()
    took = (time.perf_counter() - t0) / iters
    if comm.rank == 1:
        check(ops, recv_buf, n, f"peerlink {n} B")
    comm.barrier()
    return took


def bench_nccl(dist, torch, ops, recv_buf, send_buf, n, iters, rank):
    ops.to_device(payload(n), send_buf)
    if rank == 1:
        recv_buf[:n].zero_()
    src, dst = send_buf[:n], recv_buf[:n]
    for _ in range(3):
        dist.send(src, 1) if rank == 0 else dist.recv(dst, 0)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.send(src, 1) if rank == 0 else dist.recv(dst, 0)
    torch.cuda.synchronize()
    took = (time.perf_counter() - t0) / iters
    if rank == 1:
        check(ops, recv_buf, n, f"NCCL {n} B")
    dist.barrier()
    return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="bytes, comma-separated")
    ap.add_argument("--iters", type=int, default=200, help="messages per size (fewer for large sizes)")
    ap.add_argument("--no-nccl", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    dist = torch = None
    if "PEERLINK_RANK" in os.environ:
        comm = peerlink.Communicator.from_env()
    else:
        import torch
        import torch.distributed as dist

        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        comm = peerlink.Communicator.from_torch(device=local)
    if comm.world_size != 2:
        raise SystemExit(f"bench_p2p needs 2 ranks, got {comm.world_size}")
    ops = Ops(comm, torch)
    cap = max(sizes)
    recv_buf, send_buf = comm.empty(cap, "uint8"), comm.empty(cap, "uint8")
    comm.notify_ipc_tensor(1 - comm.rank, 0, recv_buf)
    comm.wait_ipc_buffer(1 - comm.rank, 0)
    use_nccl = dist is not None and not args.no_nccl
    if comm.rank == 1:
        where = "host backend" if comm.device < 0 else f"GPU 0 -> GPU 1 ({comm.path_to(0)})"
        vs = " vs NCCL send/recv" if use_nccl else ""
        print(f"# peerlink {peerlink.__version__} send_direct{vs}, {where}; "
              "time per message, one way, payload verified", flush=True)
        head = f"| {'Size':>10} | {'peerlink ms':>11} | {'GB/s':>7} |"
        print(head + (f" {'NCCL ms':>9} | {'GB/s':>7} |" if use_nccl else ""), flush=True)
        print("|" + "|".join("-" * (len(c) + 0) for c in head.split("|")[1:-1]) + "|" +
              ("-----------|---------|" if use_nccl else ""), flush=True)
    for n in sizes:
        it = iters_for(n, args.iters)
        t_pl = bench_peerlink(comm, ops, recv_buf, send_buf, n, it)
        row = f"| {n:>10} | {t_pl * 1e3:11.4f} | {n / t_pl / 1e9:7.2f} |"
        if use_nccl:
            t_nc = bench_nccl(dist, torch, ops, recv_buf, send_buf, n, it, comm.rank)
            row += f" {t_nc * 1e3:9.4f} | {n / t_nc / 1e9:7.2f} |"
        if comm.rank == 1:
            print(row, flush=True)
    comm.close()
    if dist is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
