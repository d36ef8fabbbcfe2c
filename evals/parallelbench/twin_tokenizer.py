"""The CPU twin's tokenizer: the char tokenizer of `models.tiny` plus whole-word tokens for the generator's names, the
list separators and the fixed fragments of the Waiting Line / Puzzle prompts.

Why not the char tokenizer: a ParallelBench prompt with its in-context example is ~700 characters, and ParallelBench's
generation length (32 tokens for Waiting Line) holds only two names at one character a token. Here a name is one
token, `["` / `", "` / `"]` are one each and every fixed prompt fragment is one, so a six-person answer is 19 tokens
(room in 32, as a BPE tokenizer gives a real model) and a prompt ~80. Every other text still tokenizes, one
character a token (the regex ends with any character), and decoding is exact (tokens are fused back as written).
The `<|mask|>` token is in every family's vocabulary (the masked family's mask; unused by the others), so all
families share one vocabulary and the same parameter count for it.
"""

from __future__ import annotations

import re

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from evals.parallelbench.instances import FIRST, LAST
from evals.parallelbench.tasks import GENERATED, TASKS
from models.tiny import CHARS, MASK, SPECIALS, UNK, wrap_tokenizer

SEPARATORS = ['["', '", "', '"]']
# the chat template's and `as_text`'s fixed pieces
TURN_PIECES = ["user\n", "model\n", "user: ", "assistant: "]


def prompt_fragments() -> list[str]:
    """The fixed text between the `{field}` placeholders of the generated tasks' prompts (4+ characters)."""
    out: set[str] = set()
    for name in GENERATED:
        out.update(p for p in re.split(r"\{\w+\}", TASKS[name].prompt) if len(p.strip()) >= 4)
    return sorted(out)


def _names() -> list[str]:
    words = sorted(set(FIRST) | set(LAST), key=lambda w: (-len(w), w))
    return [w for n in words for w in (n, " " + n)]


def twin_tokenizer() -> PreTrainedTokenizerFast:
    """The tokenizer every twin family trains and decodes with (ids 0..5 the char tokenizer's specials, 6 the mask)."""
    words = SEPARATORS + _names()
    vocab = {tok: i for i, tok in enumerate(SPECIALS + [MASK] + CHARS + words)}
    seps = "|".join(re.escape(w) for w in SEPARATORS)
    names = "|".join(re.escape(w) for w in sorted(_names(), key=len, reverse=True))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(rf"{seps}|(?:{names})\b|[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_tokens([AddedToken(p, normalized=False, special=False) for p in TURN_PIECES + prompt_fragments()])
    return wrap_tokenizer(tok, mask_token=MASK)
