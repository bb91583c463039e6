"""Evaluation (03_eval): generation under the degeneration guard, task metrics, the report.

- `detect`, `soup`, `junk`: whether a generation is degenerate (loops, token soup, unicode junk, empty).
- `cycle`: `detect`'s rule for a cycle of sentences said again before its second copy is whole.
- `items`: `detect`'s rule for list items said again with a word or two changed.
- `lines`: `detect`'s rule for a line said again with a word or two changed, outside a list.
- `shuffled`: `detect`'s rule for a numbered list's items said again in shuffled order.
- `clauses`: `detect`'s rule for one clause said again and again, joined differently each time.
- `counted`: the numbers of a loop's copies, place by place (exact, counting, a list's numbers).
- `textshape`: characters as layout sees them (combining marks, display width, sentence ends, runs).
- `guard`: `detect` inside `model.generate`, stopping only the rows that degenerate.
- `degeneration`: the circuit breaker for whole runs, summaries, and `python -m nbutils.eval.degeneration check`.
- `evaluation`: guarded batched generation on a bounded sample, the task metric, the eval loss.
- `evalplan`: 03's plan before the model loads: generation and scoring against the GPU, refused naming what to change.
- `metrics`: exact match, ROUGE-L, chrF or a user scorer, with bootstrap intervals and win/tie/loss.
- `report`: one line per model, the per-sample table and the chart of degeneration reasons.
- `chat`: talk to the tuned model (streamed interactively, plain lines in a batch run).
- `judge`: 05's report against the SFT adapter: preference accuracy, reward margins, held-out reward, task metric.
- `rewards`: GRPO reward functions (`module:function`) for short answers, and the penalty for degenerate ones.
- `rollouts`: GRPO's rollouts under the degeneration guard: loops stop early, their tokens counted as saved.
"""
