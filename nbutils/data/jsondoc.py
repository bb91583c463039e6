"""One JSON document's records, in the shapes people and pandas save them.

- a list of records (`[{...}, {...}]`);
- one record (`{"messages": [...]}`): its turns are not records;
- an object holding the records in one list (`{"version": 1, "data": [...]}`);
- pandas' `to_json()` layouts: `orient="split"` (`{"columns": [...], "data": [[...], ...]}`) and the default,
  `orient="columns"` (`{"instruction": {"0": ..., "1": ...}, "output": {...}}`);
- records keyed by id (`{"a1": {"prompt": ..., "completion": ...}, ...}`).

An object holding several lists of records (`{"train": [...], "test": [...]}`) is refused, naming them: reading one
would drop the others without a word. A document that is one number, string or null is one record of the wrong
type, so the counts still add up.
"""

from __future__ import annotations

from nbutils.data.records import recognised


def records_in(path: str, data) -> list:
    """The records of a parsed JSON document (see the module's shapes); raises ValueError naming the file when
    several lists could each be the records."""
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        return [data]  # a lone scalar: one record, quarantined as the wrong type
    values = list(data.values())
    if isinstance(data.get("columns"), list) and isinstance(data.get("data"), list):  # pandas orient="split"
        cols = [str(c) for c in data["columns"]]
        return [dict(zip(cols, row)) if isinstance(row, list) and len(row) == len(cols) else row for row in data["data"]]
    if values and all(isinstance(v, dict) for v in values):
        if recognised(data) and len({tuple(v) for v in values}) == 1:  # pandas' default: column -> {index: value}
            index = list(values[0])
            return [{col: data[col][i] for col in data} for i in index]
        if not recognised(data) and all(recognised(v) for v in values):  # records keyed by their ids
            return values
    if recognised(data):
        return [data]
    lists = [k for k, v in data.items() if isinstance(v, list) and any(isinstance(x, dict) for x in v)]
    if len(lists) > 1:
        raise ValueError(f"{path}: one JSON object holding several lists of records ({', '.join(map(str, lists))}): "
                         f"reading one would leave out the others. Save the records to train on as a file of their "
                         f"own (e.g. the '{lists[0]}' list as its own .json or .jsonl), or pass each list as its own "
                         "input file.")
    if lists:
        return data[lists[0]]
    return next((v for v in values if isinstance(v, list)), [data])
