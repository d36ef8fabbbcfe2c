"""A decoder that answers each prompt with a reply the test writes, as token ids of a real tokenizer.

No model here writes a given realistic reply on demand; what such tests check is everything after the decoder
(reply text, lm-eval's filters and metrics, format and correctness scoring), which runs for real."""

from __future__ import annotations

from collections.abc import Callable

from contract.records import GenerationResult
from contract.text import encode_prompt


class ReplayDecoder:
    """`reply(prompt text) -> reply text`; the result ends with the tokenizer's EOS, as a decoder's would."""

    label, resumable = "ar", True

    def __init__(self, tokenizer, reply: Callable[[str], str]):
        self.tokenizer, self.reply = tokenizer, reply

    def encode(self, prompt):
        return encode_prompt(self.tokenizer, prompt)

    def describe(self):
        return {"decoder": "replay"}

    def stream(self, requests, batch_size):
        for r in requests:
            text = self.reply(self.tokenizer.decode(r.prompt_ids))
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out = self.tokenizer.decode(ids, skip_special_tokens=True)
            yield GenerationResult(r.sample_id, ids, out, nfe=len(ids), wall_time_s=0.01, latency_s=0.01)
