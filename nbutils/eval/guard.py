"""The degeneration guard inside `model.generate`: stop only the rows that turn to garbage, as they stream.

Cheap by construction, so it can stay on for every generation: every `check_every` tokens it reads
only the new token ids of each unfinished row (incremental state, no re-decoding of what it has
seen); an exact repeat in the ids (a short period, also where a run of blank tokens or of digits is read as one
entry, or 16 ids said again up to 512 tokens back), CHECK_CHARS characters not yet judged (asked between checks
only at a step that brought a long token: real tokenizers pack 64 dots into one), or every `detect_every` tokens
anyway, makes it decode just the new tokens onto the row's text tail and run `nbutils.eval.detect.detect` on that
bounded tail, up to its last whole character. It detects and never intervenes: no penalties, no logits changes, so
healthy rows get exactly the tokens they would get without it. `make bench` measures its cost inside generate.
"""

from __future__ import annotations

import os
import re
from array import array
from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessor, StoppingCriteria

from nbutils.data.chatformat import derived, stop_ids
from nbutils.eval.detect import BLANK_RE, PARTIAL_SPECIAL_RE, SPECIAL_RE, TAIL_CHARS, Verdict, detect

GUARD_LINE_COPIES = 2  # more copies of a line than this after its first line start: a loop ...
LONG_COPY_CHARS = 150  # ... or more than one, where each copy is this long: a paragraph said again, not a message
GUARD_SPECIAL_CHARS = 200  # see settled(): markers alone, this long, are a model saying nothing
_MARKER_END_RE = re.compile(f"(?:{SPECIAL_RE.pattern})$", re.I)
BLANK_CHARS = frozenset("ĠĊĉč▁ \t\n\r")  # how byte-level and SentencePiece vocabularies spell whitespace
BLANK_BYTES = frozenset(("<0x0A>", "<0x20>", "<0x09>", "<0x0D>"))
GRAM, FAR = 8, 512  # long repeats: 2 * GRAM ids said again, at most FAR tokens back (see _long_repeat)
# Judged by characters where tokens are few: real tokenizers pack up to 64 dots (or `=`, spaces) into one token, so
# a row whose new tokens hold this many characters is judged at once, whatever the token count.
CHECK_CHARS = 192
# detect runs on every live row at least this often. It is most of the guard's time (`python -m bench guard_bench`):
# every 48 tokens (or 192 characters, ~4 a token: the two come together) holds the guard near 2% of generate on the
# embedded model, where every 32 (or 128) held it at 3%; loops of ids are still looked for every `check_every` tokens.
DETECT_EVERY = 48


def _tables(tokenizer, long: int) -> tuple[dict[int, int], frozenset[int], dict[int, int]]:
    """Characters per token id, as the vocabulary spells it (a byte-level space counts one), the ids of tokens
    of `long` characters or more, and the ids that _id_loop reads as one (see _kinds): built once per tokenizer and
    shared by every guard on it (eval makes one per batch; a look-up in the vocabulary per token costs more than the
    guard's step)."""
    tables = derived(tokenizer)
    if "token_chars" not in tables:
        vocab = tokenizer.get_vocab()
        tables["token_chars"] = {i: len(t) for t, i in vocab.items()}
        tables["token_kinds"] = _kinds(vocab)
    if ("long_tokens", long) not in tables:
        tables["long_tokens", long] = frozenset(i for i, n in tables["token_chars"].items() if n >= long)
    return tables["token_chars"], tables["long_tokens", long], tables["token_kinds"]


def _kinds(vocab: dict[str, int]) -> dict[int, int]:
    """Token ids that only lay text out or count, as the vocabulary spells them (byte-level and SentencePiece): blank
    ones (a line break and the next line's indentation) as -1, digits as -2. Lines said again at another indentation
    (`<table>` nested ever deeper) or under the next number of a list are a loop to `detect`, and the ids' loop is
    what makes the guard run it at once."""
    kinds = {}
    for t, i in vocab.items():
        if t and (all(c in BLANK_CHARS for c in t) or t in BLANK_BYTES):
            kinds[i] = -1
        elif (digits := t.lstrip("Ġ▁ ")).isdigit() and digits.isascii():
            kinds[i] = -2
    return kinds


@dataclass
class RowState:
    stopped: bool = False
    reasons: list[str] = field(default_factory=list)
    stop_token: int | None = None  # index (from the generation start) of the last token generated before the stop
    tokens: int = 0  # tokens generated, up to and including EOS or the stop
    eos: bool = False
    ids: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)  # the ids, a run of blank or of digit tokens as one entry (_kinds)
    text: str = ""  # the decoded tail, at most 2 * TAIL_CHARS characters
    buf: bytearray = field(default_factory=bytearray)  # the ids as 4-byte integers, for _long_repeat's search
    decoded: int = 0  # tokens already decoded into text
    unjudged: int = 0  # characters (as the vocabulary spells the tokens) generated since detect last ran on the row
    waiting: bool = False  # detect called the text degenerate and settled() waits: judged again at the row's end


def settled(verdict: Verdict, ended: bool = False) -> bool:
    """Is a verdict firm enough to stop a generation mid-stream (the guard's question, not detect's)?

    A cycle of sentences said again before its second copy is whole (`detect`'s early-cycle rule, for a text that
    `max_new_tokens` cut) waits for that second copy mid-stream, when the loop rules see it: at a prefix it is also
    what healthy documents are as they say a paragraph again after a new heading or a message again with a new ending,
    and a loop goes on. It costs a looping row one cycle more; a row that has `ended` is judged as `detect` judges it,
    and so is a cycle whose second copy follows the first's paragraph with nothing between but whole sentences that
    open the next paragraph much as the first copy's paragraph opened (`cycle_next_paragraph`: a generation stuck on a
    paragraph, not a document saying one again under a heading or from its first word, nor a paragraph of its own
    that echoes one sentence of the one before).
    A loop of lines whose first copy starts mid-line stops once GUARD_LINE_COPIES copies follow the first line start
    (gettext catalogs translate two messages alike, after a line that ends the same way), and the
    third copy has begun. A row that has written only special markers and whitespace so far stops once they reach
    GUARD_SPECIAL_CHARS characters: the embedded base model opens with `<|assistant|>` three times and then answers,
    and a stop at the first check cut that answer (10 of 64 rows in guard_bench). Post hoc,
    `detect` reports both as soon as it sees them. Every other verdict stops at once, unless the row ends with
    markers after healthy text (markers_pending).
    """
    m = verdict.metrics
    if verdict.reasons == ["special-tokens-only"]:
        return m.get("chars", 0) >= GUARD_SPECIAL_CHARS
    if verdict.reasons == ["loop"] and "loop_line_copies" in m:  # a catalog says a line twice after one alike
        long = m.get("loop_chars", 0) >= LONG_COPY_CHARS * m.get("loop_repeats", 1)  # a paragraph, not a message
        return m["loop_line_copies"] > (1 if long else GUARD_LINE_COPIES)
    if verdict.reasons == ["loop"] and "cycle_chars" in m:
        return ended or bool(m.get("cycle_next_paragraph"))
    return verdict.degenerate


def marker_tail(text: str) -> int:
    """Characters at the end of text that are special markers (the last may be cut short) and whitespace; 0 when
    the text does not end with a marker."""
    rest = text.rstrip()
    if cut := PARTIAL_SPECIAL_RE.search(rest, max(0, len(rest) - 44)):
        rest = rest[:cut.start()].rstrip()
    markers = 0
    while rest.endswith((">", "]")) and (mark := _MARKER_END_RE.search(rest, max(0, len(rest) - 48))):
        rest, markers = rest[:mark.start()].rstrip(), markers + 1
    return len(text) - len(rest) if markers else 0


def markers_pending(text: str) -> bool:
    """Has a row written fewer than GUARD_SPECIAL_CHARS characters of markers and blank lines after text that is
    healthy (or after nothing), with no run of blank lines that detect calls degenerate? Then it may still answer,
    and is not stopped yet: the embedded base model writes `<|assistant|>` and a few blank lines after echoing a
    field (" : name : bob") and then answers or ends with EOS.
    Post hoc `detect` flags the markers when they are what the row ends with."""
    tail = marker_tail(text)
    if not 0 < tail < GUARD_SPECIAL_CHARS or BLANK_RE.search(text, len(text) - tail):
        return False  # long enough, or blank lines as many as detect calls a run (a newline is one character)
    before = text[:-tail]
    return not before.strip() or not detect(before, lookback=0).degenerate


def _id_loop(ids: list[int], max_period: int = 64) -> bool:
    """Cheap pre-check on token ids: does the tail repeat exactly (two copies, 8+ tokens)?"""
    rev, p = ids[:-2 * max_period - 1:-1], 0
    size = len(rev)
    while True:
        try:
            p = rev.index(rev[0], p + 1, size // 2 + 1)
        except (ValueError, IndexError):
            return False
        run = 0
        while run + p < size and rev[run] == rev[run + p]:
            run += 1
        if run >= p and run + p >= 8:
            return True


def _long_repeat(buf: bytearray) -> bool:
    """Do the last 2 * GRAM ids (4 bytes each in buf) repeat ids said up to FAR tokens back? The trigger for loops
    whose period is too long for _id_loop (a block of sentences or lines: 100-300 tokens), so detect runs as soon
    as the second copy is under way, not only every `detect_every` tokens. One C-level substring search per check
    (a match that straddles ids is possible and only costs one more detect).
    """
    n = len(buf)
    return n >= 16 * GRAM and buf.rfind(buf[-8 * GRAM:], max(0, n - 4 * (FAR + 2 * GRAM)), n - 4) >= 0


class DegenerationGuard(StoppingCriteria):
    """A per-row stopping criterion for `model.generate`: stops the rows whose text degenerates, only those.

    Every `check_every` tokens (sooner when long tokens bring a row CHECK_CHARS characters) it looks at the
    new token ids of each unfinished row; when the ids repeat (short periods exactly, or with runs of blank or of
    digit tokens as one entry; long ones by their last 16 ids), when CHECK_CHARS characters are unjudged, and anyway
    every `detect_every` tokens, it decodes only the row's new tokens (plus two of context), appends them to the row's text tail and
    runs `detect` on it: every stop is `detect`'s verdict on the text decoded up to it (markers_pending and
    settled say when a verdict waits). A row that emits EOS is judged once more, up to its end, when
    it brought text not yet judged (its report then gives the reasons, with `stopped` False: it ended by itself),
    and never again. It only ever marks rows done, so healthy rows get exactly the tokens they
    would get without it; stopped rows are then padded by generate (which needs an eos_token_id set
    to pad finished rows). With `stop=False` it records what it would have stopped and stops nothing.
    """

    def __init__(self, tokenizer, *, check_every: int = 8, prompt_length: int | None = None,
                 eos_token_id: int | list[int] | None = None, detect_every: int = DETECT_EVERY, stop: bool = True):
        self.tokenizer, self.check_every, self.detect_every = tokenizer, check_every, detect_every
        self.prompt_length, self.stop = prompt_length, stop
        if eos_token_id is None:  # EOS, the template's end-of-turn token and the generation config's stops
            eos_token_id = stop_ids(tokenizer)
        eos = eos_token_id
        self.eos = set(eos) if isinstance(eos, (list, tuple, set)) else set() if eos is None else {eos}
        self.rows: list[RowState] = []
        self._start, self._done = 0, None
        self._checked = 0  # the sequence length at the last check
        self._token_chars, self._long, self._kinds = _tables(tokenizer, max(1, CHECK_CHARS // check_every))

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        batch, length = input_ids.shape
        if self._done is None or len(self.rows) != batch or length - self._start < self.rows[0].tokens:
            self.rows = [RowState() for _ in range(batch)]  # a new generate() call
            self._start = self.prompt_length if self.prompt_length is not None else length - 1
            self._done = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
            self._checked = self._start
        generated = length - self._start
        due, only = generated % self.check_every == 0, None  # at the schedule, every live row is looked at
        if not due:  # between checks: set look-ups on the last tokens, and only the rows that call for it
            last = input_ids[:, -1].tolist()
            only = self._many_chars(input_ids, last) if not self._long.isdisjoint(last) else set()
            if not self.eos.isdisjoint(last):  # a row that ends now is judged up to its end
                only |= {i for i, (t, r) in enumerate(zip(last, self.rows)) if t in self.eos and not (r.eos or r.stopped)}
            due = bool(only)
        if due:
            self._check(input_ids, generated, generated % self.detect_every == 0, only)
            self._checked = length
        return self._done

    def _many_chars(self, input_ids: torch.LongTensor, last: list[int]) -> set[int]:
        """The live rows whose last token is long and that have generated CHECK_CHARS characters detect has not
        judged: shorter tokens cannot add that many between two checks. A row's own tokens decide, never another
        row's, so a row is judged at the same tokens alone and in any batch."""
        chars, recent = self._token_chars, input_ids[:, self._checked:].tolist()
        return {i for i, r in enumerate(self.rows) if last[i] in self._long and not (r.stopped or r.eos)
                and r.unjudged + sum(chars.get(t, 0) for t in recent[i]) >= CHECK_CHARS}

    def _check(self, input_ids: torch.LongTensor, generated: int, full: bool, only: set[int] | None = None) -> None:
        """Take every live row's new ids; judge the rows that are due (all at the schedule, else those in `only`)."""
        active = [i for i, r in enumerate(self.rows) if not (r.stopped or r.eos)]
        if not active:
            return
        seen = min(len(self.rows[i].ids) for i in active)
        suspects, fresh = [], input_ids[:, self._start + seen:].tolist()
        chars, kinds = self._token_chars, self._kinds
        for i in active:
            row = self.rows[i]
            new = fresh[i][len(row.ids) - seen:]
            hit = None if self.eos.isdisjoint(new) else next(k for k, t in enumerate(new) if t in self.eos)
            row.ids += new if hit is None else new[:hit + 1]
            for t in new:  # a run of blank tokens or of digits is one entry: indentation and numbers of any width
                k = kinds.get(t, t)
                if k >= 0 or not row.kinds or row.kinds[-1] != k:
                    row.kinds.append(k)
            row.buf += array("i", new).tobytes()  # after EOS the row is never searched again
            row.tokens = len(row.ids)
            row.unjudged += sum(chars.get(t, 0) for t in new)
            if hit is not None:
                row.eos = True  # finished: never checked again, after one last look at what it had not judged
                if (row.unjudged or row.waiting) and not row.reasons:
                    suspects.append(row)
            elif (only is None or i in only) and (full or row.unjudged >= CHECK_CHARS or _id_loop(row.ids)
                                                  or _id_loop(row.kinds) or _long_repeat(row.buf)):
                suspects.append(row)
        if not suspects:
            return
        ctx = 2  # already-decoded tokens decoded again as context: a fragment alone loses its leading space
        # A row that ended is judged on its text, without the EOS marker (detect would read it as a space).
        pieces = [r.ids[max(0, r.decoded - ctx):len(r.ids) - r.eos] for r in suspects]
        heads = [r.ids[max(0, r.decoded - ctx):r.decoded] for r in suspects]
        texts = self._decode(pieces + heads)
        changed = False
        for row, piece, head, full_text in zip(suspects, pieces, texts[len(suspects):], texts):
            end = last = len(row.ids) - row.eos
            while full_text.endswith("\ufffd") and end > row.decoded + 1 and last - end < 3:
                end -= 1  # a character split across tokens: decode up to where it starts, the rest comes later
                full_text = self._decode([piece[:len(piece) - last + end]])[0]
            if full_text.endswith("\ufffd") and last - row.decoded < 8 and not row.eos:
                continue  # the rest of the character comes with the next tokens (a row that ended has none)
            cut = len(head) if full_text.startswith(head) else len(os.path.commonprefix((head, full_text)))
            add = full_text[cut:]
            row.text, row.decoded, row.unjudged = (row.text + add)[-2 * TAIL_CHARS:], end, 0
            verdict = detect(row.text, lookback=0)  # the guard judges every check as the text grows
            if settled(verdict, row.eos) and not row.reasons and not markers_pending(row.text):
                row.reasons, row.stop_token = verdict.reasons, len(row.ids) - 1
                row.stopped = self.stop and not row.eos  # a row that ended is judged, nothing is left to stop
                changed = changed or row.stopped
            row.waiting = verdict.degenerate and not row.reasons
        if changed:
            self._done = torch.tensor([r.stopped for r in self.rows], dtype=torch.bool, device=self._done.device)

    def _decode(self, seqs: list[list[int]]) -> list[str]:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)  # straight into Rust, no thread pool
        if backend is not None:
            return [backend.decode(s, skip_special_tokens=False) for s in seqs]
        return self.tokenizer.batch_decode(seqs, skip_special_tokens=False)

    def report(self) -> list[dict]:
        """Per row: stopped, reasons, stop_token, tokens (generated, as far as the guard saw), eos."""
        return [{"stopped": r.stopped, "reasons": r.reasons, "stop_token": r.stop_token, "tokens": r.tokens,
                 "eos": r.eos} for r in self.rows]


class GenerationObserver(LogitsProcessor):
    """Records per-row mean entropy and mean log-probability of the chosen token; returns scores unchanged."""

    def __init__(self):
        self.entropy, self.logprob, self.steps, self.chosen, self._last = None, None, 0, 0, None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        with torch.no_grad():
            logp = torch.log_softmax(scores.float(), dim=-1)
            ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
            self.entropy = ent if self.entropy is None else self.entropy + ent
            if self._last is not None:  # the token picked from the previous step's distribution
                lp = self._last.gather(1, input_ids[:, -1:]).squeeze(1)
                self.logprob = lp if self.logprob is None else self.logprob + lp
                self.chosen += 1
            self._last, self.steps = logp, self.steps + 1
        return scores

    def summary(self) -> list[dict]:
        """Per row: mean entropy (nats) and mean log-prob of the chosen token (the last token is not seen)."""
        if not self.steps:
            return []
        lp = self.logprob.tolist() if self.logprob is not None else [float("nan")] * len(self.entropy)
        return [{"mean_entropy": e / self.steps, "mean_logprob": p / max(1, self.chosen)}
                for e, p in zip(self.entropy.tolist(), lp)]
