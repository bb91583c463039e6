"""Training building blocks (the rest of training moves here with the layout change).

- `loss`: chunked cross-entropy from the last hidden states (never the full logits), or liger's fused kernel.
- `manifest`: every checkpoint file with its size and SHA-256, the step and the run's settings.
- `runlock`: one run per output_dir (filelock), naming the holder.
- `diskspace`: a full disk as one clear error with the numbers.
- `faultpoints`: named kill points, armed only by the fault-injection tests.
"""
