"""Training internals: the loss (chunked cross-entropy that never builds the full logits), and later the rest of training."""
