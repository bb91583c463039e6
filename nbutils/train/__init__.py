"""Training (02_train_qlora): the 4-bit model with LoRA, the memory plan, the Trainer run, checkpoints.

- `modeling`: load the base model in 4-bit and attach LoRA, the QLoRA way, right for a T4.
- `memory`: the memory plan before loading: does it fit, and the largest batch that does.
- `trainconfig`: the training settings, validated before any model is loaded.
- `training`: the Trainer run: resumable, time-boxed, NaN-guarded.
- `callbacks`: Trainer callbacks for the 12-hour wall, NaNs, silent progress, garbage.
- `loss`: chunked cross-entropy from the last hidden states (never the full logits), or liger's fused kernel.
- `curves`: learning curves from the log history, a plot and a one-line diagnosis.
- `checkpoints`: atomic writes, checksums checked on every use, rotation by step, resume.
- `checksums`: every checkpoint file with its size and SHA-256 (checksums.json), the step and the run's settings.
- `runsettings`: the settings that change the trained weights, compared on resume.
- `runlock`: one run per output_dir (filelock), naming the holder.
- `diskspace`: a full disk as one clear error with the numbers.
- `faultpoints`: named kill points, armed only by the fault-injection tests.
- `launch`: several processes for 02, from inside the notebook or from a shell.
"""
