"""Learning curves from the Trainer's log history: a plot and a one-line diagnosis."""

from __future__ import annotations

from pathlib import Path

RESUMED = "resumed"  # the log_history entry a resumed run adds at its first step ({"step": N, "resumed": True})


def series(log_history: list[dict]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    train = [(h["step"], float(h["loss"])) for h in log_history if "loss" in h and "step" in h]
    evals = [(h["step"], float(h["eval_loss"])) for h in log_history if "eval_loss" in h and "step" in h]
    return train, evals


def diagnose(log_history: list[dict]) -> str:
    """'diverging', 'overfit from step N', 'underfit' or 'well fit' (or 'not enough evaluations'), with what to do.

    Diverging comes first: an eval loss 10% above its best with a train loss that rose too is a learning rate too
    high, and the underfit test (an eval loss that hardly fell from the start) would advise raising it."""
    train, evals = series(log_history)
    if len(evals) < 2 or not train:
        return "not enough evaluations to tell"
    first, last = evals[0][1], evals[-1][1]
    best_step, best = min(evals, key=lambda e: e[1])
    lowest, train_last = min(v for _, v in train), train[-1][1]
    lr = max((h["learning_rate"] for h in log_history if "learning_rate" in h), default=None)
    if last > best * 1.1:
        if train_last > lowest * 1.1 or train_last > train[0][1]:
            advice = "lower the learning rate" + (f" from {lr:.1e} (halve it, say)" if lr is not None else "")
            return (f"diverging: eval loss rose from {best:.4f} at step {best_step} to {last:.4f} and train loss rose "
                    f"too, from {lowest:.4f} to {train_last:.4f}; {advice}")
        trend = "kept falling" if train_last <= lowest else "stayed near its lowest"
        return f"overfit from step {best_step}: eval loss rose from {best:.4f} to {last:.4f} while train loss {trend}"
    if last > 0.8 * first:
        if lr is None:
            advice = "train longer or raise the learning rate"
        elif lr >= 1e-3:  # already far above the 1e-4..5e-4 range where LoRA on real models is stable
            advice = f"the learning rate ({lr:.1e}) is already high: train longer, or check the labels and data"
        else:
            advice = f"train longer, or raise the learning rate from {lr:.1e} (up to about 5e-4 for LoRA)"
        return f"underfit: eval loss fell only from {first:.4f} to {last:.4f}; {advice}"
    ending = "and did not rise" if last <= best else f"(its best {best:.4f} at step {best_step}, within 10%)"
    return f"well fit: eval loss fell from {first:.4f} to {last:.4f} {ending}"


def rewards(log_history: list[dict]) -> list[tuple[int, float]]:
    """GRPO's mean reward per logged step (trl logs it as "reward"): the curve that shows whether GRPO learns."""
    return [(h["step"], float(h["reward"])) for h in log_history if "reward" in h and "step" in h]


def plot(log_history: list[dict], path: str | Path, title: str = "Learning curves"):
    """Train and eval loss against steps, and GRPO's reward on a second axis where the log has one, saved as PNG;
    returns the figure. Losses go on a log axis only while all are positive: GRPO's loss is zero or negative at
    times, and a log axis would drop those points without a word."""
    from nbutils import plots

    plt = plots.pyplot()
    train, evals = series(log_history)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    if train:
        ax.plot(*zip(*train), label="train loss")
    if evals:
        ax.plot(*zip(*evals), marker="o", label="eval loss")
    if train or evals:
        ax.set_yscale("log" if min(v for _, v in train + evals) > 0 else "linear")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"{title}: {diagnose(log_history).split(':')[0]}")
    handles, labels = ax.get_legend_handles_labels()
    if reward := rewards(log_history):
        right = ax.twinx()
        right.plot(*zip(*reward), color="tab:green", linestyle="--", label="reward")
        right.set_ylabel("reward")
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels)
    return plots.save(fig, path)


def run_loss(log_history: list[dict]) -> float:
    """Mean training loss of the whole run, across resumes: the logged losses weighted by the steps each covers. A
    logged loss is the mean since the log before it, or since the resume in between (a RESUMED entry): a run stopped
    between two logs resumes at its checkpoint's step, and its first log covers only the steps after that."""
    logs = sorted(((h["step"], h.get("loss")) for h in log_history if ("loss" in h or RESUMED in h) and "step" in h),
                  key=lambda log: log[0])
    total, steps, prev = 0.0, 0, 0
    for step, loss in logs:
        if loss is not None:
            total, steps = total + loss * (step - prev), steps + (step - prev)
        prev = step
    return total / steps if steps else float("nan")


def final_eval(trainer) -> dict:
    """The final weights' eval metrics: those of the evaluation the run ended on, when it ended on one (evaluating the
    same weights again is a whole pass over the eval split), else a new evaluation (also under load_best_model_at_end)."""
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    if evals and evals[-1]["step"] == trainer.state.global_step and not trainer.args.load_best_model_at_end:
        return {k: v for k, v in evals[-1].items() if k.startswith("eval_")}
    return trainer.evaluate()
