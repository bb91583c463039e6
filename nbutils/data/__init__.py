"""Raw records to training batches (01_data_prep; 02 reads the splits back).

- `readers`: raw files (JSONL, JSON, CSV, Parquet, HTML, SQL, HF datasets ...) to records, unreadable ones marked Bad.
- `hubdata`: a Hub dataset id (`owner/name[:config][@split]`) read as records, with what it offers when asked wrong.
- `intake`: every input read in turn under one record cap (a smoke run reads each), with each file's encoding hint.
- `jsondoc`: one JSON document's records in the shapes people and pandas save (pandas' layouts, keyed by id).
- `records`: any supported record shape to validated chat messages, or the reason it is quarantined.
- `chatformat`: the tokenizer's pad, end-of-turn and stop tokens, and its chat template.
- `splits`: validated, chat-formatted, tokenized train/eval splits and their manifest (`python -m nbutils.data`).
- `batching`: how padding each way wastes tokens, and packing done safely.
- `pairs`: preference pairs (strings, message lists, HH transcripts) and KTO rows, rendered as SFT was, quarantined by line.
- `ledger`: where every record read ends up (kept, quarantined, a duplicate of a line named); the counts add up.
- `sqldump`: SQL dumps run statement by statement in SQLite, each row with the line of its INSERT.
- `htmlpage`: HTML pages to question/answer records (definition lists, tables, headings), damage kept to its record.
"""
