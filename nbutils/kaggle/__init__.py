"""Publishing to Kaggle and Colab (no notebook imports this).

- `publish`: kernel metadata, push-ready bundles, the nbutils dataset and the one-click badges
  (`python -m nbutils.kaggle ...`).
- `wheelhouse_check`: proof that the nbutils dataset alone installs everything, offline.
"""
