"""The harness gallery: one small notebook per check id, plus clean ones that must pass.

Notebooks are built here (not committed as .ipynb) so each case reads as a few lines of source.
`build(dest)` writes them all and returns {name: (expected check id or None, expected cell)}.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

PARAMS = 'steps = 1  # a knob'
FAKE_HF = "hf_" + "Ab3" * 12  # built at run time: no token-shaped literal sits in the repository

# name -> (cells after title+parameters, expected check id, expected cell index or None)
# Cell 0 is a markdown title, cell 1 the parameters cell; the listed cells start at index 2.
STATIC = {
    "stale_import": (["import transformers", "!pip install -q peft==0.21.2"], "stale-import", 3),
    "unpinned_install": (["!pip install -U transformers"], "unpinned-install", 2),
    "background_process": (["!python -m http.server 8000 &"], "background-process", 2),
    "blocking_input": (["name = input('model? ')"], "blocking-input", 2),
    "hidden_install_output": (["%%capture\n!pip install -q peft==0.21.2"], "hidden-install-output", 2),
    "absolute_path": (["data = open('/home/alice/data.csv')"], "absolute-path", 2),
    "widget_progress": (["from tqdm.notebook import tqdm\nfor _ in tqdm(range(3)):\n    pass"], "widget-progress", 2),
    "secret_in_source": ([f"token = '{FAKE_HF}'"], "secret-in-source", 2),
    "missing_parameters": (None, "missing-parameters", None),
    "missing_kernelspec": (["x = 1"], "missing-kernelspec", None),
    "committed_outputs": (["x = 1"], "committed-outputs", 2),
    "pair_drift": (["x = 1"], "pair-drift", 2),
}
RUNTIME = {
    "cell_error": (["x = 1\nraise ValueError('boom')"], "cell-error", 2),
    "shell_error": (["!exit 3\nprint('carried on')"], "shell-error", 2),
    "stderr_traceback": (["import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()"],
                         "stderr-traceback", 2),
    "network_access": (["import socket\ntry:\n    socket.create_connection(('0.0.0.1', 9), timeout=1)\n"
                        "except OSError as e:\n    print('refused:', e)"], "network-access", 2),
    "time_budget": (["import time\ntime.sleep(60)"], "time-budget", 2),
    "secret_in_output": (["import os\nprint(os.environ['NBUTILS_GALLERY_TOKEN'])"], "secret-in-output", 2),
    "output_limit": (["from pathlib import Path\nfor i in range(501):\n    Path(f'f{i}.txt').write_text('x')"],
                     "output-limit", None),
    "stale_module": None,  # built below: needs two local wheels
    "package_conflict": None,
}
WHEEL = '''import base64, hashlib, pathlib, zipfile
def wheel(dest, name, version, requires=()):
    """A minimal pure-Python wheel, built locally so the cell needs no network."""
    path = pathlib.Path(dest) / f"{name}-{version}-py3-none-any.whl"
    files = {f"{name}/__init__.py": f"__version__ = '{version}'\\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n"
             + "".join(f"Requires-Dist: {r}\\n" for r in requires),
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: gallery\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    record = ""
    for n, t in files.items():
        d = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
        record += f"{n},sha256={d},{len(t.encode())}\\n"
    files[f"{name}-{version}.dist-info/RECORD"] = record + f"{name}-{version}.dist-info/RECORD,,\\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, t in files.items():
            z.writestr(n, t)
    return str(path)'''
STALE = [WHEEL + "\nimport os, sys\nsite = os.path.abspath('site')\nos.makedirs(site, exist_ok=True)\nsys.path.insert(0, site)\n"
         "w1, w2 = wheel('.', 'gallerypkg', '1.0'), wheel('.', 'gallerypkg', '2.0')",
         "!pip install -q --no-index --no-deps --target site $w1",
         "import gallerypkg",
         "!pip install -q --no-index --no-deps --upgrade --target site $w2"]
CONFLICT = [WHEEL + "\nimport os\nsite = os.path.abspath('site')\n"
            "os.environ['PYTHONPATH'] = site + os.pathsep + os.environ.get('PYTHONPATH', '')\n"
            "w = wheel('.', 'needsmissing', '1.0', ['nonexistent-gallery-dep'])",
            "!pip install -q --no-index --no-deps --target site $w"]
RUNTIME["stale_module"] = (STALE, "stale-module", 5)
RUNTIME["package_conflict"] = (CONFLICT, "package-conflict", 3)
CLEAN = {
    "clean_minimal": ["import json\nprint(json.dumps({'steps': steps}))"],
    "clean_files": ["from pathlib import Path\nPath('out.txt').write_text('ok')\nimport tempfile\n"
                    "tempfile.NamedTemporaryFile(delete=False).write(b'x')\nprint('TMPDIR', tempfile.gettempdir())\n"
                    "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.savefig('plot.png')"],
}


def notebook(cells: list[str] | None, kernelspec: bool = True, tags: dict | None = None):
    nb = new_notebook()
    nb.cells.append(new_markdown_cell("# gallery case"))
    if cells is not None:
        nb.cells.append(new_code_cell(PARAMS, metadata={"tags": ["parameters"]}))
        nb.cells += [new_code_cell(src) for src in cells]
    else:
        nb.cells.append(new_code_cell("x = 1"))
    if kernelspec:
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for index, tag in (tags or {}).items():
        nb.cells[index].metadata.setdefault("tags", []).append(tag)
    return nb


def build(dest: Path) -> dict[str, tuple[str | None, int | None]]:
    """Write every gallery notebook into dest; return name -> (expected check, expected cell)."""
    import jupytext

    dest.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (cells, check, cell) in {**STATIC, **RUNTIME}.items():
        nb = notebook(cells, kernelspec=name != "missing_kernelspec")
        if name == "committed_outputs":
            nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="1\n")]
            nb.cells[2].execution_count = 1
        nbformat.write(nb, dest / f"{name}.ipynb")
        if name == "pair_drift":
            edited = notebook(["x = 2"])
            jupytext.write(edited, dest / f"{name}.py", fmt="py:percent")
        expected[name] = (check, cell)
    for name, cells in CLEAN.items():
        nbformat.write(notebook(cells), dest / f"{name}.ipynb")
        expected[name] = (None, None)
    allowed = notebook(["data = open('/home/alice/data.csv') if False else None"], tags={2: "allow-absolute-path"})
    nbformat.write(allowed, dest / "allowed_absolute_path.ipynb")
    expected["allowed_absolute_path"] = ("absolute-path", 2)
    return expected


if __name__ == "__main__":
    import sys

    for k, v in build(Path(sys.argv[1])).items():
        print(k, v)
