"""SlowFast sampling: a block is decoded in sub-cycles, each a slow exploratory phase that finds a span of the block
the model is sure of, then a fast phase that fills that span. Follows the authors' `generate_slow_fast_sampling`
(LiangrunFlora/Slow-Fast-Sampling @dd9958f, slow-fast-sampling/sampling_utils/generate_slow_fast_sampling.py), one
row at a time. A sub-cycle starts where the last span ended (`prev`, 0 at the block's start):

    slow    `explore_steps` forwards, each filling in [prev, block end) every masked position with confidence >=
            `threshold` when more than one is, else the most confident one (certainty). Until the span is settled,
            each forward estimates its end: prev + (the farthest masked position with confidence >=
            `span_threshold`, + 1) (1 when none is), clamped to [1, block length); the span is settled when the
            last `stability_window` estimates have a standard deviation < `stability_std` (convergence), else it
            is their mean (settled anyway at the phase's last forward)
    fast    while [prev, span) holds a mask: one forward fills in it the masked positions with confidence >=
            `threshold` when more than one is, else the most confident one (positional); then prev = span

The block ends when a sub-cycle would start with no mask left, or after `max_cycles` sub-cycles. The slow phase
always runs its `explore_steps` forwards, also when the block fills before they are done: those forwards count
(the authors count them). Their fast phase runs its second and later forwards over the context cut at the span's
end (prompt + answer up to prev... span), the later positions' logits kept from its first forward; the rule asks for
it in its carry (`canvas_end`, positions of the block; -1: the whole canvas). Defaults are the authors' (6, 0.3,
2, 1.0, 0.9, 256). docs/samplers.md says what the engine gives and what it does not.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from samplers.masked import MaskedSamplerConfig, _is_int, _is_num, _require, draw
from samplers.masked_rule import BlockPlan, BlockProgress, MaskedStepIn, MaskedStepOut
from samplers.strategies.common import check_own_rule, refuse_seeded, row_carry, top_k, uniforms

if TYPE_CHECKING:
    import torch


@dataclass
class _State:
    """Each row's place in its block (B,) long / bool tensors; `hist` (B, window) the span estimates."""

    fast: torch.Tensor  # in the fast phase
    k: torch.Tensor  # slow forwards taken in this sub-cycle
    prev: torch.Tensor  # where this sub-cycle's span starts
    span: torch.Tensor  # where it ends (the block length until first estimated)
    n_hist: torch.Tensor  # estimates kept (<= window)
    settled: torch.Tensor
    cycles: torch.Tensor  # sub-cycles started in this block
    fast_calls: torch.Tensor  # fast forwards taken in this sub-cycle
    done: torch.Tensor  # the block is final
    capped: torch.Tensor  # ... at max_cycles, with masks left
    hist: torch.Tensor

    @classmethod
    def start(cls, n: int, width: int, window: int, device) -> _State:
        import torch

        z = torch.zeros(n, dtype=torch.long, device=device)
        no = torch.zeros(n, dtype=torch.bool, device=device)
        hist = torch.zeros(n, window, dtype=torch.long, device=device)
        return cls(no, z, z, z + width, z, no, z + 1, z, no, no, hist)

    @classmethod
    def of(cls, x: MaskedStepIn, window: int) -> _State:
        import torch

        n, width = x.block.shape
        fresh = cls.start(1, width, window, x.block.device)
        rows = [c["state"] if c else fresh for c in row_carry(x.carry, n)]
        return cls(*(torch.cat([getattr(r, f.name) for r in rows]) for f in fields(cls)))

    def canvas_end(self) -> torch.Tensor:
        """Where the next forward's canvas may end (positions of the block; -1: the whole canvas): the fast
        phase's second and later forwards see the context up to the span's end only."""
        import torch

        return torch.where(self.fast & (self.fast_calls > 0), self.span, -1)

    def rows(self) -> list[_State]:
        return [_State(*(getattr(self, f.name)[i : i + 1] for f in fields(self))) for i in range(len(self.k))]


@dataclass
class SlowFastConfig(MaskedSamplerConfig):
    """SlowFast's knobs; defaults are `generate_slow_fast_sampling`'s (threshold: high_confidence_threshold)."""

    name: str = "slowfast"
    threshold: float | None = 0.9  # certainty: fill every masked position at >= this when more than one is
    explore_steps: int = 6  # k_exploration_steps: forwards of the slow phase
    span_threshold: float = 0.3  # cycle_len_confidence_threshold: what counts toward the span's end
    stability_window: int = 2  # cycle_length_stability_window
    stability_std: float = 1.0  # cycle_length_stability_std_dev_threshold
    max_cycles: int = 256  # max_sub_cycles_per_block
    steps_per_block: int = 4096  # a safety cap on a block's forwards (the authors have max_cycles only)

    def validate(self) -> None:
        super().validate()
        check_own_rule(self)
        _require(
            _is_num(self.span_threshold) and 0.0 <= self.span_threshold <= 1.0,
            "span_threshold",
            f"must be in [0, 1], got {self.span_threshold!r}",
        )
        _require(
            _is_num(self.stability_std) and self.stability_std > 0,
            "stability_std",
            f"must be > 0, got {self.stability_std!r}",
        )
        for key in ("explore_steps", "stability_window", "max_cycles"):
            value = getattr(self, key)
            _require(_is_int(value) and value > 0, key, f"must be an integer > 0, got {value!r}")

    def plan(self, masks: int, max_new_tokens: int, block_length: int, seeded: bool = False) -> BlockPlan:
        refuse_seeded(self, seeded)
        return BlockPlan(self.steps_per_block)

    def block_end(self, progress: BlockProgress) -> tuple[bool, bool]:
        """Final when the rule says so (its carry, `progress.carry`: the slow phase runs its forwards even on a
        filled block); without the carry, when no mask is left."""
        if progress.step + progress.post >= progress.steps:
            return True, progress.masks_left
        carry = progress.carry
        if carry is None:
            return not progress.masks_left, False
        state = carry["state"]
        return bool(state.done), bool(state.capped)

    def step(self, x: MaskedStepIn) -> MaskedStepOut:
        import torch

        tok = draw(x.logits, self, uniforms(self, x))[0]
        masked = x.block == x.mask_id
        conf = torch.softmax(x.logits, dim=-1).gather(-1, tok[..., None])[..., 0]  # in the logits' dtype, as theirs
        conf = conf.masked_fill(~masked, -torch.inf)
        s = _State.of(x, self.stability_window)
        pos = torch.arange(x.block.shape[1], device=tok.device)[None]
        self._estimate(s, conf, pos, x.block.shape[1])
        end = torch.where(s.fast, s.span, x.block.shape[1])[:, None]
        fill = self._fill(conf, masked & (pos >= s.prev[:, None]) & (pos < end)) & ~s.done[:, None]
        block = torch.where(fill, tok, x.block)
        self._advance(s, block == x.mask_id, pos)
        none = torch.zeros_like(fill)
        return MaskedStepOut(block, fill, none, none, [{"state": r, "canvas_end": r.canvas_end()} for r in s.rows()])

    def _fill(self, conf: torch.Tensor, scope: torch.Tensor) -> torch.Tensor:
        """Certainty: the scope's masked positions at >= threshold when more than one is, else its most confident."""
        import torch

        high = scope & (conf >= self.threshold)
        one = top_k(conf, torch.ones(len(conf), dtype=torch.long, device=conf.device), scope)
        return torch.where((high.sum(-1) > 1)[:, None], high, one)

    def _estimate(self, s: _State, conf: torch.Tensor, pos: torch.Tensor, width: int) -> None:
        """Convergence: a slow forward's estimate of the span's end, for the rows whose span is not settled."""
        import torch

        on = ~s.fast & ~s.settled & ~s.done
        above = (pos >= s.prev[:, None]) & (conf >= self.span_threshold)
        far = torch.where(above, pos, -1).amax(-1)
        inc = torch.where(above.any(-1), far + 1 - s.prev, 1).masked_fill(s.prev >= width, 0)
        est = (s.prev + inc).clamp(min=1, max=width)
        w = self.stability_window
        shifted = torch.cat([s.hist[:, 1:], est[:, None]], dim=1)
        placed = s.hist.scatter(1, s.n_hist.clamp(max=w - 1)[:, None], est[:, None])
        hist = torch.where((s.n_hist >= w)[:, None], shifted, placed)
        n_hist = (s.n_hist + 1).clamp(max=w)
        full = n_hist >= w
        h = hist.double()
        steady = h.std(-1, correction=0) < self.stability_std
        span = torch.where(steady, est, h.mean(-1).long()).clamp(min=1, max=width)
        last = s.k == self.explore_steps - 1
        s.hist = torch.where(on[:, None], hist, s.hist)
        s.n_hist = torch.where(on, n_hist, s.n_hist)
        s.span = torch.where(on & full, span, s.span)
        s.settled = torch.where(on & full, steady | last, s.settled)

    def _advance(self, s: _State, masks: torch.Tensor, pos: torch.Tensor) -> None:
        """After the forward: the next slow forward, the fast phase, or the next sub-cycle (or the block's end)."""
        import torch

        width, w = masks.shape[1], self.stability_window
        slow_over = ~s.fast & (s.k + 1 >= self.explore_steps)
        kept = torch.arange(w, device=masks.device)[None] < s.n_hist[:, None]
        mean = (torch.where(kept, s.hist, 0).sum(-1) // s.n_hist.clamp(min=1)).clamp(min=1, max=width)
        fallback = torch.where(s.n_hist > 0, mean, width // 2)
        s.span = torch.where(slow_over & ~s.settled, fallback, s.span)
        s.settled = s.settled | slow_over
        was_fast = s.fast
        s.k = torch.where(was_fast, s.k, s.k + 1)
        region = (masks & (pos >= s.prev[:, None]) & (pos < s.span[:, None])).any(-1)
        s.fast = (slow_over | was_fast) & region
        s.fast_calls = torch.where(was_fast & s.fast, s.fast_calls + 1, 0)
        over = (slow_over | was_fast) & ~region & ~s.done
        s.prev = torch.where(over, s.span, s.prev)
        left = masks.any(-1)
        s.capped = s.capped | (over & left & (s.cycles >= self.max_cycles))
        s.done = s.done | (over & (~left | (s.cycles >= self.max_cycles)))
        restart = over & ~s.done
        s.cycles = s.cycles + restart.long()
        s.k = s.k.masked_fill(restart, 0)
        s.n_hist = s.n_hist.masked_fill(restart, 0)
        s.settled = s.settled & ~restart
