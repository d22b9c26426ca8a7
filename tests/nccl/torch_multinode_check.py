"""torch.distributed across simulated nodes on one GPU, through peerlink's libnccl.so.2.

Each rank claims a node before anything loads NCCL: PEERLINK_HOSTID groups `--per-node` ranks into a
node (peerlink inside it), a distinct NCCL_HOSTID per rank lets the real NCCL accept several ranks on
one GPU (it refuses two ranks of one host on one GPU) and carry what crosses nodes. Run with the shim
preloaded and the real NCCL named (scripts/gpu_multinode.sh does):

    LD_PRELOAD=$PWD/build-cuda/lib/libnccl.so.2 PEERLINK_NCCL_LIBRARY=<site-packages>/nvidia/nccl/lib/libnccl.so.2 \\
    NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 PEERLINK_DEBUG=INFO PEERLINK_HIER_MIN_BYTES=1 \\
        torchrun --nproc-per-node 4 tests/nccl/torch_multinode_check.py --per-node 2

Checks on the world group every op of torch_nccl_check.py (all_reduce, all_gather_into_tensor,
reduce_scatter_tensor, their AVG forms, broadcast, send/recv, all_to_all_single; float32 and
bfloat16; eager and captured in torch.cuda.graph, replayed with new inputs), then all_reduce and
all_gather on a new_group of this rank's node (peerlink only: the library says so at INFO). Prints
one PASS / FAIL line per check; exit status 1 on any FAIL.
"""
import argparse
import datetime
import os
import sys
import traceback

parser = argparse.ArgumentParser()
parser.add_argument("--per-node", type=int, required=True, help="ranks per simulated node")
parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated torch dtypes")
args = parser.parse_args()
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
JOB = os.environ.get("TORCHELASTIC_RUN_ID", os.environ.get("MASTER_PORT", "job"))
# Before torch loads NCCL (the real one reads NCCL_HOSTID once, at its first init).
os.environ["PEERLINK_HOSTID"] = f"tnode{RANK // args.per_node}-{JOB}"
os.environ["NCCL_HOSTID"] = f"trank{RANK}-{JOB}"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_nccl_check import check, loaded_nccl, make_ops, values  # noqa: E402


def run_op(name, make, bufs, rank, failed, graph):
    tag = name
    try:
        if not graph:
            run, expect = make(1, bufs)
            run()
            torch.cuda.synchronize()
            ok = check(tag, "eager", *expect(), rank)
        else:
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
                _, expect = make(seed, bufs)
                torch.cuda.synchronize()
                dist.barrier()
                g.replay()
                torch.cuda.synchronize()
                ok = check(tag, f"graph replay seed {seed}", *expect(), rank) and ok
            del g
    except Exception:
        traceback.print_exc()
        ok = False
    mode = "graph" if graph else "eager"
    print(f"rank {rank}: {tag} {mode}: {'PASS' if ok else 'FAIL'}", flush=True)
    if not ok:
        failed.append(f"{tag} {mode}")


def node_group_checks(rank, dev, failed):
    """A new_group of each node's ranks (every rank creates every group, as torch requires); this
    rank's node group runs all_reduce and all_gather."""
    per = args.per_node
    groups = [dist.new_group(list(range(n * per, (n + 1) * per))) for n in range(WORLD // per)]
    g = groups[rank // per]
    members = list(range((rank // per) * per, (rank // per + 1) * per))
    n = 8192
    try:
        x = values(rank, n, torch.float32, dev, 11)
        dist.all_reduce(x, group=g)
        want = sum(values(r, n, torch.float32, dev, 11) for r in members)
        ok = check("node group all_reduce", "eager", x, want, rank)
        out = torch.zeros(n * per, dtype=torch.float32, device=dev)
        dist.all_gather_into_tensor(out, values(rank, n, torch.float32, dev, 12), group=g)
        torch.cuda.synchronize()
        want = torch.cat([values(r, n, torch.float32, dev, 12) for r in members])
        ok = check("node group all_gather", "eager", out, want, rank) and ok
    except Exception:
        traceback.print_exc()
        ok = False
    print(f"rank {rank}: new_group of node {rank // per} ({members}): {'PASS' if ok else 'FAIL'}", flush=True)
    if not ok:
        failed.append("node group")


def main():
    assert WORLD % args.per_node == 0, "WORLD_SIZE must be a multiple of --per-node"
    local = int(os.environ.get("LOCAL_RANK", RANK)) % torch.cuda.device_count()
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=120))
    if RANK == 0:
        print(f"torch {torch.__version__}, {WORLD // args.per_node} nodes x {args.per_node} ranks, "
              f"NCCL as torch sees it: {torch.cuda.nccl.version()}", flush=True)
    ops, n = make_ops(RANK, WORLD, dev)
    failed = []
    for dtype in [getattr(torch, d) for d in args.dtypes.split(",")]:
        for name, make in ops.items():
            bufs = {"x": torch.zeros(n, dtype=dtype, device=dev), "y": torch.zeros(n, dtype=dtype, device=dev),
                    "out": torch.zeros(n * WORLD, dtype=dtype, device=dev),
                    "out2": torch.zeros(n * WORLD, dtype=dtype, device=dev)}
            tag = f"{name} {str(dtype).replace('torch.', '')}"
            run_op(tag, make, bufs, RANK, failed, graph=False)
            run_op(tag, make, bufs, RANK, failed, graph=True)
    node_group_checks(RANK, dev, failed)
    print(f"rank {RANK}: libnccl loaded: {loaded_nccl()}", flush=True)
    dist.destroy_process_group()
    print(f"rank {RANK}: {'ALL PASS' if not failed else 'FAILED: ' + ', '.join(failed)}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
