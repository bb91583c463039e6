"""The real model's task: pull an order out of a customer's message as one line of JSON, keys in a fixed order.

    from bench import order_task
    order_task.write_records(path, n=700, seed=0)    # Alpaca-style JSONL: instruction, input (the message), output

A 135M instruct model does this badly out of the box (it answers in prose, invents keys, drops the quantity or
reorders the keys), and a few dozen QLoRA steps teach it: the answer is a copy of spans of the message in a fixed
shape, so exact match is the metric. Messages vary in phrasing, order of facts and punctuation, names and cities
are many, so the eval split's messages are new sentences, not seen ones. `pairs()` makes preference pairs: the right
answer against a near miss (one field wrong, keys reordered, prose) and, given the model's own answers, against
those that were wrong.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

INSTRUCTION = "Extract the order from the customer's message as JSON with the keys name, city, item and quantity."
NAMES = ("Maria Lena Tomas Aisha Kenji Olga Pedro Nadia Samuel Ingrid Rahul Chloe Mateo Yara Felix Hana Omar Greta "
         "Luca Zoe Ivan Amara Jonas Leila Diego Freya Kofi Elena Arjun Marco Noor Emil Tara Hugo Mina").split()
CITIES = ("Lisbon Oslo Nairobi Lima Osaka Tallinn Porto Quito Dakar Hanoi Perth Sofia Krakow Bergen Cusco Accra Seville "
          "Turin Leeds Graz Malmo Split Izmir Cork Bruges Ghent Basel Lyon Nantes Bremen").split()
COLORS = "red blue green black white yellow grey orange purple brown".split()
THINGS = ("mugs notebooks lamps chairs towels pens candles plates scarves backpacks pillows clocks bottles baskets "
          "umbrellas").split()
TEMPLATES = (
    "Hi, I'm {name} from {city}. Please send {qty} {item}.",
    "{name} here ({city}): I need {qty} {item} by Friday.",
    "Order for {name}, {city}: {qty} x {item}.",
    "Could you ship {qty} {item} to {name} in {city}?",
    "This is {name}. I live in {city} and would like to order {qty} {item}, thanks!",
    "{city} office, {name} speaking. We want {qty} {item}.",
    "Please deliver {qty} {item} to {city}. Name on the order: {name}.",
    "Good morning! {name} from {city} would like {qty} {item}.",
    "hey, {qty} {item} please. it's {name}, {city}",
    "We're running low on {item} here in {city}. Send {qty}, please. Regards, {name}",
    "My name is {name} and I'd like {qty} {item} delivered to my home in {city}.",
    "{qty} {item} for {name} ({city}), as soon as you can.",
)


def _record(rng: random.Random) -> dict:
    fields = {"name": rng.choice(NAMES), "city": rng.choice(CITIES),
              "item": f"{rng.choice(COLORS)} {rng.choice(THINGS)}", "quantity": rng.randint(2, 40)}
    message = rng.choice(TEMPLATES).format(name=fields["name"], city=fields["city"], qty=fields["quantity"],
                                           item=fields["item"])
    return {"instruction": INSTRUCTION, "input": message, "output": answer(fields)}


def answer(fields: dict) -> str:
    """The one right answer: compact JSON, keys in the instruction's order."""
    return json.dumps({k: fields[k] for k in ("name", "city", "item", "quantity")})


def records(n: int = 700, seed: int = 0) -> list[dict]:
    """n distinct records (no message twice)."""
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        rec = _record(rng)
        if rec["input"] not in seen:
            seen.add(rec["input"])
            out.append(rec)
    return out


def write_records(path: str | Path, n: int = 700, seed: int = 0) -> Path:
    """records() as JSONL, the raw_data 01 reads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records(n, seed)))
    return path


def near_miss(right: str, rng: random.Random) -> str:
    """A wrong answer close to the right one: a field changed, the keys reordered, or the same facts in prose."""
    fields = json.loads(right)
    kind = rng.choice(("quantity", "city", "item", "reorder", "prose"))
    if kind == "quantity":
        fields["quantity"] += rng.choice((-1, 1, 10))
    elif kind == "city":
        fields["city"] = rng.choice([c for c in CITIES if c != fields["city"]])
    elif kind == "item":
        fields["item"] = fields["item"].split()[1]  # the colour dropped
    elif kind == "reorder":
        return json.dumps(dict(reversed(list(fields.items()))))
    else:
        return f"{fields['name']} from {fields['city']} wants {fields['quantity']} {fields['item']}."
    return answer(fields)


def pairs(rows: list[tuple[str, str]], seed: int = 0, own: dict[str, str] | None = None) -> list[dict]:
    """Preference pairs (prompt, chosen, rejected) from (user turn, right answer) rows; `own` maps a user turn to the
    model's own answer, the rejected answer where it is wrong, else a near miss."""
    rng, out = random.Random(seed), []
    for prompt, right in rows:
        mine = (own or {}).get(prompt, "").strip()
        rejected = mine if mine and mine != right else near_miss(right, rng)
        out.append({"prompt": prompt, "chosen": right, "rejected": rejected})
    return out


def split_rows(data_dir: str | Path, split: str) -> list[tuple[str, str]]:
    """(user turn, answer) of each record of 01's split: pairs are built on the split 01 made, never across it."""
    from nbutils.data import splits

    return [(r["messages"][-2]["content"], r["messages"][-1]["content"]) for r in splits.load_split(data_dir, split)]
