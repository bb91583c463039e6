"""Import every nbutils module once, in one process, so that Python writes the bytecode of what the suite imports.

`make setup` runs it after installing with --no-compile: compiling all of site-packages instead took 40 s on two
cores, mostly for modules the suite never imports (transformers' other model folders, most of torch). Whatever this
leaves out compiles on first import. A module that fails to import is named here and by tests/test_imports.py; setup
goes on.
"""

import importlib
import pkgutil

import nbutils


def main() -> None:
    failed = []
    for module in pkgutil.walk_packages(nbutils.__path__, "nbutils.", onerror=failed.append):
        if not module.name.endswith("__main__"):
            try:
                importlib.import_module(module.name)
            except Exception as e:  # noqa: BLE001 - reported, and tests/test_imports.py fails on it
                failed.append(f"{module.name} ({type(e).__name__}: {e})")
    print(f"[setup] {len(failed)} nbutils module(s) did not import: {failed}" if failed else
          "[setup] bytecode written for every module nbutils imports")


if __name__ == "__main__":
    main()
