"""torch.distributed on the NCCL backend through peerlink's libnccl.so.2.

Run on 2 GPUs with the shim preloaded (it does not build anything):
    LD_PRELOAD=$PWD/build/lib/libnccl.so.2 PEERLINK_DEBUG=INFO \
        torchrun --nproc-per-node 2 tests/nccl/torch_nccl_check.py
Checks all_reduce / all_gather_into_tensor / reduce_scatter_tensor (sum, and ReduceOp.AVG for the
two reductions) / broadcast / send+recv / all_to_all_single, eager and captured in torch.cuda.graph (replayed with new inputs), every value
compared with the expected one. Prints one line per op and mode: PASS / FAIL, and which libnccl
files the process loaded (the shim, and the real NCCL when something was forwarded to it; the
shim's own path lines come on stderr with PEERLINK_DEBUG=INFO). Exit status 1 on any FAIL.
"""
import os
import sys
import traceback

import torch
import torch.distributed as dist


def loaded_nccl():
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "libnccl" in p:
                libs.add(p)
    return sorted(libs)


def values(rank, n, dtype, dev, seed):
    # Small integers: exact in every dtype, different per rank, element and seed, never all zero.
    i = torch.arange(n, device=dev, dtype=torch.int64)
    return ((i * 7 + rank * 3 + seed) % 11 + 1).to(dtype)


def make_ops(rank, world, dev):
    n = 4096
    ops = {}

    def all_reduce(seed, bufs):
        x = bufs["x"]
        x.copy_(values(rank, n, x.dtype, dev, seed))
        return lambda: dist.all_reduce(x), lambda: (
            x, sum(values(r, n, x.dtype, dev, seed) for r in range(world)))

    def all_gather(seed, bufs):
        x, out = bufs["x"], bufs["out"]
        x.copy_(values(rank, n, x.dtype, dev, seed))
        return lambda: dist.all_gather_into_tensor(out, x), lambda: (
            out, torch.cat([values(r, n, x.dtype, dev, seed) for r in range(world)]))

    def reduce_scatter(seed, bufs):
        big, x = bufs["out"], bufs["x"]
        big.copy_(values(rank, n * world, big.dtype, dev, seed))
        full = sum(values(r, n * world, big.dtype, dev, seed) for r in range(world))
        return lambda: dist.reduce_scatter_tensor(x, big), lambda: (x, full[rank * n:(rank + 1) * n])

    def mean(seed, count):  # ReduceOp.AVG's result: the sum over ranks / world (exact for 2 ranks)
        return sum(values(r, count, torch.float64, dev, seed) for r in range(world)) / world

    def all_reduce_avg(seed, bufs):
        x = bufs["x"]
        x.copy_(values(rank, n, x.dtype, dev, seed))
        want = mean(seed, n).to(x.dtype)
        return lambda: dist.all_reduce(x, op=dist.ReduceOp.AVG), lambda: (x, want)

    def reduce_scatter_avg(seed, bufs):
        big, x = bufs["out"], bufs["x"]
        big.copy_(values(rank, n * world, big.dtype, dev, seed))
        want = mean(seed, n * world)[rank * n:(rank + 1) * n].to(x.dtype)
        return lambda: dist.reduce_scatter_tensor(x, big, op=dist.ReduceOp.AVG), lambda: (x, want)

    def broadcast(seed, bufs):
        x = bufs["x"]
        x.copy_(values(rank, n, x.dtype, dev, seed))
        root = 1 % world  # rank 1, or rank 0 of a one-rank world
        return lambda: dist.broadcast(x, src=root), lambda: (x, values(root, n, x.dtype, dev, seed))

    def send_recv(seed, bufs):
        x, y = bufs["x"], bufs["y"]
        x.copy_(values(rank, n, x.dtype, dev, seed))
        peer = (rank + 1) % world
        src = (rank - 1) % world

        def run():
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, y, src)])
            for r in reqs:
                r.wait()
        return run, lambda: (y, values(src, n, x.dtype, dev, seed))

    def all_to_all(seed, bufs):
        big, out = bufs["out"], bufs["out2"]
        big.copy_(values(rank, n * world, big.dtype, dev, seed))
        want = torch.cat([values(r, n * world, big.dtype, dev, seed)[rank * n:(rank + 1) * n] for r in range(world)])
        return lambda: dist.all_to_all_single(out, big), lambda: (out, want)

    ops["all_reduce"] = all_reduce
    ops["all_gather_into_tensor"] = all_gather
    ops["reduce_scatter_tensor"] = reduce_scatter
    ops["all_reduce avg"] = all_reduce_avg
    ops["reduce_scatter_tensor avg"] = reduce_scatter_avg
    ops["broadcast"] = broadcast
    ops["send_recv"] = send_recv
    ops["all_to_all_single"] = all_to_all
    return ops, n


def check(name, mode, got, want, rank):
    ok = torch.equal(got, want)
    if not ok:
        bad = (got != want).nonzero()
        first = bad[0].item() if bad.numel() else -1
        print(f"rank {rank}: {name} {mode}: FAIL ({bad.numel()} wrong, first at {first}: "
              f"{got.flatten()[first].item()} != {want.flatten()[first].item()})", flush=True)
    return ok


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    # Ranks beyond the GPU count share GPUs: the real NCCL refuses that, peerlink's library does not,
    # so a one-GPU machine still runs the check through the shim.
    local = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    if rank == 0:
        print(f"torch {torch.__version__}, NCCL version as torch sees it: {torch.cuda.nccl.version()}", flush=True)
    ops, n = make_ops(rank, world, dev)
    failed = []
    for dtype in (torch.float32, torch.bfloat16):
        for name, make in ops.items():
            bufs = {"x": torch.zeros(n, dtype=dtype, device=dev), "y": torch.zeros(n, dtype=dtype, device=dev),
                    "out": torch.zeros(n * world, dtype=dtype, device=dev),
                    "out2": torch.zeros(n * world, dtype=dtype, device=dev)}
            tag = f"{name} {str(dtype).replace('torch.', '')}"
            # Eager.
            try:
                run, expect = make(1, bufs)
                run()
                torch.cuda.synchronize()
                ok = check(tag, "eager", *expect(), rank)
            except Exception:
                traceback.print_exc()
                ok = False
            print(f"rank {rank}: {tag} eager: {'PASS' if ok else 'FAIL'}", flush=True)
            if not ok:
                failed.append(tag + " eager")
            # Captured: warm up on a side stream (as torch's docs ask), capture, then replay twice
            # with new inputs written into the same buffers; every replay checked.
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    run, _ = make(2, bufs)
                    run()
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                run, _ = make(3, bufs)
                with torch.cuda.graph(g):
                    run()
                ok = True
                for seed in (4, 5):
                    _, expect = make(seed, bufs)  # rewrites the inputs in place
                    torch.cuda.synchronize()
                    dist.barrier()
                    g.replay()
                    torch.cuda.synchronize()
                    ok = check(tag, f"graph replay seed {seed}", *expect(), rank) and ok
                del g
            except Exception:
                traceback.print_exc()
                ok = False
            print(f"rank {rank}: {tag} graph: {'PASS' if ok else 'FAIL'}", flush=True)
            if not ok:
                failed.append(tag + " graph")
    print(f"rank {rank}: libnccl loaded: {loaded_nccl()}", flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: {'ALL PASS' if not failed else 'FAILED: ' + ', '.join(failed)}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
