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

SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
SIZES |= {"num_key_value_heads": 2, "head_dim": 16}


@dataclass
class Case:
    """One decoding setting: new tokens, the sampler and its knobs (`harness.run` overrides; the routine's call reads
    the same values), and the block length the routine is given: the shipped yaml's own (`harness.run` takes the yaml's,
    never overridden), null where the routine has no blocks (Dream: the whole answer, as its yaml says)."""

    max_new_tokens: int
    sampler: str | tuple[str, ...]  # several: the first `harness.run` knows (the family's own rule, where it exists)
    knobs: dict[str, Any] = field(default_factory=dict)
    block_length: int | None = None

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
    """A hub family: its shipped model yaml, hub repo, files, tiny shrink and own routine."""

    name: str
    model_yaml: str  # conf/model/<model_yaml>.yaml, used as shipped
    repo: str  # hub repo id of the checkpoint whose code is checked
    auto_class: str  # the auto_map entry the yaml's auto_class loads
    mask_id: int
    eos_ids: list[int]
    shrink: dict[str, Any]
    case: Case
    own: Callable[[torch.nn.Module, torch.Tensor, Case, int, Path], list[int]]  # new token ids, uncut
    routine: str  # what `own` calls, for the table
    routine_url: str | None = None  # a routine outside the hub repo (the authors' GitHub), fetched beside the code
    model_overrides: dict[str, Any] = field(default_factory=dict)  # beyond path/device/dtype: none for hub families


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


def own_llada2(model, ids: torch.Tensor, case: Case, mask_id: int, code_dir: Path) -> list[int]:
    """Its generate builds the block mask in bfloat16 (the real model's dtype); SDPA refuses a mask of another
    dtype than a float32 query, so the mask (0 / -inf: exact in any float dtype) is cast to the model's dtype."""
    k = case.knobs
    inner = model.forward

    def forward(*args, attention_mask=None, **kwargs):
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(model.dtype)
        return inner(*args, attention_mask=attention_mask, **kwargs)

    model.forward = forward  # its generate calls self.forward
    try:
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
    finally:
        del model.forward
    return out[0].tolist()


def indexable_cache() -> type:
    """transformers 5's DynamicCache with 4.x's `cache[layer] -> (keys, values)`, which SDAR's attention reads."""
    from transformers.cache_utils import DynamicCache

    class IndexableCache(DynamicCache):
        def __getitem__(self, layer: int):
            return self.layers[layer].keys, self.layers[layer].values

    return IndexableCache


def own_sdar(model, ids: torch.Tensor, case: Case, mask_id: int, code_dir: Path) -> list[int]:
    """Greedy (see the module docstring), and the cache it builds indexable as on transformers 4.x."""
    gen = load_routine_module(code_dir, "sdar")
    gen.sample_with_temperature_topk_topp = greedy_sample
    gen.DynamicCache = indexable_cache()
    x = gen.block_diffusion_generate(
        model,
        {"input_ids": ids},
        mask_id,
        gen_length=case.max_new_tokens,
        block_length=case.block_length,
        denoising_steps=case.knobs["steps_per_block"],
        temperature=1.0,
        remasking_strategy="low_confidence_static",
    )
    return x[0, ids.shape[1] : ids.shape[1] + case.max_new_tokens].tolist()


def own_llada(model, ids: torch.Tensor, case: Case, mask_id: int, code_dir: Path) -> list[int]:
    """Its forward reads `config.use_cache`, which transformers 5 no longer keeps on a config: set from config.json."""
    if not hasattr(model.config, "use_cache"):
        model.config.use_cache = json.loads((code_dir / "config.json").read_text()).get("use_cache", False)
    gen = load_routine_module(code_dir, "llada")
    block = case.block_length
    x = gen.generate(
        model,
        ids,
        steps=case.knobs["steps_per_block"] * (case.max_new_tokens // block),
        gen_length=case.max_new_tokens,
        block_length=block,
        temperature=0.0,
        remasking="low_confidence",
        mask_id=mask_id,
    )
    return x[0, ids.shape[1] :].tolist()


def own_dream(model, ids: torch.Tensor, case: Case, mask_id: int, code_dir: Path) -> list[int]:
    """Its generation config is passed in: left to build its own, `DreamGenerationConfig.from_model_config` fails on
    transformers 5 ('GenerationConfig' object has no attribute 'eps'), a gap of the routine, not of our decode."""
    n = case.max_new_tokens
    steps = case.knobs["steps_per_block"]  # the whole answer is its one block
    gen_cfg = sys.modules[type(model).__module__].DreamGenerationConfig(
        mask_token_id=mask_id, max_new_tokens=n, steps=steps, temperature=0.0, alg="entropy"
    )
    x = model.diffusion_generate(ids, generation_config=gen_cfg)
    x = getattr(x, "sequences", x)
    return x[0, ids.shape[1] :].tolist()


LLADA2_EOS = 156892
# LLaDA 2.1's own generate defaults (threshold 0.95, 32 steps, editing 0.9 for 16 post steps), early stop on EOS;
# 40 new tokens so prompt + answer ends inside a block (its tail rule)
LLADA2_CASE = Case(
    40,
    ("llada2_editing", "block_refinement"),  # LLaDA 2.1's own rule where harness.run has it, else diffusers
    {"steps_per_block": 32, "threshold": 0.95, "editing_threshold": 0.9, "max_post_steps": 16, "eos_early_stop": True},
    block_length=32,
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
            SIZES
            | {"moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "n_group": 2}
            | {"topk_group": 1},
            LLADA2_CASE,
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
            SIZES | {"max_window_layers": 2},
            Case(16, "low_confidence", {"steps_per_block": 4}, block_length=4),
            own_sdar,
            "generate.py: block_diffusion_generate (low_confidence_static, argmax)",
            "https://raw.githubusercontent.com/JetAstra/SDAR/c2041a8333333d685f6e15122c84f60f51f85ebd/generate.py",
        ),
        HubFamily(
            "llada",
            "llada_8b_instruct",
            "GSAI-ML/LLaDA-8B-Instruct",
            "AutoModel",
            126336,
            [126081],
            {"d_model": 64, "n_heads": 4, "n_kv_heads": 4, "n_layers": 2, "mlp_hidden_size": 128},
            Case(64, "low_confidence", {"steps_per_block": 8}, block_length=32),
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
            [151643],
            SIZES | {"max_window_layers": 2},
            Case(32, "low_confidence", {"steps_per_block": 8}),
            own_dream,
            "generation_utils.py: diffusion_generate (alg=entropy, the model card's)",
        ),
    )
}
