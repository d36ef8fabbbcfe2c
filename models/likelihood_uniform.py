"""The decision read: how a uniform-state block-diffusion model (DiffusionGemma) scores a continuation.

Uniform-state noise has no mask token, so the masked ELBO does not apply. The read pins the candidate on the canvas
and asks the denoiser once: the context is encoded causally (as for decoding), the continuation's first C tokens
fill canvas 0 (C = the canvas length) and the positions past it hold the fresh-canvas noise of the request's seed
(`samplers.streams.INIT`, the tokens a decode of that seed starts from), one denoiser forward without
self-conditioning (a canvas's first step), and the score is the sum over the candidate's positions of
log softmax(softcap(logits)) at the candidate's token. A continuation longer than C continues on the next canvas
after the pinned canvas is committed to the context, as decoding commits a finished canvas.

What it is: a pseudo-likelihood, the denoiser's own verdict on each pinned token given the whole pinned canvas (the
token itself included: it reads how much the model would keep it, not how likely it would write it). What it is not:
the model's likelihood, nor a bound on it; scores of different lengths are not comparable as probabilities (use
lm-eval's length-normalised `acc_norm` with care). `is_greedy`: the argmax equals the candidate at every position
(the candidate is a fixed point of one greedy step). Deterministic, and a row's score does not depend on its batch.
SGLang's DiffusionGemma algorithm and vLLM's `diffusion_read_only` / `diffusion_seed_canvas` read the same decision.
"""

from __future__ import annotations

from typing import Any

import torch

from contract.scoring import LikelihoodConfig, LikelihoodRequest, LikelihoodResult
from samplers import streams


class DecisionReadScorer:
    """`contract.scoring.Scorer` over `models.diffusion_gemma.DiffusionGemmaAdapter` (prefill, denoise, commit)."""

    method = "decision_read"

    def __init__(self, adapter, cfg: LikelihoodConfig):
        self.adapter, self.cfg = adapter, cfg

    def describe(self) -> dict[str, Any]:
        a = self.adapter
        return {"method": self.method, "batch_size": self.cfg.batch_size, "canvas_length": a.canvas_length}

    @torch.no_grad()
    def score(self, requests: list[LikelihoodRequest]) -> list[LikelihoodResult]:
        out = []
        for lo in range(0, len(requests), self.cfg.batch_size):
            out.extend(self._batch(requests[lo : lo + self.cfg.batch_size]))
        return out

    def canvas(self, reqs: list[LikelihoodRequest], k: int) -> tuple[torch.Tensor, list[int]]:
        """(B, C) canvas k of every row: the candidate's tokens k*C .. (k+1)*C - 1 pinned, the seed's noise after them;
        how many candidate tokens each row pinned (0: the row has no canvas k, its output is unused)."""
        a = self.adapter
        c = a.canvas_length
        seed = torch.tensor([r.seed for r in reqs], dtype=torch.long)
        idx = torch.full((len(reqs),), k, dtype=torch.long)
        x = streams.tokens(seed, idx, torch.zeros_like(seed), c, a.vocab_size, streams.INIT)
        pinned = []
        for i, r in enumerate(reqs):
            part = r.continuation_ids[k * c : (k + 1) * c]
            x[i, : len(part)] = torch.tensor(part, dtype=torch.long)
            pinned.append(len(part))
        return x.to(a.device), pinned

    def _batch(self, reqs: list[LikelihoodRequest]) -> list[LikelihoodResult]:
        a = self.adapter
        c = a.canvas_length
        state = a.prefill([r.context_ids for r in reqs], a.open(len(reqs)))
        n_canvas = max(-(-len(r.continuation_ids) // c) for r in reqs)
        token_lp: list[list[float]] = [[] for _ in reqs]
        greedy = [True] * len(reqs)
        for k in range(n_canvas):
            x, pinned = self.canvas(reqs, k)
            raw = a.denoise(state, x, a.canvas_masks(state, c, len(reqs)))
            logits = raw.float()
            if a.softcap:
                logits = torch.tanh(logits / a.softcap) * a.softcap
            logp = torch.log_softmax(logits, dim=-1)
            for i, n in enumerate(pinned):
                if n:
                    tgt = x[i, :n]
                    token_lp[i] += logp[i, :n].gather(-1, tgt[:, None])[:, 0].tolist()
                    greedy[i] = greedy[i] and bool((logp[i, :n].argmax(-1) == tgt).all())
            if k + 1 < n_canvas:
                a.commit(state, x)
        return [
            LikelihoodResult(
                sample_id=r.sample_id,
                logprob=float(sum(lp)),
                is_greedy=g,
                method=self.method,
                forwards=-(-len(r.continuation_ids) // c),
                tokens=len(r.continuation_ids),
                stderr=0.0,
                token_logprobs=lp,
            )
            for r, lp, g in zip(reqs, token_lp, greedy, strict=True)
        ]
