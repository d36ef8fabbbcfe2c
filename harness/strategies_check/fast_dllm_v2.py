"""Fast-dLLM v2's runner for `harness.strategies_check`: its `batch_sample` (NVlabs/Fast-dLLM v2/
generation_functions.py), unmodified, bound to a stand-in for the model it expects.

Its model class lives in the checkpoint's own modeling file on the hub (Efficient-Large-Model/Fast_dLLM_v2_7B),
which has no public copy here; `batch_sample` reaches it through `self.forward(input_ids, past_key_values,
update_past_key_values, ...)`, `self.device` and `self.sample_with_top_p`. The stand-in gives exactly those: a
prefix cache of token ids (written only when `update_past_key_values`, as its KV cache), block-causal attention over
`bd_size` blocks recomputed on the prefix plus the input, and `sample_with_top_p`'s greedy path (softmax, argmax).
Logits come from a tiny random Qwen2 (the checkpoint's body) or from random logits. Each fill forward (its
`update_past_key_values=False`) hands our `step` the block and the logits shifted as its loop shifts them; the block
its next forward gets must equal our answer. In a batch its rows fill a sub-block in lockstep: a row whose sub-block
is done waits through the others' forwards (a forward that changes nothing for it, where our engine's row moves
on); those waiting forwards are not compared.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from harness.hub_families import load_routine_module
from harness.strategies_check.replay import RandomLogits, step_in
from harness.strategies_check.tally import Tally
from samplers.strategies import STRATEGIES

QWEN_MASK, QWEN_STOP, QWEN_VOCAB, PAD = 151665, 151645, 152064, 151643


class Prefix:
    """The stand-in's cache: the ids before the current block; one 'layer' so its row filter (key_cache /
    value_cache per layer, indexed by the rows left) filters it."""

    def __init__(self, ids: torch.Tensor):
        self.key_cache, self.value_cache = [ids], [ids]

    def __len__(self) -> int:
        return 1

    @property
    def ids(self) -> torch.Tensor:
        return self.key_cache[0]


class BlockReplay:
    """Our rule beside its fill forwards: the answer to one forward is checked against the next forward's block."""

    def __init__(self, cfg, mask_id: int, stop: int):
        self.cfg, self.mask_id, self.stop = cfg, mask_id, stop
        self.expected, self.before, self.step = None, None, 0
        self.tally = Tally("")

    def compare(self, block: torch.Tensor) -> None:
        if self.expected is None or self.expected.shape != block.shape:
            self.expected = None
            return
        for r in range(block.shape[0]):
            if torch.equal(block[r], self.before[r]):  # a waiting row (or no mask left): nothing filled
                continue
            keep = until_stop(block[r], self.stop)
            self.tally.steps += 1
            if torch.equal(self.expected[r][keep], block[r][keep]):
                self.tally.steps_same += 1
            elif not self.tally.first_diff:
                self.tally.first_diff = (
                    f"fast_dllm_v2 step {self.step}: ours {self.expected[r].tolist()} theirs {block[r].tolist()}"
                )
        self.expected = None

    def observe(self, block: torch.Tensor, logits: torch.Tensor) -> None:
        shifted = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # as batch_sample shifts them
        n = block.shape[1]
        plan = self.cfg.plan(n, n, n)  # its block holds its first token already (the AR seed is its loop's)
        o = self.cfg.step(step_in(shifted, block, plan, 0, self.mask_id))
        self.expected, self.before = o.block, block.clone()
        self.step += 1


def until_stop(row: torch.Tensor, stop: int) -> torch.Tensor:
    """(L,) bool: the positions up to the row's first stop token (after it their loop writes its pad)."""
    hit = (row == stop).nonzero()
    keep = torch.ones_like(row, dtype=torch.bool)
    if len(hit):
        keep[int(hit[0, 0]) + 1 :] = False
    return keep


class StandIn:
    """What batch_sample calls on `self` (module docstring)."""

    def __init__(self, logits_of, block_size: int, replay: BlockReplay):
        self.logits_of, self.block_size, self.replay = logits_of, block_size, replay
        self.device = torch.device("cpu")

    def forward(self, input_ids, use_cache=True, past_key_values=None, update_past_key_values=False, **kwargs):
        if kwargs.get("use_block_cache"):
            raise NotImplementedError("use_block_cache: the stand-in has no block cache (not checked)")
        self.replay.compare(input_ids[:, -self.block_size :])
        prefix = past_key_values.ids if past_key_values is not None else input_ids[:, :0]
        full = torch.cat([prefix, input_ids], dim=1)
        logits = self.logits_of(full)[:, -input_ids.shape[1] :]
        if not update_past_key_values:
            self.replay.observe(input_ids, logits)
        cache = Prefix(full) if update_past_key_values else past_key_values
        return SimpleNamespace(logits=logits, past_key_values=cache)

    def sample_with_top_p(self, logits, top_p=0.95, temperature=0.0):
        probs = torch.softmax(logits.float(), dim=-1)
        return probs.argmax(dim=-1), probs


def tiny_qwen2(block_size: int):
    """A tiny random Qwen2 (Fast_dLLM_v2_7B's body, real vocabulary) attending block-causally in `block_size`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=QWEN_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False,
    )  # fmt: skip
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
            elif name == "model.norm.weight":
                p.mul_(8.0)  # spread the confidences over (0, 1)

    @torch.no_grad()
    def logits_of(ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1]) // block_size
        seen = (pos[None, :] <= pos[:, None])[None, None].expand(ids.shape[0], 1, -1, -1)
        return model(input_ids=ids, attention_mask=seen).logits.float()

    return logits_of


def run_case(gen, logits_of, prompt: torch.Tensor, shape: dict, mask_id: int, stop: int) -> Tally:
    cfg = STRATEGIES["fast_dllm_v2"](
        threshold=shape["threshold"], sub_block_length=shape["sub"], block_length=shape["block"]
    )
    replay = BlockReplay(cfg, mask_id, stop)
    me = StandIn(logits_of, shape["block"], replay)
    seq_len = torch.full((prompt.shape[0],), prompt.shape[1])
    out = gen.Fast_dLLM_QwenForCausalLM.batch_sample(
        me, prompt.clone(), SimpleNamespace(pad_token_id=PAD), shape["block"], shape["new"], shape["sub"],
        int(seq_len.min()), seq_len, mask_id=mask_id, threshold=shape["threshold"], stop_token=stop, temperature=0.0,
    )  # fmt: skip
    if replay.expected is not None and len(out) == replay.expected.shape[0]:  # ended at an EOS: no update forward
        ends = torch.stack([out[i][-shape["block"] :] for i in range(len(out))])
        replay.compare(ends)
    return replay.tally


def random_logits(scale: float, seed: int):
    model = RandomLogits(40, scale, seed)
    return lambda ids: model(ids).logits


SHAPES = [
    {"block": 32, "sub": 8, "threshold": 0.9, "new": 64},  # its eval defaults
    {"block": 16, "sub": 4, "threshold": 0.5, "new": 48},
    {"block": 8, "sub": 8, "threshold": 0.95, "new": 32},
]


def load_generation_functions(code_dir: Path):
    """Its file, imported with transformers' `auto_docstring` (a documentation decorator it puts on its class) made
    a no-op: transformers 5 refuses a class its docs registry does not know. Nothing else of the file changes."""
    import transformers.utils as tu

    saved = tu.auto_docstring
    tu.auto_docstring = lambda obj=None, **kwargs: obj if obj is not None else (lambda o: o)
    try:
        return load_routine_module(code_dir / "fast_dllm_v2", "fast_dllm_v2", "generation_functions.py")
    finally:
        tu.auto_docstring = saved


def run(code_dir: Path) -> list[Tally]:
    gen = load_generation_functions(code_dir)
    g = torch.Generator().manual_seed(0)
    tallies = []
    models = [("tiny Qwen2 (random; stand-in forward)", None, QWEN_MASK, QWEN_STOP, 1000)]
    models += [(f"random logits x{s:g} (vocab 40)", s, 41, 3, 40) for s in (1.0, 4.0, 12.0)]
    for name, scale, mask_id, stop, vocab in models:
        total = Tally(name)
        for k, shape in enumerate(SHAPES):
            logits_of = tiny_qwen2(shape["block"]) if scale is None else random_logits(scale, k)
            b = shape["block"]  # a prompt within the first block only where no row can end there: its row filter
            short = [(5, 1)] if scale is None else []  # reads the KV cache, which no forward has written yet
            for n, batch in [*short, (b + 5, 1), (2 * b + 3, 2), (2 * b, 1), (b + 1, 3)]:
                prompt = torch.randint(4, vocab, (batch, n), generator=g)  # no stop token in a prompt
                total.add(run_case(gen, logits_of, prompt, shape, mask_id, stop))
        tallies.append(total)
    return tallies
