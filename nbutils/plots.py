"""Plots the notebooks show and save (matplotlib, Agg-safe so batch runs need no display)."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot, on the Agg backend unless a notebook's inline backend is active: a batch run (papermill,
    a Kaggle commit, a test) has no display, and an interactive backend would fail or open windows there."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg",) and "inline" not in matplotlib.get_backend().lower():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str | Path, dpi: int = 100):
    """Lay out, write the PNG and close the figure (a figure left open piles up over a long run and is shown
    again at the cell's end by the inline backend); returns the figure, which a notebook still displays."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return fig


def plot_length_histogram(lengths: list[int], cutoff: int, path: str | Path, title: str = "Tokens per example"):
    """Histogram of token lengths with the max_seq_len cut-off marked; saved as PNG, figure returned."""
    plt = pyplot()
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
    return save(fig, path)


def plot_metric_comparison(block: dict, path: str | Path, title: str = "Base vs tuned (95% bootstrap interval)"):
    """Grouped bars per metric (base, tuned) with their bootstrap intervals, from metrics.compare's block."""
    plt = pyplot()
    names = list(block["metrics"])
    models = [m for m in ("base", "tuned") if names and m in block["metrics"][names[0]]]
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(names) + 2), 3.2))
    width = 0.8 / max(1, len(models))
    for i, model in enumerate(models):
        entries = [block["metrics"][n][model] for n in names]
        means = [e["mean"] for e in entries]
        # At least 0: the mean (a Python sum) can sit a rounding error outside numpy's interval of equal scores,
        # and matplotlib refuses a negative yerr, after both models generated.
        err = [[max(0.0, m - e["ci"][0]) for m, e in zip(means, entries)],
               [max(0.0, e["ci"][1] - m) for m, e in zip(means, entries)]]
        ax.bar([j + i * width for j in range(len(names))], means, width=width, yerr=err, capsize=3, label=model)
    ax.set_xticks([j + width * (len(models) - 1) / 2 for j in range(len(names))],
                  [n + (" *" if n == block["primary"] else "") for n in names])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score (0-1)")
    ax.set_title(title + " · * primary", fontsize=10)
    ax.legend()
    return save(fig, path)
