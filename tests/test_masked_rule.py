"""A rule is a sampler config with its own `step` (samplers.masked_rule): a toy subclass that fills the leftmost
mask each step and counts its steps in `carry` runs through the engine unchanged, gets its carry back between the
steps of a block and None at each block's first forward."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from contract.records import GenerationRequest
from harness.engine.masked import MaskedDiffusionDecoder
from models.masked_diffusion import MaskedDiffusionAdapter
from models.tiny import build_masked
from samplers.masked import MaskedSamplerConfig
from samplers.masked_rule import MaskedStepIn, MaskedStepOut


@dataclass
class LeftToRight(MaskedSamplerConfig):
    """The argmax at the leftmost masked position, one per step; `carry` counts each row's steps in its block."""

    name: str = "left_to_right"
    threshold: float | None = None
    seen: tuple = ()  # (first forward, carry handed in) per row per step, for the test

    def step(self, inp: MaskedStepIn) -> MaskedStepOut:
        masked = inp.block == inp.mask_id
        first = masked & (masked.long().cumsum(-1) == 1)
        new = torch.where(first, inp.logits.argmax(-1), inp.block)
        none = torch.zeros_like(first)
        self.seen += tuple(zip(inp.first, [c and c["steps"] for c in inp.carry], strict=True))
        carry = [{"steps": (c or {"steps": 0})["steps"] + 1} for c in inp.carry]
        return MaskedStepOut(new, first, none, none, carry)


def test_a_rule_of_its_own_runs_with_its_carry(tmp_path):
    ad = MaskedDiffusionAdapter(str(build_masked(tmp_path / "m", block_length=4)), dtype="float64", context="cache")
    rule = LeftToRight(eos_early_stop=False, steps_per_block=4)
    reqs = [GenerationRequest(str(i), [10 + i, 11, 12, 13, 14][: 2 + i], seed=i, max_new_tokens=8) for i in range(3)]
    out = MaskedDiffusionDecoder(ad, rule).generate(reqs)
    assert all(ad.mask_id not in o.token_ids and len(o.token_ids) <= 8 for o in out)
    assert all(o.nfe == sum(map(sum, o.accepted_per_step)) for o in out)  # one position a forward
    # the engine's decoder resolved a copy of the rule: its record of what it saw is on that copy
    assert rule.seen == ()
    dec = MaskedDiffusionDecoder(ad, LeftToRight(eos_early_stop=False, steps_per_block=4))
    dec.generate(reqs[:1])
    seen = dec.rule.seen
    assert seen[0] == (True, None) and seen[1] == (False, 1)
    assert all((c is None) == f for f, c in seen)  # carry is None exactly at a block's first forward
