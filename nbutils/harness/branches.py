"""Which lines of a Python cell run on a platform: the cell read with `ast`, its branches decided from the facts.

Shell and magic lines become placeholder calls (`__nbshell__(n)`, n their line) so `ast` parses the cell with its
line numbers intact; walking the tree gives every line a Reach: `if`/`elif`/`else` by their condition, `except`
by whether the `try` can raise there (imports of what the image has cannot), a function body when it is called.
Variables with a known value are followed from cell to cell, as a run executes them, and handed to the shell
lines for IPython's `{name}` / `$name` expansion.
"""

from __future__ import annotations

import ast
import re

from nbutils.harness.conditions import ALWAYS, UNKNOWN, CellReach, Evaluator, Reach, Val, union
from nbutils.harness.install_lines import logical_lines

SHELL = "__nbshell__"
# `files = !ls`, `out = %sx cmd`: a Python assignment from a shell line.
ASSIGN_SHELL = re.compile(r"^(\s*)([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=\s*[!%]")
# Cell magics whose body is Python; any other (%%bash, %%writefile, %%html ...) is not read as Python.
PYTHON_CELL_MAGICS = ("%%capture", "%%time", "%%timeit", "%%prun")
SAFE_VALUES = (ast.Constant, ast.JoinedStr, ast.Name, ast.Attribute)


def python_source(source: str) -> str | None:
    """The cell with shell and magic lines replaced by placeholders (same line numbers); None if not Python."""
    lines = source.splitlines()
    if lines and lines[0].startswith("%%") and lines[0].split()[0] not in PYTHON_CELL_MAGICS:
        return None
    out = list(lines)
    for start, text, phys, shell in logical_lines(source):
        indent = text[:len(text) - len(text.lstrip())]
        if not shell:
            if m := ASSIGN_SHELL.match(text):
                out[start] = f"{m.group(1)}{m.group(2)} = {SHELL}({start})"
            continue
        out[start] = "" if text.lstrip().startswith("%%") else f"{indent}{SHELL}({start})"
        for n in phys[1:]:
            out[n] = ""
    return "\n".join(out)


def _shell_line(node: ast.AST) -> int | None:
    value = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == SHELL:
        return value.args[0].value
    return None


class CellWalker:
    """Walks the cells of one notebook in order; `evaluator.scope` carries the variables from cell to cell."""

    def __init__(self, evaluator: Evaluator):
        self.ev = evaluator
        self.source = ""
        self.result = CellReach()

    def walk(self, source: str) -> CellReach:
        """The reach of every line of one cell (every line always, when the cell is not Python that parses)."""
        self.result = CellReach()
        self.source = python_source(source) or ""
        try:
            tree = ast.parse(self.source) if self.source else None
        except SyntaxError:
            tree = None
        if tree is not None:
            self._block(tree.body, ALWAYS)
        return self.result

    def text(self, node: ast.AST) -> str:
        """The source of a node as the cell writes it."""
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    def _block(self, body: list[ast.stmt], reach: Reach) -> None:
        for stmt in body:
            for n in range(stmt.lineno - 1, (stmt.end_lineno or stmt.lineno)):
                self.result.lines[n] = reach
            line = _shell_line(stmt)
            if line is not None and not reach.never:
                self.result.variables[line] = self.known_strings()
            handler = getattr(self, f"_{type(stmt).__name__.lower()}", None)
            if handler:
                handler(stmt, reach)
            else:
                self._unknown_targets(stmt, reach)

    def known_strings(self) -> dict[str, str]:
        """The variables with exactly one known value, as IPython would expand them in a shell line."""
        return {k: str(v.values[0]) for k, v in self.ev.scope.items()
                if v.values is not None and len(v.values) == 1 and isinstance(v.values[0], (str, int, float))}

    # --- branches -----------------------------------------------------------------------------------------

    def _branches(self, arms: list[tuple[list[ast.stmt], Reach]], runs: bool | None) -> None:
        """Walk each arm from the same scope; after, the taken arm's scope, or every possible value when not decided."""
        before, scopes = dict(self.ev.scope), []
        for body, reach in arms:
            self.ev.scope = dict(before)
            self._block(body, reach)
            scopes.append(self.ev.scope)
        if runs is True:
            self.ev.scope = scopes[0]
        elif runs is False and len(scopes) > 1:
            self.ev.scope = scopes[1]
        else:
            self.ev.scope = _join(scopes)

    def _if(self, node: ast.If, reach: Reach) -> None:
        truth, facts = self.ev.truth(node.test)
        test, on = f"`{self.text(node.test)}`", self.ev.platform.label
        body = reach.under(test, f"{test} is true on {on}", f"{test} is false on {on}", truth, facts)
        other = None if truth is None else not truth
        orelse = reach.under(f"{test} is false", f"{test} is false on {on}", f"{test} is true on {on}", other, facts)
        self._branches([(node.body, body), (node.orelse, orelse)], truth)

    def _try(self, node: ast.Try, reach: Reach) -> None:
        raises, facts = self._raises(node.body)
        where = f"the `try` at line {node.lineno}"
        handler = reach.under(f"{where} raises", f"{where} raises on {self.ev.platform.label}",
                              f"{where} cannot raise on {self.ev.platform.label}", raises, facts)
        arms = [(node.body + node.orelse, reach)] + [(h.body, handler) for h in node.handlers]
        self._branches(arms, None if raises is None else not raises)
        self._block(node.finalbody, reach)

    _trystar = _try

    def _raises(self, body: list[ast.stmt]) -> tuple[bool | None, tuple[str, ...]]:
        """Can the `try` block raise here? Imports of what the image has and plain assignments cannot."""
        facts = []
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
                for name in names:
                    val = self.ev.module(name)
                    facts += val.facts
                    if val.values == (None,):
                        return True, val.facts
            elif not (isinstance(stmt, ast.Pass) or isinstance(stmt, ast.Assign) and isinstance(stmt.value, SAFE_VALUES)):
                return None, ()
        return False, tuple(facts)

    def _functiondef(self, node: ast.FunctionDef, reach: Reach) -> None:
        self.ev.scope[node.name] = UNKNOWN
        saved = dict(self.ev.scope)
        self._block(node.body, reach.under(f"`{node.name}()` is called", "", "", None, ()))
        self.ev.scope = saved  # its variables are its own

    _asyncfunctiondef = _functiondef

    def _match(self, node: ast.Match, reach: Reach) -> None:
        subject = self.text(node.subject)
        self._branches([(case.body, reach.under(f"`match {subject}` takes `case {self.text(case.pattern)}`", "", "",
                                                None, ())) for case in node.cases], None)

    def _loop(self, node, reach: Reach) -> None:
        self._unknown_targets(node, reach)
        self._branches([(node.body + node.orelse, reach), ([], reach)], None)

    _for = _asyncfor = _while = _loop

    def _with(self, node, reach: Reach) -> None:
        self._unknown_targets(node, reach)
        self._block(node.body, reach)

    _asyncwith = _with

    def _classdef(self, node: ast.ClassDef, reach: Reach) -> None:
        self.ev.scope[node.name] = UNKNOWN
        saved = dict(self.ev.scope)
        self._block(node.body, reach)
        self.ev.scope = saved

    # --- variables ----------------------------------------------------------------------------------------

    def _assign(self, node: ast.Assign, reach: Reach) -> None:
        if reach.never:
            return
        value = UNKNOWN if _shell_line(node) is not None else self.ev.value(node.value)
        for target in node.targets:
            self._bind(target, value)

    def _annassign(self, node: ast.AnnAssign, reach: Reach) -> None:
        if not reach.never and node.value is not None:
            self._bind(node.target, self.ev.value(node.value))

    def _bind(self, target: ast.AST, value: Val) -> None:
        if isinstance(target, ast.Name):
            self.ev.scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            n = len(target.elts)
            fits = value.values is not None and all(isinstance(v, tuple) and len(v) == n for v in value.values)
            for i, elt in enumerate(target.elts):
                self._bind(elt, Val(tuple(dict.fromkeys(v[i] for v in value.values)), value.facts) if fits else UNKNOWN)

    def _unknown_targets(self, stmt: ast.AST, reach: Reach) -> None:
        """Names a statement binds in ways not followed here (augmented assignment, import as, for, with as)."""
        if reach.never:
            return
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.ev.scope[node.id] = UNKNOWN
            elif isinstance(node, ast.alias):
                self.ev.scope[(node.asname or node.name).split(".")[0]] = UNKNOWN


def _join(scopes: list[dict[str, Val]]) -> dict[str, Val]:
    """Every value a variable can have after branches not decided (a name bound in one arm only keeps that value)."""
    out: dict[str, Val] = {}
    for scope in scopes:
        for name, val in scope.items():
            out[name] = val if name not in out or out[name] is val else union(out[name], val)
    return out
