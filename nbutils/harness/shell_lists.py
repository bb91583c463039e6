"""Shell lines read for what runs where: `a || b`, `a && b`, `if ...; then ...; else ...; fi`, `( ... )`, `! cmd`.

Tests the platform's facts decide are decided: `pip show X`, `python -c "import X"`, `[ -n "$VAR" ]`, `[ -z ... ]`,
`[ "$VAR" = value ]`, `[ -d /path ]`, `true`, `false`. Any other command is an action, taken to succeed: what
follows its `&&` runs as it does, and what follows its `||` runs only when it fails (quoted as the condition).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from nbutils.harness.conditions import ALWAYS, Evaluator, Reach, Val

OPERATORS = ("&&", "||", ";;", ";", "|", "&", "(", ")")
RESERVED = {"then", "else", "elif", "fi", "do", "done", "}"}
VAR = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


@dataclass
class Status:
    value: bool | None  # the command's exit: True success, False failure, None not known
    facts: tuple[str, ...] = ()
    text: str = ""  # the command as written, for messages
    assumed: bool = False  # an action, taken to succeed


def tokens(lines: list[tuple[int, str]]) -> list[tuple[str, int]]:
    """(token, line) for shell text, one item per (line, text); each line ends with `;` as a newline does."""
    out = []
    for line, text in lines:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError:  # an unclosed quote: read what is there
            words = text.split()
        for w in words:
            if set(w) <= set(";&|()"):
                while w:
                    op = next(o for o in OPERATORS if w.startswith(o))
                    out.append((op, line))
                    w = w[len(op):]
            else:
                out.append((w, line))
        out.append((";", line))
    return out


class ShellReader:
    """One shell script (a `!` line, or a %%bash cell): every simple command with the reach it runs under."""

    def __init__(self, evaluator: Evaluator, toks: list[tuple[str, int]]):
        self.ev, self.toks, self.i = evaluator, toks, 0
        self.commands: list[tuple[list[str], int, Reach]] = []  # words, line, reach

    def read(self, reach: Reach = ALWAYS) -> list[tuple[list[str], int, Reach]]:
        """Every simple command; a keyword out of place (a loop's `do`/`done`) is stepped over, its body read."""
        while self.peek() is not None:
            self.seq(reach)
            self.i += 1
        return self.commands

    def peek(self) -> str | None:
        """The next token, None at the end."""
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def seq(self, reach: Reach) -> Status:
        """Lists separated by `;`, `&` or newlines, up to a keyword or `)`; the status of the last."""
        status = Status(True, assumed=True)
        while self.peek() is not None and self.peek() not in RESERVED and self.peek() != ")":
            if self.peek() in (";", "&", ";;"):
                self.i += 1
                continue
            status = self.and_or(reach)
        return status

    def and_or(self, reach: Reach) -> Status:
        """Pipelines joined by `&&`/`||`, each under what the ones before it decide."""
        status = self.pipeline(reach)
        while self.peek() in ("&&", "||"):
            op = self.toks[self.i][0]
            self.i += 1
            runs = status.value if op == "&&" else (None if status.value is None else not status.value)
            on = self.ev.platform.label
            if op == "&&" and status.assumed:
                nxt = reach
            elif op == "&&":
                nxt = reach.under(f"`{status.text}` succeeds", f"`{status.text}` succeeds on {on}",
                                  f"`{status.text}` fails on {on}", runs, status.facts)
            else:
                nxt = reach.under(f"`{status.text}` fails", f"`{status.text}` fails on {on}",
                                  f"`{status.text}` succeeds on {on}", None if status.assumed else runs, status.facts)
            right = self.pipeline(nxt)
            status = _combine(op, status, right)
        return status

    def pipeline(self, reach: Reach) -> Status:
        """`[!] cmd | cmd ...`: the status of the last command (negated by `!`)."""
        negate = self.peek() == "!"
        self.i += negate
        status = self.command(reach)
        while self.peek() == "|":
            self.i += 1
            status = self.command(reach)
        if negate:
            status = Status(None if status.value is None or status.assumed else not status.value, status.facts,
                            "! " + status.text)
        return status

    def command(self, reach: Reach) -> Status:
        """An `if` clause, a `( ... )`/`{ ...; }` group, or a simple command (recorded with its reach)."""
        tok = self.peek()
        if tok == "if":
            return self.if_clause(reach)
        if tok in ("(", "{"):
            self.i += 1
            status = self.seq(reach)
            self.i += self.peek() in (")", "}")
            return status
        words, line = [], self.toks[self.i][1] if self.i < len(self.toks) else 0
        while self.peek() is not None and self.peek() not in OPERATORS and not (not words and self.peek() in RESERVED):
            words.append(self.toks[self.i][0])
            self.i += 1
        if not words:
            return Status(True, assumed=True)
        self.commands.append((words, line, reach))
        return self.test(words)

    def if_clause(self, reach: Reach) -> Status:
        """`if A; then B; [elif C; then D;] [else E;] fi`: each arm under its test, decided when the facts allow."""
        last, arm_reach, on = Status(True, assumed=True), reach, self.ev.platform.label
        while self.peek() in ("if", "elif"):
            self.i += 1
            test = self.seq(arm_reach)
            self.i += self.peek() == "then"
            runs = None if test.assumed else test.value
            last = self.seq(arm_reach.under(f"`{test.text}` succeeds", f"`{test.text}` succeeds on {on}",
                                            f"`{test.text}` fails on {on}", runs, test.facts))
            arm_reach = arm_reach.under(f"`{test.text}` fails", f"`{test.text}` fails on {on}",
                                        f"`{test.text}` succeeds on {on}", None if runs is None else not runs, test.facts)
        if self.peek() == "else":
            self.i += 1
            last = self.seq(arm_reach)
        self.i += self.peek() == "fi"
        return last

    # --- tests the facts decide ---------------------------------------------------------------------------

    def test(self, words: list[str]) -> Status:
        """The exit of a simple command where the facts decide it; an action is taken to succeed."""
        text = " ".join(words)
        head = words[1:] if len(words) > 2 and words[1] == "-m" and words[0].startswith("python") else words
        if head[0] in ("true", ":"):
            return Status(True, text=text)
        if head[0] == "false":
            return Status(False, text=text)
        if head[:1] in (["pip"], ["pip3"]) and head[1:2] == ["show"] or head[:3] == ["uv", "pip", "show"]:
            names = [w for w in head[head.index("show") + 1:] if not w.startswith("-")]
            return self._all([self._dist(n) for n in names], text)
        if re.match(r"^python[0-9.]*$", words[0]) and words[1:2] == ["-c"] and len(words) > 2:
            m = re.fullmatch(r"\s*import\s+([\w.]+(?:\s*,\s*[\w.]+)*)\s*;?\s*", words[2])
            if m:
                return self._all([self._module(n.strip()) for n in m.group(1).split(",")], text)
        if words[0] in ("[", "[[", "test"):
            inner = [w for w in words[1:] if w not in ("]", "]]")]
            return Status(*self._bracket(inner), text=text)
        if words[0] in ("command", "which", "type", "hash"):
            return Status(None, text=text)
        return Status(True, text=text, assumed=True)

    def _dist(self, name: str) -> Val:
        found = self.ev.platform.version(name) is not None
        return Val((found,), (f"{name} is {'on' if found else 'not on'} {self.ev.platform.label}'s image",))

    def _module(self, name: str) -> Val:
        val = self.ev.module(name)
        return Val((val.values != (None,),), val.facts)

    @staticmethod
    def _all(vals: list[Val], text: str) -> Status:
        if not vals:
            return Status(None, text=text)
        failing = next((v for v in vals if v.values == (False,)), None)
        if failing:
            return Status(False, failing.facts, text)
        return Status(True, tuple(f for v in vals for f in v.facts), text)

    def _bracket(self, inner: list[str]) -> tuple[bool | None, tuple[str, ...]]:
        if inner[:1] == ["!"]:
            value, facts = self._bracket(inner[1:])
            return (None if value is None else not value), facts
        if len(inner) == 2 and inner[0] in ("-n", "-z") and (m := VAR.match(inner[1])):
            has = self.ev.env_has(m.group(1))
            value = has.truth()
            return (None if value is None else value == (inner[0] == "-n")), has.facts
        if len(inner) == 2 and inner[0] in ("-d", "-e", "-f"):
            val = self.ev.path_exists(inner[1])
            return val.truth(), val.facts
        if len(inner) == 3 and inner[1] in ("=", "==", "!=") and (m := VAR.match(inner[0])):
            val = self.ev.env_get(m.group(1), Val(("",)))
            if val.values is None or not all(isinstance(v, str) for v in val.values):
                return None, val.facts
            same = {v == inner[2] for v in val.values}
            value = same.pop() if len(same) == 1 else None
            return (None if value is None else value == (inner[1] != "!=")), val.facts
        return None, ()


def _combine(op: str, left: Status, right: Status) -> Status:
    """The exit of `left op right` in three values (an action's assumed success counts as success)."""
    text = f"{left.text} {op} {right.text}"
    facts = left.facts + right.facts
    a = True if left.assumed else left.value
    if op == "&&":
        value = False if a is False else right.value if a is True else (False if right.value is False else None)
    else:
        value = True if a is True and not left.assumed else right.value if a is False else (
            True if right.value is True else None)
    return Status(value, facts, text, assumed=left.assumed and right.assumed)
