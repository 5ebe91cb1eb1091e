"""The soak's figures: per path <path>.png (RSS, open fds, threads and the p50/p99 latency
per 10 s of sends, against time), and soak.png (RSS, fds and threads of every path)."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .common import SAMPLE_EVERY_S, percentile  # noqa: E402

PANELS = [("rss_kib", "RSS (MiB)", 1 / 1024), ("fds", "open fds (count)", 1),
          ("threads", "threads (count)", 1)]


def latency_bins(rec):
    bins = {}
    with rec.lock:
        for frame, lat in rec.answers:
            bins.setdefault(int(rec.sent_t[frame] // SAMPLE_EVERY_S), []).append(lat)
    keys = sorted(bins)
    t = [(k + 0.5) * SAMPLE_EVERY_S for k in keys]
    return t, [percentile(bins[k], 50) for k in keys], [percentile(bins[k], 99) for k in keys]


def path_figure(out, summary, rows, rec, machine):
    name = summary["path"]
    fig, axes = plt.subplots(4, 1, figsize=(8, 10), sharex=True)
    t = [r["t_s"] for r in rows]
    for ax, (key, label, scale) in zip(axes, PANELS):
        ax.plot(t, [r[key] * scale for r in rows], marker=".")
        ax.set_ylabel(label)
        if key != "rss_kib":
            lo, hi = min(r[key] for r in rows), max(r[key] for r in rows)
            ax.set_ylim(lo - 2, hi + 2)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts
        ax.axvline(summary["warmup_s"], color="grey", linestyle=":", label="end of warm-up")
        ax.grid(alpha=0.3)
    base = summary["rss_base_kib"] / 1024
    axes[0].axhline(base, color="tab:green", linestyle="--", linewidth=0.8,
                    label=f"floor after warm-up ({base:.1f} MiB)")
    axes[0].axhline(base * 1.02, color="tab:red", linestyle="--", linewidth=0.8,
                    label="limit of the end's floor (+2%)")
    axes[0].legend(loc="lower right", fontsize=8)
    lt, p50, p99 = latency_bins(rec)
    axes[3].plot(lt, p50, label="p50")
    axes[3].plot(lt, p99, label="p99")
    w, s = summary["window_s"], summary["duration_s"]
    axes[3].axvspan(0, w, color="green", alpha=0.08, label="p99 windows")
    axes[3].axvspan(s - w, s, color="green", alpha=0.08)
    axes[3].set_ylabel("latency per 10 s of sends (ms)")
    axes[3].set_xlabel("time since the feed began (s)")
    axes[3].legend(loc="upper right")
    axes[3].grid(alpha=0.3)
    verdict = "PASS" if summary["passed"] else "FAIL"
    fig.suptitle(f"soak: {name} ({summary.get('process', '')}), {s:.0f} s at "
                 f"{summary['rate_fed']:.1f} frames/s ({summary['rate_fed'] / summary['engine_fps']:.1f}x "
                 f"the engine's {summary['engine_fps']:.1f}): {verdict}\n{machine}", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{name}.png"), dpi=100)
    plt.close(fig)


def overview(out, results, machine):
    """One panel per figure, a line per path."""
    fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    for summary, rows in results:
        t = [r["t_s"] for r in rows]
        for ax, (key, label, scale) in zip(axes, PANELS):
            ax.plot(t, [r[key] * scale for r in rows], marker=".", label=summary["path"])
            ax.set_ylabel(label)
    for ax in axes:
        ax.grid(alpha=0.3)
    for ax in axes[1:]:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts
    axes[0].legend(loc="center right")
    axes[-1].set_xlabel("time since the feed began (s)")
    fig.suptitle(f"soak: every live path at twice the engine's rate\n{machine}", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "soak.png"), dpi=100)
    plt.close(fig)
