#!/usr/bin/env python3
"""Plots the benchmarks' JSON output as PNG files saved next to the JSON.

usage: benchmarks/plot.py FILE.json|DIR [...]

  bench_transport  -> transport_latency.png (p50/p99 one-way latency vs size, one line per
                      transport/completion) and transport_bandwidth.png (GB/s vs size)
  bench_allreduce  -> <name>.png: time and bus bandwidth vs size, peerlink vs NCCL
  p2p_matrix       -> <name>.png: unidirectional / bidirectional GB/s and latency per device pair

Rows whose payload check failed (wrong != 0) are left out and reported: every plotted number comes
from a verified run. Without matplotlib it says so and exits 0.
"""
import glob
import json
import os
import sys


def load(paths):
    files = []
    for p in paths:
        files += sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
    out = []
    for f in files:
        try:
            with open(f) as fh:
                d = json.load(fh)
        except (OSError, ValueError) as e:
            print(f"plot.py: skipping {f}: {e}")
            continue
        if isinstance(d, dict) and "benchmark" in d:
            out.append((f, d))
    return out


def verified(rows, name):
    """Rows whose payload check ran and found nothing wrong (wrong == -1: the check was off)."""
    good = [r for r in rows if r.get("wrong", 0) == 0]
    unchecked = sum(1 for r in rows if r.get("wrong", 0) < 0)
    if unchecked:
        print(f"plot.py: {name}: {unchecked} unchecked rows (-c 0) not plotted")
    if len(good) + unchecked != len(rows):
        print(f"plot.py: {name}: {len(rows) - len(good) - unchecked} rows with payload errors not plotted")
    return good


def size_axis(ax, ylabel):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def plot_transport(plt, items):
    lat = [(f, d) for f, d in items if d["meta"].get("mode") == "latency"]
    bw = [(f, d) for f, d in items if d["meta"].get("mode") in ("bandwidth", "bidir")]
    written = []
    for group, fname in ((lat, "transport_latency.png"), (bw, "transport_bandwidth.png")):
        if not group:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for f, d in group:
            m = d["meta"]
            label = f"{m.get('mode')} {m.get('transport')}/{m.get('completion')}"
            rows = verified(d["results"], f)
            x = [r["bytes"] for r in rows]
            axes[0].plot(x, [r["p50_us"] for r in rows], marker="o", label=label + " p50")
            axes[0].plot(x, [r["p99_us"] for r in rows], linestyle="--", alpha=0.6, label=label + " p99")
            axes[1].plot(x, [r["gbps"] for r in rows], marker="o", label=label)
        size_axis(axes[0], "one-way latency (us)" if group is lat else "time per message (us)")
        axes[0].set_yscale("log")
        size_axis(axes[1], "GB/s")
        for ax in axes:
            ax.legend(fontsize=7)
        fig.suptitle("peerlink bench_transport (" + ("latency" if group is lat else "bandwidth") + ")")
        out = os.path.join(os.path.dirname(os.path.abspath(group[0][0])), fname)
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    return written


def plot_allreduce(plt, f, d):
    rows = verified(d["results"], f)
    if not rows:
        return []
    m = d["meta"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for impl in sorted({r["impl"] for r in rows}):
        rs = [r for r in rows if r["impl"] == impl]
        x = [r["bytes"] for r in rs]
        axes[0].plot(x, [r["time_us"] for r in rs], marker="o", label=impl)
        axes[1].plot(x, [r["busbw"] for r in rs], marker="o", label=impl)
    size_axis(axes[0], "time per allreduce (us)")
    axes[0].set_yscale("log")
    size_axis(axes[1], "bus bandwidth (GB/s)")
    for ax in axes:
        ax.legend()
    graph = " CUDA graph" if m.get("graph") == "1" else ""
    fig.suptitle(f"allreduce {m.get('dtype')} {m.get('op')}, {m.get('nranks')} ranks{graph}")
    out = os.path.splitext(f)[0] + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]


def plot_matrix(plt, f, d):
    cells = [c for c in d["cells"] if c.get("ok") and c.get("wrong", 0) == 0]
    paths = sorted({c["path"] for c in cells})
    if not cells:
        print(f"plot.py: {f}: no verified cells")
        return []
    n = max(max(c["a"], c["b"]) for c in cells) + 1
    fields = (("uni_gbps", "unidirectional GB/s"), ("bidir_gbps", "bidirectional GB/s"), ("lat_p50_us", "latency p50 us"))
    fig, axes = plt.subplots(len(paths), 3, figsize=(12, 3.6 * len(paths)), squeeze=False)
    for i, path in enumerate(paths):
        for j, (key, title) in enumerate(fields):
            grid = [[float("nan")] * n for _ in range(n)]
            for c in cells:
                if c["path"] == path:
                    grid[c["a"]][c["b"]] = c[key]
            ax = axes[i][j]
            ax.imshow(grid, cmap="viridis")
            for a in range(n):
                for b in range(n):
                    ax.text(b, a, f"{grid[a][b]:.1f}", ha="center", va="center", color="w", fontsize=9)
            ax.set_title(f"{path}: {title}")
            ax.set_xlabel("receiver")
            ax.set_ylabel("sender")
            ax.set_xticks(range(n))
            ax.set_yticks(range(n))
    out = os.path.splitext(f)[0] + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 1
    items = load(argv[1:])
    if not items:
        print("plot.py: no benchmark JSON found")
        return 0
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed; no plots written (pip install matplotlib)")
        return 0
    written = plot_transport(plt, [(f, d) for f, d in items if d["benchmark"] == "bench_transport"])
    for f, d in items:
        if d["benchmark"] == "bench_allreduce":
            written += plot_allreduce(plt, f, d)
        elif d["benchmark"] == "p2p_matrix":
            written += plot_matrix(plt, f, d)
    for w in written:
        print(f"wrote {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
