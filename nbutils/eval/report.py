"""What 03_eval shows a person: one line per model, a per-sample table and a chart of degeneration reasons."""

from __future__ import annotations

import html
from pathlib import Path

from nbutils.train import atomic

STYLE = (
    "<style>.nbr td,.nbr th{border:1px solid #ccc;padding:4px;vertical-align:top;text-align:left;"
    "font-family:monospace;white-space:pre-wrap;max-width:28em}.nbr .bad{background:#fde2e2}"
    ".nbr .ok{background:#e3f6e3}</style>"
)


def model_line(name: str, block: dict) -> str:
    """One model's figures (evaluation.score's block) as the one line 03 prints under its generations: the primary
    metric by name first (exact match beside it when the primary is another)."""
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(block["reasons"].items())) or "none"
    primary = block.get("primary_metric") or {"name": "exact_match", "value": block["task_metric"]}
    head = f"{primary['name']} {primary['value']:.3f} (primary)"
    if primary["name"] != "exact_match":
        head += f", exact_match {block['task_metric']:.3f}"
    return (f"{name}: {head}, eval loss {block['eval_loss']:.4f}, "
            f"degenerate {block['degenerate_rate']:.1%} ({reasons}), EOS {block['eos_rate']:.1%} of {block['n']} "
            f"generations; {block['tokens_generated']} tokens generated, {block['tokens_saved']} saved by the guard")


def side_by_side(block: dict) -> dict:
    """One model's column of 03's side-by-side table: the primary metric by name first (exact match beside it when
    the primary is another), then eval loss, degenerate and EOS rates, and the tokens the guard saved."""
    primary = block.get("primary_metric") or {"name": "exact_match", "value": block["task_metric"]}
    column = {primary["name"]: primary["value"], "exact_match": block["task_metric"]}
    return {**column, **{k: block[k] for k in ("eval_loss", "degenerate_rate", "eos_rate", "tokens_saved")}}


def _cell(text: str, limit: int = 400, tail: bool = False) -> str:
    """A cell's text, cut at `limit` characters: its end where the end is what matters (a rendered prompt: the
    question comes last, after the template's header, a system prompt or earlier turns)."""
    if len(text) > limit:
        text = "… " + text[-limit:] if tail else text[:limit] + " …"
    return html.escape(text)


def samples_table_html(rows: list[dict], columns: list[str], verdict_key: str = "verdict") -> str:
    """An HTML table of samples; rows whose verdict says degenerate are tinted red, correct ones green."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        verdict = str(row.get(verdict_key, ""))
        css = "bad" if verdict.startswith("degenerate") else "ok" if row.get("correct") else ""
        cells = "".join(f"<td>{_cell(str(row.get(c, '')), tail=c == 'prompt')}</td>" for c in columns)
        body.append(f'<tr class="{css}">{cells}</tr>')
    return f'{STYLE}<table class="nbr"><tr>{head}</tr>{"".join(body)}</table>'


def reasons_chart(counts: dict[str, dict[str, int]], path: str | Path, title: str = "Degenerate generations by reason"):
    """Grouped bar chart {model: {reason: count}} saved as PNG; returns the figure for display."""
    from nbutils import plots

    plt = plots.pyplot()
    reasons = sorted({r for per_model in counts.values() for r in per_model}) or ["none"]
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(reasons) + 2), 3.2))
    width = 0.8 / max(1, len(counts))
    for i, (model, per_model) in enumerate(counts.items()):
        xs = [j + i * width for j in range(len(reasons))]
        ax.bar(xs, [per_model.get(r, 0) for r in reasons], width=width, label=model)
    ax.set_xticks([j + width * (len(counts) - 1) / 2 for j in range(len(reasons))], reasons, rotation=20)
    ax.set_ylabel("generations")
    ax.set_title(title)
    ax.legend()
    return plots.save(fig, path)


def metric_chart(scores: dict, path: str | Path):
    """03's metric chart (plots.plot_metric_comparison), whole under its name or not there: a kill or a full disk
    mid-write leaves no truncated PNG, as for every file of 02 to 05 (nbutils.train.atomic)."""
    from nbutils import plots

    with atomic.file(path, "the metric chart") as tmp:
        return plots.plot_metric_comparison(scores, tmp)


def write_pages(out: str | Path, rows: list[dict], columns: list[str], reasons: dict[str, dict[str, int]]) -> None:
    """03's samples.html (every sample row) and reasons.png (reasons_chart), each written atomically."""
    atomic.write_text(Path(out) / "samples.html", samples_table_html(rows, columns), "the samples page")
    with atomic.file(Path(out) / "reasons.png", "the reasons chart") as tmp:
        reasons_chart(reasons, tmp)
