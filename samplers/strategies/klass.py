"""KLASS (KL-adaptive stability sampling): unmask the masked positions whose prediction is both confident and
stable, its distribution close (in KL) to the previous steps'. Follows the authors' `stable_confident_decode`
with `alg="klass"` (shkim0116/KLASS @ad87ecb, src/model/llada_klass.py), one row at a time:

    p       the float64 softmax of the logits; the token its argmax, the confidence its probability
    KL      sum p (log(p + 1e-12) - log(p_prev + 1e-12)) against the previous forward's distribution (zeros before
            the first), kept for the last `kl_history` forwards
    ready   masked, confidence > `threshold`, and every kept KL < `kl_threshold` (from the block's
            `kl_history - 1`-th step on)
    fill    the ready positions (`unmask`: all | max_conf: the most confident of them | min_kl: the lowest KL);
            none ready: the step's share of the block (LLaDA's even split over `steps_per_block`), most confident

The block ends when it holds no mask or after its steps. Its own defaults: threshold 0.9, kl_threshold 0.01,
kl_history 2 (its GSM8K script: 0.6, 0.015, 2, steps = gen_length, so one fill step per position at most).
The previous distribution is the canvas's, as theirs: the rule keeps its carry across blocks
(`carry_across_blocks`) and reads the logits after the block (`MaskedStepIn.ahead`), so a later block's first steps
compare with the forward before it; where the layout gives no columns after the block (a block canvas, a cached
path) a block starts with none. Differences, by design or of the interface (docs/samplers.md): a share larger than
the masks left fills the masks left (the authors' top-k then overwrites committed positions); temperature > 0
draws by `samplers.masked.draw` and measures KL on that distribution (the authors' add Gumbel noise to the logits
first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from samplers.masked import MaskedSamplerConfig, _is_int, _is_num, _require, draw, filtered_logits, transfer_schedule
from samplers.masked_rule import BlockPlan, BlockProgress, MaskedStepIn, MaskedStepOut
from samplers.strategies.common import (
    check_own_rule,
    filled_or_capped,
    refuse_seeded,
    row_carry,
    shares_of,
    steps_taken,
    top_k,
    uniforms,
)

if TYPE_CHECKING:
    import torch

UNMASK = ("all", "max_conf", "min_kl")
KL_EPS = 1e-12  # the authors' eps inside both logs


@dataclass
class KlassConfig(MaskedSamplerConfig):
    """KLASS's knobs; defaults are `stable_confident_decode`'s (threshold is its `conf_threshold`)."""

    carry_across_blocks: ClassVar[bool] = True  # one probability history for the whole canvas, as theirs
    name: str = "klass"
    threshold: float | None = 0.9  # conf_threshold: a ready position's probability is above this
    kl_threshold: float = 0.01  # ... and each of its last `kl_history` KLs below this
    kl_history: int = 2
    unmask: str = "all"  # all | max_conf | min_kl: which ready positions a step fills
    steps_per_block: int = 1024  # with cap_at_block: one step per block position (its scripts' steps = gen_length)
    cap_at_block: bool = True

    def validate(self) -> None:
        super().validate()
        check_own_rule(self)
        _require(
            _is_num(self.kl_threshold) and self.kl_threshold > 0,
            "kl_threshold",
            f"must be > 0, got {self.kl_threshold!r}",
        )
        _require(
            _is_int(self.kl_history) and self.kl_history > 0,
            "kl_history",
            f"must be an integer > 0, got {self.kl_history!r}",
        )
        _require(self.unmask in UNMASK, "unmask", f"must be one of {UNMASK}, got {self.unmask!r}")

    def plan(self, masks: int, max_new_tokens: int, block_length: int, seeded: bool = False) -> BlockPlan:
        """LLaDA's even split of the block's masks over its steps: the share of a step with no ready position."""
        refuse_seeded(self, seeded)
        steps = self.steps_for(max_new_tokens, block_length)
        return BlockPlan(steps, transfer_schedule(masks, steps))

    def block_end(self, progress: BlockProgress) -> tuple[bool, bool]:
        return filled_or_capped(progress)

    def step(self, x: MaskedStepIn) -> MaskedStepOut:
        import torch

        width = x.block.shape[1]
        ahead = x.ahead if x.ahead is not None else x.logits[:, :0]
        logits = torch.cat([x.logits, ahead], dim=1)  # the block, then the canvas after it (where the engine has it)
        u = uniforms(self, x)
        if self.temperature > 0:
            logits = filtered_logits(logits, self.temperature, self.top_k, self.top_p)
        tok = draw(x.logits, self, u)[0]
        p = torch.softmax(logits.double(), dim=-1)
        conf = p[:, :width].gather(-1, tok[..., None])[..., 0]
        prev, hist = self._previous(x, p)
        kl = (p * (torch.log(p + KL_EPS) - torch.log(prev + KL_EPS))).sum(-1)
        hist = torch.cat([hist[..., 1:], kl[..., None]], dim=-1)
        masked = x.block == x.mask_id
        stable = (hist[:, :width] < self.kl_threshold).all(-1) & (steps_taken(x) >= self.kl_history - 1)[:, None]
        ready = stable & (conf > self.threshold) & masked
        pick = self._pick(ready, conf, kl[:, :width])
        fill = torch.where(ready.any(-1)[:, None], pick, top_k(conf, shares_of(self, x), masked))
        block = torch.where(fill, tok, x.block)
        carry = [{"probs": p[i], "kl": hist[i], "width": width} for i in range(len(tok))]
        none = torch.zeros_like(fill)
        return MaskedStepOut(block, fill, none, none, carry)

    def _previous(self, x: MaskedStepIn, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's previous distribution and KL history over the block and the columns after it: the last
        forward's at the same positions (at a block's first forward, the previous block's forward shifted by its
        width), zeros where none was computed (the first block, or a layout that gives no columns after the block)."""
        import torch

        cols = p.shape[1]
        zp, zh = p.new_zeros(cols, p.shape[2]), p.new_zeros(cols, self.kl_history)

        def at(c: dict | None, first: bool, key: str, zero: torch.Tensor) -> torch.Tensor:
            if not c:
                return zero
            part = c[key][c["width"] :] if first else c[key]
            part = part[:cols]
            return torch.cat([part, zero[len(part) :]])

        rows = zip(row_carry(x.carry, p.shape[0]), x.first, strict=True)
        prev, hist = zip(*((at(c, f, "probs", zp), at(c, f, "kl", zh)) for c, f in rows), strict=True)
        return torch.stack(prev), torch.stack(hist)

    def _pick(self, ready: torch.Tensor, conf: torch.Tensor, kl: torch.Tensor) -> torch.Tensor:
        """The ready positions a step fills: all, or the one with the highest confidence / lowest KL."""
        if self.unmask == "all":
            return ready
        import torch

        one = torch.ones(ready.shape[0], dtype=torch.long, device=ready.device)
        if self.unmask == "max_conf":
            return top_k(conf, one, ready)
        return top_k(kl, one, ready, largest=False)
