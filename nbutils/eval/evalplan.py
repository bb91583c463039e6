"""03's plan, before the model loads: what it will generate and score, and whether that fits this GPU.

One table: the checkpoint's base model and recipe, the prompts, and the memory plan of generating the answers and
scoring the eval split (nbutils.train.evalmemory, from the config and the settings alone). The eval loss is scored
in batches of at most `eval_batch_tokens` padded positions, a chunk of lm_head's rows at a time
(nbutils.train.loss.sequence_logprobs): the whole batch x length x vocabulary logits never exist. When the plan
does not fit, 03 stops before loading anything, naming the parameter to change and the largest value that fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nbutils.runtime import modelsource
from nbutils.runtime.preflight import fp16_warning
from nbutils.train import evalmemory, memory, modeling
from nbutils.train import loss as lm_loss


class EvalPlanError(ValueError):
    """What 03's plan found wrong, with what to change (the table above it shows the numbers)."""


@dataclass
class EvalPlan:
    """What 03's later cells read: plan.generate_batch_size, plan.eval_batch_tokens, plan.memory."""

    base_model: str
    generate_batch_size: int
    eval_batch_tokens: int
    eval_batch_tokens_why: str
    memory: dict
    gpu_why: str
    machine: dict = field(default_factory=dict)  # preflight's rows: the table starts with them
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown in the table; the evaluation goes ahead

    def rows(self) -> dict:
        return {**self.machine, "base_model": self.base_model,
                "generation": f"{self.generate_batch_size} prompts at a time (generate_batch_size), up to "
                              f"{self.memory['prompt']} + {self.memory['new_tokens']} tokens",
                "eval_loss": f"batches of at most {self.eval_batch_tokens:,} padded tokens (eval_batch_tokens: "
                             f"{self.eval_batch_tokens_why}); {self.memory['loss']} logits",
                **evalmemory.rows(self.memory), "memory.checked_against": self.gpu_why,
                **{f"WARNING{i or ''}": w for i, w in enumerate(self.warnings)}, "problems": len(self.problems) or "none"}

    def table(self) -> str:
        rows = self.rows()
        width = max(len(k) for k in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows.items())


def scoring_loss(model_config) -> str:
    """How the eval loss is scored for this model: in chunks, or from its own whole logits (soft-capping ...)."""
    return lm_loss.without_whole_logits(model_config)


def plan_eval(trained, env, prompt_lengths: list[int], eval_lengths: list[int], new_tokens: int,
              generate_batch_size: int = evalmemory.GENERATE_ROWS, eval_batch_tokens="auto", loss: str | None = None,
              show: bool = True, attn_implementation: str = "auto") -> EvalPlan:
    """03's plan from the checkpoint's recipe (`trained`), preflight's record, the prompts' and eval rows' token
    counts; print one table; raise EvalPlanError naming the parameter to change. `loss` "plain" plans the whole
    logits (a model the chunks cannot score, or transformers' own loss); `attn_implementation` is 03's, resolved as
    the load resolves it (eager, Gemma-2's, holds seq x seq scores the plan counts)."""
    config = modelsource.load_config(trained.base_model)
    gpu, gpu_why = memory.planning_gpu(env.gpu_memory_gb)
    loss = loss or scoring_loss(config)
    settings = dict(quantized=bool(trained.quantization), lora_r=int(trained.lora.get("r", 16)), n_adapters=1,
                    prompt=max(prompt_lengths, default=1), new_tokens=new_tokens, gpu_memory_gb=gpu, loss=loss,
                    compute_bytes=4 if trained.precision == "fp32" else 2)
    longest = max(eval_lengths, default=1)
    settings.update(attention=modeling.choose_attention(config, attn_implementation, env.attention), length=longest)

    def plan_at(rows: int, tokens: int) -> dict:
        return evalmemory.plan_inference(config, generate_rows=rows, tokens=tokens, **settings)

    tokens, why = evalmemory.batch_tokens(eval_batch_tokens, lambda n: plan_at(1, n).get("fits", True), longest)
    plan = EvalPlan(trained.base_model, int(generate_batch_size), tokens, why, plan_at(int(generate_batch_size), tokens),
                    gpu_why, env.rows())
    plan.memory.update(longest_row=longest, split_tokens=len(eval_lengths) * longest)  # what the dry run re-runs
    plan.problems = problems(plan.memory, plan.generate_batch_size, tokens, longest)
    # as 02's plan: Gemma-2/3 computing in fp16 (a T4) overflow it; a stand-in env without a capability: unknown
    warning = fp16_warning(config, trained.precision, getattr(env, "gpu_capability", None))
    plan.warnings = [warning] if warning else []
    if show:
        print(plan.table())
    if plan.problems:
        raise EvalPlanError("03's plan found problems, before the model loaded:\n- " + "\n- ".join(plan.problems))
    return plan


def problems(p: dict, rows: int, tokens: int, longest: int) -> list[str]:
    """Each setting that makes the plan overflow the GPU, with the largest value that fits."""
    if not p.get("gpu_memory_gb") or p["fits"]:
        return []
    found, gpu = [], f"the {p['gpu_memory_gb']:g} GB GPU"
    if rows > p["largest_generate_rows"]:
        found.append(f"generate_batch_size={rows} does not fit {gpu} (plan {p['estimate_gb']:.1f} GB): the largest "
                     f"that fits is {p['largest_generate_rows']}" + (", with fewer new tokens (max_new_tokens)"
                                                                      if not p["largest_generate_rows"] else ""))
    if tokens > p["largest_tokens"]:
        fix = (f"the largest that fits is {p['largest_tokens']:,}" if p["largest_tokens"] >= longest else
               f"even one {longest}-token row does not fit (at most {p['largest_tokens']:,} tokens)")
        found.append(f"eval_batch_tokens={tokens:,} does not fit {gpu} (plan {p['estimate_gb']:.1f} GB, {p['loss']} "
                     f"logits): {fix}")
    return found or [f"the model alone does not fit {gpu} (plan {p['estimate_gb']:.1f} GB): evaluate on a larger GPU"]
