"""One JSON document's records in the shapes people and pandas save: every record read, or the file refused by name."""

import pytest

from nbutils.data import jsondoc

A, B = {"prompt": "a?", "completion": "A"}, {"prompt": "b?", "completion": "B"}


@pytest.mark.parametrize("doc, records", [
    ([A, B], [A, B]),
    ({"messages": [{"role": "user", "content": "hi"}]}, [{"messages": [{"role": "user", "content": "hi"}]}]),
    ({"version": 1, "data": [A, B]}, [A, B]),
    ({"tags": ["x", "y"], "data": [A, B]}, [A, B]),  # a list of words is not the records
    ({"columns": ["prompt", "completion"], "index": [0, 1], "data": [["a?", "A"], ["b?", "B"]]}, [A, B]),  # split
    ({"prompt": {"0": "a?", "1": "b?"}, "completion": {"0": "A", "1": "B"}}, [A, B]),  # pandas' default to_json()
    ({"id-1": A, "id-2": B}, [A, B]),  # keyed by id
    (42, [42]), (None, [None]), ("hello", ["hello"]),  # one scalar: one record (quarantined as the wrong type)
])
def test_every_shape_gives_its_records(doc, records):
    assert jsondoc.records_in("f.json", doc) == records


def test_an_object_with_several_lists_of_records_is_refused_naming_them():
    with pytest.raises(ValueError, match=r"f\.json: one JSON object holding several lists of records \(train, test\)"):
        jsondoc.records_in("f.json", {"train": [A], "test": [B]})
