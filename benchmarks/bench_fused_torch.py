"""The fused tensor-parallel epilogue against its torch spelling, two ranks as threads of one
process (on one GPU: the single-GPU stand-in; with two GPUs one each), each side timed as -n calls
inside one CUDA graph per rank:
  fused    comm.allreduce_add_rms_norm(x, residual, weight, eps, norm_out=n, residual_out=r)
  unfused  comm.allreduce(x); r = x + residual; n = torch.nn.functional.rms_norm(r, (hidden,), weight, eps)
Both are verified first: residual_out bitwise against an f32 reference (the unfused one with the
allreduce's rounded sum), the norm within one bf16 ulp of a double-precision norm (torch's within
three: it rounds the normalized value before the weight). Prints the slowest rank's microseconds
per call and unfused / fused.
  CUDA_MODULE_LOADING=EAGER python benchmarks/bench_fused_torch.py [--tokens 1,8,32,128,512]
                                                                     [--hidden 4096,8192] [-n 50] [-w 10]
The unfused side's allreduce is in place, so its input doubles every call: it is timed on the
input scaled by 2^-100, so that -n up to 60 keeps its squares within f32.
"""
import argparse
import os
import threading
import uuid

import torch

import peerlink

EPS = 1e-6


def _inputs(rank, tokens, hidden, dev):
    g = torch.Generator(device=dev).manual_seed(1000 + rank)
    x = (torch.rand(tokens, hidden, device=dev, generator=g) + 0.25) * (torch.randint(0, 2, (tokens, hidden), device=dev, generator=g) * 2 - 1)
    g = torch.Generator(device=dev).manual_seed(7)
    res = (torch.rand(tokens, hidden, device=dev, generator=g) * 2 + 0.5)
    w = torch.rand(hidden, device=dev, generator=g) + 0.05
    return x.bfloat16(), res.bfloat16(), w.bfloat16()


def _ulp(v):
    e = torch.frexp(v.double().abs())[1]
    return torch.ldexp(torch.ones_like(v, dtype=torch.float64), torch.clamp(e - 1, min=-126) - 7)


def _graph(fn, iters, stream):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream, capture_error_mode="thread_local"):
        for _ in range(iters):
            fn()
    return g


def _time(g, stream, barrier):
    g.replay()  # upload, untimed
    stream.synchronize()
    barrier.wait()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record(stream)
    g.replay()
    t1.record(stream)
    t1.synchronize()
    return t0.elapsed_time(t1) * 1e3


def rank_main(rank, world, uid, args, barrier, results):
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    stream = torch.cuda.Stream(dev)
    comm = peerlink.Communicator(uid, rank, world, dev.index)
    with torch.cuda.stream(stream):
        for hidden in args.hidden:
            for tokens in args.tokens:
                x, res, w = _inputs(rank, tokens, hidden, dev)
                n, r = torch.empty_like(x), torch.empty_like(x)
                xs = [_inputs(q, tokens, hidden, dev)[0].float() for q in range(world)]
                want_r = sum(xs[1:], xs[0]).add(res.float()).bfloat16()
                ro = want_r.double()
                want_n = ro * torch.rsqrt(ro.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
                # fused: verified, then timed
                comm.allreduce_add_rms_norm(x, res, w, EPS, norm_out=n, residual_out=r)
                stream.synchronize()
                wrong = int((r.view(torch.int16) != want_r.view(torch.int16)).sum())
                wrong += int(((n.double() - want_n).abs() > _ulp(want_n)).sum())
                fused = lambda: comm.allreduce_add_rms_norm(x, res, w, EPS, norm_out=n, residual_out=r)  # noqa: E731
                for _ in range(args.warmup):
                    fused()
                stream.synchronize()
                barrier.wait()
                t_fused = _time(_graph(fused, args.iters, stream), stream, barrier)
                # unfused: verified on a copy of x, then timed on x * 2^-100 (the in-place allreduce
                # doubles it every call: warmup + upload + timed calls stay far from overflow)
                xu = x.clone()

                def unfused():
                    comm.allreduce(xu)
                    ru = xu + res
                    return torch.nn.functional.rms_norm(ru, (hidden,), w, EPS), ru

                nu, ru = unfused()
                stream.synchronize()
                want_ru = sum(xs[1:], xs[0]).bfloat16().float().add(res.float()).bfloat16()
                wrong += int((ru.view(torch.int16) != want_ru.view(torch.int16)).sum())
                rou = want_ru.double()
                want_nu = rou * torch.rsqrt(rou.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
                wrong += int(((nu.double() - want_nu).abs() > 3 * _ulp(want_nu)).sum())  # torch rounds twice
                xu.copy_(x * 2.0 ** -100)
                for _ in range(args.warmup):
                    unfused()
                stream.synchronize()
                barrier.wait()
                t_unfused = _time(_graph(unfused, args.iters, stream), stream, barrier)
                results[rank].append((tokens, hidden, t_fused / args.iters, t_unfused / args.iters, wrong))
                barrier.wait()
    stream.synchronize()
    barrier.wait()
    comm.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", default="1,8,32,128,512")
    p.add_argument("--hidden", default="4096,8192")
    p.add_argument("-n", "--iters", type=int, default=50)
    p.add_argument("-w", "--warmup", type=int, default=10)
    args = p.parse_args()
    if not 1 <= args.iters <= 60 or args.warmup > 20:
        p.error("-n must be 1-60 and -w at most 20 (the unfused input doubles every call)")
    args.tokens = [int(v) for v in args.tokens.split(",")]
    args.hidden = [int(v) for v in args.hidden.split(",")]
    if not hasattr(peerlink.Communicator, "allreduce_add_rms_norm"):
        raise SystemExit("bench_fused_torch: the installed peerlink package has no allreduce_add_rms_norm")
    world = 2
    uid = f"plbench-fut-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    barrier = threading.Barrier(world, timeout=300)
    results = [[] for _ in range(world)]
    errors = []

    def run(rank):
        try:
            rank_main(rank, world, uid, args, barrier, results)
        except BaseException as e:  # noqa: BLE001 - reported below, the other rank is released
            errors.append(f"rank {rank}: {e!r}")
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(1, world)]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("\n".join(errors))
    print(f"# bench_fused_torch nranks={world} type=bfloat16 iters={args.iters} graph=1 torch={torch.__version__} "
          f"gpus={torch.cuda.device_count()}")
    print(f"# {'tokens':>7} {'hidden':>7} {'fused(us)':>10} {'torch(us)':>10} {'ratio':>7} {'#wrong':>7}")
    total = 0
    for row in zip(*results):
        tokens, hidden = row[0][0], row[0][1]
        tf, tu = max(r[2] for r in row), max(r[3] for r in row)
        wrong = sum(r[4] for r in row)
        total += wrong
        print(f"  {tokens:7d} {hidden:7d} {tf:10.2f} {tu:10.2f} {tu / tf:7.2f} {wrong:7d}")
    print(f"# Out of bounds values : {total} {'ERROR' if total else 'OK'}")
    raise SystemExit(2 if total else 0)


if __name__ == "__main__":
    main()
