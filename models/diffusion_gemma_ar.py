"""The third baseline: the DiffusionGemma weights decoding autoregressively (no training difference at all).

The checkpoint's causal encoder is a causal LM over the shared layers: AR decoding is greedy over
softcap(lm_head(encoder hidden state)), one single-token encoder forward per new token on the KV cache
(`DiffusionGemmaAdapter.prefill` / `commit` / `next_token_logits`). Batches run in lockstep with left
padding, like transformers' `generate()`: a finished row is still computed (recorded in `row_forwards`) but
stops paying NFE. TPF = 1 by construction; the cut at EOS / stop strings is the shared rule.
"""

from __future__ import annotations

from typing import Any

import torch

from contract.decoding import DecoderKind, stream_in_batches
from contract.records import GenerationRequest, GenerationResult, check_request
from contract.text import Prompt, cut_at_stop
from models.diffusion_gemma import DiffusionGemmaAdapter


class DiffusionGemmaARDecoder:
    """Greedy AR decoding with a DiffusionGemma checkpoint's encoder; label "ar-same-weights"."""

    label = kind = DecoderKind.AR_SAME_WEIGHTS
    resumable = True  # greedy: a sample does not depend on its batch

    def __init__(self, **adapter_kwargs: Any):
        self.adapter = DiffusionGemmaAdapter(**adapter_kwargs)
        self.tokenizer = self.adapter.tokenizer

    def encode(self, prompt: Prompt) -> list[int]:
        return self.adapter.encode(prompt)

    def describe(self) -> dict[str, Any]:
        mode = "DiffusionGemma causal encoder + LM head, greedy"
        return {**self.adapter.describe(), "decoder": str(self.label), "mode": mode}

    def stream(self, requests, batch_size: int):
        return stream_in_batches(self.generate, requests, batch_size)

    @torch.no_grad()
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        a = self.adapter
        for r in requests:
            check_request(r)
        state = a.prefill([r.prompt_ids for r in requests])
        outputs: list[list[int]] = [[] for _ in requests]
        done = [False] * len(requests)
        forwards = 0
        nfe = [1] * len(requests)  # the prefill's last position gives each row's first token
        while True:
            tokens = a.next_token_logits(state).argmax(-1)
            host = tokens.tolist()
            for i, r in enumerate(requests):
                if done[i]:
                    continue
                outputs[i].append(host[i])
                _, _, reason = cut_at_stop(self.tokenizer, outputs[i], a.eos_ids, r.stop_strings)
                done[i] = reason != "length" or len(outputs[i]) >= r.max_new_tokens
                nfe[i] += not done[i]
            if all(done):
                break
            state = a.commit(state, tokens[:, None])  # one single-token encoder forward for the batch
            forwards += 1
        results = []
        for i, r in enumerate(requests):
            toks, text, reason = cut_at_stop(self.tokenizer, outputs[i], a.eos_ids, r.stop_strings)
            results.append(
                GenerationResult(
                    sample_id=r.sample_id,
                    token_ids=toks,
                    text=text,
                    nfe=nfe[i],
                    prompt_tokens=len(r.prompt_ids),
                    finished_by=reason,
                    row_forwards=forwards + 1,
                )
            )
        return results
