"""Training (02_train_qlora): the 4-bit model with LoRA, the memory plan, the Trainer run, checkpoints.

- `planning`: 02's plan before anything loads: one table, every problem at once.
- `modeling`: load the base model (02's 4-bit config, or a checkpoint's) and attach LoRA, right for a T4.
- `recipe`: the run's recipe: the base model from 01, what 02 built recorded, loaded as recorded by 03 and 04.
- `memory`: the memory plan before loading: does it fit, and the largest batch that does.
- `evalmemory`: the memory of passes without gradients (generation, scoring by tokens): 03's and 05's judge plans.
- `argcheck`: the training arguments checked before any model is loaded.
- `training`: one run around 02's Trainer: its callbacks and session, resumable, time-boxed, NaN-guarded.
- `callbacks`: Trainer callbacks for the 12-hour wall, NaNs, silent progress, garbage.
- `loss`: chunked cross-entropy from the last hidden states (never the full logits), or liger's fused kernel.
- `curves`: learning curves from the log history, a plot and a one-line diagnosis.
- `checkpoints`: atomic writes, checksums checked on every use, rotation by step, resume.
- `checksums`: every checkpoint file with its size and SHA-256 (checksums.json), the step and the run's settings.
- `runsettings`: the settings that change the trained weights, compared on resume.
- `runlock`: one run per output_dir (filelock), naming the holder.
- `atomic`: the one way an artifact is written: temporary name, fsync, rename; folders swapped in whole.
- `reports`: reports naming the checkpoint they describe, retracted before it changes; summaries listing their files.
- `diskspace`: a full disk as one clear error with the numbers.
- `faultpoints`: named kill points, armed only by the fault-injection tests.
- `timeplan`: the run's first steps timed, then its wall time, sessions and quota predicted before it goes on.
- `launch`: several processes for 02, from inside the notebook or from a shell.
- `preference`: 05's plan (the SFT adapter's recipe, the data, the method's memory) and the proof its reference is 02's adapter.
- `preferencedata`: 05's data read for its method, held out apart from training, and the steps and lengths it sets.
"""
