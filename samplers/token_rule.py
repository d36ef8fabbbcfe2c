"""The AR families' token rule as a sampler (`sampler=token`): how the next token(s) are picked from logits.

Every AR family (plain, + draft / MTP, a diffusion checkpoint's own AR mode) takes this sampler, as the diffusion
families take theirs: greedy by default (`do_sample=false`), or sampled with transformers' temperature -> top-k ->
top-p order, each draw keyed by (sample seed, absolute position) so a token does not depend on its batch
(`samplers.token_draw`). Its one entry point is `pick`; speculative verification (`verify`) reads the same knobs.
Validation runs in `__post_init__`, so a bad knob fails when Hydra instantiates the sampler, before any model loads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from contract.families import TOKEN
from samplers.config import _require, check_field_types

if TYPE_CHECKING:
    import torch


@dataclass
class TokenRuleConfig:
    """AR's token rule; the fields are `samplers.token_draw.TokenSampling`'s, so it is one wherever that is read."""

    name: str = TOKEN
    do_sample: bool = False  # false: greedy (argmax); true: sample with the knobs below
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    family: str = TOKEN  # tells the config checks this sampler is for AR models

    def __post_init__(self) -> None:
        check_field_types(self)
        _require(self.family == TOKEN, "family", f"must be {TOKEN!r} for a token rule, got {self.family!r}")
        _require(
            not self.do_sample or self.temperature > 0,
            "temperature",
            f"sampling needs temperature > 0, got {self.temperature}",
        )
        _require(0 < self.top_p <= 1, "top_p", f"must be in (0, 1], got {self.top_p}")
        _require(self.top_k >= 0, "top_k", f"must be >= 0 (0 = off), got {self.top_k}")

    def pick(self, logits: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
        """(b, n, V) logits -> (b, n) next tokens: argmax, or a draw keyed by each token's absolute position."""
        from samplers.token_draw import pick

        return pick(logits, self, seeds, positions, stream)

    def knobs(self) -> dict:
        """Flat dict of every knob (recorded with each run and used for run names / plot labels)."""
        return asdict(self)


TOKEN_SAMPLERS = {TokenRuleConfig.name: TokenRuleConfig}
