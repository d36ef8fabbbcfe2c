"""The masked adapter's own knobs, its decode layout and the packages a model's code imports, checked before any
model loads (harness.runner.configs) and again by the adapter (`models.masked_diffusion`). torch-free, so a bad
masked config fails in about a second (tests/test_fast_fail.py)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import Any

from samplers.masked import CONFIDENCES, SCHEDULES

ATTENTIONS = ("block_causal", "bidirectional", "prefix_causal")
CONTEXTS = ("recompute", "cache", "prefix_cache")
MASK_FORMS = ("additive", "bool", "padding")
TAILS = ("visible", "hidden")  # the last block past the request's length: models.masked_diffusion
CANVASES = ("block", "answer")
BLOCK_ORIGINS = ("absolute", "prompt")
ANSWER_BLOCK = "answer"  # model.block_length: the whole answer is one block (Dream)
# the adapter's own forward arguments: `forward_kwargs` may not set them
OWN_KWARGS = {"input_ids", "attention_mask", "position_ids", "past_key_values", "use_cache"}
OWN_KWARGS |= {"logits_to_keep", "num_logits_to_keep"}
FALLBACK_NAMES = ("flash_attn",)  # packages with a pure-torch stand-in (models.loading.remote_load.FALLBACKS)
# what to run where a package a model's code imports is missing
INSTALL = {
    "einops": "pip install -r requirements.txt (einops==0.8.2)",
    "flash_attn": "pip install flash-attn --no-build-isolation (a CUDA machine; it compiles against the installed "
    "torch and takes a while)",
}


def check_masked_model(
    attention: str,
    context: str,
    shifted_logits: bool,
    block_length: int | str | None = None,
    mask_form: str = "additive",
    forward_kwargs: Any = None,
    layout: DecodeLayout | None = None,
    module_attrs: Any = None,
    requires: Any = None,
    torch_fallbacks: Any = None,
    tail: str = "visible",
) -> None:
    """The adapter's own knobs and the packages the model's code needs; run before loading (harness.runner.configs)
    and again by the adapter. Reads no files."""
    layout = layout or DecodeLayout()
    if tail not in TAILS:
        raise ValueError(f"model.tail: must be one of {TAILS}, got {tail!r}")
    if module_attrs is not None and (
        not hasattr(module_attrs, "items")
        or not all(isinstance(k, str) and isinstance(v, bool | int | float | str) for k, v in module_attrs.items())
    ):
        raise ValueError(f"model.module_attrs: must map attribute names to scalars, got {module_attrs!r}")
    if mask_form not in MASK_FORMS:
        raise ValueError(f"model.mask_form: must be one of {MASK_FORMS}, got {mask_form!r}")
    if mask_form == "padding" and (attention, context) != ("bidirectional", "recompute"):
        raise ValueError(
            f"model.mask_form=padding: a 2D key mask says only which keys a row has, so it needs "
            f"attention=bidirectional and context=recompute (got {attention}, {context}): a block-causal or cached "
            "step needs a 4D mask (additive or bool)"
        )
    if forward_kwargs is not None:
        if not hasattr(forward_kwargs, "keys") or not all(isinstance(k, str) for k in forward_kwargs):
            raise ValueError(f"model.forward_kwargs: must be a mapping of argument names, got {forward_kwargs!r}")
        if clash := sorted(OWN_KWARGS & set(forward_kwargs)):
            raise ValueError(f"model.forward_kwargs: {clash} are the adapter's own arguments")
    if attention not in ATTENTIONS:
        raise ValueError(f"model.attention: must be one of {ATTENTIONS}, got {attention!r}")
    if context not in CONTEXTS:
        raise ValueError(f"model.context: must be one of {CONTEXTS}, got {context!r}")
    if attention == "prefix_causal" and context != "cache":
        raise ValueError(
            f"model.context={context}: attention=prefix_causal runs on context=cache only (its context is encoded "
            "causally once, as Nemotron-Labs-Diffusion's own generate keeps it in its KV cache)"
        )
    if context == "cache" and attention not in ("block_causal", "prefix_causal"):
        raise ValueError(
            "model.context=cache is exact only for block-causal models; a bidirectional model's prefix K/V change "
            "with every later token: use context=recompute, or context=prefix_cache (approximate, Fast-dLLM)"
        )
    if context == "prefix_cache" and attention != "bidirectional":
        raise ValueError("model.context=prefix_cache is the approximation for bidirectional models; use context=cache")
    if shifted_logits and context != "recompute":
        raise ValueError("model.shifted_logits: only with model.context=recompute (the cached paths run no prefix)")
    layout.check(attention, context)
    if block_length == ANSWER_BLOCK:
        if layout.block_origin != "prompt":
            raise ValueError(
                "model.block_length=answer (one block from the prompt's end) needs model.block_origin=prompt"
            )
    elif block_length is not None and (not isinstance(block_length, int) or block_length < 1):
        raise ValueError(f"model.block_length: must be null, 'answer' or an integer >= 1, got {block_length!r}")
    check_requirements(requires, torch_fallbacks)


@dataclass(frozen=True)
class RowSpan:
    """Where one request's blocks lie (`DecodeLayout.span`)."""

    origin: int  # where block 0 starts: 0 (absolute) or the prompt's end
    start: int  # where the first block starts (the prompt's tail before that is part of it)
    end: int  # where the last block ends
    width: int  # the block length (a last block may be shorter)

    def size_at(self, at: int) -> int:
        """The length of the block that starts at position `at`."""
        return min(self.width, self.end - at)


@dataclass(frozen=True)
class DecodeLayout:
    """How the family's own generation lays out and fills the answer (module docstring of `models.masked_diffusion`),
    the one answer to it on every path: the adapter's context paths read `shifted` and `seeded`, the engine asks the
    methods below and branches on nothing. Defaults: LLaDA2Pipeline."""

    canvas: str = "block"  # block | answer: what a step runs after the prefix
    block_origin: str = "absolute"  # absolute | prompt: where block 0 starts
    schedule: str = "even"  # the fill schedule a sampler's null `schedule` takes
    confidence: str = "prob"  # the ranking a sampler's null `confidence` takes
    sub_block: int | None = None  # fill a block as sub-blocks of this many positions, left to right (Fast-dLLM v2)
    seeded: bool = False  # a block's first token is the AR prediction of the position before it (prefix_causal)
    shifted: bool = False  # logits at i predict token i + 1: a position reads the column before it (Dream)
    block_length: int | str | None = None  # the decode block: positions, `answer` (the whole answer), None: unset

    def check(self, attention: str, context: str) -> None:
        for key, allowed in (("canvas", CANVASES), ("block_origin", BLOCK_ORIGINS), ("schedule", SCHEDULES)):
            if getattr(self, key) not in allowed:
                raise ValueError(f"model.{key}: must be one of {allowed}, got {getattr(self, key)!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"model.confidence: must be one of {CONFIDENCES}, got {self.confidence!r}")
        sb = self.sub_block
        if sb is not None and (not isinstance(sb, int) or isinstance(sb, bool) or sb < 1):
            raise ValueError(f"model.sub_block: must be null or an integer >= 1, got {sb!r}")
        if self.canvas == "answer" and (attention != "bidirectional" or context != "recompute"):
            raise ValueError(
                "model.canvas=answer: the later blocks' masks are seen only by a bidirectional model recomputing "
                f"the whole canvas (model.attention=bidirectional, model.context=recompute), got {attention}, {context}"
            )
        if self.block_origin == "prompt" and attention == "block_causal":
            raise ValueError(
                "model.block_origin=prompt: a block-causal model attends in blocks aligned at position 0; "
                "use block_origin=absolute"
            )
        if attention == "prefix_causal" and self.block_origin != "prompt":
            raise ValueError(
                "model.block_origin: attention=prefix_causal opens each block at the end of what came before "
                "(Nemotron-Labs-Diffusion's own generate): use block_origin=prompt"
            )

    def describe(self) -> dict[str, Any]:
        """The run record's keys (`sub_block` only where set, so records without one read as before)."""
        keys = {"canvas": self.canvas, "block_origin": self.block_origin, "schedule": self.schedule}
        keys["confidence"] = self.confidence
        return keys if self.sub_block is None else {**keys, "sub_block": self.sub_block}

    def decoding(self, block_length: int | None) -> DecodeLayout:
        """The layout a decode runs: a sampler's block length (null: the model's) in place of the model's."""
        return replace(self, block_length=block_length or self.block_length)

    def span(self, prompt_len: int, max_new_tokens: int) -> RowSpan:
        """Where a request's blocks lie. Origin absolute (LLaDA2Pipeline): aligned at position 0, the first one
        holding the prompt's tail, the last one ending at the block past prompt + max_new_tokens. Origin prompt
        (LLaDA, Dream): from the prompt's end to prompt + max_new_tokens (a last block shorter), a seeded model's
        last block whole, as its own generate runs it. `block_length: answer`: one block, the whole answer."""
        n = max_new_tokens if self.block_length == ANSWER_BLOCK else self.block_length
        p, gen_end = prompt_len, prompt_len + max_new_tokens
        if self.block_origin == "prompt":
            return RowSpan(p, p, p + -(-max_new_tokens // n) * n if self.seeded else gen_end, n)
        return RowSpan(0, p // n * n, -(-gen_end // n) * n, n)

    def canvas_end(self, gen_end: int) -> int:
        """Where a step's canvas ends: `canvas: answer` runs the whole answer (later blocks as masks), `block` only
        the prefix and the current block (0)."""
        return gen_end if self.canvas == "answer" else 0

    def windows(self, block: list[int], mask_id: int) -> list[tuple[int, int]]:
        """The (start, end) positions of a block a rule fills in turn: the whole block, or its sub-blocks that hold
        a mask, left to right (each forward still runs the whole block)."""
        if self.sub_block is None:
            return [(0, len(block))]
        cuts = [(i, min(i + self.sub_block, len(block))) for i in range(0, len(block), self.sub_block)]
        return [(a, b) for a, b in cuts if mask_id in block[a:b]] or cuts[-1:]

    def window_width(self, width: int) -> int:
        """The block length a rule's plan is made for: the sub-block's, else the block's."""
        return width if self.sub_block is None else min(width, self.sub_block)


def shadow_gaps(
    context: str, attention: str, mask_form: str, shifted: bool, sub_block: int | None, takes_positions: bool = True
) -> list[str]:
    """What a model's layout lacks to run WINO's shadow block (`sampler.verify: shadow`; empty: it can run it): the
    verify queries ride in a recomputed forward where every position sees every other, through a 4D mask and
    position ids, on unshifted logits and whole blocks. Before loading, `takes_positions` is not known yet (the
    adapter checks it once the model's forward is read)."""
    needs = {
        "context: recompute": context == "recompute",
        "attention: bidirectional": attention == "bidirectional",
        "a 4D mask (mask_form bool or additive)": mask_form != "padding",
        "position ids": takes_positions, "unshifted logits": not shifted,
        "whole blocks (no model.sub_block)": sub_block is None,
    }  # fmt: skip
    return [k for k, ok in needs.items() if not ok]


def check_requirements(requires: Any, torch_fallbacks: Any) -> None:
    """`model.requires`: packages the model's code imports, each installed or covered by `model.torch_fallbacks`.
    Reads no files and imports nothing (a find_spec per package)."""
    for key, value in (("model.requires", requires), ("model.torch_fallbacks", torch_fallbacks)):
        if value is not None and (isinstance(value, str) or not all(isinstance(v, str) for v in value)):
            raise ValueError(f"{key}: must be a list of package names, got {value!r}")
    fallbacks = list(torch_fallbacks or [])
    if unknown := sorted(set(fallbacks) - set(FALLBACK_NAMES)):
        raise ValueError(
            f"model.torch_fallbacks: no pure-torch stand-in for {unknown} (there is one for {sorted(FALLBACK_NAMES)})"
        )
    for name in requires or []:
        if name in fallbacks or _installed(name):
            continue
        fallback = name in FALLBACK_NAMES
        hint = f"; on a machine without it, model.torch_fallbacks=[{name}] (docs/masked.md)" if fallback else ""
        raise ValueError(
            f"model.requires: the model's code imports {name}, which is not installed: "
            f"{INSTALL.get(name, f'pip install {name}')}{hint}"
        )


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:  # a module put in sys.modules without a spec
        return False
