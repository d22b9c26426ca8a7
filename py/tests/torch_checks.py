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
    got = got.detach().cpu()
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
    """Within one unit in the last place of the dtype (the norm's documented bound)."""
    rtol = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -21}[want.dtype]
    g, w = got.detach().cpu().float(), want.float()
    bad = ((g - w).abs() > rtol * w.abs() + 1e-6).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} elements off by more than an ulp, first {bad[0].tolist()}: " \
                             f"{g[tuple(bad[0])].item()} vs {w[tuple(bad[0])].item()}"


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
        g = on(c, torch.zeros(w * 128))
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
