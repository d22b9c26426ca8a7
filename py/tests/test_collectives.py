"""torch.distributed-style collectives (all_gather_into_tensor, reduce_scatter_tensor, broadcast,
reduce, all_to_all_single, all_reduce) on real processes: numpy on the host backend, torch / CuPy
on GPUs (skipped without). Random data (never zero), exact for integers, float64 reference."""
import numpy as np
import pytest

import peerlink
from plmp import run_ranks

pytestmark = pytest.mark.skipif(not peerlink.has_collectives, reason="library without collectives")


def _rand(seed, n, dtype):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        v = rng.integers(1, 1000, n) * rng.choice([-1, 1], n)
    else:
        v = rng.uniform(0.25, 1.25, n) * rng.choice([-1, 1], n)
    return v.astype(dtype)


def _mean(every, axis=0, integer=False):
    """The average as ncclAvg defines it: the sum over ranks / world; integers toward zero."""
    m = every.sum(axis=axis) / every.shape[axis]
    return np.trunc(m) if integer else m


class _TorchLikeOp:
    """Stands in for torch.distributed.ReduceOp.AVG (an enum member: the op goes by its name)."""
    name = "AVG"


def _sync(ctx):
    if ctx.kind == "torch":
        import torch

        torch.cuda.synchronize()
    elif ctx.kind == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _body(comm, ctx, n, dtype):
    r, w = ctx.rank, ctx.world
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=0, atol=0)
    # all_gather_into_tensor
    out = ctx.from_numpy(np.zeros(n * w, dtype))
    comm.all_gather_into_tensor(out, ctx.from_numpy(_rand(100 + r, n, dtype)))
    _sync(ctx)
    want = np.concatenate([_rand(100 + q, n, dtype) for q in range(w)])
    assert np.array_equal(ctx.to_numpy(out), want), f"rank {r}: all_gather_into_tensor"
    # reduce_scatter_tensor (sum, max, avg)
    integer = np.dtype(dtype).kind == "i"
    for op, f in (("sum", np.sum), ("max", np.max), ("avg", lambda e, axis: _mean(e, axis, integer))):
        out = ctx.from_numpy(np.zeros(n, dtype))
        comm.reduce_scatter_tensor(out, ctx.from_numpy(_rand(200 + r, n * w, dtype)), op=op)
        _sync(ctx)
        every = np.stack([_rand(200 + q, n * w, dtype).astype(np.float64) for q in range(w)])
        np.testing.assert_allclose(ctx.to_numpy(out), f(every, axis=0)[r * n:(r + 1) * n], **tol)
    # broadcast from the last rank
    t = ctx.from_numpy(_rand(300 + r, n, dtype))
    comm.broadcast(t, src=w - 1)
    _sync(ctx)
    assert np.array_equal(ctx.to_numpy(t), _rand(300 + w - 1, n, dtype)), f"rank {r}: broadcast"
    # reduce to rank 0
    t = ctx.from_numpy(_rand(400 + r, n, dtype))
    comm.reduce(t, dst=0, op="sum")
    _sync(ctx)
    if r == 0:
        want = np.sum(np.stack([_rand(400 + q, n, dtype).astype(np.float64) for q in range(w)]), axis=0)
        np.testing.assert_allclose(ctx.to_numpy(t), want, **tol)
    else:
        assert np.array_equal(ctx.to_numpy(t), _rand(400 + r, n, dtype)), f"rank {r}: reduce wrote a non-root"
    # all_to_all_single, equal splits; rows of 3 elements
    inp = _rand(500 + r, w * n * 3, dtype).reshape(w * n, 3)
    out = ctx.from_numpy(np.zeros((w * n, 3), dtype))
    comm.all_to_all_single(out, ctx.from_numpy(inp))
    _sync(ctx)
    want = np.concatenate([_rand(500 + q, w * n * 3, dtype).reshape(w, n * 3)[r] for q in range(w)])
    assert np.array_equal(ctx.to_numpy(out).reshape(-1), want), f"rank {r}: all_to_all_single"
    # ... in place (input and output one tensor)
    io = ctx.from_numpy(inp.copy())
    comm.all_to_all_single(io, io)
    _sync(ctx)
    assert np.array_equal(ctx.to_numpy(io).reshape(-1), want), f"rank {r}: all_to_all_single in place"
    # all_to_all_single with uneven splits: rank q sends (q + p) % 3 + 1 rows to p
    rows = lambda q, p: (q + p) % 3 + 1  # noqa: E731
    ins = [rows(r, p) for p in range(w)]
    outs = [rows(q, r) for q in range(w)]
    inp = _rand(600 + r, sum(ins) * 2, dtype).reshape(-1, 2)
    out = ctx.from_numpy(np.zeros((sum(outs), 2), dtype))
    comm.all_to_all_single(out, ctx.from_numpy(inp), output_split_sizes=outs, input_split_sizes=ins)
    _sync(ctx)
    parts = []
    for q in range(w):
        src = _rand(600 + q, sum(rows(q, p) for p in range(w)) * 2, dtype).reshape(-1, 2)
        start = sum(rows(q, p) for p in range(r))
        parts.append(src[start:start + rows(q, r)])
    assert np.array_equal(ctx.to_numpy(out), np.concatenate(parts)), f"rank {r}: all_to_all_single splits"
    # all_reduce alias
    t = ctx.from_numpy(_rand(700 + r, n, dtype))
    comm.all_reduce(t, op="max")
    _sync(ctx)
    assert np.array_equal(ctx.to_numpy(t), np.max(np.stack([_rand(700 + q, n, dtype) for q in range(w)]), axis=0))
    # all_reduce average, the op given as torch.distributed gives it
    t = ctx.from_numpy(_rand(800 + r, n, dtype))
    comm.all_reduce(t, op=_TorchLikeOp())
    _sync(ctx)
    every = np.stack([_rand(800 + q, n, dtype).astype(np.float64) for q in range(w)])
    np.testing.assert_allclose(ctx.to_numpy(t), _mean(every, 0, integer), **tol)
    return True


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("n,dtype", [(1, "float32"), (1001, "int64"), (70001, "float32")])
def test_collectives(kind, world, n, dtype):
    run_ranks(_body, world=world, kind=kind, args=(n, dtype), timeout=120.0)


def _bad(comm, ctx):
    x = ctx.from_numpy(np.ones(4, "float32"))
    with pytest.raises(peerlink.InvalidArgument):
        comm.all_gather_into_tensor(ctx.from_numpy(np.ones(5, "float32")), x)
    with pytest.raises(peerlink.InvalidArgument):
        comm.reduce_scatter_tensor(x, ctx.from_numpy(np.ones(4, "float64")))
    with pytest.raises(peerlink.InvalidArgument):
        comm.broadcast(x, src=ctx.world)
    with pytest.raises(peerlink.InvalidArgument):
        comm.all_to_all_single(x, x, output_split_sizes=[1], input_split_sizes=[1])
    comm.broadcast(x, src=0)  # still in step
    return True


def test_invalid_arguments(kind):
    run_ranks(_bad, world=2, kind=kind)


def _windows(comm, ctx, n, dtype):
    """Registered windows: outputs in a window of comm.empty() memory take the zero-copy path
    (forced through the environment) and give the same results as without."""
    r, w = ctx.rank, ctx.world
    out = comm.empty(n * w, dtype, kind=None if ctx.kind == "numpy" else ctx.kind)
    wid = comm.register_window(out)
    assert wid >= 1
    for it in range(3):
        comm.all_gather_into_tensor(out, ctx.from_numpy(_rand(100 * it + r, n, dtype)))
        _sync(ctx)
        want = np.concatenate([_rand(100 * it + q, n, dtype) for q in range(w)])
        assert np.array_equal(ctx.to_numpy(out), want), f"rank {r}: all_gather_into_tensor in a window, call {it}"
    inp = ctx.from_numpy(_rand(500 + r, w * n, dtype))
    comm.all_to_all_single(out, inp)
    _sync(ctx)
    want = np.concatenate([_rand(500 + q, w * n, dtype)[r * n:(r + 1) * n] for q in range(w)])
    assert np.array_equal(ctx.to_numpy(out), want), f"rank {r}: all_to_all_single in a window"
    # In place in the window (the zero-copy swaps): all_to_all twice is the identity, so the next
    # call gives back this rank's input, the one after that the out-of-place result again.
    for it, expect in enumerate([_rand(500 + r, w * n, dtype), want]):
        comm.all_to_all_single(out, out)
        _sync(ctx)
        assert np.array_equal(ctx.to_numpy(out), expect), f"rank {r}: all_to_all_single in place in a window, {it}"
    comm.deregister_window(wid)
    with pytest.raises(peerlink.InvalidArgument):
        comm.deregister_window(wid)
    return True


@pytest.mark.parametrize("world", [2, 3])
def test_windows_zero_copy(kind, world):
    env = {"PEERLINK_ALL_GATHER_ALGO": "zero_copy", "PEERLINK_ALL_TO_ALL_ALGO": "zero_copy"}
    run_ranks(_windows, world=world, kind=kind, args=(1001, "int64"), env=env, timeout=120.0)
