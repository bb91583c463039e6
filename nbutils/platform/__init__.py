"""Where the notebooks run (Kaggle, Colab, local) and what the install step leaves behind there."""
