"""The guard (`nbutils.eval.guard`) on shapes a real model's generations take (tests/data/real_generations.jsonl):
lines said again at another indentation or under the next number of a list make it run `detect` at once, as exact
repeats of ids do. (test_guard.py holds the rest of the guard's tests.)"""

import torch

from nbutils.data.chatformat import load_tokenizer
from nbutils.eval.detect import detect
from nbutils.eval.guard import DETECT_EVERY, DegenerationGuard, _kinds, settled
from tests.eval.test_guard import _observe


def test_blank_and_digit_tokens_are_one_kind_each_in_byte_level_and_sentencepiece_vocabularies():
    vocab = {"Ċ": 0, "ĊĠĠĠ": 1, "▁▁": 2, "<0x0A>": 3, "12": 4, "Ġ7": 5, "▁3": 6, "²": 7, "table": 8, "Ġa1": 9}
    assert _kinds(vocab) == {0: -1, 1: -1, 2: -1, 3: -1, 4: -2, 5: -2, 6: -2}


def _indenting_tokenizer():
    """Word-level: a line break and the next line's indentation are one token, one id per width, as in SmolLM2's
    vocabulary ("ĊĠĠĠĠĠĠĠ"); ids 5-10 are a break and 0 to 5 spaces."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<eos>": 0, "<bos>": 1, "Nested tables, such as:": 2, "<table>": 3, "</table>": 4,
             **{"\n" + " " * k: 5 + k for k in range(6)}}
    word = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    word.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=word, eos_token="<eos>", bos_token="<bos>")


def test_tags_said_again_at_growing_indentation_are_judged_at_the_first_check_detect_would_stop():
    """A real model's HTML example nested `<table>` ever deeper: a line break and its indentation are one token of a
    different id on each line, so no ids repeat exactly. Read as one kind, they do, and detect runs at the first
    check where it calls the lines a loop, not only every DETECT_EVERY tokens."""
    tok = _indenting_tokenizer()
    widths = [3, 1, 4, 1, 5, 3, 2, 5, 3, 5, 2, 3, 0, 2, 4, 2, 0, 5, 3, 1]  # pi's digits: no run of widths recurs
    ids = [2] + [t for w in widths for t in (5 + w, 3)] + [5, 4]
    guard = DegenerationGuard(tok, prompt_length=1, eos_token_id=0, stop=False)
    seq = torch.tensor([[1] + ids + [0]])
    for end in range(2, seq.shape[1] + 1):
        guard(seq[:, :end], None)
    row = guard.report()[0]
    first = next(k for k in range(8, len(ids), 8) if settled(detect(tok.decode(ids[:k]))))
    assert first % DETECT_EVERY and row["stop_token"] == first - 1, (first, row)


def test_list_items_under_the_next_numbers_are_judged_at_the_first_check_detect_would_stop():
    """"1. Albania (2023)", "2. Albania (2023)" ...: the item's number changes its ids; digits read as one kind, the
    ids of the items repeat, and the guard stops the list at the first check after its third item."""
    tok = load_tokenizer("embedded")
    ids, row = _observe(tok, "Countries in Europe:\n" + "".join(f"{n}. Albania (2023)\n" for n in range(1, 30)))
    first = next(k for k in range(8, len(ids), 8) if settled(detect(tok.decode(ids[:k]))))
    assert first % DETECT_EVERY and row["stop_token"] == first - 1 and row["reasons"] == ["counting-loop"], (first, row)


def test_a_paragraph_said_again_after_its_first_copy_began_mid_line_stops_as_its_third_copy_begins():
    """A real model said one paragraph three times, its first copy after another sentence of a paragraph (mid-line).
    A line said again after a line that ends alike waits for a third copy after the first line start (a catalog's
    messages); a paragraph of LONG_COPY_CHARS or more a copy stops once the copy after the line start is whole and
    the next has begun."""
    from nbutils.eval.guard import LONG_COPY_CHARS

    said = ("The game is played in a grid of 10x10 squares, with each square representing a random number. The "
            "player's goal is to select a random number from the grid, which is then randomly assigned to their hand.")
    assert len(said) >= LONG_COPY_CHARS
    intro = "The game is called Chance. It asks players to make decisions based on random numbers. "
    text = intro + said + "\n\n" + said + "\n\nThe game is played in a"
    verdict = detect(text)
    assert verdict.reasons == ["loop"] and 1 < verdict.metrics["loop_line_copies"] <= 2 and settled(verdict)
    catalog = "".join(f"Accessible {what} changed, which is used to notify the assistive technology\n"
                      for what in ("name", "role", "role")) + "Acc"  # a catalog's line said twice after one alike
    verdict = detect(catalog)
    assert verdict.reasons == ["loop"] and verdict.metrics["loop_line_copies"] == 2 and not settled(verdict)
