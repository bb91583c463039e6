"""SQL dumps: SQLite runs each statement; rows carry the line of their INSERT; a statement it refuses is one bad record,
and the statements a cut line swallowed are read on their own."""

import pytest

from nbutils.data import readers, sqldump


def _rows(path):
    return [(n, r) for _, n, r in readers.read(str(path))]


def test_sql_insert_only_dump_goes_through_sqlite(tmp_path):
    (tmp_path / "x.sql").write_text("INSERT INTO t (prompt, response) VALUES ('it''s', 'ok; fine');\n")
    [(_, n, rec)] = list(readers.read(str(tmp_path / "x.sql")))
    assert n == 1 and rec == {"prompt": "it's", "response": "ok; fine"}
    (tmp_path / "y.sql").write_text("INSERT INTO t VALUES ('a', 'b');\n")
    with pytest.raises(ValueError, match="y.sql: SQLite could not load the dump"):
        list(readers.read(str(tmp_path / "y.sql")))


def test_each_row_has_the_line_of_its_insert(tmp_path):
    (tmp_path / "x.sql").write_text("-- dump\nCREATE TABLE t (prompt TEXT,\n  response TEXT);\n"
                                    "INSERT INTO t VALUES ('a', 'b'), ('c', 'd');\n\nINSERT INTO t VALUES ('e', 'f');\n")
    assert [n for n, _ in _rows(tmp_path / "x.sql")] == [4, 4, 6]


def test_a_cut_insert_is_one_bad_record_and_the_statements_it_swallowed_are_read(tmp_path):
    (tmp_path / "x.sql").write_text("INSERT INTO t (prompt, response) VALUES ('a', 'b');\n"
                                    "INSERT INTO t (prompt, response) VALUES ('c', 'd\n"
                                    "INSERT INTO t (prompt, response) VALUES ('e', 'f');\n"
                                    "INSERT INTO t (prompt, response) VALUES ('g', 'h')")  # no final semicolon
    rows = _rows(tmp_path / "x.sql")
    assert [(n, r) for n, r in rows if not isinstance(r, readers.Bad)] == [
        (1, {"prompt": "a", "response": "b"}), (3, {"prompt": "e", "response": "f"}), (4, {"prompt": "g", "response": "h"})]
    [(n, bad)] = [(n, r) for n, r in rows if isinstance(r, readers.Bad)]
    assert n == 2 and bad.reason.startswith("malformed-sql: OperationalError")


def test_a_dump_of_preference_pairs_is_recognised(tmp_path):
    (tmp_path / "x.sql").write_text("INSERT INTO p (prompt, chosen, rejected) VALUES ('q', 'good', 'bad');\n")
    assert _rows(tmp_path / "x.sql") == [(1, {"prompt": "q", "chosen": "good", "rejected": "bad"})]


def test_statements_split_where_sqlite_says_they_end():
    script = "-- a comment\nINSERT INTO t VALUES ('x; y');INSERT INTO t VALUES (1);\n"
    assert [(line, text.strip()) for line, text, _ in sqldump.statements(script)] == [
        (2, "INSERT INTO t VALUES ('x; y');"), (2, "INSERT INTO t VALUES (1);")]
