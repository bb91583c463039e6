"""tools/warm_imports.py (make setup) imports every nbutils module, names any that fails, and never stops setup."""

import importlib.util
import pkgutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("warm_imports", ROOT / "tools" / "warm_imports.py")
warm_imports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(warm_imports)


def test_a_module_that_fails_to_import_is_named_and_setup_goes_on(monkeypatch, capsys):
    found = [pkgutil.ModuleInfo(None, "nbutils.chain", False), pkgutil.ModuleInfo(None, "nbutils.no_such_module", False),
             pkgutil.ModuleInfo(None, "nbutils.__main__", False)]
    monkeypatch.setattr(warm_imports.pkgutil, "walk_packages", lambda *a, **k: iter(found))
    imported = []
    real = importlib.import_module
    monkeypatch.setattr(warm_imports.importlib, "import_module", lambda name: imported.append(name) or real(name))
    warm_imports.main()
    out = capsys.readouterr().out
    assert imported == ["nbutils.chain", "nbutils.no_such_module"]  # __main__ would run the package map
    assert "1 nbutils module(s) did not import" in out and "nbutils.no_such_module (ModuleNotFoundError" in out

