"""The numbers of a loop's copies, place by place: the same in every copy, counting evenly, or a list's numbers.

`detect` finds loops on a token stream where every number is NUM, so a template said again with new numbers looks
periodic; the numbers themselves, read back column by column (a column is a number's place in the period), say
whether the copies are exact, a count, or items listed again under the list's next numbers.
"""

from __future__ import annotations

NUM = "\ue000"  # what a number becomes in the normalized token stream (a private-use character: never real text)
LIST_MARKS = frozenset((".", ")"))  # after a list item's number: "1. Oranges", "2) 2"


def steps_evenly(values: list[str]) -> bool:
    """Three numbers or more, each the one before plus one step that is not 0: counted (1, 2, 3; 40, 30, 20)."""
    vals = [int(v) for v in values if v.isdigit()]
    steps = {b - a for a, b in zip(vals, vals[1:])}
    return len(vals) >= 3 and len(steps) == 1 and 0 not in steps


def counted(rev: list[str], size: int, p: int, values: list[str]) -> tuple[bool, bool, bool, bool]:
    """The numbers of a periodic region (rev[:size], reversed; `values` in text order), by their place in the period:
    exact (the same in every copy), counting (some place counts evenly), listed (each place the same in every copy
    or a list item's number that counts: items said again under the list's next numbers, copies but for layout) and
    every (each place counts evenly: "1. 1 / 2. 2", a count written as a numbered list)."""
    columns: dict[int, list[str]] = {}
    for j, v in zip([j for j in range(size - 1, -1, -1) if rev[j] == NUM], values):
        columns.setdefault(j % p, []).append(v)
    same = {k: len(set(v)) == 1 for k, v in columns.items()}
    steps = {k: steps_evenly(v) for k, v in columns.items()}
    exact = all(same.values())
    # a list item's number opens a line and is followed by "." or ")": "1. Oranges" (rev[k - 1] comes after rev[k])
    return exact, any(steps.values()), not exact and all(
        same[k] or steps[k] and rev[(k - 1) % p] in LIST_MARKS and rev[(k + 1) % p] == "\n" for k in columns), \
        bool(steps) and all(steps.values())
