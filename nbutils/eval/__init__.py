"""Evaluation helpers: degeneration detection (`detect`, `soup`) and its stress set (`stress`, `corpus`)."""
