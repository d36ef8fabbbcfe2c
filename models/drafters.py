"""Drafters for speculative AR decoding on the AR engine (`models.ar_engine`): each round they propose k tokens
for every row in flight, which the target verifies in one batched forward.

`ModelDrafter`: an ordinary smaller causal LM with its own slot cache (k greedy or sampled draft forwards per
round; rejected positions are rewritten next round, nothing is copied). `MTPDrafter`: Gemma 4's
`gemma4_assistant`, k forwards at the position of the last token that read the target's K/V of its store
layers and the target's last hidden state, as transformers' assisted generation hands them over.
"""

from __future__ import annotations

import torch

from models.cache.slot_cache import SlotCache
from models.causal_lm import PREFILL_CHUNK, CausalLM
from samplers import streams
from samplers.token_draw import TokenSampling, pick, probabilities


class Drafter:
    """What the engine asks of a drafter each round. `draft` returns (b, k) tokens for rows 0..b-1 (idle rows
    draft dummies) and, when sampling, their probabilities; `rollback` forgets what the target rejected."""

    needs_hidden = False  # drafts from the target's last hidden state (a row can draft once the target ran it)
    forwards = 0

    def open(self, rows: int, capacity: int, k: int) -> None:
        """A new stream of at most `rows` rows starts."""

    def admit(self, seqs: list) -> None:
        """`seqs` took free rows."""

    def draft(self, seqs: list, b: int, k: int, cache: SlotCache, hidden: torch.Tensor):
        raise NotImplementedError

    def rollback(self, s, accepted: int, before: int) -> None:
        """Row `s` accepted `accepted` of the drafts placed after position `before`."""


class ModelDrafter(Drafter):
    """An ordinary draft model (same vocabulary) with its own slot cache; k draft forwards per round."""

    def __init__(self, draft: CausalLM, k: int, sampling: TokenSampling):
        self.lm, self.k, self.sampling = draft, k, sampling
        self.forwards = 0

    def open(self, rows: int, capacity: int, k: int) -> None:
        self.cache = self.lm.new_cache(rows, capacity, max(PREFILL_CHUNK, k + 2))

    def admit(self, seqs: list) -> None:
        self.cache.reset([s.row for s in seqs])
        for s in seqs:
            s.draft_len = 0

    def draft(self, seqs: list, b: int, k: int, cache: SlotCache, hidden: torch.Tensor):
        """k forwards of the draft model over its own cache (`cache` and `hidden` are the target's: unused)."""
        lm, dev = self.lm, self.lm.device
        by_row = {s.row: s for s in seqs}
        # catch the draft cache up: each row feeds what it has not processed yet (1 or 2 tokens after a round,
        # the prompt after admission, in chunks); a row with less to feed pads past its end (stale, rewritten later)
        todo = {s.row: (list(s.req.prompt_ids) + s.tokens)[s.draft_len :] for s in seqs}
        last_hidden = torch.zeros((b, 1, lm.text_config.hidden_size), dtype=lm.dtype, device=dev)
        while any(todo.values()):
            n = min(max(len(v) for v in todo.values()), PREFILL_CHUNK)
            ids = torch.zeros((b, n), dtype=torch.long)
            starts, take_at = [0] * b, [-1] * b
            for r in range(b):
                s, rest = by_row.get(r), todo.get(r, [])
                if s is None:
                    self.cache.reset([r])
                    continue
                starts[r] = s.draft_len
                if rest:
                    chunk = rest[:n]
                    ids[r, : len(chunk)] = torch.tensor(chunk, dtype=torch.long)
                    take_at[r] = len(chunk) - 1
                    s.draft_len += len(chunk)
                    todo[r] = rest[len(chunk) :]
            hidden = lm.forward(self.cache, None, starts, ids.to(dev))
            self.forwards += 1
            fed = torch.tensor([i >= 0 for i in take_at], device=dev)[:, None, None]
            idx = torch.tensor([max(i, 0) for i in take_at], device=dev)[:, None, None].expand(b, 1, hidden.shape[-1])
            last_hidden = torch.where(fed, hidden.gather(1, idx), last_hidden)
        seeds = torch.tensor([by_row[r].req.seed if r in by_row else 0 for r in range(b)], device=dev)
        pos = [by_row[r].length if r in by_row else 0 for r in range(b)]  # where the first draft token goes
        drafts, probs = [], []
        h = last_hidden
        for j in range(k):
            logits = lm.logits(h)  # (b, 1, V)
            tok = pick(logits, self.sampling, seeds, torch.tensor(pos, device=dev)[:, None] + j, streams.DRAFT)
            drafts.append(tok)
            if self.sampling.do_sample:
                probs.append(probabilities(logits, self.sampling))
            if j + 1 < k:
                for r in range(b):
                    if r not in by_row:
                        self.cache.reset([r])
                h = lm.forward(self.cache, None, [p + j for p in pos], tok)
                self.forwards += 1
                for s in seqs:
                    s.draft_len = s.length + j + 1
        self.round_k = k
        return torch.cat(drafts, 1), (torch.cat(probs, 1) if probs else None)

    def rollback(self, s, accepted: int, before: int) -> None:
        """Draft positions past the accepted prefix are stale: the next round rewrites them (no copy)."""
        s.draft_len = min(s.draft_len, before + min(accepted, self.round_k - 1))


class MTPDrafter(Drafter):
    """Gemma 4's multi-token-prediction drafter: k forwards at the last token's position over the target's K/V."""

    def __init__(self, assistant, target: CausalLM, store_layers: list[int], k: int):
        self.assistant, self.target, self.k = assistant, target, k
        types = target.text_config.layer_types
        self.store = {types[i]: i for i in store_layers}
        self.forwards = 0

    needs_hidden = True

    def draft(self, seqs: list, b: int, k: int, cache: SlotCache, hidden: torch.Tensor):
        """`hidden` (b, 1, H): the target's last hidden state at each row's last processed position."""
        a, t, dev = self.assistant, self.target, self.target.device
        by_row = {s.row: s for s in seqs}
        pos = [by_row[r].length - 1 if r in by_row else 0 for r in range(b)]
        last = torch.tensor([by_row[r].last() if r in by_row else 0 for r in range(b)], device=dev)[:, None]
        positions = torch.tensor(pos, device=dev)[:, None]
        rows = list(range(b))
        masks = cache.masks_for(rows, positions, t.dtype)
        shared = {}
        for layer_type, i in self.store.items():
            span = cache.span(layer_type, rows)
            shared[layer_type] = (cache.keys[i][:b, :, :span], cache.values[i][:b, :, :span])
        drafts = []
        h = hidden
        for _ in range(k):
            x = a.pre_projection(torch.cat([t.embed(last), h], dim=-1))
            out = a.model(
                input_ids=None,
                inputs_embeds=x,
                attention_mask=masks,
                position_ids=positions,
                shared_kv_states=shared,
                use_cache=False,
            )
            self.forwards += 1
            hs = out.last_hidden_state
            logits = a.masked_embedding(hs, a.lm_head.weight) if a.config.use_ordered_embeddings else a.lm_head(hs)
            last = logits.argmax(-1)
            h = a.post_projection(hs)
            drafts.append(last)
        return torch.cat(drafts, 1), None
