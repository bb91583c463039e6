"""Kaggle and Colab: kernel metadata, push-ready bundles, the nbutils dataset, and the one-click badges.

Every URL comes from `nbutils.runtime.settings` (REPOSITORY, ref(), KAGGLE_OWNER; env overrides there).

    python -m nbutils.kaggle metadata          # (re)write kaggle-metadata/<slug>/kernel-metadata.json
    python -m nbutils.kaggle bundle            # build/kaggle/<slug>/ ready for `kaggle kernels push -p`
    python -m nbutils.kaggle push              # bundle + push in chain order, waiting for each run
    python -m nbutils.kaggle dataset           # build/kaggle-dataset[-pyX.Y]/: nbutils wheel + offline wheelhouse
    python -m nbutils.kaggle wheelhouse-check  # prove the wheelhouse installs with --no-index into torch-only venv
    python -m nbutils.kaggle table             # the README's notebooks table with badges
    python -m nbutils.kaggle sync              # after changing settings: metadata + notebooks' badges/install cell
"""

from __future__ import annotations

import os
import sys

from nbutils.kaggle import badges, dataset, kernels


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv) or ["bundle"]
    cmd = args[0]
    if cmd == "metadata":
        print("\n".join(str(p) for p in kernels.write_metadata()))
    elif cmd == "bundle":
        print("\n".join(str(p) for p in kernels.bundle()))
    elif cmd == "push":
        return kernels.push(wait=os.environ.get("KAGGLE_PUSH_WAIT", "1") != "0")
    elif cmd == "dataset":
        dest = dataset.dataset()
        wheels = list(dest.glob("*.whl"))
        print(f"{dest}: {len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 2**20:.0f} MiB for Python "
              f"{dataset.KAGGLE_PYTHON}. Upload: kaggle datasets create -p {dest} (later: kaggle datasets version -p {dest} -m ...)")
        if dataset.KAGGLE_PYTHON != dataset.image_python():
            print(f"note: Kaggle's image runs Python {dataset.image_python()} (kaggle-image/freezes/kaggle.txt) and this "
                  f"wheelhouse is for {dataset.KAGGLE_PYTHON} (what this machine's twins and wheelhouse check install): "
                  f"for the upload, build it with KAGGLE_PYTHON={dataset.image_python()} make kaggle-dataset")
    elif cmd == "wheelhouse-check":
        from nbutils.kaggle.wheelhouse_check import wheelhouse_check

        for result in wheelhouse_check(twins=os.environ.get("TWINS", "1") != "0"):
            print("[wheelhouse-check] OK " + " ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    elif cmd == "table":
        print(badges.notebooks_table_markdown())
    elif cmd == "sync":
        paths = kernels.write_metadata() + badges.sync_notebooks()
        print("\n".join(str(p) for p in paths))
    else:
        print(f"unknown command {cmd!r}: metadata, bundle, push, dataset, wheelhouse-check, table or sync", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
