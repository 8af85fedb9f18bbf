"""The soak's two pictures for docs/: every service's RSS over time, and the appends' p99 and
throughput per minute, with the faults marked on both."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.reliability.soak import SoakResult

RSS_PNG = "soak-rss.png"
P99_PNG = "soak-p99.png"


def plot(result: SoakResult, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    minutes = result.config["minutes"]
    title = (
        f"{minutes:g} min soak, {result.config['slots']} sessions at once, "
        f"{len(result.faults)} faults"
    )

    fig, ax = plt.subplots(figsize=(10, 5))
    for name, points in sorted(result.rss_mb.items()):
        ax.plot([t / 60 for t, _ in points], [mb for _, mb in points], label=name, linewidth=1)
    _mark_faults(ax, result)
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MiB)")
    ax.set_yscale("log")
    ax.set_title(f"RSS of every service — {title}")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    rss = out_dir / RSS_PNG
    fig.tight_layout()
    fig.savefig(rss, dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 5))
    rows = result.per_minute
    xs = [r["minute"] - 0.5 for r in rows]  # the middle of each minute
    ax.plot(xs, [r["p99_ms"] for r in rows], marker="o", label="append p99 (ms)")
    ax.plot(xs, [r["p50_ms"] for r in rows], marker=".", label="append p50 (ms)")
    ax.set_xlabel("minutes")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    rate = ax.twinx()
    rate.plot(xs, [r["events_per_s"] for r in rows], color="grey", linestyle="--", label="ev/s")
    rate.set_ylabel("acknowledged events/s")
    rate.set_ylim(bottom=0)
    _mark_faults(ax, result)
    ax.set_title(f"Append latency and throughput per minute — {title}")
    lines = ax.get_legend_handles_labels()
    more = rate.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    p99 = out_dir / P99_PNG
    fig.tight_layout()
    fig.savefig(p99, dpi=90)
    plt.close(fig)
    return [rss, p99]


def _mark_faults(ax: object, result: SoakResult) -> None:
    """A vertical band per fault, from its injection to its recovery, labelled with its class."""
    for f in result.faults:
        start = f.at_s / 60
        ax.axvspan(start, start + f.recovery_s / 60, color="red", alpha=0.12)  # type: ignore[attr-defined]
        ax.annotate(  # type: ignore[attr-defined]
            f.fault,
            (start, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=6,
            rotation=90,
            va="top",
        )
