"""Plots the notebooks show and save (matplotlib, Agg-safe so batch runs need no display)."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg",) and "inline" not in matplotlib.get_backend().lower():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def length_histogram(lengths: list[int], cutoff: int, path: str | Path, title: str = "Tokens per example"):
    """Histogram of token lengths with the max_seq_len cut-off marked; saved as PNG, figure returned."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(lengths, bins=min(50, max(5, len(set(lengths)))), color="#4c72b0")
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
