"""The real model's own generations, for the degeneration guard: greedy and sampled answers of SmolLM2-135M-Instruct
(bench/pretrained.py) to varied prompts, several of the kinds that make a small model loop.

    python -m bench.real_generations            # writes tests/data/real_generations.jsonl (labels kept by id)

Sets of their own prompts and seed (SETS), each generated and labelled by hand before any rule met it: the last is
what the figures are reported on ("report"); the first was tuned on from the start, and each after it was reported
on in turn and then tuned on ("tune": its misses named shapes the rules lacked). Each row: id, prompt, kind, mode
(greedy, or sampled at a temperature with its seed), the generated token ids and text, whether it ended on a stop
token or at MAX_NEW_TOKENS, its set, its half ("tune" or "report") and a hand label, read off the text alone (the
prompt's request does not count: "print A 300 times" answered with A, A, A ... is a loop to the guard and to its
label):
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


# The second set: new prompts of the same kinds, none of them in PROMPTS.
SECOND_PROMPTS = {
    "question": [
        "What is the tallest mountain in the world?", "Why do leaves change color in autumn?",
        "How does a refrigerator keep food cold?", "Who painted the Mona Lisa?", "What is the speed of light?",
        "How do bees make honey?", "What is democracy?",
    ],
    "list": [
        "List 40 cities in Asia.", "Name 25 famous scientists.", "Give me a list of 30 vegetables.",
        "List all the months of the year with their number of days.", "Write the even numbers from 2 to 200.",
        "Name 20 musical instruments.",
    ],
    "repeat": [
        "Repeat the word 'goodbye' 40 times.", "Say 'the end' again and again.", "Write 'no' two hundred times.",
        "Count backwards from 300 to 1.", "Type the letter Z 500 times.", "Write 'I am a robot' over and over.",
    ],
    "creative": [
        "Write a poem about the moon.", "Write a story about a cat who wants to fly.", "Write a rap verse about coffee.",
        "Write a short play with two characters.", "Write a lullaby.", "Describe a forest at night.",
        "Write a diary entry of a pirate.",
    ],
    "code": [
        "Write a Python function that sorts a list of numbers.", "Write a JavaScript countdown timer.",
        "Write a SQL table for a library with books and members.", "Write a Java class for a rectangle.",
        "Write a Python script that reads a CSV file and prints the average of a column.",
        "Write a regular expression that matches email addresses and explain it.",
    ],
    "instructions": [
        "How do I plant tomatoes?", "How do I make a paper airplane?", "How do I tie a tie? Step by step.",
        "Write a recipe for chocolate cake.", "How do I prepare for a job interview?", "How do I clean a laptop keyboard?",
    ],
    "math": [
        "What is 123 plus 456?", "Solve 2x - 7 = 11.", "What is 15 percent of 80?", "Is 91 a prime number?",
        "Multiply 12 by 12, then by 12 again.",
    ],
    "other_language": [
        "Quelle heure est-il à Tokyo quand il est midi à Paris ?", "¿Por qué el cielo es azul?",
        "Was ist die Hauptstadt von Österreich?", "Come si prepara il risotto?",
    ],
    "structured": [
        "Give me a JSON list of three movies with title and year.", "Make a markdown table of the planets and their sizes.",
        "Write a TOML config for a Python project.", "Write an SVG image of a red circle.",
    ],
    "odd": [
        "and and and and", "zzzz", "!!!", "Continue the pattern: A B A B A B", "hmm", "Write nothing but numbers.",
        "Tell me a secret.", "Repeat your last answer.",
    ],
    "longform": [
        "Write a 2000-word article about artificial intelligence.", "Explain the causes of the First World War.",
        "Write a detailed guide to keeping a houseplant alive.", "Describe the water cycle in depth.",
        "Write a long product description for running shoes.",
    ],
}
# The third set: new prompts of the same kinds again, none of them in the first two.
THIRD_PROMPTS = {
    "question": [
        "What is the largest ocean on Earth?", "Why do we dream?", "How does a rainbow form?",
        "Who invented the telephone?", "What is gravity?", "How do airplanes stay in the air?",
        "What is the boiling point of water?",
    ],
    "list": [
        "List 50 birds.", "Name 30 famous painters.", "Give me a list of 40 sports.",
        "List the first 50 square numbers.", "Write the multiples of 7 up to 350.", "Name 25 rivers of the world.",
    ],
    "repeat": [
        "Repeat the word 'cat' 60 times.", "Say 'ha' forever.", "Write 'ok ok ok' a hundred times.",
        "Count from 1 to 1000 in steps of 2.", "Type the word 'apple' again and again without stopping.",
        "Write 'I am happy' fifty times.",
    ],
    "creative": [
        "Write a poem about the rain.", "Write a story about a lost robot.", "Write song lyrics about friendship.",
        "Write a ghost story.", "Write a nursery rhyme about a frog.", "Describe a busy market in the morning.",
        "Write a letter from a soldier to his mother.",
    ],
    "code": [
        "Write a Python function that counts the vowels in a string.", "Write a C program that prints a triangle of stars.",
        "Write a SQL query that joins orders and customers.", "Write a Go function that adds two numbers.",
        "Write a Python generator that yields the first n squares.", "Write a Dockerfile for a Flask app.",
    ],
    "instructions": [
        "How do I make coffee with a French press?", "How do I learn to swim?", "How do I wash a wool sweater?",
        "Write a recipe for lemonade.", "How do I study for an exam?", "How do I set up a fish tank?",
    ],
    "math": [
        "What is 999 divided by 3?", "Solve 5x + 2 = 3x + 10.", "What is the area of a circle of radius 3?",
        "What is 7 factorial?", "List the factors of 60.",
    ],
    "other_language": [
        "Quel est le plus long fleuve de France ?", "¿Cuál es la capital de Argentina?",
        "Wie backe ich einen Apfelkuchen?", "Qual è il monte più alto d'Italia?",
    ],
    "structured": [
        "Give me a JSON object for a user with name, email and age.", "Make a markdown table of five fruits and colors.",
        "Write an INI file for a database connection.", "Write a Makefile for a C project.",
    ],
    "odd": [
        "or or or or or", "xyzzy", "???", "Continue: red blue red blue red", "yes", "Write only emojis.",
        "Tell me a joke.", "Say it again.",
    ],
    "longform": [
        "Write a 1500-word essay about the ocean.", "Explain the history of the printing press in detail.",
        "Write a detailed guide to training a puppy.", "Describe how electricity reaches a home.",
        "Write a long review of a restaurant.",
    ],
}

# The fourth set: new prompts of the same kinds once more, none of them in the first three.
FOURTH_PROMPTS = {
    "question": [
        "What is the smallest country in the world?", "Why is the ocean salty?", "How does a compass work?",
        "Who discovered penicillin?", "What is an atom?", "How do fish breathe underwater?", "What is a leap year?",
    ],
    "list": [
        "List 30 insects.", "Name 25 famous writers.", "Give me a list of 40 flowers.", "List the first 30 prime numbers.",
        "Write the multiples of 9 up to 270.", "Name 20 kitchen tools.",
    ],
    "repeat": [
        "Repeat the word 'sun' 70 times.", "Say 'la la la' forever.", "Write 'go' three hundred times.",
        "Count down from 100 to 0.", "Type the word 'star' again and again.", "Write 'I can do it' forty times.",
    ],
    "creative": [
        "Write a poem about winter.", "Write a story about a brave mouse.", "Write song lyrics about the city.",
        "Write a mystery story.", "Write a nursery rhyme about a duck.", "Describe a beach at dawn.",
        "Write a letter from a dog to its owner.",
    ],
    "code": [
        "Write a Python function that checks whether a string is a palindrome.", "Write a C function that swaps two integers.",
        "Write a SQL query that counts orders per day.", "Write a Rust function that returns the maximum of a vector.",
        "Write a Python class for a to-do list.", "Write a GitHub Actions workflow that runs tests.",
    ],
    "instructions": [
        "How do I make tea?", "How do I ride a bicycle?", "How do I iron a shirt?", "Write a recipe for guacamole.",
        "How do I write a cover letter?", "How do I grow basil indoors?",
    ],
    "math": [
        "What is 64 divided by 8?", "Solve 4x - 3 = 2x + 9.", "What is the perimeter of a square of side 5?",
        "What is 10 factorial?", "List the divisors of 48.",
    ],
    "other_language": [
        "Quelle est la plus haute montagne d'Europe ?", "¿Cuál es el río más largo del mundo?",
        "Wie funktioniert ein Kühlschrank?", "Qual è la capitale della Spagna?",
    ],
    "structured": [
        "Give me a JSON object for a car with make, model and year.", "Make a markdown table of five animals and their habitats.",
        "Write a .gitignore file for a Python project.", "Write a docker-compose file for a web app and a database.",
    ],
    "odd": [
        "if if if if", "qwerty", "...?", "Continue: 1 1 2 3 5 8", "no", "Write only symbols.", "Tell me a riddle.",
        "Do it again.",
    ],
    "longform": [
        "Write a 1200-word essay about space exploration.", "Explain the history of the bicycle in detail.",
        "Write a detailed guide to starting a vegetable garden.", "Describe how a computer boots up.",
        "Write a long review of a novel.",
    ],
}


# The fifth set: new prompts of the same kinds once more, none of them in the first four.
FIFTH_PROMPTS = {
    "question": [
        "What is the longest river in Africa?", "Why do birds migrate?", "How does a microwave oven heat food?",
        "Who built the pyramids?", "What is a galaxy?", "How do plants drink water?", "What is a volcano?",
    ],
    "list": [
        "List 30 mammals.", "Name 25 famous composers.", "Give me a list of 40 board games.",
        "List the first 40 even numbers.", "Write the multiples of 6 up to 300.", "Name 20 tools in a garage.",
    ],
    "repeat": [
        "Repeat the word 'moon' 80 times.", "Say 'bye bye' forever.", "Write 'stop' two hundred times.",
        "Count down from 50 to 0.", "Type the word 'blue' again and again.", "Write 'I like trains' thirty times.",
    ],
    "creative": [
        "Write a poem about the stars.", "Write a story about a shy giant.", "Write song lyrics about the sea.",
        "Write a detective story.", "Write a nursery rhyme about a cow.", "Describe a snowy village at night.",
        "Write a letter from a cat to the moon.",
    ],
    "code": [
        "Write a Python function that merges two sorted lists.", "Write a C function that computes a factorial.",
        "Write a SQL query that lists employees and their managers.", "Write a Kotlin data class for a user.",
        "Write a Python decorator that times a function.", "Write a Nginx config for a static site.",
    ],
    "instructions": [
        "How do I boil an egg?", "How do I learn to juggle?", "How do I paint a room?", "Write a recipe for hummus.",
        "How do I prepare for a marathon?", "How do I care for a cactus?",
    ],
    "math": [
        "What is 81 divided by 9?", "Solve 6x + 4 = 2x + 20.", "What is the area of a triangle with base 6 and height 4?",
        "What is 5 factorial?", "List the factors of 36.",
    ],
    "other_language": [
        "Quelle est la capitale du Canada ?", "¿Cómo se prepara el gazpacho?", "Warum ist der Himmel nachts dunkel?",
        "Qual è il lago più grande d'Italia?",
    ],
    "structured": [
        "Give me a JSON object for a movie with title, director and year.", "Make a markdown table of five cities and their countries.",
        "Write a requirements.txt for a data science project.", "Write a Kubernetes deployment for a web server.",
    ],
    "odd": [
        "but but but but", "asdf", "!?!?", "Continue: x y z x y z x", "maybe", "Write only punctuation.",
        "Tell me a fun fact.", "Once more.",
    ],
    "longform": [
        "Write a 1000-word essay about music.", "Explain the history of the railway in detail.",
        "Write a detailed guide to learning a new language.", "Describe how a car engine works.",
        "Write a long review of a video game.",
    ],
}

# Each set with its seed and the half it is in. Each set after the first was generated and labelled before any rule
# met it and reported on; then its misses named shapes the rules lacked, it was tuned on, and the next was reported on.
SETS = {"first": (PROMPTS, 0, "tune"), "second": (SECOND_PROMPTS, 1, "tune"), "third": (THIRD_PROMPTS, 2, "tune"),
        "fourth": (FOURTH_PROMPTS, 3, "tune"), "fifth": (FIFTH_PROMPTS, 4, "report")}


def _row_id(prompt: str, mode: str, temperature: float | None) -> str:
    return hashlib.sha256(f"{prompt}|{mode}|{temperature}".encode()).hexdigest()[:12]


def generate_rows(model, tokenizer, which: str, batch: int = 16) -> list[dict]:
    """Every prompt of a set (a key of SETS) in every mode, MAX_NEW_TOKENS at most, seeded by the set's seed, no
    guard: what the model writes when nothing stops it."""
    import torch

    from nbutils.data import chatformat

    stops = chatformat.stop_ids(tokenizer, model)
    given, seed, half = SETS[which]
    prompts = [(kind, p) for kind, ps in given.items() for p in ps]
    chunks = [[(kind, p, mode, t) for kind, p in prompts[i:i + batch]]  # one mode per batch
              for mode, t in MODES for i in range(0, len(prompts), batch)]
    tokenizer.padding_side = "left"
    rows = []
    for i, chunk in enumerate(chunks):
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for _, p, _, _ in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        t = chunk[0][3]
        torch.manual_seed(1000 * seed + i)
        with torch.no_grad():
            seq = model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=t is not None,
                                 temperature=t, top_p=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=stops)
        for (kind, p, m, temp), ids in zip(chunk, seq[:, enc["input_ids"].shape[1]:].tolist()):
            cut = next((k for k, tok in enumerate(ids) if tok in stops), None)
            ids = ids if cut is None else ids[:cut]
            rows.append({"id": _row_id(p, m, temp), "prompt": p, "kind": kind, "mode": m, "temperature": temp,
                         "set": which, "half": half, "ended": "limit" if cut is None else "stop", "token_ids": ids,
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
    """Generate the rows of each set not saved yet and write them all, keeping the rows (and hand labels) of ids seen
    before: the tune set was labelled and tuned on before the report set was generated."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench import pretrained

    folder = pretrained.ensure()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    old = {r["id"]: r for r in map(json.loads, OUT.read_text().splitlines())} if OUT.exists() else {}
    rows = []
    for which, (prompts, _, half) in SETS.items():
        ids = {_row_id(p, m, t) for ps in prompts.values() for p in ps for m, t in MODES}
        if ids <= old.keys():
            rows += [{**r, "set": which, "half": half} for i, r in old.items() if i in ids]  # in the file's order
            continue
        rows += [{**r, "label": old.get(r["id"], {}).get("label")} for r in generate_rows(model, tokenizer, which)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {OUT} ({sum(r['label'] is None for r in rows)} without a label)")


if __name__ == "__main__":
    main()
