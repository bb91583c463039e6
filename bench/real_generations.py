"""The real model's own generations, for the degeneration guard: greedy and sampled answers of SmolLM2-135M-Instruct
(bench/pretrained.py) to varied prompts, several of the kinds that make a small model loop.

    python -m bench.real_generations            # writes tests/data/real_generations.jsonl (labels kept by id)

Each row: id, prompt, kind, mode (greedy, or sampled at a temperature with its seed), the generated token ids and
text, whether it ended on a stop token or at MAX_NEW_TOKENS, the half it belongs to (by prompt: every generation of
a prompt falls in the same half; "tune" is what rules may be tuned on, "report" what the figures are reported on)
and a hand label, read off the text alone (the prompt's request does not count: "print A 300 times" answered with
A, A, A ... is a loop to the guard and to its label):
- "loop": the text becomes the same thing over and over: a token, a phrase, a line, a paragraph or a line template
  (identical, or differing only by a counter or a word or two) at least three times in a row, running on to the end,
  or for a stretch a reader would call stuck even where the text gets out of it later (a refrain met in turn with
  other content is not one; neither is counting 1, 2, 3 ... when asked to count);
- "junk": the text stops being language a reader can follow: made-up words, tokens glued together, random
  characters or fragments with no sentence make up most of it or its end (nonsense in real sentences is not junk);
- "healthy": everything else, right or wrong, however odd.
Labels are set by reading each text, never by a detector; regenerating the file keeps the labels of the ids it
already had, and a new row starts unlabelled (None), which the bench and the tests refuse.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

NAME = "SmolLM2-135M-Instruct"
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_generations.jsonl"
MAX_NEW_TOKENS = 200
MODES = (("greedy", None), ("sampled", 0.7), ("sampled", 1.0))
SEED = 0
PROMPTS = {
    "question": [
        "What is the capital of France? Answer in one sentence.", "Why is the sky blue?",
        "How does photosynthesis work?", "What is the difference between a virus and a bacterium?",
        "Who wrote Pride and Prejudice?", "What causes the seasons on Earth?", "How do vaccines work?",
        "What is machine learning?", "Explain what a black hole is to a child.", "Why do cats purr?",
        "What is inflation in economics?", "How many legs does a spider have?",
    ],
    "list": [
        "List 30 animals.", "Name 20 countries in Europe.", "Give me a list of 50 fruits.",
        "List every prime number below 200.", "Write the numbers from 1 to 100, separated by commas.",
        "List 25 colors.", "Name all the planets and their moons.", "List 40 English verbs.",
        "Write down the alphabet backwards, letter by letter.", "List the days of the week in ten languages.",
    ],
    "repeat": [
        "Repeat the word 'hello' 50 times.", "Say 'I love pizza' over and over.", "Write 'yes' a hundred times.",
        "Count from 1 to 500.", "Repeat after me: the cat sat on the mat. Again and again.",
        "Write the same sentence twenty times: I will not talk in class.", "Keep saying banana.",
        "Print the letter A 300 times.",
    ],
    "creative": [
        "Write a poem about the sea.", "Write a song with a chorus about summer.", "Tell me a long story about a dragon.",
        "Write a haiku about autumn.", "Write a bedtime story for a five-year-old.", "Write a limerick about a cat.",
        "Describe a sunset in great detail.", "Write a motivational speech for a football team.",
        "Write a love letter from a robot.", "Write a fairy tale that never ends.",
    ],
    "code": [
        "Write a Python function that checks whether a number is prime.", "Write an HTML page with a table of 10 rows.",
        "Write a SQL query that finds the top 5 customers by revenue.", "Write a bash script that counts files in a folder.",
        "Write a JavaScript function to reverse a string.", "Write a Python class for a bank account.",
        "Write a CSS stylesheet for a blog.", "Write a recursive Fibonacci function in C.",
    ],
    "instructions": [
        "How do I bake bread? Give step-by-step instructions.", "How do I change a flat tire?",
        "Give me a weekly workout plan.", "How do I start learning the guitar?", "Write a recipe for pancakes.",
        "How do I write a good CV?", "Explain how to solve a Rubik's cube step by step.",
        "What should I pack for a week of hiking?",
    ],
    "math": [
        "What is 17 times 23?", "Solve 3x + 5 = 20 step by step.", "What is the square root of 144?",
        "Compute 2 to the power of 20.", "What is the derivative of x squared times sin x?",
        "Add up all numbers from 1 to 100.", "Convert 100 degrees Fahrenheit to Celsius.",
    ],
    "other_language": [
        "Quelle est la capitale de l'Italie ?", "¿Cómo se hace una tortilla española?",
        "Erkläre mir bitte, wie ein Motor funktioniert.", "Scrivi una poesia sulla luna.",
        "Wat is de hoofdstad van Nederland?", "Qual é a melhor época para visitar Lisboa?",
    ],
    "structured": [
        "Give me a JSON object describing a book with title, author and year.",
        "Make a markdown table of five countries and their capitals.", "Write a CSV file with 10 rows of fake users.",
        "Write a YAML config for a web server.", "Write an XML document listing three products.",
    ],
    "odd": [
        "the the the the the", "asdkjh qwe zxcv", "?", "Continue: 1 2 3 4 5 6 7 8", "ok", "...",
        "Tell me everything.", "Write the longest sentence you can.", "Translate into English: 我爱你",
        "Write the word 'loop' and nothing else.", "Say nothing.", "Write a sentence with every word starting with s.",
    ],
    "longform": [
        "Write a 1000-word essay on climate change.", "Explain the history of the Roman Empire in detail.",
        "Write a detailed review of a smartphone.", "Describe how the internet works, from cables to websites.",
        "Write a blog post about productivity tips.", "Summarize the plot of Hamlet in detail.",
        "Write a user manual for a toaster.", "Explain quantum computing in depth.",
    ],
}


def half(prompt: str) -> str:
    """'tune' or 'report' by a hash of the prompt: a prompt's generations never straddle the halves."""
    return "tune" if hashlib.sha256(prompt.encode()).digest()[0] % 2 == 0 else "report"


def _row_id(prompt: str, mode: str, temperature: float | None) -> str:
    return hashlib.sha256(f"{prompt}|{mode}|{temperature}".encode()).hexdigest()[:12]


def generate_rows(model, tokenizer, batch: int = 16) -> list[dict]:
    """Every prompt in every mode, MAX_NEW_TOKENS at most, no guard: what the model writes when nothing stops it."""
    import torch

    from nbutils.data import chatformat

    stops = chatformat.stop_ids(tokenizer, model)
    prompts = [(kind, p) for kind, ps in PROMPTS.items() for p in ps]
    chunks = [[(kind, p, mode, t) for kind, p in prompts[i:i + batch]]  # one mode per batch
              for mode, t in MODES for i in range(0, len(prompts), batch)]
    tokenizer.padding_side = "left"
    rows = []
    for i, chunk in enumerate(chunks):
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for _, p, _, _ in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        t = chunk[0][3]
        torch.manual_seed(SEED + i)
        with torch.no_grad():
            seq = model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=t is not None,
                                 temperature=t, top_p=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=stops)
        for (kind, p, m, temp), ids in zip(chunk, seq[:, enc["input_ids"].shape[1]:].tolist()):
            cut = next((k for k, tok in enumerate(ids) if tok in stops), None)
            ids = ids if cut is None else ids[:cut]
            rows.append({"id": _row_id(p, m, temp), "prompt": p, "kind": kind, "mode": m, "temperature": temp,
                         "half": half(p), "ended": "limit" if cut is None else "stop", "token_ids": ids,
                         "text": tokenizer.decode(ids, skip_special_tokens=False), "label": None})
        print(f"[generations] {len(rows)}/{len(prompts) * len(MODES)}", flush=True)
    return rows


def load(path: Path = OUT) -> list[dict]:
    """The saved rows; refuses any without a hand label."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    missing = [r["id"] for r in rows if r["label"] not in ("loop", "junk", "healthy")]
    if missing:
        raise ValueError(f"{path}: {len(missing)} rows have no hand label (loop, junk or healthy), e.g. {missing[:3]}")
    return rows


def main() -> None:
    """Generate every row again and write them, keeping the hand labels of ids seen before."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench import pretrained

    folder = pretrained.ensure()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    old = {}
    if OUT.exists():
        old = {r["id"]: r["label"] for r in map(json.loads, OUT.read_text().splitlines()) if r.get("label")}
    rows = generate_rows(model, tokenizer)
    for r in rows:
        r["label"] = old.get(r["id"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {OUT} ({sum(r['label'] is None for r in rows)} without a label)")


if __name__ == "__main__":
    main()
