"""The dry run of a model's exact architecture before any GPU time (`python -m nbutils.plan dry-run MODEL`).

A build-and-check tool like `harness`, above it (it drives the chain through the harness) and, like it, never
imported by a notebook and left out of the wheel the notebooks install.

- `fetch`: a model's light files only: config.json, the tokenizer files and generation_config.json, never the weights.
- `shrink`: a random-weight twin of a model's exact architecture, small enough to train on a CPU in seconds.
- `dryrun`: the dry run: a model's exact architecture, shrunk, with random weights, through 01 -> 02 -> 03 -> 04 on a CPU.
- `memcheck`: the dry run's memory check: each notebook's plan on a T4 beside the twin's peak, extrapolated to depth.
- `probes`: each notebook's work re-run on a twin in one fresh process, its peak memory measured.
"""
