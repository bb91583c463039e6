"""Evaluation: judging generations and answers.

- `detect`, `soup`: is a generation degenerate (loops, token soup, junk, empty)?
- `corpus`, `stress`, `scorecard`: the stress set that measures those verdicts, and its scores.
- `metrics`: exact match, ROUGE-L, chrF or a user scorer, with bootstrap intervals and win/tie/loss.
- `chat`: talk to the tuned model (streamed interactively, plain lines in a batch run).
"""
