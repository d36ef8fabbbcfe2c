"""Monte-Carlo ELBO of a continuation under a masked (absorbing-state) diffusion LM, LLaDA's estimator.

For sample i a number x_i of the continuation's L tokens is masked, stratified over the `mc_num` samples (one
uniform offset k in 1..L per request, x_i = round(k + i L / mc_num) wrapped into 1..L, as LLaDA's `eval_llada.py`
spreads the counts over one Monte-Carlo batch; here over all `mc_num` samples, so the estimate does not depend on
`mc_batch`), which positions at random. Each masked token's cross-entropy is divided by the masking probability
x_i / L; the estimate is minus the mean over samples of their sums, its standard error the samples' standard
deviation / sqrt(mc_num) (conservative: stratification makes the true error smaller). With `cfg_scale` > 0 each
sample also runs with the context masked and logits = uncond + (scale + 1) (cond - uncond) (LLaDA's `cfg`).

Block-causal models (LLaDA 2.x, SDAR) score each block of the continuation on its own, the context and the earlier
blocks clean: a row per (sample, block) with only that block's tokens masked (later blocks are not attended), the
blocks' estimates summed. Bidirectional models (LLaDA, Dream) mask the whole continuation as one block.

Every random number is a counter-based draw keyed by (request seed, block, sample) (`samplers.streams`): a
request's estimate does not depend on its batch, its neighbours, `mc_batch` or the order of the requests.
`is_greedy` (`greedy_check`): the argmax of the fully masked block equals the continuation at every position (one
forward per block; LLaDA's iterative `suffix_greedy_prediction` is off in its published runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from contract.scoring import LikelihoodConfig, LikelihoodRequest, LikelihoodResult
from models.masked_diffusion import block_mask
from samplers.ranking import sort_rank
from samplers.streams import ELBO_COUNT, ELBO_ORDER, uniforms


def stratified_counts(seed: int, block: int, length: int, mc_num: int) -> torch.Tensor:
    """(mc_num,) masked-token counts in 1..length: a random offset k, then evenly spaced by length / mc_num."""
    u = uniforms(torch.tensor([seed]), torch.tensor([block]), torch.zeros(1, dtype=torch.long), 1, ELBO_COUNT)
    k = int(u[0, 0] * length) + 1
    x = torch.round(k + torch.arange(mc_num, dtype=torch.float64) * (length / mc_num)).long()
    return (x - 1) % length + 1


def elbo_masks(seed: int, block: int, length: int, mc_num: int) -> tuple[torch.Tensor, torch.Tensor]:
    """((mc_num, length) bool masks, (mc_num,) counts): sample i masks the counts[i] positions of lowest key."""
    counts = stratified_counts(seed, block, length, mc_num)
    n = torch.full((mc_num,), seed, dtype=torch.long)
    keys = uniforms(n, torch.full((mc_num,), block, dtype=torch.long), torch.arange(mc_num), length, ELBO_ORDER)
    return sort_rank(keys) < counts[:, None], counts


@dataclass
class _Row:
    """One forward row: which continuation positions it masks (over the whole continuation) and how they count."""

    sample: int  # -1: the greedy check's fully masked row
    masked: torch.Tensor  # (n,) bool over the continuation: the masked positions, all inside one block
    weight: float  # 1 / masking probability


class MaskedELBOScorer:
    """`contract.scoring.Scorer` over `models.masked_diffusion.MaskedDiffusionAdapter` (its model's forward)."""

    method = "mc_elbo"

    def __init__(self, adapter, cfg: LikelihoodConfig):
        if adapter.attention == "prefix_causal":
            raise ValueError(
                "model.attention=prefix_causal: likelihood scoring of an AR-seeded block model is not implemented "
                "(score it with its AR mode, model=*_ar)"
            )
        self.adapter, self.cfg = adapter, cfg
        self.block_causal = adapter.attention == "block_causal"
        self.shift = int(adapter.shifted_logits)

    def describe(self) -> dict[str, Any]:
        c = self.cfg
        blocks = f"per block of {self.adapter.block_length}" if self.block_causal else "whole continuation"
        return {
            "method": self.method, "mc_num": c.mc_num, "mc_batch": c.mc_batch, "cfg_scale": c.cfg_scale,
            "greedy_check": c.greedy_check, "stratified": "over mc_num", "blocks": blocks,
        }  # fmt: skip

    def blocks(self, ctx_len: int, total: int) -> list[list[int]]:
        """The continuation's positions grouped by attention block (one group on a bidirectional model)."""
        positions = list(range(ctx_len, total))
        if not self.block_causal:
            return [positions]
        b = self.adapter.block_length
        return [[p for p in positions if p // b == k] for k in sorted({p // b for p in positions})]

    @torch.no_grad()
    def score(self, requests: list[LikelihoodRequest]) -> list[LikelihoodResult]:
        return [self.score_one(r) for r in requests]

    def rows_of(self, req: LikelihoodRequest) -> list[_Row]:
        ctx, n = len(req.context_ids), len(req.continuation_ids)
        rows = []
        for j, pos in enumerate(self.blocks(ctx, ctx + n)):
            masks, counts = elbo_masks(req.seed, j, len(pos), self.cfg.mc_num)
            full = torch.zeros((self.cfg.mc_num, n), dtype=torch.bool)
            full[:, pos[0] - ctx : pos[-1] + 1 - ctx] = masks
            rows += [_Row(i, full[i], len(pos) / float(counts[i])) for i in range(self.cfg.mc_num)]
            if self.cfg.greedy_check:
                whole = torch.zeros(n, dtype=torch.bool)
                whole[pos[0] - ctx : pos[-1] + 1 - ctx] = True
                rows.append(_Row(-1, whole, 0.0))
        return rows

    def score_one(self, req: LikelihoodRequest) -> LikelihoodResult:
        seq = req.context_ids + req.continuation_ids
        rows = self.rows_of(req)
        sums = torch.zeros(self.cfg.mc_num, dtype=torch.float64)
        greedy, forwards = True, 0
        for lo in range(0, len(rows), self.cfg.mc_batch):
            chunk = rows[lo : lo + self.cfg.mc_batch]
            masked = torch.stack([r.masked for r in chunk])
            tok, hit = self.token_logprobs(seq, len(req.context_ids), masked)
            forwards += len(chunk) * (2 if self.cfg.cfg_scale > 0 else 1)
            sample = torch.tensor([r.sample for r in chunk])
            weight = torch.tensor([r.weight for r in chunk], dtype=torch.float64)
            loss = -(tok.double() * masked).sum(1) * weight
            mc = sample >= 0
            sums.index_add_(0, sample[mc], loss[mc])
            greedy = greedy and bool((hit | ~masked)[~mc].all())
        n = self.cfg.mc_num
        stderr = float(sums.std(unbiased=True) / n**0.5) if n > 1 else None
        return LikelihoodResult(
            sample_id=req.sample_id,
            logprob=-float(sums.mean()),
            is_greedy=greedy if self.cfg.greedy_check else None,
            method=self.method,
            forwards=forwards,
            tokens=len(req.continuation_ids),
            stderr=stderr,
            mc_num=n,
        )

    def token_logprobs(self, seq: list[int], ctx_len: int, masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For rows with `masked` (R, n) continuation positions replaced by the mask id (and guidance, if on): the
        (R, n) float32 log-probabilities of the continuation's tokens and whether each is the argmax."""
        a = self.adapter
        ids = torch.tensor(seq).repeat(masked.shape[0], 1)
        ids[:, ctx_len:][masked] = a.mask_id
        if self.cfg.cfg_scale > 0:
            uncond = ids.clone()
            uncond[:, :ctx_len] = a.mask_id
            ids = torch.cat([ids, uncond])
        logits = self.logits(ids.to(a.device), len(seq) - ctx_len + self.shift)[:, : len(seq) - ctx_len]
        if self.cfg.cfg_scale > 0:
            cond, uncond = logits.chunk(2)
            logits = uncond + (self.cfg.cfg_scale + 1) * (cond - uncond)
        logp = torch.log_softmax(logits.float(), dim=-1)
        tgt = torch.tensor(seq[ctx_len:], device=logp.device).expand(masked.shape[0], -1)
        tok = logp.gather(-1, tgt[..., None])[..., 0]
        return tok.cpu(), (logp.argmax(-1) == tgt).cpu()

    def logits(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        """The last `keep` columns' logits of one forward over whole rows (positions 0 .. T - 1, every key real)."""
        a = self.adapter
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)[None]
        keys = torch.ones((1, t), dtype=torch.bool, device=ids.device)
        mask = block_mask(pos, pos, keys, a.block_length, self.block_causal)
        return a._call(ids, pos.expand(ids.shape[0], -1), mask, keep, keys, use_cache=False)
