#!/usr/bin/env python3
"""Host time of one eager torch.distributed.all_reduce of a small tensor (8 B by default) on the
c10d backend "peerlink", against the same call on torch's NCCL backend with peerlink's
libnccl.so.2 preloaded, in one run: two ranks sharing one GPU (the real NCCL refuses that).

    python benchmarks/bench_torch_allreduce.py --shim build-cuda/lib/libnccl.so.2 \\
        [--nccl .../nvidia/nccl/lib/libnccl.so.2] [--bytes 8] [--iters 500] [--repeats 7]

Each configuration runs in fresh processes (LD_PRELOAD must be set before torch loads): rank r
times `iters` back-to-back calls without a synchronization (the host's cost per call while the GPU
keeps up), then synchronizes; the best and median of `repeats` such loops are printed as a table.
Exit status 1 when peerlink's median host time is above the preloaded library's (--no-fail: 0).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(args):
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["BENCH_RANK"]), int(os.environ["BENCH_WORLD"])
    torch.cuda.set_device(0)
    if args.backend == "peerlink":
        import peerlink.torch  # noqa: F401
        backend = "cuda:peerlink,cpu:gloo"
    else:
        backend = "cuda:nccl,cpu:gloo"
    dist.init_process_group(backend, init_method="file://" + args.init_file, rank=rank, world_size=world)
    x = torch.ones(max(1, args.bytes // 4), device="cuda")
    for _ in range(200):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    host, total = [], []
    for _ in range(args.repeats):
        dist.barrier(device_ids=[0])
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / args.iters * 1e6)
        total.append((t2 - t0) / args.iters * 1e6)
    assert float(x[0]) > 0
    if rank == 0:
        print("RESULT " + json.dumps({"host_us": host, "total_us": total}), flush=True)
    dist.destroy_process_group()


def run_config(args, backend, env_extra):
    with tempfile.TemporaryDirectory() as d:
        procs = []
        for rank in range(2):
            env = dict(os.environ, BENCH_RANK=str(rank), BENCH_WORLD="2", **env_extra)
            cmd = [sys.executable, __file__, "--worker", "--backend", backend, "--init-file", os.path.join(d, "init"),
                   "--bytes", str(args.bytes), "--iters", str(args.iters), "--repeats", str(args.repeats)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = [p.communicate(timeout=300)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{backend}: a rank failed:\n" + "\n".join(outs))
    line = next(l for l in outs[0].splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shim", help="peerlink's libnccl.so.2 (build-cuda/lib/libnccl.so.2)")
    ap.add_argument("--nccl", default="", help="the real libnccl.so.2 the shim forwards to (PEERLINK_NCCL_LIBRARY)")
    ap.add_argument("--bytes", type=int, default=8)
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-fail", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--init-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not args.shim or not os.path.isfile(args.shim):
        raise SystemExit(f"--shim {args.shim!r}: no such libnccl.so.2 (make BACKEND=cuda lib nccl)")
    configs = [("peerlink backend", "peerlink", {}),
               ("nccl backend + libnccl.so.2 preloaded", "nccl",
                {"LD_PRELOAD": os.path.abspath(args.shim), **({"PEERLINK_NCCL_LIBRARY": args.nccl} if args.nccl else {})})]
    rows = []
    for label, backend, env in configs:
        r = run_config(args, backend, env)
        rows.append((label, min(r["host_us"]), statistics.median(r["host_us"]), statistics.median(r["total_us"])))
    print(f"\n{args.bytes} B fp32 dist.all_reduce, 2 ranks on cuda:0, {args.iters} calls x {args.repeats}, rank 0\n")
    print("| path | host us/call best | host us/call median | with sync us/call median |")
    print("|---|---|---|---|")
    for label, best, med, tot in rows:
        print(f"| {label} | {best:.2f} | {med:.2f} | {tot:.2f} |")
    ratio = rows[0][2] / rows[1][2]
    print(f"\npeerlink / preloaded library, median host time: {ratio:.3f}")
    if ratio > 1.0 and not args.no_fail:
        print("FAIL: the peerlink backend is slower than torch's NCCL backend on the preloaded library")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main() or 0)
