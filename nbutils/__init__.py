"""nbutils: the helper package behind the QLoRA notebooks, 01_data_prep to 05_preference.

The chain: 01_data_prep -> 02_train_qlora -> 03_eval -> 04_export; 05_preference tunes 02's adapter further and
feeds 04 the same way (its report has 03's shape).

The notebooks import the first five subpackages; `harness` and `kaggle` are the project's own build and
check tools (papermill-check, Kaggle bundles and the wheelhouse) and no notebook imports them.
`python -m nbutils` prints this map with every module's one-line summary.

- `runtime`: where the notebooks run and what they need there (paths, preflight, install, secrets).
- `data`: raw records in, chat-formatted and tokenized splits out, and how they are batched.
- `train`: the 4-bit model with LoRA, the memory plan, the Trainer run and its checkpoints.
- `eval`: generation under the degeneration guard, task metrics and the report.
- `export`: the export gate, merged and adapter exports, model cards, Hub push, GGUF.
- `harness`: papermill-check, the simulated Kaggle background run and the Kaggle image twins.
- `kaggle`: kernel metadata, bundles, the nbutils dataset and Colab/Kaggle badges.
- `plan`: the dry run of a model's exact architecture on a CPU, before any GPU time.

Chain-wide modules:
- `chain`: the notebooks in order, their folders, marker files, Kaggle slugs and upstreams (one source).
- `defaults`: the "auto" values of learning_rate, max_steps, max_seq_len and max_new_tokens, and `is_auto`.
- `embedded`: the embedded default model and dataset, built offline.
- `plots`: the one matplotlib helper (Agg-safe).
"""
