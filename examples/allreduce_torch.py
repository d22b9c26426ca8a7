"""In-place allreduce with peerlink, checked against torch.distributed (NCCL) on the same data.

    torchrun --nproc-per-node 2 examples/allreduce_torch.py       # GPUs: peerlink vs NCCL, timed
    python -m peerlink.launch -n 2 examples/allreduce_torch.py    # host backend: numpy, checked

Values are small integers stored as floats, so every summation order gives the exact same result
and the check can be bit-exact. On GPUs comm.allreduce is enqueued on the current torch stream
(like dist.all_reduce) and does not block the host.
"""
import argparse
import os
import time

import numpy as np

import peerlink

SIZES = [1024, 65536, 1 << 20, 16 << 20]  # elements


def host_main(args):
    comm = peerlink.Communicator.from_env()
    for n in SIZES[:3]:
        x = comm.empty(n, "float32")  # any host array works; comm.empty avoids a staging copy
        every = [np.random.default_rng(r * 7919 + n).integers(-100, 100, n).astype(np.float32)
                 for r in range(comm.world_size)]
        x[:] = every[comm.rank]
        t0 = time.perf_counter()
        comm.allreduce(x, op="sum")
        took = time.perf_counter() - t0
        if not np.array_equal(x, np.sum(every, axis=0)):
            raise SystemExit(f"rank {comm.rank}: allreduce of {n} floats is wrong")
        if comm.rank == 0:
            print(f"{n * 4:>10} B  peerlink {took * 1e6:9.1f} us  verified", flush=True)
    comm.close()


def gpu_main(args):
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    comm = peerlink.Communicator.from_torch(device=local)
    rank, world = comm.rank, comm.world_size
    if rank == 0:
        print(f"{'bytes':>10} {'dtype':>9} | {'peerlink us':>11} | {'NCCL us':>9} | check", flush=True)
    for dtype in (torch.float32, torch.bfloat16):
        for n in SIZES:
            gen = torch.Generator().manual_seed(rank * 7919 + n)
            base = torch.randint(-100, 100, (n,), generator=gen).to(dtype).cuda()
            x, y = base.clone(), base.clone()
            comm.allreduce(x)
            dist.all_reduce(y)
            torch.cuda.synchronize()
            if not torch.equal(x, y):
                bad = int((x != y).sum())
                raise SystemExit(f"rank {rank}: {n} x {dtype}: {bad} elements differ from NCCL")
            times = {}
            for name, fn in (("peerlink", lambda: comm.allreduce(x)), ("nccl", lambda: dist.all_reduce(y))):
                for _ in range(5):
                    fn()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(args.iters):
                    fn()
                end.record()
                torch.cuda.synchronize()
                times[name] = start.elapsed_time(end) * 1000 / args.iters
            if rank == 0:
                print(f"{n * base.element_size():>10} {str(dtype)[6:]:>9} | {times['peerlink']:11.1f} | "
                      f"{times['nccl']:9.1f} | equal to NCCL", flush=True)
    comm.close()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    try:
        host_main(args) if "PEERLINK_RANK" in os.environ else gpu_main(args)
    except peerlink.UnsupportedError as e:
        raise SystemExit(f"allreduce is not available in this build: {e}")


if __name__ == "__main__":
    main()
