"""Run a notebook's .py as a plain script, with its parameters from the command line or a file.

This is how the training notebook runs on machines with several GPUs, one process per GPU:

    accelerate launch --num_processes 2 -m nbutils.launch notebooks/02_train_qlora.py --max_steps 200
    torchrun --nproc_per_node 2 -m nbutils.launch notebooks/02_train_qlora.py --config run.yaml

The launcher does what papermill does for a kernel, in-process: it reads the jupytext notebook,
keeps the code cells, and injects the overrides right after the cell tagged `parameters`, cast to
the type of each default. Unknown names are an error (a typo would otherwise be ignored silently).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path


def parameter_defaults(source: str) -> dict:
    """Names and default values assigned in a parameters cell (literals only, as papermill sees them)."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def _cast(name: str, raw, default):
    if not isinstance(raw, str) or isinstance(default, str):
        return raw
    if isinstance(default, bool):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"--{name} expects true or false, got {raw!r}")
    if isinstance(default, (int, float)):
        try:
            value = float(raw) if isinstance(default, float) or "." in raw or "e" in raw.lower() else int(raw)
        except ValueError:
            raise ValueError(f"--{name} expects a number, got {raw!r}") from None
        return value
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def load_config(path: str | Path) -> dict:
    """Parameters from a JSON or YAML file (same names as the parameters cell)."""
    text = Path(path).read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        return yaml.safe_load(text) or {}
    return json.loads(text)


def build_script(notebook: str | Path, overrides: dict) -> tuple[str, dict]:
    """The notebook's code cells as one script with the overrides injected after `parameters`."""
    import jupytext

    nb = jupytext.read(notebook)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    params = [i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])]
    if not params:
        raise ValueError(f"{notebook}: no cell tagged 'parameters'; cannot take parameters from the command line.")
    defaults = parameter_defaults(cells[params[0]].source)
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"{notebook}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(defaults)}")
    values = {k: _cast(k, v, defaults[k]) for k, v in overrides.items()}
    injected = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    parts = []
    for i, cell in enumerate(cells):
        lines = [ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("!", "%"))]
        parts.append(f"# --- cell {i} ---\n" + "\n".join(lines))
        if i == params[0] and injected:
            parts.append("# --- injected parameters ---\n" + injected)
    return "\n\n".join(parts) + "\n", values


def parse_overrides(argv: list[str]) -> dict:
    """`--name value` pairs (and `--config FILE`) into a dict; command line wins over the file."""
    overrides, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or i + 1 >= len(argv):
            raise ValueError(f"expected '--name value' pairs, got {arg!r}")
        name, value = arg[2:].replace("-", "_"), argv[i + 1]
        if name == "config":
            overrides = {**load_config(value), **overrides}
        else:
            overrides[name] = value
        i += 2
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.launch", description=__doc__.splitlines()[0])
    parser.add_argument("notebook", help="the notebook's jupytext .py (or .ipynb)")
    args, rest = parser.parse_known_args(argv)
    try:
        script, values = build_script(args.notebook, parse_overrides(rest))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import os

    if int(os.environ.get("RANK", "0")) > 0:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- one copy of the log; errors still reach stderr
    code = compile(script, f"{args.notebook} (as script)", "exec")
    exec(code, {"__name__": "__main__", "__file__": str(Path(args.notebook).resolve())})  # noqa: S102
    return 0


if __name__ == "__main__":
    sys.exit(main())
