"""Exact log-likelihood of a continuation under a causal LM, as lm-eval's `HFLM._loglikelihood_tokens` computes it.

One forward over context + continuation (the last token dropped), log-softmax of the logits, the continuation
tokens' log-probabilities summed; `is_greedy`: every continuation token is the argmax. Requests are right-padded into
batches: a causal model's logits at real positions do not read the padding, so a result does not depend on its batch
(on tiny float32 models exactly; at scale matmul shapes may move the last bits).
"""

from __future__ import annotations

from typing import Any

import torch

from contract.scoring import LikelihoodConfig, LikelihoodRequest, LikelihoodResult


class ExactARScorer:
    """`contract.scoring.Scorer` over a transformers causal LM (`model(input_ids, attention_mask).logits`)."""

    method = "exact"

    def __init__(self, model, pad_id: int, cfg: LikelihoodConfig, max_length: int | None = None):
        self.model, self.pad_id, self.cfg = model, pad_id, cfg
        self.max_length = max_length or getattr(model.config, "max_position_embeddings", None) or 4096

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "batch_size": self.cfg.batch_size, "max_length": self.max_length}

    @torch.no_grad()
    def score(self, requests: list[LikelihoodRequest]) -> list[LikelihoodResult]:
        out = []
        for lo in range(0, len(requests), self.cfg.batch_size):
            out.extend(self._batch(requests[lo : lo + self.cfg.batch_size]))
        return out

    def _batch(self, reqs: list[LikelihoodRequest]) -> list[LikelihoodResult]:
        # HFLM: (context + continuation)[-(max_length + 1):][:-1], left-truncated
        seqs = [(r.context_ids + r.continuation_ids)[-(self.max_length + 1) :][:-1] for r in reqs]
        width = max(map(len, seqs))
        dev = self.model.device
        ids = torch.tensor([s + [self.pad_id] * (width - len(s)) for s in seqs], device=dev)
        att = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=dev)
        logp = torch.log_softmax(self.model(input_ids=ids, attention_mask=att).logits.float(), dim=-1)
        results = []
        for i, (r, s) in enumerate(zip(reqs, seqs, strict=True)):
            n = len(r.continuation_ids)
            rows = logp[i, len(s) - n : len(s)]
            target = torch.tensor(r.continuation_ids, device=dev)
            tok = rows.gather(-1, target[:, None])[:, 0]
            results.append(
                LikelihoodResult(
                    sample_id=r.sample_id,
                    logprob=float(tok.sum()),
                    is_greedy=bool((rows.argmax(-1) == target).all()),
                    method=self.method,
                    forwards=1,
                    tokens=n,
                    stderr=0.0,
                    token_logprobs=tok.tolist(),
                )
            )
        return results


def ar_scorer(adapter, cfg: LikelihoodConfig) -> ExactARScorer:
    """The AR families' scorer (`contract.families`): the adapter's causal LM, its pad id."""
    return ExactARScorer(adapter.model, adapter.pad_id, cfg)
