"""More checks of peerlink.torch (registered into torch_checks.CHECKS): torch.ops.peerlink with
opcheck, functional collectives, the fused epilogue, DTensor, FSDP2, and CUDA-only ones (streams,
graphs, torch.compile)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from torch_checks import check, close_ulp, exact_reduce, fused_reference, gloo_reduce, on, same, values


@check
def check_ops(c):
    """torch.ops.peerlink against the c10d calls, and torch.library.opcheck on each."""
    ops = torch.ops.peerlink
    name = c.group_name
    w = c.world
    x = on(c, values(1023, torch.bfloat16, c.rank))
    want = gloo_reduce(c, values(1023, torch.bfloat16, c.rank), ReduceOp.SUM)
    same(ops.all_reduce(x, "sum", name), want, "ops.all_reduce")
    same(x, values(1023, torch.bfloat16, c.rank), "ops.all_reduce leaves its input")
    y = ops.all_reduce_(x, "avg", name)
    assert y is x
    same(x, exact_reduce([values(1023, torch.bfloat16, r) for r in range(w)], ReduceOp.AVG, torch.bfloat16), "ops.all_reduce_")
    g = ops.all_gather_into_tensor(on(c, values(15, torch.int32, c.rank).reshape(5, 3)), w, name)
    same(g, torch.cat([values(15, torch.int32, q).reshape(5, 3) for q in range(w)]), "ops.all_gather_into_tensor")
    full = [values(w * 6, torch.float32, r).reshape(w * 2, 3) for r in range(w)]
    rs = ops.reduce_scatter_tensor(on(c, full[c.rank]), "max", w, name)
    same(rs, exact_reduce(full, ReduceOp.MAX, torch.float32).narrow(0, c.rank * 2, 2), "ops.reduce_scatter_tensor")
    in_splits = [q + c.rank + 1 for q in range(w)]
    out_splits = [c.rank + q + 1 for q in range(w)]
    src = on(c, values(sum(in_splits), torch.int8, c.rank))
    a2a = ops.all_to_all_single(src, out_splits, in_splits, name)
    want = torch.cat([values(sum(p + q + 1 for p in range(w)), torch.int8, q).split([p + q + 1 for p in range(w)])[c.rank]
                      for q in range(w)])
    same(a2a, want, "ops.all_to_all_single")
    eq = ops.all_to_all_single(on(c, values(w * 4, torch.float32, c.rank)), [], [], name)
    same(eq, torch.cat([values(w * 4, torch.float32, q).narrow(0, c.rank * 4, 4) for q in range(w)]), "ops.all_to_all_single equal")
    samples = [
        (ops.all_reduce.default, (on(c, values(64, torch.float32, c.rank)), "sum", name)),
        (ops.all_reduce_.default, (on(c, values(64, torch.float32, c.rank)), "max", name)),
        (ops.all_gather_into_tensor.default, (on(c, values(64, torch.bfloat16, c.rank).reshape(8, 8)), w, name)),
        (ops.reduce_scatter_tensor.default, (on(c, values(w * 16, torch.float32, c.rank).reshape(w * 4, 4)), "sum", w, name)),
        (ops.all_to_all_single.default, (on(c, values(w * 8, torch.float32, c.rank)), [8] * w, [8] * w, name)),
    ]
    for op, args in samples:
        torch.library.opcheck(op, args)


@check
def check_functional_collectives(c):
    """torch.distributed._functional_collectives on the peerlink group, eager and traced
    (aot_eager: the fake implementations and the functionalized graph, no code generation)."""
    import torch.distributed._functional_collectives as funcol

    grp = c.pg or dist.group.WORLD
    w = c.world
    x = on(c, values(1023, torch.float32, c.rank))
    same(funcol.all_reduce(x, "sum", grp), gloo_reduce(c, values(1023, torch.float32, c.rank), ReduceOp.SUM), "funcol.all_reduce")
    same(funcol.all_gather_tensor(x, 0, grp), torch.cat([values(1023, torch.float32, q) for q in range(w)]), "funcol.all_gather_tensor")
    full = [values(w * 10, torch.int32, r) for r in range(w)]
    same(funcol.reduce_scatter_tensor(on(c, full[c.rank]), "sum", 0, grp),
         exact_reduce(full, ReduceOp.SUM, torch.int32).narrow(0, c.rank * 10, 10), "funcol.reduce_scatter_tensor")
    a2a = funcol.all_to_all_single(on(c, values(w * 3, torch.float32, c.rank)), None, None, grp)
    same(a2a, torch.cat([values(w * 3, torch.float32, q).narrow(0, c.rank * 3, 3) for q in range(w)]), "funcol.all_to_all_single")

    name = c.group_name

    def with_funcol(t):
        return funcol.all_reduce(t * 2, "sum", grp) + 1

    def with_ops(t):
        return torch.ops.peerlink.all_reduce(t * 2, "sum", name) + 1

    for fn in (with_funcol, with_ops):
        compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
        same(compiled(x), fn(x), f"aot_eager {fn.__name__}")


@check
def check_fused(c):
    """torch.ops.peerlink's fused allreduce + residual add + RMSNorm (+ FP8): the in-place, functional
    and FP8 forms against the reference, opcheck on each, and traced by torch.compile."""
    ops = torch.ops.peerlink
    name = c.group_name
    eps = 1e-6
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for tokens, hidden, wb in ((1, 64, 0.0), (7, 1024, 1.0), (128, 512, 0.0)):
            xs = [(values(tokens * hidden, torch.float32, r, salt=1) * 0.125).to(dtype).reshape(tokens, hidden)
                  for r in range(c.world)]
            residual = (values(tokens * hidden, torch.float32, 0, salt=2) * 0.25).to(dtype).reshape(tokens, hidden)
            weight = (values(hidden, torch.float32, 0, salt=3) * 0.0625 + (0.0 if wb else 1.0)).to(dtype)
            want_norm, want_res = fused_reference(xs, residual, weight, eps, wb)
            what = f"{dtype} {tokens}x{hidden} weight_bias={wb}"
            a, r = on(c, xs[c.rank]), on(c, residual)
            ops.fused_allreduce_add_rms_norm(a, r, on(c, weight), eps, name, wb)
            same(r, want_res, f"fused in place residual {what}")
            close_ulp(a, want_norm, f"fused in place norm {what}")
            x = on(c, xs[c.rank])
            n2, r2 = ops.fused_allreduce_add_rms_norm_functional(x, on(c, residual), on(c, weight), eps, name, wb)
            same(x, xs[c.rank], f"fused functional leaves its input {what}")
            same(r2, want_res, f"fused functional residual {what}")
            same(n2, a.cpu(), f"fused functional norm = in place norm {what}")
            norms = [None] * c.world
            dist.all_gather_object(norms, n2.cpu(), group=c.ref)
            for q in range(c.world):
                same(norms[q], n2.cpu(), f"fused norm bitwise equal on rank {q} {what}")
            q8 = on(c, torch.zeros(tokens, hidden, dtype=torch.float8_e4m3fn))
            r3 = on(c, residual)
            scale = on(c, torch.tensor([0.5]))
            ops.fused_allreduce_add_rms_norm_fp8(q8, on(c, xs[c.rank]), r3, on(c, weight), scale, eps, name, wb)
            same(r3, want_res, f"fused fp8 residual {what}")
            same(q8, (n2.cpu().float() / 0.5).to(torch.float8_e4m3fn), f"fused fp8 quantized norm {what}")
    t, h = 4, 64
    x = on(c, values(t * h, torch.bfloat16, c.rank).reshape(t, h) * 0.125)
    res = on(c, values(t * h, torch.bfloat16, 0, salt=2).reshape(t, h))
    w = on(c, torch.ones(h, dtype=torch.bfloat16))
    samples = [
        (ops.fused_allreduce_add_rms_norm.default, (x.clone(), res.clone(), w, eps, name, 0.0)),
        (ops.fused_allreduce_add_rms_norm_functional.default, (x, res, w, eps, name, 1.0)),
        # out as uint8 (the op takes either): opcheck's schema test does arithmetic that fp8 lacks on CPU
        (ops.fused_allreduce_add_rms_norm_fp8.default, (on(c, torch.zeros(t, h, dtype=torch.uint8)), x,
                                                        res.clone(), w, on(c, torch.tensor([2.0])), eps, name, 0.0)),
    ]
    for op, args in samples:
        torch.library.opcheck(op, args)

    def layer(inp, resid):  # vLLM's in-place shape inside a compiled function
        inp = inp * 2
        ops.fused_allreduce_add_rms_norm(inp, resid, w, eps, name, 0.0)
        return inp + 1, resid

    want = layer(x.clone(), res.clone())
    got = torch.compile(layer, backend="aot_eager", fullgraph=True)(x.clone(), res.clone())
    same(got[0], want[0].cpu(), "compiled fused norm")
    same(got[1], want[1].cpu(), "compiled fused residual")

# ---- checks that need the default group to be peerlink (DTensor and FSDP2 use the default group)


@check
def check_dtensor(c):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(c.device.type, (c.world,))
    w = c.world
    full = values(w * 4 * 6, torch.float32, 0).reshape(w * 4, 6)
    d = distribute_tensor(on(c, full), mesh, [Shard(0)])
    same(d.to_local(), full.narrow(0, c.rank * 4, 4), "distribute_tensor Shard(0)")
    same(d.redistribute(mesh, [Replicate()]).to_local(), full, "Shard(0) -> Replicate")
    same(d.redistribute(mesh, [Shard(1)]).to_local(), full.tensor_split(w, dim=1)[c.rank].contiguous(), "Shard(0) -> Shard(1)")
    p = DTensor.from_local(on(c, values(24, torch.float32, c.rank).reshape(4, 6)), mesh, [Partial()])
    want = exact_reduce([values(24, torch.float32, r).reshape(4, 6) for r in range(w)], ReduceOp.SUM, torch.float32)
    same(p.redistribute(mesh, [Replicate()]).to_local(), want, "Partial -> Replicate")
    same(d.full_tensor(), full, "full_tensor")


def _mlp(device, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).to(device)


@check
def check_fsdp2(c):
    """fully_shard on an MLP, 3 SGD steps, against the same model trained in this process on every
    rank's batch (FSDP2 averages the gradients over ranks)."""
    import copy

    from torch.distributed.fsdp import fully_shard

    model = _mlp(c.device)
    ref = copy.deepcopy(model)
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for step in range(3):
        xs = [values(4 * 16, torch.float32, r, salt=step).reshape(4, 16) * 0.25 for r in range(c.world)]
        model(on(c, xs[c.rank])).square().sum().backward()
        opt.step()
        opt.zero_grad()
        (sum(ref(on(c, x)).square().sum() for x in xs) / c.world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        got = p.full_tensor().detach().cpu()
        want = q.detach().cpu()
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), f"fsdp2 {name}: max diff {(got - want).abs().max().item()}"


# ---- CUDA only


@check
def check_stream_semantics(c):
    """A synchronous call runs on the current stream, an asynchronous one on the internal stream
    after it; wait() makes the current stream wait without blocking the host; the future's value
    is the result. The current stream is a side stream busy with torch.cuda._sleep, so a call that
    did not order itself after it would read the input before it is written."""
    n = 1 << 20
    want = gloo_reduce(c, values(n, torch.float32, c.rank), ReduceOp.SUM)
    src = on(c, values(n, torch.float32, c.rank))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s: the host gets far ahead of the device
        y = src * 1                      # written after the sleep
        work = dist.all_reduce(y, group=c.pg, async_op=True)
        busy_after_call = not side.query()
        assert not work.is_completed()
        work.wait()                      # the side stream now waits for the call; the host does not
        busy_after_wait = not side.query()
        fut = work.get_future()
        z = y * 1                        # after wait(): sees the result
        s = src * 1
        dist.all_reduce(s, group=c.pg)   # synchronous: on the side stream, no host wait either
        busy_after_sync = not side.query()
    torch.cuda.synchronize()
    assert busy_after_call and busy_after_wait and busy_after_sync, (busy_after_call, busy_after_wait, busy_after_sync)
    same(y, want, "async all_reduce after a sleeping producer")
    same(z, want, "a kernel after wait()")
    same(s, want, "sync all_reduce on a side stream")
    same(fut.wait()[0], want, "future value")
    assert work.is_completed()


@check
def check_cuda_graph(c):
    """Sync and async c10d calls and torch.ops.peerlink captured in one CUDA graph, replayed with new
    inputs."""
    name, w, n = c.group_name, c.world, 4096
    static_in = on(c, torch.zeros(n))
    resid = on(c, values(n, torch.float32, 0, salt=7).reshape(8, 512))
    weight = on(c, torch.ones(512))

    def body():
        a = static_in * 2
        dist.all_reduce(a, group=c.pg)
        b = static_in + 1
        dist.all_reduce(b, op=ReduceOp.MAX, group=c.pg, async_op=True).wait()
        g = torch.zeros(w * 128, device=c.device)  # no host-to-device copy inside the capture
        dist.all_gather_into_tensor(g, static_in[:128], group=c.pg, async_op=True).wait()
        o1 = torch.ops.peerlink.all_reduce(static_in * 3, "sum", name)
        o2 = torch.ops.peerlink.reduce_scatter_tensor(static_in, "sum", w, name)
        fn, fr = torch.ops.peerlink.fused_allreduce_add_rms_norm_functional(static_in.view(8, 512), resid, weight,
                                                                            1e-6, name, 0.0)
        return a, b, g, o1, o2, fn, fr

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (first calls set up)
        for _ in range(2):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = body()
    for replay in range(3):
        xs = [values(n, torch.float32, r, salt=replay) for r in range(w)]
        static_in.copy_(on(c, xs[c.rank]))
        graph.replay()
        a, b, g, o1, o2, fn, fr = (t.cpu() for t in outs)
        want_norm, want_res = fused_reference([x.view(8, 512) for x in xs], resid.cpu(), weight.cpu(), 1e-6, 0.0)
        same(fr, want_res, f"graph fused residual replay {replay}")
        close_ulp(fn, want_norm, f"graph fused norm replay {replay}")
        same(a, exact_reduce([x * 2 for x in xs], ReduceOp.SUM, torch.float32), f"graph sync all_reduce replay {replay}")
        same(b, exact_reduce([x + 1 for x in xs], ReduceOp.MAX, torch.float32), f"graph async all_reduce replay {replay}")
        same(g, torch.cat([x[:128] for x in xs]), f"graph all_gather replay {replay}")
        same(o1, exact_reduce([x * 3 for x in xs], ReduceOp.SUM, torch.float32), f"graph ops.all_reduce replay {replay}")
        same(o2, exact_reduce(xs, ReduceOp.SUM, torch.float32).narrow(0, c.rank * (n // w), n // w),
             f"graph ops.reduce_scatter_tensor replay {replay}")


@check
def check_compile_tp_mlp(c):
    """A sequence-parallel MLP (all-gather of the token shards, column- and row-parallel linears,
    reduce-scatter back) compiled with fullgraph=True, default and reduce-overhead, equal to eager;
    once with functional collectives on the peerlink group, once with torch.ops.peerlink."""
    import torch.distributed._functional_collectives as funcol

    grp = c.pg or dist.group.WORLD
    name, w = c.group_name, c.world
    torch.manual_seed(0)
    w1 = torch.randn(64 * w, 32) * 0.1   # the full weights, equal on every rank
    w2 = torch.randn(32, 64 * w) * 0.1
    w1s = on(c, w1.chunk(w, 0)[c.rank])  # column parallel: this rank's output features
    w2s = on(c, w2.chunk(w, 1)[c.rank])  # row parallel: this rank's input features

    def mlp_funcol(x):
        full = funcol.all_gather_tensor(x, 0, grp)
        h = torch.relu(full @ w1s.t())
        return funcol.reduce_scatter_tensor(h @ w2s.t(), "sum", 0, grp)

    def mlp_ops(x):
        full = torch.ops.peerlink.all_gather_into_tensor(x, w, name)
        h = torch.relu(full @ w1s.t())
        y = torch.ops.peerlink.all_reduce(h @ w2s.t(), "sum", name)
        return y.chunk(w, 0)[c.rank] + 0

    for fn in (mlp_funcol, mlp_ops):
        for mode in (None, "reduce-overhead"):
            compiled = torch.compile(fn, fullgraph=True, mode=mode)
            for step in range(3):
                torch.manual_seed(100 + step * 10 + c.rank)
                x = on(c, torch.randn(8, 32))
                want = fn(x)
                got = compiled(x).clone()
                assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), \
                    f"{fn.__name__} mode={mode} step {step}: max diff {(got - want).abs().max().item()}"
        torch._dynamo.reset()
