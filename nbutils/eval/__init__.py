"""Evaluation beyond exact match: text metrics with bootstrap intervals, and chatting with the tuned model."""
