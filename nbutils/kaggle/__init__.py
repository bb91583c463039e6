"""Publishing to Kaggle and Colab (no notebook imports this).

Command line: `python -m nbutils.kaggle metadata|bundle|push|dataset|wheelhouse-check|table|sync`.

- `kernels`: kernel metadata for each notebook, push-ready bundles, the push in chain order.
- `dataset`: the nbutils dataset: the nbutils wheel plus an offline wheelhouse.
- `badges`: Colab/Kaggle badges, the README's notebooks table, the notebooks' generated parts.
- `wheelhouse_check`: proof that the nbutils dataset alone installs everything, offline.
"""
