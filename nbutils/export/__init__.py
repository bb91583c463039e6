"""After training: decide whether to ship (gate), merge to fp16 and verify, export the adapter, write model
cards, push to the Hugging Face Hub, convert to GGUF. One job per module; 04_export calls them in order."""
