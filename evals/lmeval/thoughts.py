"""Thought blocks in replies: split them off before answer extraction, and say when one never closed.

A thinking model writes its reasoning between tags (Gemma 4: `<|channel>thought ... <channel|>`; Qwen and
others: `<think> ... </think>`). The reasoning mentions every choice, so answer extractors that fall back to
matching choice text (lm-eval's `multi_choice_regex`) must only see what follows the thought. A block that
never closes (the reply hit the token cap while still thinking) leaves no answer at all: that is one of the
known weaknesses the harness has to make visible, so it is counted, not guessed around.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (open, close) tag pairs; the Gemma 4 pair is what transformers' response parser uses for `gemma4`.
THOUGHT_TAGS: tuple[tuple[str, str], ...] = (("<|channel>thought", "<channel|>"), ("<think>", "</think>"))


@dataclass(frozen=True)
class ThoughtSplit:
    answer: str  # the reply with every thought block removed (empty if a block never closed); see `split_thoughts`
    thought: str  # the text inside thought blocks, joined
    has_thought: bool
    unclosed: bool  # a thought block was still open when the reply ended


def opens_thought(text: str) -> bool:
    """True if `text` (e.g. the end of a rendered prompt) leaves a thought block open."""
    for open_tag, close_tag in THOUGHT_TAGS:
        if text.rfind(open_tag) > text.rfind(close_tag):
            return True
    return False


def split_thoughts(reply: str, starts_in_thought: bool = False) -> ThoughtSplit:
    """Remove thought blocks from `reply`.

    `starts_in_thought`: the prompt already opened a block (templates that prefill the opening tag), so the
    reply begins inside one. A closing tag with no opening tag before it is treated the same way.

    The answer is the text lm-eval's own model classes hand their filters, less the thoughts: nothing is stripped
    but the whitespace leading into the answer after a removed block (lm-eval's `postprocess_generated_text`
    does `split(think_end)[-1].lstrip()`). Trailing whitespace stays: GPQA's strict-match regex
    `(?<=The answer is )(.*)(?=.)` needs a character after the letter, so `The answer is B ` (a reply that
    stopped on a space token) is right and `The answer is B` is not, in lm-eval as here.
    """
    answer, thoughts, unclosed, has = [], [], False, False
    pos = 0
    pattern = re.compile("|".join(re.escape(t) for pair in THOUGHT_TAGS for t in pair))
    closes = {close: open_ for open_, close in THOUGHT_TAGS}
    inside = starts_in_thought
    if not inside:  # a close tag before any open tag: the reply started inside a prefilled block
        first = pattern.search(reply)
        inside = bool(first and first.group(0) in closes)
    has = inside
    while pos <= len(reply):
        m = pattern.search(reply, pos)
        if inside:
            if m is None:
                thoughts.append(reply[pos:])
                unclosed = True
                break
            if m.group(0) in closes:
                thoughts.append(reply[pos : m.start()])
                inside = False
            pos = m.end()  # an open tag inside a block is just text to skip
        else:
            if m is None:
                answer.append(reply[pos:])
                break
            answer.append(reply[pos : m.start()])
            if m.group(0) not in closes:
                inside, has = True, True
            pos = m.end()
    text = "".join(answer)
    return ThoughtSplit(text.lstrip() if has else text, "\n".join(t.strip() for t in thoughts), has, unclosed)
