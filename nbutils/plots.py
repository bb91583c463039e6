"""Plots the notebooks show and save (matplotlib, Agg-safe so batch runs need no display)."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg",) and "inline" not in matplotlib.get_backend().lower():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_length_histogram(lengths: list[int], cutoff: int, path: str | Path, title: str = "Tokens per example"):
    """Histogram of token lengths with the max_seq_len cut-off marked; saved as PNG, figure returned."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    lo, hi = (min(lengths), max(lengths)) if lengths else (0, 1)
    step = max(1, -(-(hi - lo + 1) // 60))  # about 60 bins, each a whole number of tokens wide
    counts, _, _ = ax.hist(lengths, bins=range(lo, hi + step + 1, step), color="#4c72b0")
    nonzero = [c for c in counts if c > 0]
    if nonzero and max(nonzero) > 50 * min(nonzero):
        ax.set_yscale("log")  # long tails: the few long examples would not show on a linear axis
    ax.axvline(cutoff, color="#c44e52", linestyle="--", label=f"max_seq_len = {cutoff}")
    over = sum(1 for n in lengths if n > cutoff)
    ax.set_title(f"{title} ({over} of {len(lengths)} over the cut-off)")
    ax.set_xlabel("tokens")
    ax.set_ylabel("examples")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


length_histogram = plot_length_histogram  # the earlier name
