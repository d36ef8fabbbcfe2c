"""The batch size a run decodes with, checked against a memory estimate before any weights load.

For every family the peak (weights, K/V for the longest prompt + max_new_tokens, the logits workspace, one
layer's activations; `models.planning.memory`) is compared with the device's free memory: a batch that cannot fit fails
naming `batch_size`; `batch_size=auto` picks the largest that fits (at most the number of items). The family's
decode shape (`contract.families` -> `harness.runner.decode_shapes`) is the only thing that differs per family.
"""

from __future__ import annotations

import logging

from hydra.utils import get_method
from omegaconf import DictConfig

from contract.families import Family
from harness.runner.decode_shapes import ShapeInputs

log = logging.getLogger(__name__)

# lm-eval builds its prompts only while it runs; the memory check assumes prompts up to this long for them.
LM_EVAL_PROMPT_TOKENS = 2048


def checked_batch_size(value) -> int | str:
    if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"batch_size: must be an integer >= 1 or 'auto', got {value!r}")
    return value


def model_config(model: DictConfig, path: str, revision: str | None):
    """The checkpoint's config for the memory estimate; remote code is prepared as the adapter's loading prepares it
    (the estimate builds the model on `meta`, importing its code): stand-ins installed, classes fitted."""
    from models.loading import remote_load
    from models.planning import memory

    remote = bool(model.get("trust_remote_code"))
    remote_load.install_fallbacks(model.get("torch_fallbacks"))
    if remote:
        auto_name = "AutoModel" if model.get("auto_class") == "model" else "AutoModelForCausalLM"
        remote_load.fit_remote_classes(path, auto_name, revision)
    return memory.load_config(path, revision=revision, trust_remote_code=remote)


def longest_prompt(model: DictConfig, path: str, revision: str | None, items: list | None) -> int:
    if items is None:
        return LM_EVAL_PROMPT_TOKENS
    from transformers import AutoTokenizer

    from contract.text import encode_prompt

    tok = AutoTokenizer.from_pretrained(path, revision=revision, trust_remote_code=bool(model.get("trust_remote_code")))
    return max(len(encode_prompt(tok, it.prompt, model.get("enable_thinking"))) for it in items)


def plan_batch_size(cfg: DictConfig, max_new_tokens: int, sampler, items: list | None, family: Family) -> int:
    """The batch size to decode with (`batch_size`, or the largest that fits for `auto`); `family`: the run plan's
    (`harness.runner.plan`), whose decode shape sizes the estimate."""
    bs = checked_batch_size(cfg.batch_size)
    if cfg.model.get("device_map"):
        if bs == "auto":
            raise ValueError("batch_size=auto needs a model on one device (the memory estimate); drop model.device_map")
        return bs
    from contract.paths import resolve_model_ref
    from models.planning import memory

    path, revision = resolve_model_ref(str(cfg.model.path), "model.path"), cfg.model.get("revision")
    config = model_config(cfg.model, path, revision)
    prompt = longest_prompt(cfg.model, path, revision, items)
    shape_of = get_method(family.decode_shape)
    shape = shape_of(ShapeInputs(cfg.model, sampler, config, prompt, max_new_tokens))
    limit = getattr(config.get_text_config(), "max_position_embeddings", None)
    if limit and shape.context > limit:
        raise ValueError(
            f"eval.max_new_tokens / sampler.canvas_length: the longest prompt ({prompt} tokens) plus "
            f"{max_new_tokens} new tokens in canvases of {shape.canvas} needs {shape.context} positions, beyond the "
            f"model's {limit} (max_position_embeddings)"
        )
    kwargs = {"prompt_tokens": prompt, "attn_implementation": cfg.model.get("attn_implementation") or "sdpa"}
    kwargs.update(shape.estimate)
    dtype_bytes = memory.dtype_bytes_of(str(cfg.model.get("dtype", "auto")), config)
    free = memory.free_memory_bytes(str(cfg.model.get("device", "cpu")))
    if bs == "auto":
        max_batch = len(items) if items else 1024
        bs = memory.largest_batch_that_fits(
            config, shape.context, shape.canvas, dtype_bytes, free, max_batch=max_batch, **kwargs
        )
        log.info("batch_size=auto: %d (context %d tokens, %.1f GiB free)", bs, shape.context, free / memory.GIB)
        return bs
    memory.check_batch_fits(config, bs, shape.context, shape.canvas, dtype_bytes, free, **kwargs)
    return bs
