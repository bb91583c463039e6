"""Chat with the tuned model: a few prompts under the checkpoint's own chat template, answers streamed.

Interactively the answer appears token by token (transformers' TextStreamer); in a batch run (papermill,
Kaggle "Save & Run All") a stream of partial lines only clutters the log, so each answer prints whole.
The degeneration guard stops an answer that loops, so a bad adapter cannot fill the cell with garbage.
Prompts are rendered and answers decoded as 03's evaluation does (evaluation.render_prompt, evaluation.answer).
"""

from __future__ import annotations


def questions(eval_ds, given="auto", n: int = 3) -> list[str | list[dict]]:
    """03's chat_prompts: "auto" (the first n eval conversations without their answers, in full: system prompt and
    earlier turns too), one prompt as a string, or a list."""
    from nbutils.defaults import is_auto
    from nbutils.eval import evaluation

    if isinstance(given, str):
        return evaluation.prompt_messages(eval_ds, n) if is_auto(given) else [given]
    return [str(p) for p in given]


def chat(model, tokenizer, prompts: list[str | list[dict]], max_new_tokens: int = 64, stream: bool | None = None,
         system: str = "") -> list[str]:
    """Answer each prompt (greedy), streaming when interactive; returns the answers. A prompt is a question (asked
    after `system` where given) or a conversation's messages up to the answer (what questions("auto") gives)."""
    import torch
    from transformers import StoppingCriteriaList, TextStreamer

    from nbutils.data import chatformat
    from nbutils.eval import evaluation
    from nbutils.eval.guard import DegenerationGuard
    from nbutils.runtime.environment import detect_platform

    if not tokenizer.chat_template:
        raise ValueError("the tokenizer has no chat template: load the tokenizer saved with the checkpoint "
                         "(02 saves it next to the adapter), not the base model's")
    stream = (not detect_platform().is_batch) if stream is None else stream
    answers = []
    for prompt in prompts:
        messages = list(prompt) if not isinstance(prompt, str) else \
            ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        text = evaluation.render_prompt(tokenizer, messages)  # the prompt 03 scores with, as 01's texts start
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).to(model.device)
        width = ids["input_ids"].shape[1]
        guard = DegenerationGuard(tokenizer, prompt_length=width)
        print(f"user: {next((m['content'] for m in reversed(messages) if m['role'] == 'user'), '')}\nmodel: ",
              end="", flush=True)
        streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True) if stream else None
        with torch.no_grad():
            seq = model.generate(**ids, max_new_tokens=max_new_tokens, **evaluation.GREEDY, streamer=streamer,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=chatformat.stop_ids(tokenizer, model),
                                 stopping_criteria=StoppingCriteriaList([guard]))
        # a leading think block (Qwen3's markers are not special tokens, so decoding keeps them) is not the answer
        answer = evaluation.answer(tokenizer.decode(seq[0, width:], skip_special_tokens=True).strip())
        if not stream:
            print(answer, flush=True)
        state = (guard.report() or [{}])[0]
        if state.get("stopped"):
            print(f"[guard] stopped this answer: {', '.join(state['reasons'])}", flush=True)
        print()
        answers.append(answer)
    return answers
