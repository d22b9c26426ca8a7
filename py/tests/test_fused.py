"""comm.allreduce_add_rms_norm(_fp8): the fused allreduce + residual add + RMSNorm (+ e4m3) on real
processes: numpy on the host backend (float32, float16), torch (also bfloat16) and CuPy on GPUs.
Reference here in numpy: residual_out bitwise (f32 sum in rank order, one rounding), norm_out within
one ulp (float16 / bfloat16) or 2e-5 relative (float32) of a float64 norm of residual_out, quant_out
the nearest e4m3 code of norm_out / scale; every rank the same bits."""
import numpy as np
import pytest

import peerlink
from plmp import run_ranks

pytestmark = pytest.mark.skipif(not peerlink.has_collectives, reason="library without collectives")

EPS = 1e-6
SCALE = 0.0125


def _vals(seed, n, lo, span):
    rng = np.random.default_rng(seed)
    return ((lo + span * rng.uniform(0, 1, n)) * rng.choice([-1, 1], n)).astype(np.float32)


def _inputs(rank, tokens, hidden):
    return (_vals(100 + rank, tokens * hidden, 0.25, 1.0), _vals(7, tokens * hidden, 0.5, 2.0),
            _vals(9, hidden, 0.05, 1.0))


def _e4m3(v):
    """The e4m3fn code nearest to each float32 (ties to the even code, |v| >= 448 saturated)."""
    codes = np.arange(127)
    e, m = codes >> 3, codes & 7
    vals = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    a = np.abs(v.astype(np.float64))
    hi = np.clip(np.searchsorted(vals, a), 1, 126)
    lo = hi - 1
    dl, dh = a - vals[lo], vals[hi] - a
    pick = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
    pick = np.where(a >= 448.0, 126, pick)
    return (pick | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def _to(ctx, host, dtype):
    if ctx.kind == "torch":
        import torch

        return torch.from_numpy(host.astype(np.float32)).to(f"cuda:{ctx.device()}").to(getattr(torch, dtype))
    return ctx.from_numpy(host.astype(dtype))


def _back(ctx, x):
    if ctx.kind == "torch":
        return x.float().cpu().numpy()
    return ctx.to_numpy(x).astype(np.float32)


def _sync(ctx):
    if ctx.kind == "torch":
        import torch

        torch.cuda.synchronize()
    elif ctx.kind == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _round(x, dtype):
    if dtype == "bfloat16":  # round to nearest even on the upper 16 bits
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
        return u.astype(np.uint32).view(np.float32)
    return x.astype(dtype).astype(np.float32)


def _check(ctx, dtype, tokens, hidden, wb, norm, rout, quant):
    w = ctx.world
    xs = [_inputs(q, tokens, hidden)[0] for q in range(w)]
    _, res, wt = _inputs(0, tokens, hidden)
    xs, res, wt = [_round(x, dtype) for x in xs], _round(res, dtype), _round(wt, dtype)
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = acc + x  # float32, rank order
    want = _round(acc + res, dtype)
    assert np.array_equal(rout, want), f"rank {ctx.rank}: residual_out differs at {np.flatnonzero(rout != want)[:5]}"
    ro = want.astype(np.float64).reshape(tokens, hidden)
    inv = 1.0 / np.sqrt((ro * ro).mean(axis=1, keepdims=True) + EPS)
    exact = (ro * inv * (wb + wt.astype(np.float64))).reshape(-1)
    if dtype == "float32":
        tol = 2e-5 * np.abs(exact) + 1e-30
    else:
        mant, emin = (7, -126) if dtype == "bfloat16" else (10, -14)
        tol = np.ldexp(1.0, np.maximum(np.frexp(np.abs(exact))[1] - 1, emin) - mant)
    bad = np.flatnonzero(np.abs(norm - exact) > tol)
    assert bad.size == 0, f"rank {ctx.rank}: norm_out[{bad[0]}] = {norm[bad[0]]}, reference {exact[bad[0]]}"
    if quant is not None:
        q = _e4m3((norm / np.float32(SCALE)).astype(np.float32))
        assert np.array_equal(quant, q), f"rank {ctx.rank}: quant_out differs at {np.flatnonzero(quant != q)[:5]}"


def _body(comm, ctx, dtype, tokens, hidden):
    x, res, wt = _inputs(ctx.rank, tokens, hidden)
    outs = []
    # In place (the default), weight_bias 0.
    t_in, t_res, t_w = _to(ctx, x, dtype), _to(ctx, res, dtype), _to(ctx, wt, dtype)
    n, r = comm.allreduce_add_rms_norm(t_in, t_res, t_w, EPS)
    assert n is t_in and r is t_res
    _sync(ctx)
    _check(ctx, dtype, tokens, hidden, 0.0, _back(ctx, n), _back(ctx, r), None)
    outs.append(_back(ctx, n).tobytes() + _back(ctx, r).tobytes())
    # Out of place, weight_bias 1, and the FP8 form into a one-byte tensor.
    t_in = _to(ctx, x, dtype)
    norm, rout = _to(ctx, np.zeros_like(x), dtype), _to(ctx, np.zeros_like(x), dtype)
    comm.allreduce_add_rms_norm(t_in, _to(ctx, res, dtype), t_w, EPS, weight_bias=1.0,
                                norm_out=norm, residual_out=rout)
    _sync(ctx)
    _check(ctx, dtype, tokens, hidden, 1.0, _back(ctx, norm), _back(ctx, rout), None)
    quant = ctx.from_numpy(np.zeros(tokens * hidden, np.uint8))
    scale = ctx.from_numpy(np.array([SCALE], np.float32))
    norm2 = _to(ctx, np.zeros_like(x), dtype)
    q, r2 = comm.allreduce_add_rms_norm_fp8(_to(ctx, x, dtype), _to(ctx, res, dtype), t_w, scale, quant, EPS,
                                             weight_bias=1.0, norm_out=norm2)
    assert q is quant
    _sync(ctx)
    _check(ctx, dtype, tokens, hidden, 1.0, _back(ctx, norm2), _back(ctx, r2), ctx.to_numpy(quant))
    outs.append(ctx.to_numpy(quant).tobytes())
    return outs


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("dtype,tokens,hidden", [("float32", 3, 1024), ("float16", 7, 520), ("bfloat16", 5, 4096)])
def test_allreduce_add_rms_norm(kind, world, dtype, tokens, hidden):
    if dtype == "bfloat16" and kind != "torch":
        pytest.skip("bfloat16 arrays: torch only")
    got = run_ranks(_body, world=world, kind=kind, args=(dtype, tokens, hidden), timeout=120.0)
    assert all(g == got[0] for g in got), "ranks got different bits"


def _bad(comm, ctx):
    x = ctx.from_numpy(np.ones(64, np.float32))
    w = ctx.from_numpy(np.ones(16, np.float32))
    with pytest.raises(peerlink.InvalidArgument, match="whole number of rows"):
        comm.allreduce_add_rms_norm(x, ctx.from_numpy(np.ones(64, np.float32)), ctx.from_numpy(np.ones(24, np.float32)),
                                    EPS)
    with pytest.raises(peerlink.InvalidArgument, match="float16"):
        comm.allreduce_add_rms_norm(x, ctx.from_numpy(np.ones(64, np.float16)), w, EPS)
    with pytest.raises(peerlink.InvalidArgument, match="hidden 6"):
        comm.allreduce_add_rms_norm(ctx.from_numpy(np.ones(12, np.float32)), ctx.from_numpy(np.ones(12, np.float32)),
                                    ctx.from_numpy(np.ones(6, np.float32)), EPS)
    with pytest.raises(peerlink.InvalidArgument, match="quant_out"):
        comm.allreduce_add_rms_norm_fp8(x, ctx.from_numpy(np.ones(64, np.float32)), w,
                                        ctx.from_numpy(np.ones(1, np.float32)), ctx.from_numpy(np.ones(8, np.uint8)), EPS)
    comm.allreduce_add_rms_norm(x, ctx.from_numpy(np.ones(64, np.float32)), w, EPS)  # still in step
    _sync(ctx)
    return float(ctx.to_numpy(x)[0])


def test_invalid_arguments(kind):
    got = run_ranks(_bad, world=2, kind=kind)
    assert got[0] == got[1] == pytest.approx(1.0, rel=1e-3)  # (1 + 1 + 1) / rms 3 * 1
