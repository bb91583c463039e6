"""The runtime check's verdicts (nbutils.export.runtimecheck): each compares what llama.cpp did with what the HF
side did and names what differs: the first differing token with both sides' tokens, the template's first differing
line, the stop llama.cpp does not make, the logit figure outside its bound."""

from __future__ import annotations

from nbutils.export import runtimecheck
from nbutils.export.runtimecheck import Plan


def _token(i: int, pieces: list[str] | None = None, at: int | None = None, piece=None) -> str:
    shown = pieces[at] if pieces is not None and at is not None else piece(i) if piece else ""
    return f"{i} {shown!r}"


def _bos_cause(want: list[int], got: list[int], bos: int, add_bos: bool) -> str | None:
    """Why the first tokens differ when BOS is the cause."""
    def lead(ids):
        return next((i for i, t in enumerate(ids) if t != bos), len(ids))
    if lead(got) == lead(want):
        return None
    return (f"llama.cpp's prompt starts with {lead(got)} BOS token(s), the HF tokenizer's with {lead(want)} "
            f"(the GGUF's tokenizer.ggml.add_bos_token is {str(add_bos).lower()})")


def first_difference(want: list[int], got: list[int], got_pieces: list[str], piece, bos: int, add_bos: bool) -> str:
    """The first token where llama.cpp's ids part from the HF tokenizer's, both decoded (or the BOS cause)."""
    cause = _bos_cause(want, got, bos, add_bos)
    if cause:
        return cause
    i = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    ours = _token(want[i], piece=piece) if i < len(want) else "(end)"
    theirs = _token(got[i], got_pieces, i) if i < len(got) else "(end)"
    return f"token {i} is {theirs} in llama.cpp, {ours} in the HF tokenizer ({len(got)} vs {len(want)} tokens)"


def tokens(p: Plan, rt: dict) -> tuple[dict, list[str]]:
    """(a): eval prompts rendered and tokenized by llama.cpp equal the HF ids; a plain text gets BOS exactly when the
    template writes it. Plain texts' other tokens are counted, not judged: a SentencePiece tokenizer that puts "▁"
    only at the very start (Phi-3.5) has no llama.cpp equivalent, and the GGUF follows it after special tokens,
    where every chat needs it (gguf.space_prefix)."""
    vocab, problems, same = rt["vocab"], [], 0
    for k, ((_, ids), got) in enumerate(zip(p.hf["chats"], rt["chats"])):
        if "error" in got:
            problems.append(f"eval prompt {k}: llama.cpp cannot render it with the GGUF's chat template: {got['error']}")
        elif got["ids"] == ids:
            same += 1
        else:
            problems.append(f"eval prompt {k}: " + first_difference(ids, got["ids"], got["pieces"], p.piece,
                                                                    vocab["bos"], vocab["add_bos"]))
    plain_same = sum(got["plain"] == ids for ids, got in zip(p.hf["plain"], rt.get("texts", [])))
    for got in rt.get("texts", [])[:1]:  # a plain prompt's BOS: what llama.cpp adds to its own tokens of the text
        leading = len(got["ids"]) - len(got["plain"])
        if leading != int(p.template_bos):
            problems.append(f"a plain prompt gets {leading} BOS token(s) in llama.cpp (tokenizer.ggml.add_bos_token is "
                            f"{str(vocab['add_bos']).lower()}); the chat template the model was trained with "
                            f"{'writes one' if p.template_bos else 'writes none'}")
    return {"eval_prompts": len(p.hf["chats"]), "same_ids": same, "plain_texts": len(p.hf["plain"]),
            "plain_same_ids": plain_same, "add_bos": vocab["add_bos"], "template_bos": p.template_bos}, problems


def _line_difference(want: str, got: str) -> str:
    a, b = want.split("\n"), got.split("\n")
    i = next(k for k in range(max(len(a), len(b))) if (a[k] if k < len(a) else None) != (b[k] if k < len(b) else None))
    return (f"line {i + 1} is {b[i] if i < len(b) else '(missing)'!r} in llama.cpp, "
            f"{a[i] if i < len(a) else '(missing)'!r} in the HF template")


def template(p: Plan, rt: dict) -> tuple[dict, list[str]]:
    """(b): each conversation rendered by llama.cpp (BOS text left to the tokenizer where the model adds BOS, as
    llama-server does) equals the HF rendering."""
    bos_text = p.hf["bos_text"] if rt["vocab"]["add_bos"] else None
    problems, equal = [], 0
    for k, ((text, _), got) in enumerate(zip(p.hf["conversations"], rt["chats"][len(p.chats):])):
        what = f"conversation {k} ({len(p.conversations[k])} messages" + \
            (", with a system prompt)" if p.conversations[k][0]["role"] == "system" else ")")
        want = text[len(bos_text):] if bos_text and text.startswith(bos_text) else text
        if "error" in got:
            problems.append(f"{what}: llama.cpp cannot render the GGUF's chat template: {got['error']}")
        elif got["text"] != want:
            problems.append(f"{what}: the chat template renders differently: {_line_difference(want, got['text'])}")
        else:
            equal += 1
    return {"conversations": len(p.conversations), "equal": equal, "note": p.hf.get("note")}, problems


def stops(p: Plan, rt: dict) -> tuple[dict, list[str]]:
    """Every stop id is an end-of-generation token in llama.cpp and declared in the GGUF's metadata."""
    eog, meta = set(rt["vocab"]["eog"]), rt["vocab"]["metadata"]
    declared = {int(meta[f"{n}_token_id"]) for n in ("eos", "eot", "eom") if meta.get(f"{n}_token_id") is not None}
    problems = []
    for s in p.stop_ids:
        if s not in eog:
            problems.append(f"llama.cpp does not end generation on {_token(s, piece=p.piece)}, one of the model's stop "
                            f"tokens: the GGUF's tokenizer.ggml.eos/eot/eom_token_id hold {sorted(declared)}")
        elif s not in declared:
            problems.append(f"llama.cpp ends generation on {_token(s, piece=p.piece)} only because it knows the token's "
                            f"name: the GGUF's tokenizer.ggml.eos/eot/eom_token_id hold {sorted(declared)}, so runtimes "
                            "that read them (Ollama's own engine) go on")
    confirmed = [s for s in p.stop_ids if s in eog and s in declared]
    return {"stop_ids": p.stop_ids, "confirmed": confirmed, "declared": sorted(declared)}, problems


def _one_greedy(k: int, h: dict, r: dict, p: Plan, tie_gap: float, out: dict) -> str | None:
    """One eval prompt's greedy runs compared; updates `out`'s counts, returns a problem or None."""
    a, b = h["ids"], r["ids"]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is not None:
        gap = h["margins"][first]
        if gap <= tie_gap:
            out["ties"].append({"prompt": k, "step": first, "gap": round(gap, 5), "merged": p.piece(a[first]),
                                "llama_cpp": r["pieces"][first]})
            return None
        return (f"eval prompt {k}: greedy tokens part at step {first}: the merged model's {_token(a[first], piece=p.piece)}, "
                f"llama.cpp's {_token(b[first], r['pieces'], first)} (the merged model leads by {gap:.3g}, more than "
                f"the near-tie bound {tie_gap:.3g})")
    if len(b) > len(a):
        return (f"eval prompt {k}: llama.cpp does not stop at {_token(a[-1], piece=p.piece)} (step {len(a) - 1}), where "
                f"the merged model ends its answer; it goes on with {_token(b[len(a)], r['pieces'], len(a))}")
    if len(b) < len(a) or r["stopped"] != h["stopped"]:
        return (f"eval prompt {k}: llama.cpp stops at {_token(b[-1], r['pieces'], len(b) - 1)} (step {len(b) - 1}), "
                "which is not one of the model's stop tokens; the merged model goes on")
    out["same"] += 1
    if r["stopped"]:
        out["stopped"] += 1
        out["stopped_on"].append(r["pieces"][-1])
    return None


def greedy(p: Plan, rt: dict, ref: dict, tie_gap: float) -> tuple[dict, list[str]]:
    """(c): llama.cpp's greedy tokens are the merged model's up to a near-tie, ending where the merged model ends."""
    out = {"prompts": len(ref["greedy"]), "same": 0, "ties": [], "stopped": 0, "stopped_on": [],
           "merged_stopped": sum(h["stopped"] for h in ref["greedy"]), "max_new_tokens": p.max_new,
           "tie_gap": tie_gap}
    problems = []
    for k, (h, got) in enumerate(zip(ref["greedy"], rt["chats"])):
        if "generated" in got:
            why = _one_greedy(k, h, got["generated"], p, tie_gap, out)
            problems += [why] if why else []
    return out, problems


def verdict(p: Plan, rt: dict, ref: dict, quant_type: str, lora: dict | None = None) -> dict:
    """Every part of the runtime check, its figures and its problems; ok when there are none."""
    logits = ref["logits"]["gguf"]
    parts = {"tokens": tokens(p, rt), "template": template(p, rt), "stops": stops(p, rt),
             "greedy": greedy(p, rt, ref, 2 * logits["max_abs_diff"])}
    result = {name: figures for name, (figures, _) in parts.items()}
    problems = [why for _, (_, found) in parts.items() for why in found]
    problems += runtimecheck.logit_problems(logits, quant_type, "held-out texts")
    result["logits"] = {**logits, "bounds": dict(zip(("nmse", "kl_mean", "top1"), runtimecheck.bounds(quant_type)))}
    if lora is not None:
        result["lora"] = lora
        problems += lora.get("problems", [])
    return {**result, "problems": problems, "ok": not problems}
