"""The runtime check's verdicts on what llama.cpp answered (the probe's result, written here by hand): each failure
names its cause (the BOS count, the first differing token with both sides' tokens, the template line, the missing
stop, the greedy step), and near-ties are named, not failed."""

from nbutils.export import runtimecheck, runtimeverdict

BOS, EOT, EOS = 1, 7, 8
PIECES = {1: "<s>", 2: "hi", 3: "there", 4: "you", 5: "\n", 6: "A", 7: "<|im_end|>", 8: "</s>", 9: "B"}


def _plan(chats=((1, 2, 3),), convs=("<s>user\nhi\nassistant\n",), template_bos=True, stops=(EOT, EOS)):
    p = runtimecheck.Plan([[{"role": "user", "content": "hi"}]] * len(chats),
                          [[{"role": "user", "content": "hi"}]] * len(convs), ["there"], list(stops), template_bos)
    p.hf = {"chats": [("", list(c)) for c in chats], "conversations": [(c, []) for c in convs], "plain": [[3]],
            "texts": [], "bos": BOS, "bos_text": "<s>"}
    p.piece = PIECES.get
    return p


def _rt(chat_ids=(1, 2, 3), conv_text="user\nhi\nassistant\n", add_bos=True, plain=(1, 3), eog=(EOT, EOS),
        declared=(EOT, EOS)):
    meta = dict(zip(("eos_token_id", "eot_token_id", "eom_token_id"), [str(i) for i in declared] + [None] * 3))
    return {"vocab": {"bos": BOS, "add_bos": add_bos, "eog": list(eog), "metadata": meta},
            "chats": [{"ids": list(chat_ids), "pieces": [PIECES[i] for i in chat_ids]},
                      {"text": conv_text, "ids": []}],
            "texts": [{"plain": [3], "ids": list(plain)}]}


def test_a_runtime_that_agrees_passes_every_part():
    p, rt = _plan(), _rt()
    assert runtimeverdict.tokens(p, rt)[1] == [] and runtimeverdict.template(p, rt)[1] == []
    figures, problems = runtimeverdict.stops(p, rt)
    assert problems == [] and figures["confirmed"] == [EOT, EOS]


def test_a_second_bos_is_named_as_such():
    _, problems = runtimeverdict.tokens(_plan(), _rt(chat_ids=(1, 1, 2, 3)))
    assert problems == ["eval prompt 0: llama.cpp's prompt starts with 2 BOS token(s), the HF tokenizer's with 1 "
                        "(the GGUF's tokenizer.ggml.add_bos_token is true)"]


def test_a_differing_token_is_named_with_both_decodings():
    _, problems = runtimeverdict.tokens(_plan(), _rt(chat_ids=(1, 2, 4)))
    assert problems == ["eval prompt 0: token 2 is 4 'you' in llama.cpp, 3 'there' in the HF tokenizer (3 vs 3 tokens)"]


def test_a_plain_prompt_without_the_bos_the_template_writes_is_named():
    _, problems = runtimeverdict.tokens(_plan(), _rt(plain=(3,), add_bos=False))
    assert problems == ["a plain prompt gets 0 BOS token(s) in llama.cpp (tokenizer.ggml.add_bos_token is false); the "
                        "chat template the model was trained with writes one"]


def test_a_template_that_renders_differently_names_its_first_differing_line():
    _, problems = runtimeverdict.template(_plan(), _rt(conv_text="user\nhi\nmodel\n"))
    assert problems == ["conversation 0 (1 messages): the chat template renders differently: line 3 is 'model' in "
                        "llama.cpp, 'assistant' in the HF template"]


def test_a_stop_llama_cpp_does_not_end_on_and_one_it_ends_on_only_by_name_are_named():
    _, problems = runtimeverdict.stops(_plan(), _rt(eog=(EOS,), declared=(EOS,)))
    assert problems == ["llama.cpp does not end generation on 7 '<|im_end|>', one of the model's stop tokens: the "
                        "GGUF's tokenizer.ggml.eos/eot/eom_token_id hold [8]"]
    _, problems = runtimeverdict.stops(_plan(), _rt(declared=(EOS,)))
    assert len(problems) == 1 and "only because it knows the token's name" in problems[0] and "[8]" in problems[0]


def _greedy(ids, stopped, margins=None):
    return {"ids": list(ids), "stopped": stopped, "margins": margins or [5.0] * len(ids),
            "pieces": [PIECES[i] for i in ids]}


def _compare(merged, runtime, tie_gap=0.1):
    rt = {"chats": [{"generated": runtime}]}
    return runtimeverdict.greedy(_plan(), rt, {"greedy": [merged]}, tie_gap)


def test_greedy_that_ends_on_the_end_of_turn_token_in_both_passes_and_counts_the_stop():
    figures, problems = _compare(_greedy([6, 9, EOT], True), _greedy([6, 9, EOT], True))
    assert problems == [] and figures["same"] == figures["stopped"] == 1 and figures["stopped_on"] == ["<|im_end|>"]


def test_a_runtime_that_talks_past_the_end_of_turn_token_is_named():
    _, problems = _compare(_greedy([6, EOT], True), _greedy([6, EOT, 9], False))
    assert problems == ["eval prompt 0: llama.cpp does not stop at 7 '<|im_end|>' (step 1), where the merged model ends "
                        "its answer; it goes on with 9 'B'"]


def test_a_parting_within_the_tie_gap_is_a_named_tie_and_beyond_it_a_failure():
    figures, problems = _compare(_greedy([6, 9], False, [5.0, 0.05]), _greedy([6, 2], False))
    assert problems == [] and figures["ties"] == [{"prompt": 0, "step": 1, "gap": 0.05, "merged": "B", "llama_cpp": "hi"}]
    _, problems = _compare(_greedy([6, 9], False, [5.0, 3.0]), _greedy([6, 2], False))
    assert problems == ["eval prompt 0: greedy tokens part at step 1: the merged model's 9 'B', llama.cpp's 2 'hi' (the "
                        "merged model leads by 3, more than the near-tie bound 0.1)"]


def test_logit_statistics_follow_their_definitions():
    import math

    import numpy as np
    import torch

    ref = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    same = runtimecheck.LogitStats()
    same.add(ref, ref.numpy())
    assert same.summary()["nmse"] == 0 and same.summary()["kl_mean"] == 0 and same.summary()["top1"] == 1
    shifted = runtimecheck.LogitStats()  # a constant shift: the same distribution (KL 0), not the same logits
    shifted.add(ref, (ref + 1).numpy())
    s = shifted.summary()
    assert abs(s["kl_mean"]) < 1e-12 and math.isclose(s["nmse"], 1 / float(np.var(ref.numpy())), rel_tol=1e-6)
    assert s["max_abs_diff"] == 1
    swapped = runtimecheck.LogitStats()
    swapped.add(ref, ref.flip(-1).numpy())
    assert swapped.summary()["top1"] == 0.5 and swapped.summary()["kl_mean"] > 0
    # softmax([2, 1, 0]) tops at 0.67, softmax([0, 3, 1]) at 0.84: both positions confident
    assert swapped.summary()["top1_confident"] == 0.5 and swapped.summary()["confident_positions"] == 2
    assert runtimecheck.logit_problems(swapped.summary(), "f16", "texts")[2].startswith("texts: top-1 agreement 50.0%")
    flat = runtimecheck.LogitStats()  # nowhere confident (a random twin): the share is not judged
    flat.add(ref / 100, (ref / 100).flip(-1).numpy())
    assert flat.summary()["top1_confident"] is None and len(runtimecheck.logit_problems(flat.summary(), "q4_k_m", "t")) < 3
