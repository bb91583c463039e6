"""Evaluation helpers: degeneration verdicts (`detect`, `soup`) and their stress set (`corpus`, `stress`, `scorecard`)."""
