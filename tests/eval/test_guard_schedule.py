"""When the guard judges a row (`nbutils.eval.guard`): at once where a few long tokens bring many characters, up to
its end where it ends between two checks, and only where the row itself calls for it, never at another row's
tokens, so a row is judged alike alone and in any batch."""

import torch

from nbutils.eval.guard import DegenerationGuard


def _packed_tokenizer(long: str = "." * 64):
    """A word-level tokenizer whose vocabulary packs a run into one token (id 2), as Llama-3's and Qwen2's pack 64
    dots."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<eos>": 0, "<bos>": 1, long: 2, "Loading": 3, " the": 4, " model": 5, "\n": 6, " ": 7}
    word = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    word.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=word, eos_token="<eos>", bos_token="<bos>")


def _feed(tok, rows: list[list[int]], stop: bool = False) -> list[dict]:
    """Stream rows of ids side by side through one guard, token by token as generate calls it, each row ended by EOS
    (and padded with it, as generate pads finished rows)."""
    width = max(map(len, rows)) + 1
    seq = torch.tensor([[1] + ids + [0] * (width - len(ids)) for ids in rows])
    guard = DegenerationGuard(tok, prompt_length=1, eos_token_id=0, stop=stop)
    for end in range(2, seq.shape[1] + 1):
        guard(seq[:, :end], None)
    return guard.report()


def test_a_run_packed_into_few_tokens_is_judged_by_its_characters():
    """CHECK_CHARS characters in a few tokens of 64 dots: detect runs at once, not at the next 8-token check, and
    stops the row as soon as the run is longer than any line of dot leaders; a short run after words is left alone."""
    from nbutils.eval.detect import detect
    from nbutils.eval.guard import CHECK_CHARS

    tok = _packed_tokenizer()
    head, needed = [3, 4, 5, 7], -(-(CHECK_CHARS - 18) // 64)  # "Loading the model " and dots to CHECK_CHARS
    for dots, stopped_by in ((6, len(head) + needed), (1, None)):  # (before the 8-token check)
        ids = head + [2] * dots
        row = _feed(tok, [ids])[0]
        assert (row["stop_token"] + 1 if row["reasons"] else None) == stopped_by, row
        if row["reasons"]:
            assert detect(tok.decode(ids[:row["stop_token"] + 1])).degenerate and "char-repeat" in row["reasons"]


def test_a_rows_verdict_does_not_depend_on_the_rows_beside_it():
    """A row is judged where it alone calls for it: at the schedule, at its own long tokens, at its own end. Another
    row's run of long tokens (or its EOS) between two checks once made the guard judge every row there, so a loop
    was stopped at a different token in a batch than alone, and the eval's figures moved with its batch size."""
    tok = _packed_tokenizer()
    loop = [3, 4, 5, 6] * 6  # "Loading the model\n" again and again
    runs = [[3, 4, 5, 7, 3, 4, 5, 7, 3] + [2] * k for k in (3, 4)]  # long tokens at steps 10-13, dots to the limit
    ended = [3, 4, 5, 7, 3, 4, 5, 7, 3, 4, 5]  # EOS at step 12
    alone = _feed(tok, [loop])[0]
    assert alone["reasons"] and alone["stop_token"] is not None
    for other in runs + [ended]:
        assert _feed(tok, [loop, other])[0] == alone, other


def test_a_row_that_ends_in_a_run_between_two_checks_is_judged_up_to_its_end():
    """Sixty 'o' in two tokens, then EOS between two checks, where generate makes its last call (a real tokenizer
    packs such runs): the row ended by itself, so nothing is stopped, but its report says why it is degenerate, as
    detect does on the whole text."""
    from nbutils.eval.detect import detect

    tok = _packed_tokenizer("o" * 30)
    ids = [3, 4, 5, 6, 3, 4, 5, 6, 6, 2, 2]  # a check at 8 (healthy), EOS at 12: generate's last call
    assert detect(tok.decode(ids)).degenerate
    row = _feed(tok, [ids], stop=True)[0]
    assert "char-repeat" in row["reasons"] and not row["stopped"] and row["eos"] and row["stop_token"] == len(ids)
