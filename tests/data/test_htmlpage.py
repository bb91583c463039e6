"""HTML pages: records from definition lists, tables or headings; one bad byte or a tag left open spoils only its own
record."""

from nbutils.data import readers


def test_one_bad_byte_in_an_html_page_quarantines_its_record_and_keeps_the_others_accents(tmp_path):
    page = "<dl>\n<dt>café ?</dt><dd>crème</dd>\n<dt>x @ ?</dt><dd>y</dd>\n</dl>\n"
    (tmp_path / "x.html").write_bytes(page.encode().replace(b"@", b"\xff"))
    [(_, _, first), (_, line, bad)] = readers.read(str(tmp_path / "x.html"))
    assert first == {"prompt": "café ?", "response": "crème"}  # not mojibake
    assert line == 3 and bad == readers.Bad("invalid-utf8: in prompt")


def test_an_html_tag_cut_at_the_end_of_its_line_does_not_take_the_next_tag(tmp_path):
    (tmp_path / "x.html").write_text("<dl>\n<dt>q1</dt>\n<dd>a1</\n<dt>q2</dt>\n<dd>a2</dd>\n</dl>\n")
    [(n1, bad), (n2, q2)] = [(n, r) for _, n, r in readers.read(str(tmp_path / "x.html"))]
    assert (n1, n2) == (2, 4) and q2 == {"prompt": "q2", "response": "a2"}  # read on its own, not taken into "</"
    assert bad.reason.startswith("malformed-html: the answer holds the questions after it (a tag left open)")


def test_a_table_row_left_open_is_one_bad_record_and_the_rows_it_holds_are_read(tmp_path):
    (tmp_path / "x.html").write_text("<table>\n<tr><th>prompt</th><th>response</th></tr>\n<tr><td>q1</td><td>a1</\n"
                                     "<tr><td>q2</td><td>a2</td></tr>\n</table>\n")
    rows = [(n, r) for _, n, r in readers.read(str(tmp_path / "x.html"))]
    assert rows[-1] == (4, {"prompt": "q2", "response": "a2"})
    assert [r.reason.split(":")[0] for _, r in rows[:-1]] == ["malformed-html"]
