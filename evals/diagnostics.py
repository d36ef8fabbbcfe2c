"""Why quality drops: the report's known failure modes, counted per sample and per run.

Pure functions over stored token ids (no torch, no tokenizer), so every decoder's rows compare: diffusion,
AR and AR+draft alike.

- **Stutter**: a *repeat loop* is one n-gram (n = 1..`MAX_LOOP_N`) repeated at least `MIN_LOOP_REPEATS`
  times in a row (`a a a`, `a b a b a b`, `a b c a b c a b c`). A sample stutters when its output holds
  one. Per sample: the longest run of one repeated token, the fraction of tokens inside loops, distinct-1 /
  distinct-2 (unique n-grams / n-grams), and, for diffusion rows with a stored `trajectory` (argmax canvas
  per step, `sampler.capture_trajectory=true`), the canvas and denoising step at which the stutter that
  reached the output appeared.
- **Terse answers**: output length in tokens, and vs an AR run on the same items (`length_ratio_vs_ar`).
- **Unclosed thoughts**: counted where rows carry `unclosed_thought` (lm-eval tasks).
- **Format success**: the share of samples whose output has the form the eval's scorer reads, right or wrong
  (`format_ok`, set by each eval's scorer: a complete Sudoku grid, GPQA's strict "The answer is (X)", a
  LiveCodeBench block that compiles, an lm-eval filter's match, valid JSON, a prompts regex / schema).
- **How samples end** (`finished_by`: eos / stop / length) as rates; the step-cap hit rate is in
  `contract.records.decode_metrics`.

`sample_diagnostics(row)` gives the `diag_*` fields stored with every row of `samples.jsonl`;
`run_diagnostics(rows)` the run figures in `metrics.json`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_LOOP_N = 4  # longest n-gram a repeat loop is made of
MIN_LOOP_REPEATS = 3  # how many times in a row it must occur
FINISH_REASONS = ("eos", "stop", "length")
# Run figures added by `run_diagnostics` (besides `length_ratio_vs_<label>`, `terse_rate_vs_<label>`,
# `unclosed_thought_rate` and the stutter-origin means, which appear only where they apply).
RUN_KEYS = (
    "stutter_rate",
    "mean_output_tokens",
    "mean_longest_repeat",
    "max_longest_repeat",
    "mean_loop_fraction",
    "mean_distinct_1",
    "mean_distinct_2",
    *(f"finished_by_{r}_rate" for r in FINISH_REASONS),
)
TERSE_FRACTION = 0.5  # a sample is terse when shorter than this fraction of the baseline's output on its item


# ---- token-level measures ----------------------------------------------------------------------------------


def longest_repeat(tokens: Sequence[int]) -> tuple[int, int | None]:
    """(length, token) of the longest run of one repeated token; (0, None) for no tokens. Ties: the first run."""
    best, best_tok, run = 0, None, 0
    for i, t in enumerate(tokens):
        run = run + 1 if i and tokens[i - 1] == t else 1
        if run > best:
            best, best_tok = run, t
    return best, best_tok


def loop_mask(tokens: Sequence[int], max_n: int = MAX_LOOP_N, min_repeats: int = MIN_LOOP_REPEATS) -> list[bool]:
    """Per token: inside a repeat loop, i.e. one of `min_repeats`+ back-to-back copies of an n-gram, n <= max_n.

    For each n, a maximal stretch where `tokens[k] == tokens[k + n]` holds is periodic with period n; when it
    spans at least `min_repeats` whole copies, those whole copies (from the stretch's start) are marked. A
    trailing partial copy is not (`a b a b a b a` marks 6 tokens).
    """
    size = len(tokens)
    mask = [False] * size
    for n in range(1, max_n + 1):
        k = 0
        while k + n < size:
            if tokens[k] != tokens[k + n]:
                k += 1
                continue
            start = k
            while k + n < size and tokens[k] == tokens[k + n]:
                k += 1
            length = (k - start) + n  # tokens[start : start + length] has period n
            copies = length // n
            if copies >= min_repeats:
                for i in range(start, start + copies * n):
                    mask[i] = True
    return mask


def has_loop(tokens: Sequence[int], max_n: int = MAX_LOOP_N, min_repeats: int = MIN_LOOP_REPEATS) -> bool:
    return any(loop_mask(tokens, max_n, min_repeats))


def distinct_n(tokens: Sequence[int], n: int) -> float | None:
    """Unique n-grams / n-grams (1.0: no n-gram repeats); None when the output is shorter than n."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def first_stutter(
    trajectory: Sequence[Mapping[str, Any]],
    output: Sequence[int],
    max_n: int = MAX_LOOP_N,
    min_repeats: int = MIN_LOOP_REPEATS,
) -> tuple[int, int] | None:
    """(canvas, step) where the output's first stutter appeared, or None when the output holds no loop.

    The canvas is the first whose committed tokens hold (or complete) a repeat loop: canvas k covers output
    positions [k*C, (k+1)*C), cut where the output ends (so padding after an EOS never counts), with the
    output before it prepended (a loop across a canvas boundary belongs to the canvas that completes it). The
    step is the first of that canvas's last stretch of steps whose argmax canvas held a loop at every step up
    to the commit: a loop that came and went earlier is not the one that reached the output. Steps are as
    stored (0-based).
    """
    context = (max_n * min_repeats) - 1  # the most earlier tokens a loop touching a canvas can use

    def loops_in(canvas: int, width: int, tokens: Sequence[int]) -> bool:
        start = canvas * width
        part = list(tokens[: max(0, min(width, len(output) - start))])
        prefix = list(output[max(0, start - context) : start])
        return bool(part) and any(loop_mask(prefix + part, max_n, min_repeats)[len(prefix) :])

    if not trajectory or not has_loop(output, max_n, min_repeats):
        return None
    width = len(trajectory[0]["argmax"])
    canvases = sorted({int(e["canvas"]) for e in trajectory})
    stuck = next((k for k in canvases if loops_in(k, width, output[k * width : (k + 1) * width])), None)
    if stuck is None:
        return None
    steps = [e for e in trajectory if int(e["canvas"]) == stuck]
    first = None
    for entry in reversed(steps):
        if not loops_in(stuck, width, list(entry["argmax"])):
            break
        first = int(entry["step"])
    return (stuck, first) if first is not None else None


# ---- per sample and per run --------------------------------------------------------------------------------


def _getter(row: Any):
    if isinstance(row, Mapping):
        return row.get
    return lambda key, default=None: getattr(row, key, default)


def sample_diagnostics(row: Any) -> dict[str, Any]:
    """The `diag_*` fields of one sample: a stored row (dict) or a `GenerationResult`.

    `diag_stutter_canvas` / `diag_stutter_step` appear only for rows with a trajectory (None there when the
    output does not stutter).
    """
    get = _getter(row)
    tokens = list(get("token_ids") or [])
    mask = loop_mask(tokens)
    loops = sum(mask)
    run, run_tok = longest_repeat(tokens)
    out: dict[str, Any] = {
        "diag_output_tokens": len(tokens),
        "diag_longest_repeat": run,
        "diag_repeat_token": run_tok,
        "diag_loop_tokens": loops,
        "diag_loop_fraction": loops / len(tokens) if tokens else 0.0,
        "diag_stutter": loops > 0,
        "diag_distinct_1": distinct_n(tokens, 1),
        "diag_distinct_2": distinct_n(tokens, 2),
    }
    trajectory = get("trajectory")
    if trajectory:
        first = first_stutter(trajectory, tokens)
        out["diag_stutter_canvas"], out["diag_stutter_step"] = first if first else (None, None)
    return out


def _diag(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's stored `diag_*` fields, recomputed when it has none (rows stored before diagnostics existed)."""
    return row if "diag_stutter" in row else {**row, **sample_diagnostics(row)}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def run_diagnostics(
    rows: Sequence[Mapping[str, Any]],
    baseline_rows: Sequence[Mapping[str, Any]] | None = None,
    baseline_label: str = "ar",
) -> dict[str, Any]:
    """Run figures over stored rows (see `RUN_KEYS`); `{}` for no rows.

    - `unclosed_thought_rate`: only where rows carry `unclosed_thought`;
    - `format_ok_rate` / `format_failures`: over the rows whose eval measured `format_ok`;
    - `mean_stutter_first_step` / `mean_stutter_first_canvas`: over stuttering rows with a trajectory;
    - with `baseline_rows` (e.g. an AR run on the same items), matched on `sample_id`:
      `length_ratio_vs_<label>` = output tokens / the baseline's, summed over the shared items, and
      `terse_rate_vs_<label>` = share of shared items where the output is under half the baseline's length.
    """
    if not rows:
        return {}
    diags = [_diag(r) for r in rows]
    n = len(diags)
    lengths = [d["diag_output_tokens"] for d in diags]
    runs = [d["diag_longest_repeat"] for d in diags]
    out: dict[str, Any] = {
        "stutter_rate": sum(bool(d["diag_stutter"]) for d in diags) / n,
        "mean_output_tokens": sum(lengths) / n,
        "mean_longest_repeat": sum(runs) / n,
        "max_longest_repeat": max(runs),
        "mean_loop_fraction": sum(d["diag_loop_fraction"] for d in diags) / n,
        "mean_distinct_1": _mean([d["diag_distinct_1"] for d in diags if d["diag_distinct_1"] is not None]),
        "mean_distinct_2": _mean([d["diag_distinct_2"] for d in diags if d["diag_distinct_2"] is not None]),
    }
    for reason in FINISH_REASONS:
        out[f"finished_by_{reason}_rate"] = sum(d.get("finished_by") == reason for d in diags) / n
    if any("unclosed_thought" in r for r in rows):
        out["unclosed_thought_rate"] = sum(bool(r.get("unclosed_thought")) for r in rows) / n
    if formatted := [bool(r["format_ok"]) for r in rows if r.get("format_ok") is not None]:
        out["format_ok_rate"] = sum(formatted) / len(formatted)
        out["format_failures"] = len(formatted) - sum(formatted)
    origins = [d for d in diags if d.get("diag_stutter_step") is not None]
    if origins:
        out["mean_stutter_first_step"] = _mean([d["diag_stutter_step"] for d in origins])
        out["mean_stutter_first_canvas"] = _mean([d["diag_stutter_canvas"] for d in origins])
    if baseline_rows is not None:
        out.update(baseline_comparison(diags, baseline_rows, baseline_label))
    return out


def baseline_comparison(
    rows: Sequence[Mapping[str, Any]], baseline_rows: Sequence[Mapping[str, Any]], label: str = "ar"
) -> dict[str, float]:
    """`length_ratio_vs_<label>` and `terse_rate_vs_<label>` over the items both runs hold; `{}` if none."""
    base = {r["sample_id"]: len(r.get("token_ids") or []) for r in baseline_rows}
    pairs = [(len(r.get("token_ids") or []), base[r["sample_id"]]) for r in rows if r.get("sample_id") in base]
    if not pairs:
        return {}
    ours, theirs = sum(a for a, _ in pairs), sum(b for _, b in pairs)
    return {
        f"length_ratio_vs_{label}": ours / theirs if theirs else float("nan"),
        f"terse_rate_vs_{label}": sum(a < TERSE_FRACTION * b for a, b in pairs) / len(pairs),
    }
