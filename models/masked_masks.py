"""The masked adapter's (`models.masked_diffusion`) canvases and attention masks: what a step's forward runs on and
what each of its queries sees (the block layout's mask, a row's canvas cut or extended, WINO's shadow block)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BlockQuery:
    """One row's step: the tokens before its current block, the block, and where the request's length ends
    (`valid_end`: with `tail=hidden` later keys are hidden, as LLaDA2Pipeline's 2D mask marks them)."""

    row: int
    prefix: list[int]
    block: list[int]
    valid_end: int
    # where the row's canvas ends (0: after its block): canvas=answer runs to gen_end, the positions past its block
    # holding the mask id; one before the block's end cuts the block there (a rule's carry asked, SlowFast)
    canvas_end: int = 0

    @property
    def start(self) -> int:
        return len(self.prefix)


def block_mask(
    qpos: torch.Tensor, kpos: torch.Tensor, kvalid: torch.Tensor, block_length: int, block_causal: bool
) -> torch.Tensor:
    """(B, 1, Q, K) bool: what each query sees: the `kvalid` keys, block-causally those in the query's block or before
    it. A hidden key is hidden from every query, its own included (as transformers reads a padding mask)."""
    ok = kvalid[:, None, :].expand(-1, qpos.shape[1], -1)
    if block_causal:
        ok = ok & ((kpos[:, None, :] // block_length) <= (qpos[:, :, None] // block_length))
    return ok[:, None]


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask as the float bias models add to their scores (0 seen, the dtype's minimum hidden):
    LLaDA 2.x's own generate passes this form, an eager attention adds it as is, and SDPA would convert a boolean
    mask to it in every layer."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)


def canvas_ids(q: BlockQuery, mask_id: int) -> list[int]:
    """A row's tokens for its forward: prefix and block, then masks up to `canvas_end`, or cut there when it lies
    inside the block."""
    seq = q.prefix + q.block + [mask_id] * (q.canvas_end - q.start - len(q.block))
    return seq[: q.canvas_end] if q.start < q.canvas_end < q.start + len(q.block) else seq


def shadowed(ids, pos, mask, starts, block: int, mask_id: int):
    """WINO's shadow block (its authors' `decoding_wino`): L mask tokens after each row's canvas at its block's
    positions, which no real query sees; shadow query i sees what the row's block queries see but the block's
    position i, and the whole shadow. Returns the ids, positions and (B, 1, W + L, W + L) bool mask."""
    b, w = ids.shape
    dev = ids.device
    at = starts[:, None] + torch.arange(block, device=dev)  # (B, L) the block's positions
    ids = torch.cat([ids, torch.full((b, block), mask_id, dtype=ids.dtype, device=dev)], dim=1)
    pos = torch.cat([pos, at], dim=1)
    real = mask.expand(b, -1, -1, -1)[:, 0]  # (B, w, w)
    sees = real.gather(1, at.clamp(max=w - 1)[..., None].expand(-1, -1, w))  # what the block's queries see
    sees = sees & ~torch.zeros_like(sees).scatter_(2, at.clamp(max=w - 1)[..., None], True)  # ... less their own
    top = torch.cat([real, real.new_zeros(b, w, block)], dim=2)
    bottom = torch.cat([sees, real.new_ones(b, block, block)], dim=2)
    return ids, pos, torch.cat([top, bottom], dim=1)[:, None]


def mask_rows(ends: list[int], positions: list[list[int]] = ()) -> int:
    """1 when every row has the same end and query positions (one mask row serves the batch: building and reading
    a (B, 1, Q, K) mask costs a 512-token prefill of 16 rows a quarter of its time), else the row count."""
    same = all(e == ends[0] for e in ends) and all(p == positions[0] for p in positions)
    return 1 if same else len(ends)
