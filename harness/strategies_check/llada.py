"""WINO, SlowFast and KLASS against their authors' own generate functions (all three written for LLaDA): the
authors' function and our rule (`rule_loop`, the LLaDA layout the engine follows) decode the same random
prompts on the same tiny LLaDA-style model; a case is identical when every forward's input (the canvas it ran on)
and the answer are the same, token for token. Greedy only: their draws add Gumbel noise from torch's global RNG
(`torch.rand_like` over the whole canvas's logits), which our counter-based streams do not reproduce.

Their code is imported from a folder of their repositories (never committed here: one sub-folder per repository
as `git archive` writes it, `REPOS`), unmodified.

What the CPU / this environment needs, nothing of their logic: SlowFast's module imports `seaborn` (plots only)
and `transformers.tokenization_utils.PaddingStrategy` (gone in transformers 5; unused by its sampler), so both are
put where its imports look. Their code calls LLaDA's forward (`model(x, attention_mask=..., position_ids=...)`):
`LLaDAStandin` gives a tiny Llama that call, as LLaDA's modeling reads it (no mask or an all-ones padding mask:
every position sees every other; a 4D bool mask: True seen, WINO's modified modeling; 1D position ids).
"""

from __future__ import annotations

import importlib.util
import random
import sys
import types
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from harness.strategies_check import rule_loop
from harness.strategies_check.tally import Tally

REPOS = {  # strategy -> (its folder: the repository's root, the file with the generate function, its name)
    "wino": ("wino", "LLaDA/decoding.py", "decoding_wino"),
    "slowfast": (
        "slowfast",
        "slow-fast-sampling/sampling_utils/generate_slow_fast_sampling.py",
        "generate_slow_fast_sampling",
    ),
    "klass": ("klass", "src/model/llada_klass.py", "stable_confident_decode"),
}


def _env_stubs(repo_root: Path) -> None:
    """SlowFast's imports that this environment lacks (none touches its sampling)."""
    sys.modules.setdefault("seaborn", types.ModuleType("seaborn"))
    import transformers.tokenization_utils as tu
    from transformers.utils import PaddingStrategy, TensorType  # noqa: F401

    tu.PaddingStrategy = getattr(tu, "PaddingStrategy", PaddingStrategy)
    if not hasattr(tu, "TruncationStrategy"):
        from transformers.tokenization_utils_base import TruncationStrategy

        tu.TruncationStrategy = TruncationStrategy
    root = str(repo_root / "slow-fast-sampling")
    if root not in sys.path:
        sys.path.insert(0, root)


def authors_generate(strategy: str, root: Path):
    """The authors' generate function for `strategy`, imported from `root`/<repo>/<file>."""
    repo, rel, name = REPOS[strategy]
    path = root / repo / rel
    if not path.is_file():
        raise FileNotFoundError(f"{strategy}: {path} missing (the code dir holds one folder per repository: {repo}/)")
    if strategy == "slowfast":
        _env_stubs(root / repo)
    spec = importlib.util.spec_from_file_location(f"authors_{strategy}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


class LLaDAStandin(torch.nn.Module):
    """A tiny Llama called as LLaDA's forward is: `model(x, attention_mask=None | (B, T) ones | (B, 1, T, T) bool,
    position_ids=None | (T,))`; `.device`, `.lm_head`, `.config` as their code reads them."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.inner = model
        self.trace: list[list[int]] = []  # each call's input ids
        self.config = model.config
        self.lm_head = model.lm_head

    @property
    def device(self) -> torch.device:
        return next(self.inner.parameters()).device

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        t = input_ids.shape[1]
        self.trace.append(input_ids[0].tolist())
        if attention_mask is None or attention_mask.dim() == 2:
            if attention_mask is not None and not bool(attention_mask.all()):
                raise ValueError("a padded batch: LLaDA's forward takes none (the authors run batch 1)")
            seen = torch.ones(1, 1, t, t, dtype=torch.bool)
        else:
            seen = attention_mask.bool()
        dtype = next(self.inner.parameters()).dtype
        mask = torch.zeros(seen.shape, dtype=dtype).masked_fill(~seen, torch.finfo(dtype).min)
        pos = torch.arange(t)[None] if position_ids is None else position_ids.reshape(1, -1)
        return self.inner(input_ids=input_ids, attention_mask=mask, position_ids=pos)


# --------------------------------------------------------------------------------------------------
# the model and the cases

LIVE = 97  # tokens the tiny model predicts: ids 0..96 (and its EOS); every other row of its LM head is zero


@dataclass
class TinyLLaDA:
    """A tiny random bidirectional model with LLaDA's ids where the authors' code needs them."""

    name: str
    model: torch.nn.Module
    mask_id: int
    eos_id: int


def tiny_llada(vocab: int, mask_id: int, eos_id: int, seed: int = 0, sharpen: float = 50.0) -> TinyLLaDA:
    """A Llama of 2 layers (width 32) in float64, run bidirectionally: its layers scaled up so that positions differ,
    its final norm by `sharpen` so confidences spread over (0, 1); only the first `LIVE` tokens and EOS have an LM
    head row, as only they are ever predicted (the mask never is)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=4096, pad_token_id=0, eos_token_id=eos_id,
        bos_token_id=2, tie_word_embeddings=False,
    )  # fmt: skip
    cfg.mask_token_id = mask_id
    model = LlamaForCausalLM(cfg).double().eval()
    live = torch.zeros(vocab, dtype=torch.bool)
    live[:LIVE] = True
    live[eos_id] = True
    with torch.no_grad():
        for name, w in model.named_parameters():
            if ".layers." in name and "norm" not in name:
                w.mul_(15)
        model.lm_head.weight[~live] = 0
        model.model.norm.weight.fill_(sharpen)
    return TinyLLaDA(f"tiny LLaDA-style Llama (V={vocab}, mask {mask_id}, seed {seed})", model, mask_id, eos_id)


@dataclass
class Case:
    """1-3 prompts decoded together by our loop (one step call), each by the authors' function alone."""

    prompts: list[list[int]]
    gen: int
    width: int
    knobs: dict


def cases(n: int, seed: int, knobs, blocks=(1, 2, 3)) -> list[Case]:
    """`n` random cases: 1-3 prompts of 2-8 tokens, blocks of 4 or 8, answers of `blocks` blocks, knobs drawn by
    `knobs(rng)`."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        width = rng.choice([4, 8])
        prompts = [[rng.randrange(3, LIVE) for _ in range(rng.randrange(2, 9))] for _ in range(rng.randrange(1, 4))]
        out.append(Case(prompts, width * rng.choice(blocks), width, knobs(rng)))
    return out


# --------------------------------------------------------------------------------------------------
# per strategy: the knobs drawn, the authors' call, our rule


def _wino_knobs(rng: random.Random) -> dict:
    return {"threshold": rng.choice([0.6, 0.3, 0.8]), "threshold_back": rng.choice([0.9, 0.7, 0.95])}


def _wino_theirs(fn, st, m: TinyLLaDA, prompt: list[int], c: Case) -> list[int]:
    x, _ = fn(st, torch.tensor([prompt]), gen_length=c.gen, block_length=c.width, temperature=0.0,
              mask_id=m.mask_id, **c.knobs)  # fmt: skip
    return x[0, len(prompt) :].tolist()


def _slowfast_knobs(rng: random.Random) -> dict:
    return {
        "explore_steps": rng.choice([6, 2, 3]), "threshold": rng.choice([0.9, 0.7]),
        "span_threshold": rng.choice([0.3, 0.5]), "stability_window": rng.choice([2, 3]),
        "stability_std": rng.choice([1.0, 0.5]), "max_cycles": rng.choice([256, 2]),
    }  # fmt: skip


def _slowfast_theirs(fn, st, m: TinyLLaDA, prompt: list[int], c: Case) -> list[int]:
    k = c.knobs
    ids = torch.tensor([prompt])
    x, _, _ = fn(
        ids, torch.ones_like(ids), st, gen_length=c.gen, block_length=c.width, temperature=0.0, mask_id=m.mask_id,
        k_exploration_steps=k["explore_steps"], cycle_len_confidence_threshold=k["span_threshold"],
        cycle_length_stability_window=k["stability_window"],
        cycle_length_stability_std_dev_threshold=k["stability_std"], high_confidence_threshold=k["threshold"],
        max_sub_cycles_per_block=k["max_cycles"],
    )  # fmt: skip
    return x[0].tolist()


def _klass_knobs(rng: random.Random) -> dict:
    return {
        "threshold": rng.choice([0.9, 0.6]), "kl_threshold": rng.choice([0.01, 0.015, 0.05, 0.2]),
        "kl_history": rng.choice([1, 2, 3]), "unmask": rng.choice(["all", "all", "max_conf", "min_kl"]),
        "steps_per_block": rng.choice([0, 0, 2]),  # 0: one step per block position (its scripts' steps = gen_length)
    }  # fmt: skip


def _klass_theirs(fn, st, m: TinyLLaDA, prompt: list[int], c: Case) -> list[int]:
    k = c.knobs
    steps = (k["steps_per_block"] or c.width) * (c.gen // c.width)
    x, _ = fn(
        st, None, torch.tensor([prompt]), c.gen, steps, c.width, temperature=0.0, mask_id=m.mask_id,
        conf_threshold=k["threshold"], kl_threshold=k["kl_threshold"], kl_history_length=k["kl_history"],
        alg="klass", unmask_strategy=k["unmask"],
    )  # fmt: skip
    return x[0, len(prompt) :].tolist()


def _rule(strategy: str, c: Case):
    from samplers.strategies.klass import KlassConfig
    from samplers.strategies.slowfast import SlowFastConfig
    from samplers.strategies.wino import WinoConfig

    if strategy == "klass":
        k = dict(c.knobs)
        k["steps_per_block"] = k["steps_per_block"] or c.width
        return KlassConfig(**k)
    return {"wino": WinoConfig, "slowfast": SlowFastConfig}[strategy](**c.knobs)


SMALL, LLADA_IDS = (128, 126, 100, 65.0), (126464, 126336, 126081, 50.0)  # vocab, mask, EOS, final-norm scale
SPECS = {  # strategy -> (knobs, the authors' call, the model, our layout has a shadow)
    "wino": (_wino_knobs, _wino_theirs, SMALL, True),
    "slowfast": (_slowfast_knobs, _slowfast_theirs, SMALL, False),
    "klass": (_klass_knobs, _klass_theirs, LLADA_IDS, False),  # its code fixes mask_id = 126336: LLaDA's vocabulary
}


def run(
    strategy: str,
    root: Path,
    n: int = 24,
    seeds: tuple[int, ...] = (0, 1),
    blocks: tuple[int, ...] = (1, 2, 3),
    ours_knobs: dict | None = None,
) -> list[Tally]:
    """One tally per model seed: `n` cases each (answers of `blocks` blocks), the authors' function against ours
    (`ours_knobs` set on our rule only: WINO's `verify: self` runs without the shadow block, and the canvases are
    compared without it)."""
    knobs, theirs, (vocab, mask_id, eos_id, sharpen), shadow = SPECS[strategy]
    ours_knobs = ours_knobs or {}
    strip = shadow and ours_knobs.get("verify") == "self"
    shadow = shadow and not strip
    fn = authors_generate(strategy, root)
    out = []
    for seed in seeds:
        m = tiny_llada(vocab, mask_id, eos_id, seed=seed, sharpen=sharpen)
        st, tally = LLaDAStandin(m.model), Tally(m.name)
        for i, c in enumerate(cases(n, 1000 * seed + len(strategy), knobs, blocks)):
            with torch.no_grad():
                rule = replace(_rule(strategy, c), **ours_knobs)
                ours = rule_loop.decode(rule, m.model, c.prompts, c.gen, c.width, mask_id, shadow)
                for prompt, row in zip(c.prompts, ours, strict=True):
                    st.trace = []
                    answer = theirs(fn, st, m, prompt, c)
                    trace = [t[: -c.width] for t in st.trace] if strip else st.trace
                    tally.compare(trace, row.trace, answer == row.x[row.prompt :], f"case {i} {c.knobs}")
                    tally.remasked, tally.cut = tally.remasked + row.remasked, tally.cut + row.cut
        out.append(tally)
    return out


def save_tiny_llada(out: Path, m: TinyLLaDA, block_length: int) -> Path:
    """`m` as a local checkpoint our adapter loads (`models.masked_diffusion`, attention bidirectional): its config
    with the mask id, block length and attention, and a character tokenizer covering every id."""
    from models.tiny_remote import char_vocab_tokenizer

    cfg = m.model.config
    cfg.mask_token_id, cfg.block_length, cfg.attention = m.mask_id, block_length, "bidirectional"
    m.model.save_pretrained(out)
    tok = char_vocab_tokenizer(cfg.vocab_size, m.mask_id, [m.eos_id])
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the messages' text, as it is
    tok.save_pretrained(out)
    return out


def run_engine(
    strategy: str,
    root: Path,
    out_dir: Path,
    n: int = 8,
    blocks: tuple[int, ...] = (1,),
    ours_knobs: dict | None = None,
) -> Tally:
    """The authors' function against our engine (`harness.engine.masked.MaskedDiffusionDecoder` over the saved
    tiny model, LLaDA's layout: canvas answer, blocks from the prompt's end, recompute), each prompt alone: every
    forward's input canvas, the answer and the forward count. EOS does not end our rows early (theirs decode the
    whole answer); both answers are cut after the first EOS."""
    from contract.records import GenerationRequest
    from harness.engine.masked import MaskedDiffusionDecoder
    from models.masked_diffusion import MaskedDiffusionAdapter

    knobs, theirs, (vocab, mask_id, eos_id, sharpen), shadow = SPECS[strategy]
    m = tiny_llada(vocab, mask_id, eos_id, seed=0, sharpen=sharpen)
    fn, st, tally = authors_generate(strategy, root), LLaDAStandin(m.model), Tally(f"{m.name}, our engine")
    strip = shadow and (ours_knobs or {}).get("verify") == "self"
    for i, c in enumerate(cases(n, 7 + len(strategy), knobs, blocks)):
        path = save_tiny_llada(out_dir / f"w{c.width}", m, c.width)
        ad = MaskedDiffusionAdapter(
            str(path), dtype="float64", attention="bidirectional", context="recompute", eos_token_ids=[eos_id],
            num_threads=1, canvas="answer", block_origin="prompt", block_length=c.width,
        )  # fmt: skip
        rule = replace(_rule(strategy, c), eos_early_stop=False, **(ours_knobs or {}))
        dec = MaskedDiffusionDecoder(ad, rule)
        seen: list[list[int]] = []
        hook = ad.model.register_forward_pre_hook(
            lambda _m, _a, kw, seen=seen: seen.append(kw["input_ids"][0].tolist()), with_kwargs=True
        )
        with torch.no_grad():
            for prompt in c.prompts:
                seen.clear()
                res = dec.generate([GenerationRequest(f"c{i}", prompt, seed=0, max_new_tokens=c.gen)])[0]
                st.trace = []
                answer = _cut(theirs(fn, st, m, prompt, c), eos_id)
                trace = [t[: -c.width] for t in st.trace] if strip else st.trace
                tally.compare(
                    trace, list(seen), answer == res.token_ids and res.nfe == len(trace), f"case {i} {c.knobs}"
                )
        hook.remove()
    return tally


def _cut(seq: list[int], eos: int) -> list[int]:
    return seq[: seq.index(eos) + 1] if eos in seq else seq
