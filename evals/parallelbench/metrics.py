"""ParallelBench's per-sample scores, written from its published definitions (`dataset/parallel_bench/metrics.py` of
furiosa-ai/ParallelBench, read, not copied) so that a stored prediction scores here as it scores there.

Every scorer returns a dict of floats; a value that needs what this machine lacks is None, never 0:
- the grammar check (LanguageTool + a JDK) enters words-to-sentence, summaries and paraphrases; where the other
  factor already decides the product (a missing word, an empty reply) the score is known without it;
- BERTScore (`evaluate` fetches its model from the hub at run time) enters paraphrases. BLEU needs no model: `bleu`
  is the hub's `evaluate-metric/bleu` (tensorflow/nmt's `compute_bleu`, 4-grams, no smoothing, on sacrebleu's 13a
  tokens) computed here.
`score` is the task's score as ParallelBench reports it; list and puzzle tasks also have `score_strict` (their
`strict=True` parse: a bracketed list of double-quoted items separated by ", ").
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

NEEDS_GRAMMAR = "grammar_score: needs LanguageTool and a JDK"
NEEDS_BERTSCORE = "bertscore_score: needs a BERTScore model from the hub"


def parse_list(text: str, strict: bool = False) -> list[str] | None:
    """The list a reply holds: the text after its last `[` up to the next `]`. Loose: items split on commas,
    quotes and spaces trimmed, empty items dropped; strict: both brackets, items `"..."` joined by `, `."""
    if "[" in text:
        text = text.rsplit("[", 1)[1]
    elif strict:
        return None
    if "]" in text:
        text = text.split("]", 1)[0]
    elif strict:
        return None
    if not strict:
        return [part.strip('" ') for part in text.strip("[]").split(",") if part.strip()]
    out = []
    for part in text.split(", "):
        if not (part.startswith('"') and part.endswith('"')):
            return None
        inner = part[1:-1]
        if '"' in inner:
            return None
        out.append(inner)
    return out


def list_match(pred: list[str] | None, ref: Any) -> float:
    return 0.0 if pred is None else float(pred == parse_list(ref))


def list_shuffle(pred: list[str] | None, ref: Any) -> float:
    """Any reordering of the input but the input itself."""
    line = list(ref["input"])
    return 0.0 if pred is None else float(sorted(pred) == sorted(line) and pred != line)


def removed_one_of(shorter: list[str], longer: list[str], n: int) -> float:
    """`shorter` is `longer` with `n` distinct names taken out (each at its first place)."""
    if len(shorter) != len(longer) - n:
        return 0.0
    gone = set(longer) - set(shorter)
    if len(gone) != n:
        return 0.0
    rest = list(longer)
    for name in gone:
        rest.remove(name)
    return float(shorter == rest)


def list_insert_random(pred: list[str] | None, ref: Any) -> float:
    """The input with the new name(s) anywhere; without a named word, any one name added."""
    if pred is None:
        return 0.0
    word, n = ref["word"], ref.get("n_words", 1)
    if word is None:
        return removed_one_of(list(ref["input"]), pred, n)
    rest = list(pred)
    for name in [word] if isinstance(word, str) else word:
        if name not in rest:
            return 0.0
        rest.remove(name)
    return float(rest == list(ref["input"]))


def list_remove_random(pred: list[str] | None, ref: Any) -> float:
    return 0.0 if pred is None else removed_one_of(pred, list(ref["input"]), ref.get("n_words", 1))


def list_replace_random(pred: list[str] | None, ref: Any) -> float:
    """The input with the name at the new word's first place in the reply replaced by it."""
    line = list(ref["input"])
    if pred is None or len(pred) != len(line):
        return 0.0
    word = ref["word"]
    if word is None:
        return float(sum(p != g for p, g in zip(pred, line)) == ref.get("n_words", 1))
    if word not in pred:
        return 0.0
    line[pred.index(word)] = word
    return float(pred == line)


LIST_SCORERS: dict[str, Callable[[list[str] | None, Any], float]] = {
    "list_match_score": list_match,
    "list_shuffle_score": list_shuffle,
    "list_random_insert_score": list_insert_random,
    "list_random_remove_score": list_remove_random,
    "list_random_replace_score": list_replace_random,
}


def latin_square(text: str, ref: Any) -> float:
    """The first `size` lines whose comma-separated cells are exactly the symbols form a Latin square (and start
    with `first_row` where the reference names one)."""
    symbols = set(ref["symbols"])
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    rows = [[c.strip() for c in line.split(",")] for line in lines]
    rows = [r for r in rows if set(r) == symbols][: len(symbols)]
    if len(rows) < len(symbols):
        return 0.0
    if any(set(col) != symbols for col in zip(*rows)):
        return 0.0
    first = ref.get("first_row")
    return float(first is None or rows[0] == first)


def sudoku_grid(text: str, strict: bool, n: int = 4) -> list[list[int]] | None:
    """Loose: spaces and commas dropped, the lines holding exactly n digits, n of them; strict: n lines of n
    digits and nothing else."""
    lines = [line.strip() for line in text.strip().split("\n") if line.strip()]
    if not strict:
        lines = [line.strip() for line in text.strip().replace(" ", "").replace(",", "").split("\n") if line.strip()]
        rows = [[int(d) for d in re.findall(r"\d", line)] for line in lines]
        rows = [r for r in rows if len(r) == n]
        return rows if len(rows) == n else None
    if len(lines) != n or any(len(line) != n for line in lines):
        return None
    try:
        return [[int(ch) for ch in line] for line in lines]
    except ValueError:
        return None


def sudoku(text: str, ref: str, strict: bool = False) -> float:
    return float(sudoku_grid(text, strict) == sudoku_grid(ref, True))


def words_to_sentence(text: str, ref: Any) -> dict[str, float | None]:
    """Every given word in the reply (as a substring) and no grammar error; a missing word decides it alone."""
    inclusion = float(all(word in text for word in ref["words"]))
    return {"inclusion_score": inclusion, "grammar_score": None, "score": 0.0 if not inclusion else None}


def rouge_l(text: str, reference: str) -> float:
    """ROUGE-L F1 with the Porter stemmer: what `evaluate`'s rouge module returns for one prediction (its bootstrap
    aggregate of one value is that value)."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(reference, text)["rougeL"].fmeasure


def summary(text: str, ref: Any) -> dict[str, float | None]:
    """ROUGE-L times the grammar check; an empty reply scores 0 without it."""
    text = text.strip()
    empty = text == ""
    return {
        "rougeL_score": rouge_l(text, ref["summary"].strip()),
        "grammar_score": 0.0 if empty else None,
        "score": 0.0 if empty else None,
    }


def _ngrams(tokens: list[str], max_order: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for n in range(1, max_order + 1) for i in range(len(tokens) - n + 1))


def bleu(prediction: str, reference: str, max_order: int = 4) -> float:
    """`evaluate.load("bleu").compute(predictions=[prediction], references=[[reference]])["bleu"]`: 13a tokens
    (sacrebleu's tokenizer, which the hub module copies), clipped n-gram precisions up to `max_order`, their
    geometric mean (0 when any is 0), times the brevity penalty exp(1 - reference / prediction length) when the
    prediction is not longer. `prediction` must have a token (ParallelBench scores an empty reply without BLEU)."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    tokenize = Tokenizer13a()
    pred, ref = tokenize(prediction).split(), tokenize(reference).split()
    overlap = _ngrams(pred, max_order) & _ngrams(ref, max_order)
    matches = [sum(c for g, c in overlap.items() if len(g) == n) for n in range(1, max_order + 1)]
    possible = [len(pred) - n + 1 for n in range(1, max_order + 1)]
    precisions = [m / p if p > 0 else 0.0 for m, p in zip(matches, possible)]
    if min(precisions) <= 0:
        return 0.0
    ratio = len(pred) / len(ref)
    penalty = 1.0 if ratio > 1.0 else math.exp(1 - 1 / ratio)
    return math.exp(sum(math.log(p) for p in precisions) / max_order) * penalty


def paraphrase(text: str, ref: Any) -> dict[str, float | None]:
    """(1 - BLEU) x BERTScore x grammar: BERTScore and grammar need the hub or LanguageTool; an empty reply scores 0,
    and so does one with BLEU 1 (the reference itself, up to tokens): there (1 - BLEU) decides the product."""
    text = text.strip()
    if text == "":
        return {"inv_bleu_score": 0.0, "bertscore_score": 0.0, "grammar_score": 0.0, "score": 0.0}
    inv_bleu = 1.0 - bleu(text, ref["text"])
    return {
        "inv_bleu_score": inv_bleu,
        "bertscore_score": None,
        "grammar_score": None,
        "score": 0.0 if inv_bleu == 0 else None,
    }


TEXT_SCORERS: dict[str, Callable[[str, Any], dict[str, float | None]]] = {
    "sentence_to_words_score": words_to_sentence,
    "summary_score": summary,
    "paraphrase_score": paraphrase,
}
METRICS = (*LIST_SCORERS, "latin_square_score", "sudoku_score", *TEXT_SCORERS)
# what each metric needs that this machine lacks (said at config time; the rest of the eval runs)
MISSING: dict[str, tuple[str, ...]] = {
    "sentence_to_words_score": (NEEDS_GRAMMAR,),
    "summary_score": (NEEDS_GRAMMAR,),
    "paraphrase_score": (NEEDS_BERTSCORE, NEEDS_GRAMMAR),
}


def score_sample(metric: str, text: str, ref: Any) -> dict[str, float | None]:
    """One reply's scores as ParallelBench records them: `score` (+ `score_strict` for list and puzzle tasks), or
    the text metric's parts; None where a part needs what is not here (`MISSING`)."""
    if metric in LIST_SCORERS:
        fn = LIST_SCORERS[metric]
        return {"score": fn(parse_list(text), ref), "score_strict": fn(parse_list(text, strict=True), ref)}
    if metric == "latin_square_score":
        value = latin_square(text, ref)  # ParallelBench's Latin square scorer has no strict mode
        return {"score": value, "score_strict": value}
    if metric == "sudoku_score":
        return {"score": sudoku(text, ref), "score_strict": sudoku(text, ref, strict=True)}
    if metric in TEXT_SCORERS:
        return TEXT_SCORERS[metric](text, ref)
    raise ValueError(f"unknown ParallelBench metric {metric!r}; known: {METRICS}")
