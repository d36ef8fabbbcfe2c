"""The masked hub families as `make hub-check` checks them: where their code lives, how a tiny copy is shrunk, which
`harness.run` settings decode them, and how their authors' own generation routine is called on the same prompts.

Each family's own routine runs greedy with the settings that match the `harness.run` overrides beside it, so the
two must agree token for token; where a routine has no greedy mode (SDAR samples with `torch.multinomial` at every
temperature) its sampling function is replaced by argmax with the softmax probability as confidence, as every other
routine here does greedy. The routine is imported from the code folder at run time, never copied into this repo.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Shape:
    """A tiny model's shape in generic names; each family maps it onto its own config keys (`HubFamily.shrink`)."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    layers: int
    ffn: int

    @property
    def qwen(self) -> dict[str, Any]:
        """The keys of the Qwen-style configs (SDAR, Dream, LLaDA 2.1): head_dim = hidden / heads."""
        return {"hidden_size": self.hidden, "intermediate_size": self.ffn, "num_hidden_layers": self.layers} | {
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.hidden // self.heads,
        }


# three shapes: the first is the one the check always used; the others change every size, the head counts (6 over 3
# KV heads; 3 over 1) and the depth. The mask ids are the real ones, none of them the vocabulary's last id.
SHAPES = {
    s.name: s
    for s in (Shape("h64-l2", 64, 4, 2, 2, 128), Shape("h96-l3", 96, 6, 3, 3, 160), Shape("h48-l4", 48, 3, 1, 4, 96))
}
SIZES = SHAPES["h64-l2"].qwen


@dataclass
class Case:
    """One decoding setting: new tokens, the sampler and its knobs (`harness.run` overrides; the routine's call reads
    the same values), the block length the routine is given (the shipped yaml's, or another one that `harness.run`
    then gets too; null where the routine has no blocks: Dream), the prompts' token counts and the batch. Where the
    routine cannot match by design (`by_design`, documented in docs/masked.md "Hub families at other shapes"), it is
    run a second time with `explain` (the documented cause taken away), which must then match ours."""

    max_new_tokens: int
    sampler: str | tuple[str, ...]  # several: the first `harness.run` knows (the family's own rule, where it exists)
    knobs: dict[str, Any] = field(default_factory=dict)
    block_length: int | None = None  # another than the yaml's: harness.run gets model.block_length too
    label: str = "default"
    prompt_lengths: tuple[int, ...] | None = None  # prompts of these token counts (None: hub_check.PROMPTS)
    batch: int | None = None  # harness.run's batch_size (None: the check's --batch-size)
    routine: dict[str, Any] = field(default_factory=dict)  # the routine's own arguments (e.g. SDAR's remasking)
    by_design: str = ""  # why the routine decodes otherwise here (docs/masked.md): then `explain` must match ours
    explain: dict[str, Any] = field(default_factory=dict)  # routine arguments that take the documented cause away

    def sampler_name(self) -> str:
        names = (self.sampler,) if isinstance(self.sampler, str) else self.sampler
        return next((n for n in names if n in known_samplers()), names[-1])

    def overrides(self) -> list[str]:
        return [f"sampler={self.sampler_name()}", *(f"sampler.{k}={_hydra(v)}" for k, v in self.knobs.items())]


def known_samplers() -> set[str]:
    """The sampler configs `harness.run` composes: registered dataclasses and conf/sampler files."""
    from hydra.core.config_store import ConfigStore

    from harness.runner.configs import register_configs

    register_configs()
    names = {Path(n).stem for n in ConfigStore.instance().repo.get("sampler", {})}
    return names | {f.stem for f in (Path(__file__).resolve().parents[1] / "conf" / "sampler").glob("*.yaml")}


@dataclass
class HubFamily:
    """A hub family: its shipped model yaml, hub repo, files, tiny shrink (per shape) and own routine."""

    name: str
    model_yaml: str  # conf/model/<model_yaml>.yaml, used as shipped
    repo: str  # hub repo id of the checkpoint whose code is checked
    auto_class: str  # the auto_map entry the yaml's auto_class loads
    mask_id: int
    eos_ids: list[int]
    shrink: dict[str, Any] | Callable[[Shape], dict[str, Any]]  # a dict: one fixed shape
    cases: list[Case]
    # the new token ids (uncut) of each prompt; the prompts as one batch where the routine takes one
    own: Callable[[torch.nn.Module, list[list[int]], Case, int, Path, dict[str, Any]], list[list[int]]]
    routine: str  # what `own` calls, for the table
    routine_url: str | None = None  # a routine outside the hub repo (the authors' GitHub), fetched beside the code
    model_overrides: dict[str, Any] = field(default_factory=dict)  # beyond path/device/dtype: none for hub families

    def shrink_for(self, shape: Shape | None) -> dict[str, Any]:
        return self.shrink if isinstance(self.shrink, dict) else self.shrink(shape or SHAPES["h64-l2"])

    @property
    def case(self) -> Case:
        """The family's first (default) case."""
        return self.cases[0]


def _hydra(v: Any) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def load_routine_module(code_dir: Path, family: str, file: str = "generate.py"):
    """The authors' generate script from the code folder, imported under a name of its own."""
    path = code_dir / file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the family's own generation routine is not in the code folder")
    spec = importlib.util.spec_from_file_location(f"hub_check_{family}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def greedy_sample(logits, temperature=1.0, top_k=0, top_p=1.0):
    """Argmax and its softmax probability, in the shape SDAR's `sample_with_temperature_topk_topp` returns."""
    p, token = torch.softmax(logits.float(), dim=-1).max(dim=-1)
    return token, p


def left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask), left padded: how LLaDA's generate.py main() and Dream's model card batch prompts."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    return ids, torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])


def one_by_one(run: Callable[[torch.Tensor], torch.Tensor], prompts: list[list[int]], n: int) -> list[list[int]]:
    """A routine that takes one prompt (batch 1): each prompt alone, its `n` new tokens."""
    return [run(torch.tensor([p]))[0, len(p) : len(p) + n].tolist() for p in prompts]


def own_llada2(model, prompts, case: Case, mask_id: int, code_dir: Path, args: dict) -> list[list[int]]:
    """Its generate builds the block mask in bfloat16 (the real model's dtype); SDPA refuses a mask of another
    dtype than a float32 query, so the mask (0 / -inf: exact in any float dtype) is cast to the model's dtype.
    Batch 1 (its generate reads one prompt length)."""
    k = case.knobs
    inner = model.forward

    def forward(*a, attention_mask=None, **kwargs):
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(model.dtype)
        return inner(*a, attention_mask=attention_mask, **kwargs)

    def run(ids: torch.Tensor) -> torch.Tensor:
        out = model.generate(
            inputs=ids,
            temperature=0.0,
            block_length=case.block_length,
            steps=k["steps_per_block"],
            gen_length=case.max_new_tokens,
            threshold=k["threshold"],
            editing_threshold=k["editing_threshold"],
            max_post_steps=k["max_post_steps"],
            eos_early_stop=k["eos_early_stop"],
            eos_id=LLADA2_EOS,
            mask_id=mask_id,
        )
        return torch.cat([ids, out], dim=1)  # its generate returns the new tokens only

    model.forward = forward  # its generate calls self.forward
    try:
        return one_by_one(run, prompts, case.max_new_tokens)
    finally:
        del model.forward


def indexable_cache() -> type:
    """transformers 5's DynamicCache with 4.x's `cache[layer] -> (keys, values)`, which SDAR's attention reads."""
    from transformers.cache_utils import DynamicCache

    class IndexableCache(DynamicCache):
        def __getitem__(self, layer: int):
            return self.layers[layer].keys, self.layers[layer].values

    return IndexableCache


class TopkInMasks:
    """`torch` as SDAR's generate.py sees it, with `topk(confidence, k)` taking at most the positions whose
    confidence is finite (the masked ones): `explain` for its steps whose share exceeds the masks left, where its own
    topk also picks committed (or prompt) positions, at confidence -inf, and rewrites them (docs/masked.md)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def topk(x: torch.Tensor, k, *a, **kw):
        return torch.topk(x, min(int(k), int(torch.isfinite(x).sum())), *a, **kw)


def own_sdar(model, prompts, case: Case, mask_id: int, code_dir: Path, args: dict) -> list[list[int]]:
    """Greedy (see the module docstring), and the cache it builds indexable as on transformers 4.x. Batch 1 (its
    canvas is one row). `args`: `remasking` (its strategy, default low_confidence_static), `threshold` (its
    confidence_threshold), `topk_in_masks` (`TopkInMasks`)."""
    gen = load_routine_module(code_dir, "sdar")
    gen.sample_with_temperature_topk_topp = greedy_sample
    gen.DynamicCache = indexable_cache()
    if args.get("topk_in_masks"):
        gen.torch = TopkInMasks()

    def run(ids: torch.Tensor) -> torch.Tensor:
        return gen.block_diffusion_generate(
            model,
            {"input_ids": ids},
            mask_id,
            gen_length=case.max_new_tokens,
            block_length=case.block_length,
            denoising_steps=case.knobs["steps_per_block"],
            temperature=1.0,
            remasking_strategy=args.get("remasking", "low_confidence_static"),
            confidence_threshold=args.get("threshold", 0.85),
        )

    return one_by_one(run, prompts, case.max_new_tokens)


def own_llada(model, prompts, case: Case, mask_id: int, code_dir: Path, args: dict) -> list[list[int]]:
    """Its forward reads `config.use_cache`, which transformers 5 no longer keeps on a config: set from config.json.
    Several prompts run as one left-padded batch with their attention mask, as its main() calls it; `args`
    `attention_mask: false` calls it without (it then attends the pad tokens: docs/masked.md)."""
    if not hasattr(model.config, "use_cache"):
        model.config.use_cache = json.loads((code_dir / "config.json").read_text()).get("use_cache", False)
    gen = load_routine_module(code_dir, "llada")
    block, n = case.block_length, case.max_new_tokens
    ids, mask = left_padded(prompts, LLADA_EOS)
    x = gen.generate(
        model,
        ids,
        mask if args.get("attention_mask", True) and len(prompts) > 1 else None,
        steps=case.knobs["steps_per_block"] * (n // block),
        gen_length=n,
        block_length=block,
        temperature=0.0,
        remasking="low_confidence",
        mask_id=mask_id,
    )
    return x[:, ids.shape[1] :].tolist()


def own_dream(model, prompts, case: Case, mask_id: int, code_dir: Path, args: dict) -> list[list[int]]:
    """Its generation config is passed in: left to build its own, `DreamGenerationConfig.from_model_config` fails on
    transformers 5 ('GenerationConfig' object has no attribute 'eps'), a gap of the routine, not of our decode.
    Several prompts run as one left-padded batch with their attention mask (its `tok_idx` positions). `args`: `alg`
    (default entropy, the model card's)."""
    n = case.max_new_tokens
    steps = case.knobs["steps_per_block"]  # the whole answer is its one block
    gen_cfg = sys.modules[type(model).__module__].DreamGenerationConfig(
        mask_token_id=mask_id, max_new_tokens=n, steps=steps, temperature=0.0, alg=args.get("alg", "entropy")
    )
    ids, mask = left_padded(prompts, DREAM_EOS)
    x = model.diffusion_generate(ids, attention_mask=mask if len(prompts) > 1 else None, generation_config=gen_cfg)
    x = getattr(x, "sequences", x)
    return x[:, ids.shape[1] :].tolist()


LLADA2_EOS, LLADA_EOS, DREAM_EOS = 156892, 126081, 151643
# LLaDA 2.1's own generate defaults (threshold 0.95, 32 steps, editing 0.9 for 16 post steps), early stop on EOS;
# 40 new tokens so prompt + answer ends inside a block (its tail rule)
LLADA2_KNOBS = {"steps_per_block": 32, "threshold": 0.95, "editing_threshold": 0.9, "max_post_steps": 16}
LLADA2_CASE = Case(
    40,
    ("llada2_editing", "block_refinement"),  # LLaDA 2.1's own rule where harness.run has it, else diffusers
    LLADA2_KNOBS | {"eos_early_stop": True},
    block_length=32,
)
SDAR_TOPK = (
    "SDAR's generate.py takes each step's share from the block length (not the masks left) and tops it up with "
    "torch.topk over -inf confidences: when the share exceeds the masks left it rewrites committed (first block: "
    "prompt) tokens"
)
LLADA_PADS = "LLaDA's generate.py called on a padded batch without its attention_mask attends the pad tokens"
# item 7 of issue 54: steps below the block with thresholds, another block length, prompts whose prompt + answer is
# not a multiple of the block, batches of 2-3 unequal prompts (harness.run batched; the routines batched where they
# take a batch: LLaDA, Dream)
SDAR_CASES = [
    Case(16, "low_confidence", {"steps_per_block": 4}, block_length=4),
    Case(
        16, "sdar_dynamic", {"steps_per_block": 4, "threshold": 0.85}, 4, "dynamic 0.85, 4 steps", (13, 9, 6), 3,
        {"remasking": "low_confidence_dynamic", "threshold": 0.85},
    ),
    Case(
        23, "sdar_dynamic", {"steps_per_block": 2, "threshold": 0.3}, 4, "dynamic 0.3, 2 steps", (13, 9), 2,
        {"remasking": "low_confidence_dynamic", "threshold": 0.3}, SDAR_TOPK, {"topk_in_masks": True},
    ),
    Case(
        17, "sdar_dynamic", {"steps_per_block": 4, "threshold": 0.99}, 8, "dynamic 0.99, block 8, 4 steps", (13, 9), 2,
        {"remasking": "low_confidence_dynamic", "threshold": 0.99}, SDAR_TOPK, {"topk_in_masks": True},
    ),
]  # fmt: skip
LLADA_CASES = [
    Case(64, "low_confidence", {"steps_per_block": 8}, block_length=32),
    Case(32, "low_confidence", {"steps_per_block": 8}, 16, "block 16, batch 3", (32, 11, 50), 3),
    Case(
        32, "low_confidence", {"steps_per_block": 8}, 16, "block 16, batch 3, no attention_mask", (32, 11, 50), 3,
        {"attention_mask": False}, LLADA_PADS, {"attention_mask": True},
    ),
]  # fmt: skip
DREAM_CASES = [
    Case(32, "low_confidence", {"steps_per_block": 8}),
    Case(
        40, "low_confidence", {"steps_per_block": 40, "confidence": "margin"}, None, "topk_margin, 40 steps",
        (15, 33), 2, {"alg": "topk_margin"},
    ),
]  # fmt: skip
LLADA2_CASES = [
    LLADA2_CASE,
    Case(40, LLADA2_CASE.sampler, LLADA2_CASE.knobs, 32, "batch 3", (13, 9, 30), 3),
]


def llada_shrink(s: Shape) -> dict[str, Any]:
    """LLaDA's own key names (as many KV heads as heads, as its 8B config)."""
    return {"d_model": s.hidden, "n_heads": s.heads, "n_kv_heads": s.heads, "n_layers": s.layers} | {
        "mlp_hidden_size": s.ffn
    }


def llada2_shrink(s: Shape) -> dict[str, Any]:
    return (
        s.qwen
        | {"moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "n_group": 2}
        | {"topk_group": 1}
    )


FAMILIES: dict[str, HubFamily] = {
    f.name: f
    for f in (
        HubFamily(
            "llada2",
            "llada2_mini",
            "inclusionAI/LLaDA2.1-mini",
            "AutoModelForCausalLM",
            156895,
            [LLADA2_EOS],
            llada2_shrink,
            LLADA2_CASES,
            own_llada2,
            "modeling_llada2_moe.py: LLaDA2MoeModelLM.generate",
        ),
        HubFamily(
            "sdar",
            "sdar",
            "JetLM/SDAR-1.7B-Chat",
            "AutoModelForCausalLM",
            151669,
            [151643, 151645],
            lambda s: s.qwen | {"max_window_layers": s.layers},
            SDAR_CASES,
            own_sdar,
            "generate.py: block_diffusion_generate (low_confidence_static / _dynamic, argmax)",
            "https://raw.githubusercontent.com/JetAstra/SDAR/c2041a8333333d685f6e15122c84f60f51f85ebd/generate.py",
        ),
        HubFamily(
            "llada",
            "llada_8b_instruct",
            "GSAI-ML/LLaDA-8B-Instruct",
            "AutoModel",
            126336,
            [LLADA_EOS],
            llada_shrink,
            LLADA_CASES,
            own_llada,
            "generate.py: generate (low_confidence)",
            "https://raw.githubusercontent.com/ML-GSAI/LLaDA/b7e6c3565f194352da44b38dd12b6970597309f3/generate.py",
        ),
        HubFamily(
            "dream",
            "dream",
            "Dream-org/Dream-v0-Instruct-7B",
            "AutoModel",
            151666,
            [DREAM_EOS],
            lambda s: s.qwen | {"max_window_layers": s.layers},
            DREAM_CASES,
            own_dream,
            "generation_utils.py: diffusion_generate (alg=entropy, the model card's; topk_margin)",
        ),
    )
}
