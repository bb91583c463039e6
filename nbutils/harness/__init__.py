"""papermill-check: the notebooks run as a Kaggle background run runs them, and stricter (no notebook imports this).

- `runner`: run and check notebooks in the sandbox, in the project venv or a twin.
- `cli`: the command line (`python -m nbutils.harness`: run, lint, check).
- `notebook_recipe`: 02's recipe run from the notebook itself, for tests and benches that train outside a run.
- `ipc_kernels`: the kernel manager runs start kernels with (Unix sockets: side-by-side runs never race for a port).
- `sandbox`: one Kaggle background run simulated locally (paths, internet switch, time budget).
- `nbchecks`: static checks that find what kills a batch run without starting a kernel.
- `problems`: one problem found: check id, notebook, cell and line, what happens, the fix.
- `install_checks`: the install checks, judged by what each install line does on the platform's image.
- `install_lines`: install commands in cells, read the way a shell reads them.
- `shell_lists`: shell lines read for what runs: `||`, `&&`, `if ... fi`, tests the platform's facts decide.
- `branches`: which lines of a Python cell run on a platform (the cell read with ast, its branches decided).
- `conditions`: Python conditions decided from a platform's facts (environment, find_spec, sys.version_info).
- `platforms`: what Kaggle and Colab preinstall (from their freezes), their Python, environment and paths.
- `results`: one row per notebook, report.json, junit.xml and the summary table.
- `chainrun`: the chain run papermill-check stamps, which the tests reuse while the sources are unchanged.
- `twin`: twins of the Kaggle image, one venv per snapshot, a hard-linked copy per notebook.
- `shared_install`: a chain's install step run once per twin; the later notebooks start where it ended.
"""
