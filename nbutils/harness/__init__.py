"""papermill-check: the notebooks run as a Kaggle background run runs them, and stricter (no notebook imports this).

- `runner`: run and check notebooks in the sandbox, in the project venv or a twin.
- `cli`: the command line (`python -m nbutils.harness`: run, lint, check).
- `notebook_recipe`: 02's recipe run from the notebook itself, for tests and benches that train outside a run.
- `sandbox`: one Kaggle background run simulated locally (paths, internet switch, time budget).
- `nbchecks`: static checks that find what kills a batch run without starting a kernel.
- `install_lines`: install commands in cells, read the way a shell reads them.
- `results`: one row per notebook, report.json, junit.xml and the summary table.
- `chainrun`: the chain run papermill-check stamps, which the tests reuse while the sources are unchanged.
- `twin`: twins of the Kaggle image, one venv per snapshot, a hard-linked copy per notebook.
- `shared_install`: a chain's install step run once per twin; the later notebooks start where it ended.
"""
