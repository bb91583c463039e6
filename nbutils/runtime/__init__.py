"""Where the notebooks run (Kaggle, Colab, local) and what the install step leaves behind there.

- `environment`: the platform, its run type and the input/working roots; stage folders.
- `modelsource`: where the base model comes from, and one clear message when it cannot be reached.
- `preflight`: accelerators, the precision rule, versions and disk, checked near each notebook's top.
- `packages`: the package table: pins, minimums, what images preinstall, the torch stack, the version parser.
- `install`: install only what the platform lacks, pinned, never torch.
- `install_verify`: after pip, what changed, what the kernel still holds, and whether it imports.
- `llamacpp`: llama.cpp's converter, sources and real vocabularies from the pinned llama-cpp-python sdist.
- `output`: what a run prints: known harmless library messages filtered, progress bars that end.
- `secrets`: secrets read the platform's way, never printed, redacted from what is written.
- `limits`: what each platform gives a run: session limit, weekly GPU quota, GPUs.
- `settings`: the project's addresses (repository, Kaggle owner, dataset slug).
"""
