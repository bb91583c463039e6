"""After training (04_export): decide whether to ship, merge and verify, export, describe, push. 04 calls them in order.

- `gate`: ship only a model that 03 showed to be better than the base and not degenerate.
- `merge`: the base reloaded in fp16, the adapter merged, and the merged model checked against the adapter.
- `adapter`: the light option: the LoRA weights, the tokenizer and the chat template.
- `card`: model cards (README.md with Hub metadata) from what 01, 02 and 03 wrote.
- `hub`: push an export folder to the Hugging Face Hub, private by default, the token never shown.
- `gguf`: GGUF for llama.cpp / Ollama when llama.cpp's converter is at hand; a clear skip otherwise.
- `summary`: export_summary.json: what 04 decided and wrote, redacted.
"""
