"""After training (04_export): decide whether to ship, merge and verify, export, describe, push. 04 calls them in order.

- `gate`: ship only a model that 03 showed to be better than the base and not degenerate.
- `merge`: the base reloaded in fp16, the adapter merged, and the merged model checked against the adapter.
- `mergeweights`: the merge proved in the weights, layer by layer, whatever the adapter's size; digests for the reload.
- `adapter`: the light option: the LoRA weights, the tokenizer and the chat template.
- `card`: model cards (README.md with Hub metadata) from what 01, 02 and 03 wrote.
- `hub`: push an export folder to the Hugging Face Hub, private by default, the token never shown.
- `diskplan`: before writing: every artifact's size against the free space and the platform's output limit.
- `gguf`: llama.cpp's converter (dataset, checkout or pinned sdist) run with every stop token written.
- `llamabuild`: llama.cpp's tools (llama-quantize, the runtime probe) built once from the pinned sources, cached.
- `quantize`: k-quants through llama-quantize, built from the pinned llama.cpp sources when needed.
- `ggufload`: a GGUF read back: its header metadata, its weights in the merged model's architecture.
- `ggufbounds`: one table of what each GGUF type must hold against the merged model, for both checks.
- `ggufcheck`: a GGUF checked against the trained tokenizer and, reloaded, against the merged model.
- `llamaruntime`: the runtime probe run on a GGUF: what llama.cpp itself makes of it, written out.
- `runtimecheck`: the runtime check's two sides: what llama.cpp is asked, the merged model's answers, logit figures.
- `runtimeverdict`: the runtime check's verdicts: tokens, template, stops, greedy, logits, each naming what differs.
- `ggufruntime`: the runtime check run around 04's GGUF step (or skipped, saying why); the summary's "runtime".
- `modelfile`: Ollama's Modelfile (the trained chat template as a Go template, one stop per stop token).
- `ggufbuild`: 04's GGUF step: convert, quantize, verify, Modelfile, LoRA GGUF, placed by the disk plan.
- `summary`: export_summary.json: what 04 decided and wrote, redacted.
"""
