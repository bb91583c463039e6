"""The degeneration stress set: real healthy text, and degenerate text shaped as real generations are.

Healthy samples are pieces of the documents in bench.degeneration.corpus, drawn evenly over groups (each
script of the translated prose, each kind of structured or English text). A degenerate sample is a
healthy prefix of 0-600 characters followed by one class of degeneration; every loop is then cut at
8 offsets of its last period (non-periodic classes: of their last 64 characters), as
`max_new_tokens` cuts a generation anywhere. Each sample carries `onset` (where it becomes
degenerate: for a loop, where the first repetition starts) and `cut` (which of the 8 offsets).
`build(seed, reported=...)` draws from one half of the documents: the tuning half with one seed,
the reported half with another.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from bench.degeneration.corpus import STRUCTURED, Doc, is_reported, snippet
from bench.degeneration.shaped import everything

CLASSES = ["char-repeat", "dot-run", "token-repeat", "punctuation-repeat", "phrase-loop", "sentence-loop",
           "multi-sentence-loop", "multi-sentence-early", "multi-line-loop", "prompt-echo", "counting-loop", "word-soup",
           "subword-soup", "unicode-junk", "empty"]
LOOP_CLASSES = CLASSES[:11]
CUTS = 8
TUNING_SEED, REPORTED_SEED = 0, 1
SPECIALS = ["</s>", "<s>", "<pad>", "<unk>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<eos>",
            "[PAD]", "[SEP]", "<|eot|>", "<end_of_turn>", "<|end_of_text|>"]
CHAR_POOL = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" * 3 + "0123456789" + "!?.,;:*=#~_)" +
             "éüßçЖжщ中好的のあ한글αωกนع" + "😀🙂👍")
PUNCTUATION = [", ", " ,", ",", ". ", "! ", "? ", "; ", "!", "?!", "...", " -", "- ", "* ", "| ", "()", "[]", "{}",
               "\"\" ", "' ", "、", "。", "،", "：", ", \n", ".\n", "…", ") ", "-> "]
COUNTING = ["Step {n}: {v}.", "{n}. {v}", "Item {n} - {v};", "({n}) {v}", "Example {n}: {v}", "{v} {n}", "Q{n}: {v}?",
            "{v} #{n}", "| {n} | {v} |", "The {n}th {v}", "- [{n}] {v}", "Day {n}: {v}", "[{n}]", "({n})", "{n})",
            "<{n}>", "{{{n}}}", "#{n}", "{n}.", "— {n} —", "[{n}] {v}", "{n}/", "№{n}", "{n}:", "<{n}> {v}", "**{n}.** {v}"]
ECHO = ["{p}\n", "### Instruction:\n{p}\n\n### Response:\n", "User: {p}\nAssistant: ", "Q: {p}\nA: ", "{p} ",
        "<|user|>\n{p}\n<|assistant|>\n", "{p}\n\n"]
SENTENCE_END = re.compile(r"(?<=[.!?。！？।؟])\s+|\n\n")


@dataclass
class Sample:
    cls: str  # "healthy" or a degenerate class
    text: str
    group: str = ""  # healthy: the script of prose, or the kind of structured / English text
    onset: int = 0
    cut: int = 0
    base: int = 0  # samples cut from the same generation share it


def group_of(doc: Doc) -> str:
    return doc.script if doc.kind == "prose" else doc.kind


class Material:
    """Words, sentences and lines to build degenerations from: English and every script of the corpus."""

    def __init__(self, docs: list[Doc]):
        english = [d for d in docs if d.kind in ("docstring", "readme", "license", "changelog")]
        foreign = [d for d in docs if d.kind == "prose"]
        self.docs = docs
        self.sentences = [s for d in english for s in _sentences(d.text)][:20000]
        self.foreign = [s for d in foreign for s in _sentences(d.text)][:20000] or self.sentences
        words = [w for d in english for w in re.findall(r"[A-Za-z][a-z]+", d.text)]
        self.vocab = {
            "types": sorted({w.lower() for w in words}),  # uniform over distinct words: content words dominate
            "running": words[:200000],  # frequency-weighted: function words at their natural rate
            "code": sorted({w for d in docs if d.kind == "code" for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", d.text)}),
            "foreign": sorted({w for s in self.foreign[:5000] for w in s.split() if w.isalpha()}) or ["слово"],
        }

    def sentence(self, rng: random.Random) -> str:
        return rng.choice(self.sentences if rng.random() < 0.6 else self.foreign)

    def words(self, rng: random.Random, k: int, source: str | None = None) -> list[str]:
        pool = self.vocab[source or rng.choice(["types", "types", "running", "code", "foreign"])]
        return [rng.choice(pool) for _ in range(k)]

    def lines(self, rng: random.Random, lo: int, hi: int) -> str:
        doc = rng.choice(self.docs)
        lines = [ln for ln in doc.text.splitlines() if ln.strip()]
        start = rng.randrange(max(1, len(lines)))
        unit = "\n".join(lines[start:start + rng.randint(2, 8)])[:hi]
        return unit if len(unit) >= lo else unit + "\n" + self.sentence(rng)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(text) if s and 20 <= len(s.strip()) <= 250 and "\n" not in s.strip()]


def _repeat(unit: str, rng: random.Random, least: int = 3) -> tuple[str, int]:
    """unit repeated to fill 200-1400 characters (at least `least` copies); (text, length of the last period)."""
    k = max(least, -(-rng.randint(200, 1400) // max(1, len(unit))))
    return unit * k, len(unit)


def loop(cls: str, m: Material, rng: random.Random) -> tuple[str, int, int]:
    """A degenerate continuation of loop class `cls` -> (text, onset within it, length of its last period)."""
    if cls == "char-repeat":
        return rng.choice(CHAR_POOL) * rng.randint(30, 400), 0, 1
    if cls == "dot-run":  # real tokenizers pack 16-64 dots into one token: long in characters, short in tokens
        unit = rng.choice([".", ".", ".", "…"])
        return _repeat(unit, rng, least=200)[0], 0, 1
    if cls == "token-repeat":
        tok = rng.choice([m.words(rng, 1)[0], m.words(rng, 1, "code")[0], str(rng.randint(0, 999)),
                          rng.choice("中好的のあЖ"), m.words(rng, 1)[0][:3], m.words(rng, 1, "foreign")[0]])
        unit = tok + rng.choice([" ", " ", ", ", "\n", " - ", "", "|", ". "])
    elif cls == "punctuation-repeat":
        unit = rng.choice(PUNCTUATION)
    elif cls == "phrase-loop":
        if rng.random() < 0.5:
            unit = " ".join(m.words(rng, rng.randint(2, 8)))
        else:
            s = m.sentence(rng).split()
            i = rng.randrange(len(s))
            unit = " ".join(s[i:i + rng.randint(2, 8)])
        unit += rng.choice([" ", ", ", ". ", "\n", "! ", " - "])
    elif cls in ("sentence-loop", "multi-sentence-loop"):
        k = 1 if cls == "sentence-loop" else rng.randint(2, 4)
        unit = " ".join(m.sentence(rng) for _ in range(k))[:420] + rng.choice([" ", " ", "\n", "\n\n"])
    elif cls == "multi-line-loop":
        unit = m.lines(rng, 20, 420) + "\n"
    elif cls == "prompt-echo":
        prompt = " ".join(m.sentence(rng) for _ in range(rng.randint(1, 3)))[: rng.randint(60, 360)]
        unit = rng.choice(ECHO).format(p=prompt)
    elif cls == "counting-loop":
        return _counting(m, rng)
    else:
        raise ValueError(cls)
    text, period = _repeat(unit, rng)
    return text, len(unit), period


def _counting(m: Material, rng: random.Random) -> tuple[str, int, int]:
    body = " ".join(m.words(rng, rng.randint(2, 8))) if rng.random() < 0.6 else m.sentence(rng)[:160]
    form = rng.choice(COUNTING)
    first, step = rng.randint(0, 120), rng.choice([1, 1, 1, 2, 5, 10, -1])
    joiner = rng.choice([" ", "\n", "\n", "\n\n", ", ", "; "])
    parts = [form.format(n=first + i * step, v=body) + joiner for i in range(3)]
    while sum(map(len, parts)) < rng.randint(200, 1400) or len(parts) < 12:
        parts.append(form.format(n=first + len(parts) * step, v=body) + joiner)
    return "".join(parts), len(parts[0]), len(parts[-1])


def _mojibake(rng: random.Random, m: Material) -> str:
    src = rng.choice([" ".join(m.words(rng, rng.randint(4, 30), "foreign")),
                      "It’s “quoted” – a dash — ‘single’ … café, naïve, über, façade, São Paulo, Straße."])
    return src.encode("utf-8").decode(rng.choice(["latin-1", "cp1252"]), errors="replace")


def junk(cls: str, m: Material, rng: random.Random) -> str:
    """A degenerate continuation without a period: word soup, subword soup or unicode junk."""
    if cls == "word-soup":
        words = m.words(rng, rng.randint(30, 150), rng.choice(["types", "types", "running", "code"]))
        if rng.random() < 0.4:  # sprinkle punctuation and capitals, as sampled soup often has
            words = [w + rng.choice([",", ".", ""]) if rng.random() < 0.12 else w for w in words]
            words = [w.capitalize() if i and words[i - 1].endswith(".") else w for i, w in enumerate(words)]
        return " ".join(words)
    if cls == "subword-soup":
        frags = []
        for w in m.words(rng, 400, rng.choice(["types", "running", "code"])):
            i = rng.randrange(max(1, len(w) - 1))
            frags.append(w[i:i + rng.randint(1, 4)])
        style, n = rng.choice(["Ġ", "▁", "##", "plain", "glued", "bytes"]), rng.randint(20, 100)
        if style in ("Ġ", "▁", "##"):
            return " ".join(style + f if rng.random() < 0.6 else f for f in frags[:n])
        if style == "plain":
            return " ".join(frags[:n])
        if style == "glued":
            cuts = [0]
            while len(cuts) <= n:
                cuts.append(cuts[-1] + rng.randint(2, 4))
            return " ".join("".join(frags[a:b]) for a, b in zip(cuts, cuts[1:]))
        return "".join(rng.choice(["Ġ", "Ċ", "âĢĻ", "ĠĠ", ""]) + f for f in frags[:n])
    kind = rng.choice(["random", "mojibake", "replacement", "invisible", "private", "zalgo"])
    if kind == "random":
        ranges = [(0x400, 0x4FF), (0x4E00, 0x9FFF), (0x600, 0x6FF), (0x370, 0x3FF), (0x21, 0x7E), (0xE0, 0x17F),
                  (0x900, 0x97F), (0x2580, 0x259F), (0x1F300, 0x1F5FF), (0xAC00, 0xD7A3), (0x0E00, 0x0E7F)]
        picked = rng.sample(ranges, rng.randint(2, 5))
        return "".join(chr(rng.randint(*rng.choice(picked))) for _ in range(rng.randint(40, 200)))
    if kind == "mojibake":
        return _mojibake(rng, m)
    if kind == "replacement":
        return " ".join(w + "\ufffd" * rng.randint(1, 3) for w in m.words(rng, rng.randint(5, 30)))
    if kind == "invisible":
        return "".join(w + rng.choice(["\u200b", "\u200d", "\x07", "\x1b", "\ufeff", "\x00", "\u2060"])
                       for w in m.words(rng, rng.randint(10, 60)))
    if kind == "private":
        return " ".join(w + chr(rng.randint(0xE000, 0xF8FF)) for w in m.words(rng, rng.randint(5, 40)))
    return "".join(c + "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(3, 8)))
                   for c in " ".join(m.words(rng, rng.randint(3, 20))))


def _empty(rng: random.Random) -> str:
    k = rng.randint(1, 12)
    return rng.choice(["", " ", "\n\n", " \t\n ", "".join(rng.choice(SPECIALS) for _ in range(k)),
                       rng.choice(SPECIALS) + rng.choice(["<pad>", "[PAD]", "</s>"]) * k,
                       " ".join(rng.choice(SPECIALS) for _ in range(k)) + "\n"])


def degenerate(cls: str, base: int, docs: list[Doc], m: Material, rng: random.Random) -> list[Sample]:
    """One generation of class `cls` after a healthy prefix of 0-600 characters, cut at CUTS offsets of its end."""
    if cls == "empty":
        return [Sample(cls, _empty(rng), base=base, cut=j) for j in range(CUTS)]
    prefix = "" if rng.random() < 0.15 else snippet(rng.choice(docs), rng, rng.randint(20, 600))[:600]
    head = prefix + ("" if not prefix or prefix.endswith((" ", "\n")) else rng.choice([" ", "\n", "\n\n"]))
    if cls == "multi-sentence-early":
        return _early(head, m, rng, base)
    if cls in LOOP_CLASSES:
        body, onset, period = loop(cls, m, rng)
    else:
        body = junk(cls, m, rng)
        onset, period = 0, min(64, len(body) // 2)
    text = head + body
    shift = rng.random()
    ends = [len(text) - period + int((j + shift) * period / CUTS) for j in range(CUTS)]
    return [Sample(cls, text[:e], onset=len(head) + onset, cut=j, base=base) for j, e in enumerate(ends)]


def _early(head: str, m: Material, rng: random.Random, base: int) -> list[Sample]:
    """A cycle of 3-5 sentences cut in the last 40% of its second copy, once two of its sentences and 100 characters
    were said again: a loop that `max_new_tokens` cut before two whole copies."""
    sentences = [m.sentence(rng) for _ in range(rng.randint(3, 5))]
    sep = rng.choice([" ", " ", "\n", "\n\n"])
    unit = sep.join(sentences) + sep
    text = head + unit * 2
    start = len(head) + len(unit)  # the second copy
    after_two = start + max(len(sep.join(sentences[:2])), int(0.6 * len(unit)), 100)
    shift = rng.random()
    ends = [after_two + int((j + shift) * (len(text) - after_two) / CUTS) for j in range(CUTS)]
    return [Sample("multi-sentence-early", text[:e], onset=start, cut=j, base=base) for j, e in enumerate(ends)]


def healthy(docs: list[Doc], n: int, rng: random.Random) -> list[Sample]:
    """n healthy samples drawn evenly over groups (scripts, structured kinds, English kinds)."""
    by_group: dict[str, list[Doc]] = {}
    for d in docs:
        by_group.setdefault(group_of(d), []).append(d)
    groups, out = sorted(by_group), []
    while len(out) < n:
        group = groups[len(out) % len(groups)]
        text = snippet(rng.choice(by_group[group]), rng)
        if len(text) >= 40:
            out.append(Sample("healthy", text, group))
    return out


def build(seed: int, reported: bool, n_healthy: int = 1600, per_class: int = 40,
          docs: list[Doc] | None = None, per_group: int | None = None) -> tuple[list[Sample], list[Sample]]:
    """(healthy, degenerate) samples from the tuning half (reported=False) or the reported half of the documents.
    per_group: that many healthy samples of each script or kind the half holds, instead of n_healthy in all."""
    rng = random.Random(seed)
    docs = [d for d in (docs or everything()) if is_reported(d) == reported]
    if per_group:
        n_healthy = per_group * len({group_of(d) for d in docs})
    material = Material(docs)
    bad = [s for cls in CLASSES for b in range(per_class) for s in degenerate(cls, b, docs, material, rng)]
    return healthy(docs, n_healthy, rng), bad


def is_structured(group: str) -> bool:
    return group in STRUCTURED
