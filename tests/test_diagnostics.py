"""Failure-mode diagnostics (evals.diagnostics) against hand counts, their wiring into rows, metrics, the
run table and the small-multiples figure, and the Sudoku low-step evidence on the shipped model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from contract.records import GenerationResult
from evals.diagnostics import (
    RUN_KEYS,
    distinct_n,
    first_stutter,
    has_loop,
    longest_repeat,
    loop_mask,
    run_diagnostics,
    sample_diagnostics,
)

REPO = Path(__file__).resolve().parents[1]  # the repo root, whatever the cwd of the test run
CKPT = "models/checkpoints/sudoku6_diffusion"  # shipped in git

# ---- hand-built token sequences ------------------------------------------------------------------------------


def test_run_of_five_identical_tokens():
    toks = [3, 4, 7, 7, 7, 7, 7, 5, 6]
    assert longest_repeat(toks) == (5, 7)
    assert loop_mask(toks) == [False, False, True, True, True, True, True, False, False]
    d = sample_diagnostics({"token_ids": toks})
    assert d["diag_longest_repeat"] == 5 and d["diag_repeat_token"] == 7
    assert d["diag_loop_tokens"] == 5 and d["diag_loop_fraction"] == pytest.approx(5 / 9)
    assert d["diag_stutter"] is True and d["diag_output_tokens"] == 9
    assert d["diag_distinct_1"] == pytest.approx(5 / 9)  # {3, 4, 7, 5, 6}
    assert d["diag_distinct_2"] == pytest.approx(5 / 8)  # 34 47 77 (x4) 75 56


def test_repeated_trigram_loop():
    toks = [9, 1, 2, 3, 1, 2, 3, 1, 2, 3, 8]  # "1 2 3" three times in a row
    assert loop_mask(toks) == [False] + [True] * 9 + [False]
    d = sample_diagnostics({"token_ids": toks})
    assert d["diag_longest_repeat"] == 1 and d["diag_loop_tokens"] == 9 and d["diag_stutter"] is True
    assert d["diag_distinct_1"] == pytest.approx(5 / 11)
    assert d["diag_distinct_2"] == pytest.approx(5 / 10)  # 91 12 23 31 38
    # only twice: no loop; a 4-gram three times is one; a 5-gram is beyond the loop length
    assert not has_loop([1, 2, 3, 1, 2, 3])
    assert sum(loop_mask([1, 2, 3, 4] * 3)) == 12
    assert not has_loop([1, 2, 3, 4, 5] * 3)


def test_no_repeats():
    toks = list(range(10))
    d = sample_diagnostics({"token_ids": toks})
    assert d["diag_longest_repeat"] == 1 and d["diag_loop_tokens"] == 0 and d["diag_stutter"] is False
    assert d["diag_distinct_1"] == d["diag_distinct_2"] == 1.0
    assert "diag_stutter_canvas" not in d  # no trajectory, no stutter origin
    empty = sample_diagnostics({"token_ids": []})
    assert empty["diag_longest_repeat"] == 0 and empty["diag_repeat_token"] is None
    assert empty["diag_distinct_1"] is None and empty["diag_loop_fraction"] == 0.0


def test_loop_edges():
    assert sum(loop_mask([1, 2] * 3 + [1])) == 6  # a trailing partial copy is not marked
    assert loop_mask([5, 5]) == [False, False]  # a pair is not a loop
    assert sum(loop_mask([5, 5, 5])) == 3
    assert sum(loop_mask([1, 2, 1, 2, 1, 2, 7, 7, 7, 7])) == 10  # two loops side by side
    # a valid 6x6 Sudoku solution (rows concatenated) holds no loop: any repeat in one is an error
    grid = "123456456123231564564231312645645312"
    assert not has_loop([int(c) for c in grid]) and longest_repeat([int(c) for c in grid])[0] <= 2
    assert distinct_n([1, 1], 2) == 1.0 and distinct_n([1], 2) is None


def _traj(canvases: list[list[list[int]]]) -> list[dict]:
    """Per canvas, the argmax canvas at each step."""
    return [
        {"canvas": c, "step": s, "argmax": argmax, "mean_entropy": 0.0}
        for c, steps in enumerate(canvases)
        for s, argmax in enumerate(steps)
    ]


def test_first_stutter_canvas_and_step():
    clean = [1, 2, 3, 4]
    # canvas 0 is clean; canvas 1 had a transient loop at step 0, then the loop that stayed from step 2 on
    traj = _traj(
        [
            [[4, 4, 4, 4], clean, clean],
            [[6, 6, 6, 1], [5, 6, 7, 8], [5, 9, 9, 9], [5, 9, 9, 9], [5, 9, 9, 9]],
        ]
    )
    out = clean + [5, 9, 9, 9]
    assert first_stutter(traj, out) == (1, 2)
    d = sample_diagnostics(GenerationResult("q", out, "", nfe=8, trajectory=traj))  # a result works as a row
    assert (d["diag_stutter_canvas"], d["diag_stutter_step"]) == (1, 2)
    # the output without a loop: no origin, even though step 0 of canvas 0 repeated a token
    assert first_stutter(traj[:3], clean) is None
    assert sample_diagnostics({"token_ids": clean, "trajectory": traj[:3]})["diag_stutter_step"] is None


def test_first_stutter_across_canvases_and_after_eos():
    # a loop completed across the canvas boundary belongs to canvas 1, from the step its "7 7" appeared
    traj = _traj([[[1, 2, 3, 7], [1, 2, 3, 7]], [[5, 6, 8, 9], [7, 6, 8, 9], [7, 7, 8, 9]]])
    assert first_stutter(traj, [1, 2, 3, 7, 7, 7, 8, 9]) == (1, 2)
    # positions past the output's end (padding after EOS) never count: [0, 0, 0] there is no stutter
    traj = _traj([[[1, 2, 1, 0, 0, 0]]])
    assert first_stutter(traj, [1, 2, 1]) is None
    assert sample_diagnostics({"token_ids": [1, 2, 1], "trajectory": traj})["diag_stutter"] is False


# ---- run figures -----------------------------------------------------------------------------------------------


def _row(sid: str, toks: list[int], finished_by: str = "eos", **kw) -> dict:
    row = {"sample_id": sid, "token_ids": toks, "finished_by": finished_by, **kw}
    return {**row, **sample_diagnostics(row)}


def test_run_diagnostics_by_hand():
    rows = [
        _row("a", [1, 1, 1, 1, 1, 2], "length"),  # stutters: run of 5
        _row("b", [1, 2, 3, 4]),
        _row("c", [1, 2, 1, 2, 1, 2], "stop"),  # stutters: bigram loop
        {"sample_id": "d", "token_ids": [5, 6], "finished_by": "eos"},  # stored before diagnostics: recomputed
    ]
    m = run_diagnostics(rows)
    assert set(RUN_KEYS) <= set(m)
    assert m["stutter_rate"] == 0.5
    assert m["mean_output_tokens"] == pytest.approx(18 / 4)
    assert m["mean_longest_repeat"] == pytest.approx((5 + 1 + 1 + 1) / 4) and m["max_longest_repeat"] == 5
    assert m["mean_loop_fraction"] == pytest.approx((5 / 6 + 0 + 1 + 0) / 4)
    assert m["mean_distinct_1"] == pytest.approx((2 / 6 + 1 + 2 / 6 + 1) / 4)
    assert (m["finished_by_eos_rate"], m["finished_by_stop_rate"], m["finished_by_length_rate"]) == (0.5, 0.25, 0.25)
    assert "unclosed_thought_rate" not in m and "length_ratio_vs_ar" not in m
    assert "mean_stutter_first_step" not in m  # no trajectories
    assert run_diagnostics([]) == {}


def test_run_diagnostics_thoughts_and_baseline():
    rows = [_row("a", [1] * 2, unclosed_thought=True), _row("b", [1, 2, 3, 4, 5, 6], unclosed_thought=False)]
    assert run_diagnostics(rows)["unclosed_thought_rate"] == 0.5
    ar = [_row("a", [1] * 10), _row("b", [1] * 6), _row("z", [1] * 100)]  # z: an item the run does not hold
    m = run_diagnostics(rows, baseline_rows=ar)
    assert m["length_ratio_vs_ar"] == pytest.approx(8 / 16)
    assert m["terse_rate_vs_ar"] == 0.5  # a: 2 < 0.5 * 10; b: 6 = 6
    assert "length_ratio_vs_mtp" in run_diagnostics(rows, baseline_rows=ar, baseline_label="mtp")
    assert "length_ratio_vs_ar" not in run_diagnostics(rows, baseline_rows=[_row("x", [1])])


def test_run_diagnostics_stutter_origin():
    traj = _traj([[[5, 6, 7], [5, 5, 5]]])
    rows = [
        _row("a", [5, 5, 5], trajectory=traj),
        _row("b", [5, 6, 7], trajectory=_traj([[[5, 6, 7]]])),
    ]
    m = run_diagnostics(rows)
    assert (m["mean_stutter_first_canvas"], m["mean_stutter_first_step"]) == (0, 1)
    assert not math.isnan(m["stutter_rate"]) and m["stutter_rate"] == 0.5


# ---- the run table and the figure ------------------------------------------------------------------------------


def test_summary_table_backfills_diagnostics_and_compares_with_ar(tmp_path):
    """Runs stored before diagnostics get them from samples.jsonl; `length_ratio_vs_ar` is per eval."""
    import pandas as pd

    from harness.analysis.aggregate import TABLE_FIGURE_COLUMNS, summarize
    from tests.helpers.runs import make_run_dir, make_sweep

    sweep = make_sweep(tmp_path)
    # another eval with no AR run: no ratio there
    make_run_dir(sweep, "other", [(6, 2, 1, [1])], eval_name="other", sampler={"name": "entropy_bound"})
    table, _, _ = summarize([sweep], tmp_path / "out")
    r = table.set_index("run_name")
    assert r.loc["b0.5", "mean_output_tokens"] == 12 and r.loc["ar", "mean_output_tokens"] == 16
    assert r.loc["b0.5", "length_ratio_vs_ar"] == pytest.approx(12 / 16)
    assert r.loc["ar", "length_ratio_vs_ar"] == 1.0 and r.loc["ar_mtp", "length_ratio_vs_ar"] == 1.0
    assert pd.isna(r.loc["other", "length_ratio_vs_ar"])
    assert (r["stutter_rate"] == 0).all()  # token ids 0..n-1: no repeats
    assert {"stutter_rate", "mean_output_tokens", "length_ratio_vs_ar"} <= set(TABLE_FIGURE_COLUMNS)
    csv = pd.read_csv(tmp_path / "out" / "summary.csv").set_index("run_name")
    assert csv.loc["b0.5", "length_ratio_vs_ar"] == pytest.approx(0.75) and "mean_distinct_2" in csv


def test_diagnostics_figure_series_per_family(tmp_path):
    import pandas as pd

    from harness.figures.pareto import diagnostics_figure

    base = {"model": "m", "eval": "e", "num_canvases": 4}
    table = pd.DataFrame(
        [
            {**base, "run_name": "s1", "label": "diffusion", "sampler": "entropy_bound", "tpf": 36.0},
            {**base, "run_name": "s48", "label": "diffusion", "sampler": "entropy_bound", "tpf": 8.0},
            {**base, "run_name": "ft", "label": "diffusion", "sampler": "confidence_threshold", "tpf": 12.0},
            {**base, "run_name": "ar", "label": "ar", "sampler": "ar", "tpf": 1.0, "num_canvases": 0},
        ]
    ).assign(
        stutter_rate=[0.13, 0.0, 0.02, 0.0],
        mean_output_tokens=[36.0, 36.0, 36.0, 40.0],
        step_cap_hit_rate=[1.0, 0.01, 0.2, 0.0],
        format_ok_rate=[0.6, 1.0, 0.9, 1.0],
    )
    fig = diagnostics_figure(table)
    stutter, length, cap, form = fig.axes
    lines = {ln.get_label(): ln for ln in stutter.lines}
    assert set(lines) == {"AR", "confidence_threshold", "entropy_bound"}
    assert list(lines["entropy_bound"].get_xdata()) == [8.0, 36.0]  # sorted by TPF, one line
    assert list(lines["entropy_bound"].get_ydata()) == [0.0, 0.13]
    assert lines["AR"].get_linestyle() == "None"  # a baseline is a marker
    assert {ln.get_label() for ln in cap.lines} == {"confidence_threshold", "entropy_bound"}  # AR has no canvases
    assert [ln.get_ydata()[0] for ln in length.lines if ln.get_label() == "AR"] == [40.0]
    formats = {ln.get_label(): ln for ln in form.lines}  # format success vs TPF, per family, AR included
    assert set(formats) == {"AR", "confidence_threshold", "entropy_bound"}
    assert list(formats["entropy_bound"].get_ydata()) == [1.0, 0.6] and "format success" in form.get_title()
    # a table without format figures (runs from before format_ok existed) says so in that panel
    empty = diagnostics_figure(table.drop(columns="format_ok_rate")).axes[3]
    assert [t.get_text() for t in empty.texts] == ["not recorded"]
    assert "e: failure modes" in fig._suptitle.get_text()
    no_diag = diagnostics_figure(table.drop(columns=["stutter_rate"]))
    assert [t.get_text() for t in no_diag.axes[0].texts] == ["not recorded"]


# ---- wiring: both row builders and both metric paths ------------------------------------------------------


@pytest.mark.slow
def test_lm_eval_rows_and_metrics_carry_diagnostics(tiny_diffusion_dir, adapter_factory, tmp_path):
    import json

    from evals.lmeval import LmEvalEval
    from harness.engine.decode import BlockDiffusionDecoder
    from harness.runner.store import ResultStore
    from samplers.config import EntropyBoundConfig

    data = tmp_path / "echo.jsonl"
    data.write_text("".join(json.dumps({"word": w}) + "\n" for w in ("alpha", "beta")))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    fixture = REPO / "tests" / "fixtures" / "lm_eval" / "echo_task.yaml"
    (tasks / "echo_task.yaml").write_text(fixture.read_text().replace("PLACEHOLDER", json.dumps(str(data))))
    dec = BlockDiffusionDecoder(adapter_factory(tiny_diffusion_dir), EntropyBoundConfig(max_steps=2))
    store = ResultStore(tmp_path / "run")
    ev = LmEvalEval(tasks=["dg_echo"], include_path=[str(tasks)], include_defaults=False, apply_chat_template=False)
    m = ev.run(dec, store, batch_size=2, seed=0)
    rows = list(store.load().values())
    assert all(r["diag_output_tokens"] == r["num_tokens"] for r in rows)
    assert m["stutter_rate"] == sum(r["diag_stutter"] for r in rows) / 2
    assert m["mean_output_tokens"] == pytest.approx(m["mean_tokens_per_sample"])
    assert m["unclosed_thought_rate"] == sum(r["unclosed_thought"] for r in rows) / 2
    scored = ev.scored_rows(store)
    assert all("diag_loop_fraction" in r for r in scored)


# ---- evidence on the shipped Sudoku model ----------------------------------------------------------------------


@pytest.mark.slow
def test_sudoku_stutter_rises_as_steps_fall(tmp_path):
    """60 held-out puzzles per `max_steps`: fewer denoising steps, more repeated digits (a valid grid has no
    repeat loop). Measured on 300 puzzles x 3 seeds: 12.7% / 3.0-4.3% / 0.7-1.0% / 0% at 1 / 2 / 4 / 48 steps."""
    from evals.sudoku import SudokuEval
    from harness import api
    from harness.runner.evaluate import run_items
    from harness.runner.store import ResultStore, read_samples

    ev = SudokuEval(size=6, path=str(REPO / "evals/sudoku/data/sudoku6_test.jsonl"), limit=60, name="sudoku6")
    items = ev.items()[:60]
    rates, metrics = {}, {}
    for steps in (1, 2, 4, 48):
        dec = api.load_decoder(str(REPO / CKPT), max_steps=steps, capture_trajectory=True)
        store = ResultStore(tmp_path / f"s{steps}")
        m = metrics[steps] = run_items(ev, dec, store, batch_size=60, seed=0, items=items)
        store.close()
        rows = read_samples(tmp_path / f"s{steps}")
        assert all("diag_stutter" in r and "diag_stutter_step" in r for r in rows)  # stored per sample
        assert m["stutter_rate"] == sum(r["diag_stutter"] for r in rows) / 60
        rates[steps] = m["stutter_rate"]
    assert rates[1] >= 0.05 and rates[1] > rates[2] >= rates[4] >= rates[48] == 0.0, rates
    assert all(m["mean_output_tokens"] == 36 and m["finished_by_length_rate"] == 1.0 for m in metrics.values())
    assert metrics[1]["mean_stutter_first_step"] == 0.0  # one step: the stutter is there from the first argmax
    assert metrics[1]["quality"] < metrics[48]["quality"]
