"""Final answers of GSM8K (CoT) and MATH replies, and when two of them are the same answer.

GSM8K follows lm-eval's `gsm8k_cot_zeroshot` (the task d3LLM runs): `strict` is the number in "The answer is N.",
`flexible` the last number in the reply; both compare with the reference (the text after "#### ") once commas,
dollar signs and a trailing period are dropped. MATH follows `minerva_math`'s extraction ("Final Answer: The final
answer is X. I hope it is correct."), falling back to the last `\\boxed{}` (what a chat model writes, and what
lm-eval's `math_verify` metric also reads). Equivalence is our own: Minerva-style normalisation (units, `\\text`,
`\\left`, spaces, shorthand `\\frac12`), then equal strings or equal exact rationals. lm-eval's sympy `parse_latex`
path needs antlr 4.11, which Hydra's pin (4.9) rules out, and sympy's parsers `eval` their input: model output is
never evaluated here, so symbolic answers (radicals, pi, intervals) compare as normalised strings.
"""

from __future__ import annotations

import re
from fractions import Fraction

INVALID = "[invalid]"
GSM8K_STRICT = re.compile(r"The answer is (\-?[0-9\.\,]+)\.")
GSM8K_NUMBER = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
MINERVA_FINAL = re.compile(r"Final Answer: The final answer is(.*?). I hope it is correct.")  # Minerva's own pattern
MINERVA_END = "I hope it is correct."


def gsm8k_reference(answer: str) -> str:
    """The reference number of a GSM8K solution: what follows its last "#### "."""
    return clean_number(answer.rsplit("####", 1)[-1])


def clean_number(text: str) -> str:
    """A number as lm-eval's exact_match compares it: no commas or dollar signs, no trailing period, lower case."""
    return text.replace(",", "").replace("$", "").strip().removesuffix(".").strip().lower()


def gsm8k_answers(reply: str) -> dict[str, str]:
    """{"strict": ..., "flexible": ...}: the number each of lm-eval's two filters takes from `reply`."""
    strict = GSM8K_STRICT.search(reply)
    numbers = [a or b for a, b in GSM8K_NUMBER.findall(reply)]
    return {
        "strict": strict.group(1) if strict else INVALID,
        "flexible": numbers[-1] if numbers else INVALID,
    }


def gsm8k_correct(extracted: str, reference: str) -> bool:
    return extracted != INVALID and clean_number(extracted) == clean_number(reference)


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces matched; None when there is none or it
    never closes."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    if text.startswith("\\boxed ", start):  # "\boxed 5": up to the next "$" or line end
        return re.split(r"[$\n]", text[start + len("\\boxed ") :], maxsplit=1)[0].strip()
    open_at = text.find("{", start)
    if open_at < 0:
        return None
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i]
    return None


def math_answer(reply: str) -> str:
    """The final answer of a MATH reply: Minerva's closing sentence, else the last box, else INVALID."""
    found = MINERVA_FINAL.search(reply + MINERVA_END)  # as Minerva: a reply cut after "is X. " still counts
    if found and found.group(1).strip():
        return found.group(1).strip()
    boxed = last_boxed(reply)
    return boxed.strip() if boxed is not None and boxed.strip() else INVALID


def math_reference(solution: str) -> str:
    """The reference answer of a MATH solution: its last box."""
    boxed = last_boxed(solution)
    if boxed is None:
        raise ValueError(f"MATH solution has no \\boxed{{}} answer: {solution[-120:]!r}")
    return boxed.strip()


_UNITS = (
    r"(degrees?|units?|inches|inch|feet|foot|ft|cm|meters?|km|mph|hours?|minutes?|seconds?|dollars?|cents?|pounds?)"
)
_DROPS = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ ", "$", "\\displaystyle")


def normalize_math(answer: str) -> str:
    """A canonical string for a final answer (Minerva-style: the right side of an "=", no units, text wrappers,
    spacing commands or spaces; `\\dfrac`/`\\tfrac` -> `\\frac`; shorthand `\\frac12` -> `\\frac{1}{2}`)."""
    s = answer.strip().split("=")[-1]
    boxed = last_boxed(s)
    s = boxed if boxed is not None else s
    for cmd in ("\\text", "\\textbf", "\\mathrm", "\\mbox", "\\overline"):
        s = re.sub(re.escape(cmd) + r"\{([^{}]*)\}", r"\1", s)
    for piece in _DROPS:
        s = s.replace(piece, "")
    s = re.sub(r"\^\{?\\circ\}?", "", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", s)
    s = re.sub(rf"\s*{_UNITS}\b", "", s)
    s = re.sub(r"\s+", "", s).rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):  # 100,000 -> 100000 (not a tuple such as 1,2)
        s = s.replace(",", "")
    return s


def as_rational(answer: str) -> Fraction | None:
    """An exact rational for an integer, decimal, percent-free `a/b` or `\\frac{a}{b}` (signs allowed); None else."""
    s = answer
    if m := re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s):
        sign, num, den = m.groups()
        s = f"{sign}{num}/{den}"
    try:
        if re.fullmatch(r"-?\d+/-?\d+", s):
            num, den = s.split("/")
            return Fraction(int(num), int(den)) if int(den) else None
        if re.fullmatch(r"-?(\d+\.?\d*|\.\d+)", s):
            return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return None


def math_equivalent(answer: str, reference: str) -> bool:
    """Equal after normalisation, or the same exact rational (0.5 == \\frac{1}{2} == 1/2)."""
    if answer == INVALID:
        return False
    a, b = normalize_math(answer), normalize_math(reference)
    if a == b:
        return True
    ra, rb = as_rational(a), as_rational(b)
    return ra is not None and ra == rb
