"""Python conditions decided from a platform's facts: environment variables, find_spec, sys.version_info, paths.

`Evaluator.value(node)` gives the possible values of an expression (a tuple; None when not known) and the facts
that decided them; `truth(node)` True, False or None (cannot be decided here). Variables assigned a known value are
followed (`scope`), so `IN_COLAB = "COLAB_" in "".join(os.environ.keys())` then `if IN_COLAB:` is decided too.
"""

from __future__ import annotations

import ast
import itertools
import operator
from dataclasses import dataclass, field, replace

from nbutils.harness.platforms import Platform

MAX_VALUES = 16  # possible values followed per expression; more is read as not known


@dataclass(frozen=True)
class Val:
    values: tuple | None  # the possible values; None: not known
    facts: tuple[str, ...] = ()

    def truth(self) -> bool | None:
        """True or False when every possible value agrees, else None."""
        if self.values is None:
            return None
        truths = {bool(v) for v in self.values}
        return truths.pop() if len(truths) == 1 else None


UNKNOWN = Val(None)


@dataclass(frozen=True)
class Reach:
    """Whether a line runs on the platform: never (and why), or always but for the conditions not decided."""

    never: str = ""  # why it cannot run there ('' when it can)
    unless: tuple[str, ...] = ()  # conditions not decided here, as written: the line runs only when they hold
    because: tuple[str, ...] = ()  # conditions decided in its favour, each with the facts that decided it

    def under(self, holds: str, is_true: str, is_false: str, runs: bool | None, facts: tuple[str, ...]) -> Reach:
        """This reach inside a branch: `holds` when not decided, `is_true`/`is_false` (+ facts) when decided."""
        if self.never:
            return self
        why = f", since {'; '.join(facts)}" if facts else ""
        if runs is False:
            return Reach(never=is_false + why)
        if runs is True:
            return replace(self, because=self.because + (is_true + why,))
        return replace(self, unless=self.unless + (holds,))

    def within(self, outer: Reach) -> Reach:
        """This reach (of a command inside a line) inside the reach of its line."""
        if outer.never or self.never:
            return Reach(never=outer.never or self.never)
        return Reach(unless=outer.unless + self.unless, because=outer.because + self.because)


ALWAYS = Reach()


@dataclass
class CellReach:
    lines: dict[int, Reach] = field(default_factory=dict)  # 0-based line -> its reach (absent: always)
    variables: dict[int, dict[str, str]] = field(default_factory=dict)  # shell line -> names with one known value

    def at(self, line: int) -> Reach:
        """The reach of a 0-based line of the cell."""
        return self.lines.get(line, ALWAYS)


class _Marker:
    """A value that stands for something of the platform (os.environ, its keys joined, a found module spec)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


ENV, ENV_KEYS, ENV_JOIN, SPEC, SET = (_Marker(n) for n in ("os.environ", "env-keys", "env-join", "spec", "set"))
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
           ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def dotted(node: ast.AST) -> str:
    """`os.environ.get` for an attribute chain of names, '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _merge(vals: list[Val], values) -> Val:
    facts = tuple(dict.fromkeys(f for v in vals for f in v.facts))
    return Val(tuple(values), facts) if values is not None else Val(None, facts)


class Evaluator:
    """Expressions of one notebook, under one platform's facts; `scope` holds the variables followed so far."""

    def __init__(self, platform: Platform):
        self.platform = platform
        self.scope: dict[str, Val] = {}

    def truth(self, node: ast.AST) -> tuple[bool | None, tuple[str, ...]]:
        """Is the condition true on the platform (None: cannot tell), and the facts that decided it."""
        val = self.value(node)
        return val.truth(), val.facts

    def value(self, node: ast.AST) -> Val:
        """The possible values of an expression and the facts behind them (UNKNOWN when not followed)."""
        if isinstance(node, ast.Constant):
            return Val((node.value,))
        if isinstance(node, ast.Name):
            return self.scope.get(node.id, UNKNOWN)
        name = dotted(node)
        if name == "os.environ":
            return Val((ENV,))
        if name == "sys.version_info":
            return Val((PyVersion(self.platform.python),), (f"{self.platform.label} runs Python "
                                                 f"{'.'.join(map(str, self.platform.python))}",))
        if name == "sys.platform":
            return Val(("linux",))
        for kind, handler in ((ast.Call, self._call), (ast.Compare, self._compare), (ast.BoolOp, self._boolop),
                              (ast.UnaryOp, self._unary), (ast.IfExp, self._ifexp), (ast.Tuple, self._tuple),
                              (ast.Subscript, self._subscript), (ast.Attribute, self._attribute)):
            if isinstance(node, kind):
                return handler(node)
        return UNKNOWN

    # --- the platform's facts -----------------------------------------------------------------------------

    def env_has(self, var: str) -> Val:
        """Is the variable set on the platform?"""
        p = self.platform
        if var in p.env:
            return Val((True,), (p.env_why[var],))
        absent = next((a for a in p.env_absent if a in var), None)
        return Val((False,), (f"{p.label} sets no {absent}* variable",)) if absent else UNKNOWN

    def env_get(self, var: str, default) -> Val:
        """os.environ.get(var, default) on the platform (SET: set, value not known)."""
        has = self.env_has(var)
        if has.values is None or default.values is None and has.values == (False,):
            return UNKNOWN
        if has.values == (False,):
            return Val(default.values, has.facts + default.facts)
        known = self.platform.env[var]
        return Val((SET if known is None else known,), has.facts)

    def env_key_contains(self, text: str) -> Val:
        """Does some variable's name contain the text?"""
        p = self.platform
        hit = next((v for v in p.env if text in v), None)
        if hit:
            return Val((True,), (p.env_why[hit],))
        absent = next((a for a in p.env_absent if a in text), None)
        return Val((False,), (f"{p.label} sets no {absent}* variable",)) if absent else UNKNOWN

    def module(self, name: str) -> Val:
        """importlib.util.find_spec(name) on a fresh image: SPEC or None."""
        found = self.platform.has_module(name)
        where = f"{self.platform.label}'s image"
        return Val((SPEC,) if found else (None,), (f"{name} is {'on' if found else 'not on'} {where}",))

    def path_exists(self, path: str) -> Val:
        """Does the path exist on the platform (only the roots it is known for)?"""
        known = self.platform.paths.get(path.rstrip("/") or "/")
        if known is None:
            return UNKNOWN
        return Val((known,), (f"{path} {'exists' if known else 'does not exist'} on {self.platform.label}",))

    # --- expressions --------------------------------------------------------------------------------------

    def _call(self, node: ast.Call) -> Val:
        name = dotted(node.func)
        arg = node.args[0] if node.args else None
        text = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
        if name.endswith("find_spec") and name.split(".")[0] in ("importlib", "util", "find_spec") and text:
            return self.module(text)
        if name in ("os.environ.get", "os.getenv") and text:
            default = self.value(node.args[1]) if len(node.args) > 1 else Val((None,))
            return self.env_get(text, default)
        if name == "os.environ.keys":
            return Val((ENV_KEYS,))
        if name in ("os.path.exists", "os.path.isdir") and text:
            return self.path_exists(text)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "join" and isinstance(node.func.value, ast.Constant):
            inner = self.value(arg) if arg is not None else UNKNOWN
            return Val((ENV_JOIN,)) if inner.values in ((ENV,), (ENV_KEYS,)) else UNKNOWN
        if name == "any" and isinstance(arg, ast.GeneratorExp):
            return self._any_variable(arg)
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("exists", "is_dir") and \
                isinstance(node.func.value, ast.Call) and dotted(node.func.value.func) in ("Path", "pathlib.Path"):
            inner = node.func.value.args
            if inner and isinstance(inner[0], ast.Constant) and isinstance(inner[0].value, str):
                return self.path_exists(inner[0].value)
        return UNKNOWN

    def _any_variable(self, gen: ast.GeneratorExp) -> Val:
        """`any(k.startswith("COLAB_") for k in os.environ)` and `any("COLAB_" in k for k in os.environ)`."""
        comp = gen.generators[0]
        if len(gen.generators) != 1 or comp.ifs or self.value(comp.iter).values not in ((ENV,), (ENV_KEYS,)):
            return UNKNOWN
        elt = gen.elt
        if isinstance(elt, ast.Call) and isinstance(elt.func, ast.Attribute) and elt.func.attr == "startswith" \
                and elt.args and isinstance(elt.args[0], ast.Constant) and isinstance(elt.args[0].value, str):
            return self.env_key_contains(elt.args[0].value)  # a prefix is in the name: the same facts decide it
        if isinstance(elt, ast.Compare) and isinstance(elt.ops[0], ast.In) and isinstance(elt.left, ast.Constant) \
                and isinstance(elt.left.value, str):
            return self.env_key_contains(elt.left.value)
        return UNKNOWN

    def _compare(self, node: ast.Compare) -> Val:
        left, parts = self.value(node.left), []
        for op, right_node in zip(node.ops, node.comparators):
            right = self.value(right_node)
            parts.append(self._compare_one(left, op, right))
            left = right
        return self._all(parts)

    def _compare_one(self, left: Val, op: ast.cmpop, right: Val) -> Val:
        if isinstance(op, (ast.In, ast.NotIn)) and right.values in ((ENV,), (ENV_KEYS,), (ENV_JOIN,)) \
                and left.values is not None and len(left.values) == 1 and isinstance(left.values[0], str):
            found = (self.env_has if right.values != (ENV_JOIN,) else self.env_key_contains)(left.values[0])
            return self._not(found) if isinstance(op, ast.NotIn) else found
        if left.values is None or right.values is None:
            return _merge([left, right], None)
        results, identity = [], isinstance(op, (ast.Is, ast.IsNot))
        for a, b in itertools.product(left.values, right.values):
            if not identity and any(isinstance(v, _Marker) and v is not SPEC for v in (a, b)):
                return _merge([left, right], None)  # a variable set to a value not known here
            if not identity and _micro_matters(a, b):
                return _merge([left, right], None)  # (3, 12) against (3, 12, 1): the image's micro is not known
            try:
                results.append(bool(COMPARE[type(op)](a, b)))
            except TypeError:
                return _merge([left, right], None)
        return _merge([left, right], set(results))

    @staticmethod
    def _not(val: Val) -> Val:
        return Val(None if val.values is None else tuple({not v for v in val.values}), val.facts)

    @staticmethod
    def _all(parts: list[Val]) -> Val:
        """And of 3-valued parts: False if one is False, True if all are True, else not known."""
        truths = [p.truth() for p in parts]
        if False in truths:
            return Val((False,), parts[truths.index(False)].facts)
        return _merge(parts, (True,) if all(truths) else None)

    def _boolop(self, node: ast.BoolOp) -> Val:
        parts = [self.value(v) for v in node.values]
        if isinstance(node.op, ast.And):
            return self._all(parts)
        truths = [p.truth() for p in parts]  # or: True if one is True, False if all are False
        if True in truths:
            return Val((True,), parts[truths.index(True)].facts)
        return _merge(parts, (False,) if all(t is False for t in truths) else None)

    def _unary(self, node: ast.UnaryOp) -> Val:
        val = self.value(node.operand)
        if isinstance(node.op, ast.Not):
            truth = val.truth()
            return Val(None if truth is None else (not truth,), val.facts)
        if isinstance(node.op, ast.USub) and val.values is not None and all(isinstance(v, (int, float)) for v in val.values):
            return Val(tuple(-v for v in val.values), val.facts)
        return UNKNOWN

    def _ifexp(self, node: ast.IfExp) -> Val:
        test = self.value(node.test)
        truth = test.truth()
        if truth is not None:
            chosen = self.value(node.body if truth else node.orelse)
            return _merge([test, chosen], chosen.values)
        return union(self.value(node.body), self.value(node.orelse))

    def _tuple(self, node: ast.Tuple) -> Val:
        parts = [self.value(e) for e in node.elts]
        if any(p.values is None for p in parts):
            return UNKNOWN
        combos = list(itertools.islice(itertools.product(*(p.values for p in parts)), MAX_VALUES + 1))
        return _merge(parts, combos) if len(combos) <= MAX_VALUES else UNKNOWN

    def _subscript(self, node: ast.Subscript) -> Val:
        base = self.value(node.value)
        if base.values == (ENV,) and isinstance(node.slice, ast.Constant):
            return self.env_get(node.slice.value, UNKNOWN)
        index = self.value(node.slice) if not isinstance(node.slice, ast.Slice) else self._slice(node.slice)
        if base.values is None or index.values is None or len(index.values) != 1:
            return UNKNOWN
        try:
            return _merge([base, index], [b[index.values[0]] for b in base.values])
        except (TypeError, IndexError, KeyError):
            return UNKNOWN

    def _slice(self, node: ast.Slice) -> Val:
        bounds = [self.value(b) if b is not None else Val((None,)) for b in (node.lower, node.upper, node.step)]
        if any(b.values is None or len(b.values) != 1 for b in bounds):
            return UNKNOWN
        return Val((slice(*(b.values[0] for b in bounds)),))

    def _attribute(self, node: ast.Attribute) -> Val:
        base = self.value(node.value)
        fields = {"major": 0, "minor": 1}
        if node.attr in fields and base.values is not None and all(isinstance(v, tuple) for v in base.values):
            return Val(tuple(v[fields[node.attr]] for v in base.values), base.facts)
        return UNKNOWN


class PyVersion(tuple):
    """The platform's (major, minor): compared with a longer tuple of the same major and minor, not known."""


def _micro_matters(a, b) -> bool:
    for x, y in ((a, b), (b, a)):
        if isinstance(x, PyVersion) and isinstance(y, tuple) and len(y) > 2 and tuple(y[:2]) == tuple(x):
            return True
    return False


def union(a: Val, b: Val) -> Val:
    """Either value (a variable set in one branch of a condition not decided)."""
    if a.values is None or b.values is None:
        return UNKNOWN
    values = list(a.values) + [v for v in b.values if v not in a.values]
    return _merge([a, b], values) if len(values) <= MAX_VALUES else UNKNOWN
