"""Checks of the c10d backend "peerlink", run inside every rank of a job (torch_job.py).

Each check computes every rank's inputs locally (deterministic functions of the rank), runs the
call on the peerlink group on the job's device and compares, bit for bit, with a reference: the
same call on a gloo group over CPU copies where gloo has the dtype and op, else the value computed
from all ranks' inputs. Inputs are small integers in every dtype, so sums, means of two ranks and
products are exact whatever the order of the reduction.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

CHECKS = {}
CUDA_ONLY = ("stream_semantics", "cuda_graph")
# Need the default group to be peerlink (DTensor and FSDP2 build their meshes on it).
DEFAULT_GROUP = ("dtensor", "fsdp2")
SIZES = (1, 7, 1023, 65541)
MAIN_DTYPES = (torch.float32, torch.bfloat16, torch.int32)
OPS = (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT)


class Ctx:
    def __init__(self, rank, world, device, pg, ref):
        self.rank, self.world, self.device = rank, world, device
        self.pg = pg      # the peerlink group (None: the default group, whose backend is peerlink)
        self.ref = ref    # a gloo group of the same ranks, for references on CPU copies

    @property
    def group_name(self):
        return (self.pg or dist.group.WORLD).group_name


def check(fn):
    CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


def values(n, dtype, rank, salt=0):
    """Rank `rank`'s input: small integers in -3..5 (0..8 unsigned, alternating bools)."""
    v = (torch.arange(n, dtype=torch.int64) * 3 + rank * 5 + salt) % 9
    if dtype == torch.bool:
        return v % 2 == 0
    if dtype.is_floating_point or dtype.is_complex or dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        v = v - 3
    return v.to(dtype)


def same(got, want, what):
    got, want = got.detach().cpu(), want.detach().cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}"
    if want.dtype.is_floating_point and want.dtype.itemsize == 1:  # fp8: compare bits
        got, want = got.view(torch.uint8), want.view(torch.uint8)
    ok = torch.equal(got, want)
    if not ok:
        diff = (got != want).reshape(-1).nonzero()
        i = int(diff[0]) if diff.numel() else -1
        raise AssertionError(f"{what}: {diff.numel()} of {want.numel()} elements differ, first at {i}: "
                             f"got {got.reshape(-1)[i].item()}, want {want.reshape(-1)[i].item()}")


def exact_reduce(xs, op, dtype):
    """The reduction of the ranks' inputs computed exactly (int64 / float64), then cast to dtype as
    peerlink documents it (integers wrap modulo the type, the mean truncates toward zero)."""
    wide = torch.float64 if (dtype.is_floating_point or dtype.is_complex) else torch.int64
    if dtype.is_complex:
        wide = torch.complex128
    ys = [x.to(wide) for x in xs]
    acc = ys[0].clone()
    for y in ys[1:]:
        if op in (ReduceOp.SUM, ReduceOp.AVG):
            acc = acc + y
        elif op == ReduceOp.PRODUCT:
            acc = acc * y
        elif op == ReduceOp.MAX:
            acc = torch.maximum(acc, y)
        elif op == ReduceOp.MIN:
            acc = torch.minimum(acc, y)
    if op == ReduceOp.AVG:  # integers: toward zero; floats: the sum times 1/n in f32 (f64 for f64), as peerlink
        if wide == torch.int64:
            acc = torch.div(acc, len(xs), rounding_mode="trunc")
        elif dtype in (torch.float64, torch.complex128):
            acc = acc * (1.0 / len(xs))
        else:
            acc = acc.to(torch.complex64 if dtype.is_complex else torch.float32) * (1.0 / len(xs))
    if dtype == torch.bool:
        return acc != 0
    if wide == torch.int64 and dtype != torch.int64:  # wrap like the type's arithmetic
        bits = dtype.itemsize * 8
        acc = acc & ((1 << bits) - 1)
        if dtype.is_signed:
            acc = torch.where(acc >= (1 << (bits - 1)), acc - (1 << bits), acc)
    return acc.to(dtype)


def gloo_reduce(c, x, op):
    """gloo's allreduce of CPU copies (gloo has no AVG: the sum divided as peerlink divides)."""
    y = x.detach().cpu().clone()
    dist.all_reduce(y, op=ReduceOp.SUM if op == ReduceOp.AVG else op, group=c.ref)
    if op == ReduceOp.AVG:
        if y.dtype.is_floating_point:
            y = (y.float() * (1.0 / c.world)).to(y.dtype)
        else:
            y = torch.div(y, c.world, rounding_mode="trunc")
    return y


def on(c, x):
    """A copy of x on the job's device (never x itself: calls write their tensors)."""
    return x.to(c.device, copy=True)


@check
def check_allreduce_matrix(c):
    for dtype in MAIN_DTYPES:
        for op in OPS:
            for n in SIZES:
                for async_op in (False, True):
                    x = on(c, values(n, dtype, c.rank))
                    want = gloo_reduce(c, values(n, dtype, c.rank), op)
                    w = dist.all_reduce(x, op=op, group=c.pg, async_op=async_op)
                    if async_op:
                        w.wait()
                    same(x, want, f"all_reduce {dtype} {op} n={n} async={async_op}")


@check
def check_allreduce_other_dtypes(c):
    cases = [(torch.float16, OPS), (torch.float64, OPS), (torch.int64, OPS),
             (torch.int8, OPS), (torch.uint8, OPS), (torch.int16, OPS),
             (torch.bool, (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT)),
             (torch.complex64, (ReduceOp.SUM, ReduceOp.AVG)),
             (torch.float8_e4m3fn, (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN))]
    for dtype, ops in cases:
        for op in ops:
            for n in (1, 7, 1023):
                x = on(c, values(n, dtype, c.rank))
                dist.all_reduce(x, op=op, group=c.pg)
                want = exact_reduce([values(n, dtype, r) for r in range(c.world)], op, dtype)
                if dtype == torch.bool:  # sum / max are "or", product / min "and"
                    xs = [values(n, dtype, r) for r in range(c.world)]
                    want = torch.stack(xs).any(0) if op in (ReduceOp.SUM, ReduceOp.MAX) else torch.stack(xs).all(0)
                same(x, want, f"all_reduce {dtype} {op} n={n}")
    # premultiplied sum (FSDP2's gradient division)
    x = on(c, values(1023, torch.float32, c.rank))
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5), group=c.pg)
    same(x, exact_reduce([values(1023, torch.float32, r) * 0.5 for r in range(c.world)], ReduceOp.SUM,
                         torch.float32), "all_reduce premul_sum")


@check
def check_reduce_op_errors(c):
    import pytest

    with pytest.raises(NotImplementedError, match="BAND"):
        dist.all_reduce(on(c, values(7, torch.int32, c.rank)), op=ReduceOp.BAND, group=c.pg)
    with pytest.raises(TypeError, match="AVG"):
        dist.all_reduce(on(c, values(7, torch.bool, c.rank)), op=ReduceOp.AVG, group=c.pg)
    with pytest.raises(TypeError, match="PREMUL_SUM"):
        dist.all_reduce(on(c, values(7, torch.int32, c.rank)), op=dist._make_nccl_premul_sum(2.0), group=c.pg)
    # the group still works after refused calls (nothing was enqueued)
    x = on(c, values(7, torch.float32, c.rank))
    dist.all_reduce(x, group=c.pg)
    same(x, gloo_reduce(c, values(7, torch.float32, c.rank), ReduceOp.SUM), "all_reduce after errors")


@check
def check_broadcast(c):
    for dtype in MAIN_DTYPES + (torch.int8, torch.bool, torch.float8_e4m3fn, torch.complex64):
        for n in SIZES:
            for root in range(c.world):
                x = on(c, values(n, dtype, c.rank))
                dist.broadcast(x, src=root, group=c.pg)
                same(x, values(n, dtype, root), f"broadcast {dtype} n={n} root={root}")


@check
def check_reduce(c):
    for dtype in MAIN_DTYPES + (torch.int8,):
        for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.AVG):
            for root in range(c.world):
                n = 1023
                x = on(c, values(n, dtype, c.rank))
                dist.reduce(x, dst=root, op=op, group=c.pg)
                want = exact_reduce([values(n, dtype, r) for r in range(c.world)], op, dtype)
                same(x, want if c.rank == root else values(n, dtype, c.rank), f"reduce {dtype} {op} root={root}")


@check
def check_all_gather(c):
    for dtype in MAIN_DTYPES + (torch.int8, torch.float8_e4m3fn):
        for n in SIZES:
            outs = [on(c, torch.zeros(n, dtype=torch.int64).to(dtype)) for _ in range(c.world)]
            dist.all_gather(outs, on(c, values(n, dtype, c.rank)), group=c.pg)
            for q in range(c.world):
                same(outs[q], values(n, dtype, q), f"all_gather {dtype} n={n} from {q}")
    # each rank's part of its own size
    outs = [on(c, torch.zeros(q + 3, dtype=torch.int16)) for q in range(c.world)]
    dist.all_gather(outs, on(c, values(c.rank + 3, torch.int16, c.rank)), group=c.pg)
    for q in range(c.world):
        same(outs[q], values(q + 3, torch.int16, q), f"all_gather uneven from {q}")


@check
def check_all_gather_into_tensor(c):
    for dtype in MAIN_DTYPES + (torch.int8,):
        for n in SIZES:
            out = on(c, torch.zeros(c.world * n, dtype=torch.int64).to(dtype))
            dist.all_gather_into_tensor(out, on(c, values(n, dtype, c.rank)), group=c.pg)
            want = torch.cat([values(n, dtype, q) for q in range(c.world)])
            same(out, want, f"all_gather_into_tensor {dtype} n={n}")
            # in place: the input is this rank's chunk of the output (FSDP2's form)
            out = on(c, torch.zeros(c.world * n, dtype=torch.int64).to(dtype))
            chunk = out.narrow(0, c.rank * n, n)
            chunk.copy_(on(c, values(n, dtype, c.rank)))
            dist.all_gather_into_tensor(out, chunk, group=c.pg)
            same(out, want, f"all_gather_into_tensor in place {dtype} n={n}")
    out = on(c, torch.zeros(c.world * 3, 5))  # 2-D, stacked along dim 0
    dist.all_gather_into_tensor(out, on(c, values(15, torch.float32, c.rank).reshape(3, 5)), group=c.pg)
    same(out, torch.cat([values(15, torch.float32, q).reshape(3, 5) for q in range(c.world)]), "all_gather 2-D")


@check
def check_reduce_scatter(c):
    for dtype in MAIN_DTYPES:
        for op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX):
            for n in (1, 7, 1023, 65541):
                full = [values(c.world * n, dtype, r) for r in range(c.world)]
                want = exact_reduce(full, op, dtype).narrow(0, c.rank * n, n)
                out = on(c, torch.zeros(n, dtype=torch.int64).to(dtype))
                dist.reduce_scatter_tensor(out, on(c, full[c.rank]), op=op, group=c.pg)
                same(out, want, f"reduce_scatter_tensor {dtype} {op} n={n}")
                inp = on(c, full[c.rank])
                out = inp.narrow(0, c.rank * n, n)  # in place
                dist.reduce_scatter_tensor(out, inp, op=op, group=c.pg)
                same(out, want, f"reduce_scatter_tensor in place {dtype} {op} n={n}")
                outl = on(c, torch.zeros(n, dtype=torch.int64).to(dtype))
                dist.reduce_scatter(outl, [on(c, x) for x in full[c.rank].split(n)], op=op, group=c.pg)
                same(outl, want, f"reduce_scatter list {dtype} {op} n={n}")
    # each rank's part of its own size
    ins = [on(c, values(q + 2, torch.float32, c.rank, salt=q)) for q in range(c.world)]
    out = on(c, torch.zeros(c.rank + 2))
    dist.reduce_scatter(out, ins, group=c.pg)
    same(out, exact_reduce([values(c.rank + 2, torch.float32, r, salt=c.rank) for r in range(c.world)],
                           ReduceOp.SUM, torch.float32), "reduce_scatter uneven")
    # premultiplied sum, int8 through i32
    full = [values(c.world * 7, torch.float32, r) for r in range(c.world)]
    out = on(c, torch.zeros(7))
    dist.reduce_scatter_tensor(out, on(c, full[c.rank]), op=dist._make_nccl_premul_sum(0.25), group=c.pg)
    same(out, exact_reduce([f * 0.25 for f in full], ReduceOp.SUM, torch.float32).narrow(0, c.rank * 7, 7),
         "reduce_scatter premul_sum")


@check
def check_coalesced(c):
    from torch.distributed.distributed_c10d import _coalescing_manager

    for async_ops in (False, True):
        xs = [on(c, values(n, torch.float32, c.rank, salt=n)) for n in (7, 1023)]
        with _coalescing_manager(group=c.pg, device=c.device, async_ops=async_ops) as cm:
            for x in xs:
                dist.all_reduce(x, group=c.pg)
        if async_ops:
            cm.wait()
        for x, n in zip(xs, (7, 1023)):
            same(x, gloo_reduce(c, values(n, torch.float32, c.rank, salt=n), ReduceOp.SUM), f"coalesced all_reduce n={n}")
        outs = [on(c, torch.zeros(c.world * n, dtype=torch.bfloat16)) for n in (5, 64)]
        with _coalescing_manager(group=c.pg, device=c.device, async_ops=async_ops) as cm:
            for o, n in zip(outs, (5, 64)):
                dist.all_gather_into_tensor(o, on(c, values(n, torch.bfloat16, c.rank)), group=c.pg)
        if async_ops:
            cm.wait()
        for o, n in zip(outs, (5, 64)):
            same(o, torch.cat([values(n, torch.bfloat16, q) for q in range(c.world)]), f"coalesced all_gather n={n}")
        outs = [on(c, torch.zeros(n, dtype=torch.int32)) for n in (3, 100)]
        with _coalescing_manager(group=c.pg, device=c.device, async_ops=async_ops) as cm:
            for o, n in zip(outs, (3, 100)):
                dist.reduce_scatter_tensor(o, on(c, values(c.world * n, torch.int32, c.rank)), group=c.pg)
        if async_ops:
            cm.wait()
        for o, n in zip(outs, (3, 100)):
            want = exact_reduce([values(c.world * n, torch.int32, r) for r in range(c.world)], ReduceOp.SUM, torch.int32)
            same(o, want.narrow(0, c.rank * n, n), f"coalesced reduce_scatter n={n}")


@check
def check_all_to_all(c):
    w = c.world
    for dtype in MAIN_DTYPES + (torch.int8,):
        for k in (1, 7, 1023):
            out = on(c, torch.zeros(w * k, dtype=torch.int64).to(dtype))
            dist.all_to_all_single(out, on(c, values(w * k, dtype, c.rank)), group=c.pg)
            want = torch.cat([values(w * k, dtype, q).narrow(0, c.rank * k, k) for q in range(w)])
            same(out, want, f"all_to_all_single {dtype} k={k}")
    # uneven: rank r sends q + r + 1 rows of 3 to rank q
    for dtype in (torch.float32, torch.int8, torch.bfloat16):
        def rows_from(r):
            return values(3 * sum(q + r + 1 for q in range(w)), dtype, r).reshape(-1, 3)
        in_splits = [q + c.rank + 1 for q in range(w)]
        out_splits = [c.rank + q + 1 for q in range(w)]
        out = on(c, torch.zeros(sum(out_splits), 3, dtype=torch.int64).to(dtype))
        dist.all_to_all_single(out, on(c, rows_from(c.rank)), out_splits, in_splits, group=c.pg)
        want = torch.cat([rows_from(q).split([p + q + 1 for p in range(w)])[c.rank] for q in range(w)])
        same(out, want, f"all_to_all_single uneven {dtype}")
    # list form, each pair its own size
    ins = [on(c, values(q + 2 * c.rank + 1, torch.int32, c.rank, salt=q)) for q in range(w)]
    outs = [on(c, torch.zeros(c.rank + 2 * q + 1, dtype=torch.int32)) for q in range(w)]
    dist.all_to_all(outs, ins, group=c.pg)
    for q in range(w):
        same(outs[q], values(c.rank + 2 * q + 1, torch.int32, q, salt=c.rank), f"all_to_all list from {q}")


@check
def check_gather_scatter(c):
    for root in range(c.world):
        x = on(c, values(1023, torch.bfloat16, c.rank))
        outs = [on(c, torch.zeros(1023, dtype=torch.bfloat16)) for _ in range(c.world)] if c.rank == root else None
        dist.gather(x, gather_list=outs, dst=root, group=c.pg)
        if c.rank == root:
            for q in range(c.world):
                same(outs[q], values(1023, torch.bfloat16, q), f"gather root={root} from {q}")
        out = on(c, torch.zeros(7, dtype=torch.int8))
        ins = [on(c, values(7, torch.int8, q, salt=root)) for q in range(c.world)] if c.rank == root else None
        dist.scatter(out, scatter_list=ins, src=root, group=c.pg)
        same(out, values(7, torch.int8, c.rank, salt=root), f"scatter root={root}")


@check
def check_send_recv(c):
    w, r = c.world, c.rank
    nxt, prv = (r + 1) % w, (r - 1) % w
    for dtype, n in ((torch.int8, 7), (torch.float32, 65541), (torch.bfloat16, 1)):
        # blocking, in a ring order that cannot deadlock: even ranks send first
        got = on(c, torch.zeros(n, dtype=torch.int64).to(dtype))
        if r % 2 == 0:
            dist.send(on(c, values(n, dtype, r)), dst=nxt, group=c.pg)
            dist.recv(got, src=prv, group=c.pg)
        else:
            dist.recv(got, src=prv, group=c.pg)
            dist.send(on(c, values(n, dtype, r)), dst=nxt, group=c.pg)
        same(got, values(n, dtype, prv), f"send/recv {dtype}")
        # batched both ways around the ring
        a, b = on(c, torch.zeros(n, dtype=torch.int64).to(dtype)), on(c, torch.zeros(n, dtype=torch.int64).to(dtype))
        ops = [dist.P2POp(dist.isend, on(c, values(n, dtype, r, salt=1)), nxt, group=c.pg),
               dist.P2POp(dist.isend, on(c, values(n, dtype, r, salt=2)), prv, group=c.pg),
               dist.P2POp(dist.irecv, a, prv, group=c.pg),
               dist.P2POp(dist.irecv, b, nxt, group=c.pg)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        same(a, values(n, dtype, prv, salt=1), f"batch_isend_irecv {dtype} from prev")
        same(b, values(n, dtype, nxt, salt=2), f"batch_isend_irecv {dtype} from next")
    # isend / irecv with their own waits
    got = on(c, torch.zeros(1023))
    if r == 0:
        dist.isend(on(c, values(1023, torch.float32, 0)), dst=1, group=c.pg).wait()
    elif r == 1:
        dist.irecv(got, src=0, group=c.pg).wait()
        same(got, values(1023, torch.float32, 0), "isend/irecv")


@check
def check_node_map(c):
    """The group's node map is the one its ranks' host identities say (PEERLINK_HOSTID on simulated
    nodes): nodes in the order of their first rank."""
    import peerlink.torch as pt

    backend = (c.pg or dist.group.WORLD)._get_backend(c.device)
    hosts = [None] * c.world
    dist.all_gather_object(hosts, pt.host_id(), group=c.ref)
    want = list(dict.fromkeys(hosts))
    assert list(backend.node_hosts) == want, (list(backend.node_hosts), want)
    assert list(backend.node_of_rank) == [want.index(h) for h in hosts], list(backend.node_of_rank)


@check
def check_objects_and_barrier(c):
    objs = [None] * c.world
    dist.all_gather_object(objs, {"rank": c.rank, "s": "x" * (c.rank + 1)}, group=c.pg)
    assert objs == [{"rank": q, "s": "x" * (q + 1)} for q in range(c.world)], objs
    lst = [f"from {c.rank}", c.rank] if c.rank == 1 else [None, None]
    dist.broadcast_object_list(lst, src=1, group=c.pg)
    assert lst == ["from 1", 1], lst
    dist.barrier(group=c.pg)


@check
def check_async_work_and_future(c):
    x = on(c, values(65541, torch.float32, c.rank))
    work = dist.all_reduce(x, group=c.pg, async_op=True)
    fut = work.get_future()
    value = fut.wait()
    assert isinstance(value, list) and len(value) == 1, value
    same(value[0], gloo_reduce(c, values(65541, torch.float32, c.rank), ReduceOp.SUM), "future's value")
    work.wait()
    same(x, gloo_reduce(c, values(65541, torch.float32, c.rank), ReduceOp.SUM), "async all_reduce")
    if c.device.type == "cuda":
        torch.cuda.synchronize()
    assert work.is_completed()
    y = on(c, values(7, torch.int32, c.rank))
    w2 = dist.all_reduce(y, group=c.pg, async_op=True)
    out = w2.get_future().then(lambda f: f.value()[0] * 2).wait()
    same(out, gloo_reduce(c, values(7, torch.int32, c.rank), ReduceOp.SUM) * 2, "future.then")


@check
def check_non_contiguous_and_empty(c):
    base = on(c, values(12, torch.float32, c.rank).reshape(3, 4))
    x = base.t()  # not contiguous
    dist.all_reduce(x, group=c.pg)
    same(x, gloo_reduce(c, values(12, torch.float32, c.rank).reshape(3, 4).t(), ReduceOp.SUM), "non-contiguous all_reduce")
    y = on(c, values(12, torch.int32, c.rank).reshape(3, 4)).t()
    dist.broadcast(y, src=1, group=c.pg)
    same(y, values(12, torch.int32, 1).reshape(3, 4).t(), "non-contiguous broadcast")
    e = on(c, torch.zeros(0))
    dist.all_reduce(e, group=c.pg)
    out = on(c, torch.zeros(0))
    dist.all_gather_into_tensor(out, on(c, torch.zeros(0)), group=c.pg)


def fused_reference(xs, residual, weight, eps, weight_bias):
    """peerlink/fused.h's semantics: f32 sum in rank order, one rounding per output, the norm over
    the rounded residual."""
    dtype = residual.dtype
    s = xs[0].float()
    for x in xs[1:]:
        s = s + x.float()
    res_out = (s + residual.float()).to(dtype)
    r = res_out.float()
    inv = torch.rsqrt(r.square().mean(-1, keepdim=True) + eps)
    return (r * inv * (weight_bias + weight.float())).to(dtype), res_out


def close_ulp(got, want, what):
    """Within one unit in the last place of bf16 / f16 (the norm's documented bound); f32 within a
    few dozen (rsqrt differs by a few ulps between the reference's CPU and the kernels)."""
    rtol = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -18}[want.dtype]
    g, w = got.detach().cpu().float(), want.float()
    bad = ((g - w).abs() > rtol * w.abs() + 1e-6).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} elements off by more than an ulp, first {bad[0].tolist()}: " \
                             f"{g[tuple(bad[0])].item()} vs {w[tuple(bad[0])].item()}"


# The checks of torch.ops.peerlink, functional collectives, compilation, graphs, DTensor and FSDP2.
import torch_checks_more  # noqa: E402,F401  (registers them after the ones above)
