"""A small interpreter for the Go text/template subset the Modelfile's TEMPLATE uses, and Ollama's view of a chat.

Go's own rules for what it supports: text is copied as is; `{{ if X }}`/`{{ else if X }}`/`{{ else }}`/`{{ end }}`;
`{{ range .Messages }}` (dot becomes the message); fields `.System`, `.Role`, `.Content`; variables `$v := X`
(declare) and `$v = X` (assign, visible after the loop body, Go >= 1.11); conditions: a value (empty string is
false) or `eq A "literal"`. Anything else raises, so a template using more than this fails its test loudly.
Ollama (template/template.go, `collate`) passes every system message joined by a blank line as .System and keeps
them in .Messages too.
"""

from __future__ import annotations

import re

ACTION = re.compile(r"{{-?\s*(.*?)\s*-?}}", re.S)


def _parse(text: str) -> list:
    """Nested nodes: str, ("out", expr), ("set", name, expr), ("if", [(cond, body)...], else_body), ("range", expr, body)."""
    tokens, pos = [], 0
    for m in ACTION.finditer(text):
        tokens += [text[pos:m.start()], ("action", m.group(1))]
        pos = m.end()
    tokens.append(text[pos:])
    tree, stack = [], []
    node = tree
    for tok in tokens:
        if isinstance(tok, str):
            if tok:
                node.append(tok)
            continue
        act = tok[1]
        if act.startswith("if "):
            branch = ("if", [[act[3:], []]], [])
            node.append(branch)
            stack.append((node, branch))
            node = branch[1][0][1]
        elif act.startswith("else if "):
            branch = stack[-1][1]
            branch[1].append([act[8:], []])
            node = branch[1][-1][1]
        elif act == "else":
            node = stack[-1][1][2]
        elif act.startswith("range "):
            loop = ("range", act[6:], [])
            node.append(loop)
            stack.append((node, loop))
            node = loop[2]
        elif act == "end":
            node = stack.pop()[0]
        elif m := re.fullmatch(r"(\$\w+)\s*(:?=)\s*(.+)", act):
            node.append(("set", m.group(1), m.group(3)))
        else:
            node.append(("out", act))
    if stack:
        raise ValueError("unclosed {{ if }} or {{ range }}")
    return tree


def _value(expr: str, dot: dict, top: dict, variables: dict):
    expr = expr.strip()
    if expr.startswith('"'):
        return expr[1:-1]
    if expr.startswith("$"):
        return variables[expr]
    if re.fullmatch(r"\.\w+", expr):
        return dot[expr[1:]]  # inside range, dot is the message: .System there is an error, as in Go
    if m := re.fullmatch(r'eq (\S+) ("[^"]*")', expr):
        return _value(m.group(1), dot, top, variables) == m.group(2)[1:-1]
    raise ValueError(f"unsupported expression {expr!r}")


def _run(nodes: list, dot: dict, top: dict, variables: dict, out: list) -> None:
    for n in nodes:
        if isinstance(n, str):
            out.append(n)
        elif n[0] == "out":
            out.append(str(_value(n[1], dot, top, variables)))
        elif n[0] == "set":
            variables[n[1]] = _value(n[2], dot, top, variables)
        elif n[0] == "if":
            body = next((b for cond, b in n[1] if _value(cond, dot, top, variables)), n[2])
            _run(body, dot, top, variables, out)
        elif n[0] == "range":
            for item in _value(n[1], dot, top, variables):
                _run(n[2], item, top, variables, out)


def render(template: str, messages: list[dict]) -> str:
    """What Ollama's prompt would be for these messages (its collate step, then the template)."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    top = {"System": system, "Messages": [{"Role": m["role"], "Content": m["content"]} for m in messages]}
    out: list[str] = []
    _run(_parse(template), top, top, {}, out)
    return "".join(out)
