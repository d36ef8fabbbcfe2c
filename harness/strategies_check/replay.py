"""The LLaDA-family runners of `harness.strategies_check`: the authors' generate functions on recording models, our
`step` beside each of their forwards (`harness.strategies_check.checks`).

A replay keeps what our rule answered at a forward; at the next forward (or at the end) the block their loop
produced from the same logits must equal it. Only the authors' loops decide the trajectory; our rule is checked at
every step of it.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from harness.hub_families import load_routine_module
from harness.strategies_check.tally import Tally
from samplers.masked_rule import BlockPlan, MaskedStepIn
from samplers.strategies import STRATEGIES

WORK = Path(__file__).resolve().parents[2] / "outputs" / "strategies_check"
LLADA_MASK, LLADA_VOCAB = 126336, 126464
LLADA_SHRINK = {"d_model": 64, "n_heads": 4, "n_kv_heads": 4, "n_layers": 2, "mlp_hidden_size": 128}
RANDOM_VOCAB, SHARPNESS = 40, (1.0, 4.0, 12.0)  # random-logit cases: small vocab, soft to saturated softmax


def step_in(logits: torch.Tensor, block: torch.Tensor, plan: BlockPlan, i: int, mask_id: int) -> MaskedStepIn:
    """Our rule's input for one forward of their loop, every row at step `i` of `plan` (greedy: keys unused)."""
    b = block.shape[0]
    editable = torch.ones_like(block, dtype=torch.bool)
    keys = torch.zeros(3, b, dtype=torch.long)
    return MaskedStepIn(logits, block.clone(), editable, [plan] * b, [i] * b, [i == 0] * b, keys, mask_id, [None] * b)


class SeqReplay:
    """A model for LLaDA-style generate functions (`model(x).logits` over the whole sequence, unshifted): each call
    compares the sequence it is given with our answer to the previous call, then computes our answer to this one."""

    def __init__(self, model, cfg, mask_id: int, prompt_len: int, block_length: int, gen_length: int, name: str):
        self.model, self.cfg, self.mask_id, self.name = model, cfg, mask_id, name
        self.prompt_len, self.block_length, self.gen_length = prompt_len, block_length, gen_length
        self.device = torch.device("cpu")
        self.expected, self.start, self.i, self.plan = None, None, 0, None
        self.tally = Tally(name)

    def compare(self, x: torch.Tensor) -> None:
        if self.expected is None:
            return
        self.tally.steps += 1
        if torch.equal(self.expected, x):
            self.tally.steps_same += 1
        elif not self.tally.first_diff:
            at = (self.expected != x).nonzero()[0].tolist()
            ours, theirs = self.expected[tuple(at)].item(), x[tuple(at)].item()
            self.tally.first_diff = f"{self.name} step {self.tally.steps}: position {at[1]} ours {ours} theirs {theirs}"
        self.expected = None

    def __call__(self, x: torch.Tensor, *args, **kwargs):
        self.compare(x)
        out = self.model(x, *args, **kwargs)
        masked = (x[0, self.prompt_len :] == self.mask_id).nonzero()
        if len(masked):
            self._ours(x, out.logits)
        return out

    def _ours(self, x: torch.Tensor, logits: torch.Tensor) -> None:
        first = int(masked_first(x, self.mask_id, self.prompt_len))
        s = self.prompt_len + (first - self.prompt_len) // self.block_length * self.block_length
        e = s + self.block_length
        if s != self.start:  # a new block: our plan (for PC-Sampler: LLaDA's get_num_transfer_tokens)
            self.start, self.i = s, 0
            self.plan = self.cfg.plan(self.block_length, self.gen_length, self.block_length)
        o = self.cfg.step(step_in(logits[:, s:e], x[:, s:e], self.plan, self.i, self.mask_id))
        self.expected = x.clone()
        self.expected[:, s:e] = o.block
        self.i += 1


def masked_first(x: torch.Tensor, mask_id: int, prompt_len: int) -> int:
    return int((x[0, prompt_len:] == mask_id).nonzero()[0, 0]) + prompt_len


class RandomLogits:
    """A model of random logits (seeded), `(B, L, vocab)` times `scale`: soft to saturated distributions."""

    def __init__(self, vocab: int, scale: float, seed: int):
        self.vocab, self.scale, self.gen = vocab, scale, torch.Generator().manual_seed(seed)
        self.device = torch.device("cpu")

    def __call__(self, x: torch.Tensor, *args, **kwargs):
        return SimpleNamespace(logits=torch.randn(*x.shape, self.vocab, generator=self.gen) * self.scale)


@functools.cache
def tiny_llada(code_dir: Path):
    """A tiny random LLaDA from dParallel's own modeling file (its LLaDA copy) and LLaDA's config.json."""
    from models.tiny_remote import build_tiny_remote

    src = WORK / "llada_code"
    src.mkdir(parents=True, exist_ok=True)
    for f in (code_dir / "dparallel" / "model").glob("*_llada.py"):
        (src / f.name).write_text(f.read_text())
    (src / "config.json").write_text((code_dir / "llada" / "config.json").read_text())
    tiny = build_tiny_remote(src, WORK / "tiny_llada", LLADA_SHRINK, "AutoModel", LLADA_MASK, [126081])
    model = tiny.model
    if not hasattr(model.config, "use_cache"):  # transformers 5 drops it from the config (as harness.hub_families)
        model.config.use_cache = False
    return lambda x, *a, **k: model(x)


def prompts(vocab: int, seed: int, lengths=(5, 9, 13)) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (1, n), generator=g) for n in lengths]


def llada_cases(code_dir: Path):
    """(model name, model factory, vocab, mask id): the tiny LLaDA, then random logits at each sharpness."""
    llada = tiny_llada(code_dir)
    yield (
        "tiny LLaDA (dParallel's modeling_llada.py, random)",
        (lambda seed, m=llada: m),
        1000,
        LLADA_MASK,
    )
    for scale in SHARPNESS:
        yield (
            f"random logits x{scale:g} (vocab {RANDOM_VOCAB})",
            (lambda seed, s=scale: RandomLogits(RANDOM_VOCAB, s, seed)),
            RANDOM_VOCAB,
            RANDOM_VOCAB + 1,
        )


def run_llada_family(code_dir: Path, name: str, call, shapes, cfg_of) -> list[Tally]:
    """Every (model, prompt, shape) case of a LLaDA-based strategy: `call(model, prompt, shape, mask_id)` runs their
    generate and returns its final sequence; `cfg_of(shape)` our config for it."""
    tallies = []
    for model_name, factory, vocab, mask_id in llada_cases(code_dir):
        total = Tally(model_name)
        for k, shape in enumerate(shapes):
            for j, prompt in enumerate(prompts(vocab, k)):
                cfg = cfg_of(shape)
                gen, block = shape["gen_length"], shape["block_length"]
                rec = SeqReplay(factory(100 * k + j), cfg, mask_id, prompt.shape[1], block, gen, name)
                final = call(rec, prompt, shape, mask_id)
                rec.compare(final)
                total.add(rec.tally)
        tallies.append(total)
    return tallies


def run_dparallel(code_dir: Path) -> list[Tally]:
    sys.path.insert(0, str(code_dir / "dparallel"))  # its generate.py imports model.modeling_llada
    gen = load_routine_module(code_dir / "dparallel", "dparallel")
    shapes = [
        {"gen_length": g, "block_length": b, "threshold": t}
        for g, b, t in ((32, 8, 0.5), (32, 16, 1.5), (24, 24, 0.05))
    ]

    def call(rec, prompt, shape, mask_id):
        x, _ = gen.generate(
            rec,
            prompt,
            steps=shape["gen_length"],
            gen_length=shape["gen_length"],
            block_length=shape["block_length"],
            temperature=0.0,
            mask_id=mask_id,
            threshold=shape["threshold"],
        )
        return x

    def cfg_of(shape):
        return STRATEGIES["dparallel"](entropy_threshold=shape["threshold"], block_length=shape["block_length"])

    return run_llada_family(code_dir, "dparallel", call, shapes, cfg_of)


def run_eb_sampler(code_dir: Path) -> list[Tally]:
    gen = load_routine_module(code_dir / "pc_sampler" / "src", "pc_sampler")
    shapes = [{"gen_length": g, "block_length": g, "gamma": y} for g, y in ((16, 0.01), (24, 0.5), (32, 2.0))]

    def call(rec, prompt, shape, mask_id):
        return gen.generate_with_eb_sampler(
            rec, prompt, gamma=shape["gamma"], gen_length=shape["gen_length"], temperature=0.0, mask_id=mask_id
        )

    def cfg_of(shape):
        return STRATEGIES["eb_sampler"](gamma=shape["gamma"], block_length=shape["block_length"])

    return run_llada_family(code_dir, "eb_sampler", call, shapes, cfg_of)


def baseline_file(vocab: int) -> Path:
    """A PC-Sampler background-frequency file (its JSON layout) over ids of both vocabularies checked, seeded."""
    g = torch.Generator().manual_seed(7)
    ids = torch.cat([torch.arange(RANDOM_VOCAB), torch.randint(0, vocab, (2000,), generator=g)]).unique()
    counts = torch.randint(1, 10_000, (len(ids),), generator=g)
    path = WORK / "pc_baseline.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "num_token": int(counts.sum()) * 3,
        "p_baseline_dict": {str(int(i)): int(c) for i, c in zip(ids, counts, strict=True)},
    }
    path.write_text(json.dumps(data))
    return path


def run_pc_sampler(code_dir: Path) -> list[Tally]:
    gen = load_routine_module(code_dir / "pc_sampler" / "src", "pc_sampler")
    base = str(baseline_file(LLADA_VOCAB))
    shapes = [
        {"gen_length": g, "block_length": b, "steps": s, "lambd": lam, "alpha": a}
        for g, b, s, lam, a in (
            (16, 16, 16, 0.25, 10.0),
            (32, 16, 8, 0.25, 10.0),
            (24, 8, 12, 1.0, 2.0),
            (16, 8, 16, 0.0, 100.0),  # lambd 0: no position decay; alpha high: no clamp (clamped ties: by design)
        )
    ]

    def call(rec, prompt, shape, mask_id):
        gen.BASE_LINE = None  # its background is loaded once per process; load ours
        return gen.generate_with_pc_sampler(
            rec,
            prompt,
            steps=shape["steps"],
            gen_length=shape["gen_length"],
            block_length=shape["block_length"],
            lambd=shape["lambd"],
            alpha=shape["alpha"],
            baseline_name=base,
            temperature=0.0,
            mask_id=mask_id,
        )

    def cfg_of(shape):
        per_block = shape["steps"] // (shape["gen_length"] // shape["block_length"])
        return STRATEGIES["pc_sampler"](
            lambd=shape["lambd"],
            alpha=shape["alpha"],
            baseline=base,
            block_length=shape["block_length"],
            steps_per_block=per_block,
        )

    return run_llada_family(code_dir, "pc_sampler", call, shapes, cfg_of)
