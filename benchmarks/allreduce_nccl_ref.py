# Same-machine NCCL reference for the allreduce sweep (bf16 sum, 2 ranks): time per call back to
# back on one stream, eager and replayed from a CUDA graph, like bench_allreduce --algo.
#   python3 -m torch.distributed.run --nproc_per_node=2 benchmarks/allreduce_nccl_ref.py
import os
import torch
import torch.distributed as dist

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
s = torch.cuda.Stream()
for nbytes in [8, 1024, 8192, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]:
    x = torch.full((nbytes // 2,), float(rank + 1), dtype=torch.bfloat16, device="cuda")
    iters = 200 if nbytes <= (1 << 20) else 40 if nbytes <= (16 << 20) else 10
    with torch.cuda.stream(s):
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        e0.record(s)
        for _ in range(iters):
            dist.all_reduce(x)
        e1.record(s)
        torch.cuda.synchronize()
        eager = e0.elapsed_time(e1) * 1000 / iters
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(iters):
                dist.all_reduce(x)
        g.replay()
        torch.cuda.synchronize()
        dist.barrier()
        e0.record(s)
        g.replay()
        e1.record(s)
        torch.cuda.synchronize()
        graph = e0.elapsed_time(e1) * 1000 / iters
    if rank == 0:
        print(f"nccl      {nbytes:10d} B  eager {eager:9.2f} us  graph {graph:9.2f} us  busbw(graph) {nbytes / (graph * 1e3):7.1f} GB/s", flush=True)
dist.destroy_process_group()
