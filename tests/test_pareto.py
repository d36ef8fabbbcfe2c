"""Pareto fronts, area under the front, and the figures (checked through their artists and SVG text)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.aggregate import collect
from harness.fronts import annotate_fronts, area_under_front, front_mask
from harness.pareto import canvas_evolution_figure, make_report, pareto_figure, steps_histogram_figure
from tests.helpers.runs import make_sweep


def test_front_mask_maximizes_both():
    x = [1, 4, 10, 3, 4, 4, np.nan, 10]
    y = [0.8, 0.6, 0.3, 0.5, 0.6, 0.2, 0.9, 0.1]
    # (3, .5) is dominated by (4, .6); the duplicate (4, .6) counts once; (4, .2) and (10, .1) are dominated
    assert front_mask(x, y).tolist() == [True, True, True, False, False, False, False, False]


def test_area_under_front_by_hand():
    tpf, q = [1, 4, 10, 3], [0.8, 0.6, 0.3, 0.5]
    # f = .8 at x<=1, .6 on (1,4], .3 on (4,10], 0 beyond: over [1, 11] -> (3*.6 + 6*.3 + 1*0) / 10
    assert area_under_front(tpf, q, 1, 11) == pytest.approx(0.36)
    # over [2, 5]: 2*.6 + 1*.3 = 1.5, / 3
    assert area_under_front(tpf, q, 2, 5) == pytest.approx(0.5)
    # below the slowest run, the best quality is reachable: [0, 1] -> .8
    assert area_under_front(tpf, q, 0, 1) == pytest.approx(0.8)
    # a dominated run changes nothing; a better one raises it
    assert area_under_front(tpf + [2], q + [0.1], 1, 11) == pytest.approx(0.36)
    assert area_under_front(tpf + [10], q + [0.4], 1, 11) == pytest.approx(0.42)
    with pytest.raises(ValueError):
        area_under_front(tpf, q, 3, 3)


def test_annotate_fronts_per_model_and_eval(tmp_path):
    table, fronts = annotate_fronts(collect([make_sweep(tmp_path)]))
    on = dict(zip(table["run_name"], table["on_front"]))
    assert on == {"ar": False, "ar_mtp": True, "b0.05": True, "b0.1": True, "b0.5": True}
    f = fronts.set_index("model")
    # tiny: f = 1 on [1, 16/7], .5 on (16/7, 4], 0 on (4, 6]; range [1, largest TPF on the eval = 6]
    assert f.loc["tiny", "aup"] == pytest.approx((16 / 7 - 1 + 0.5 * (4 - 16 / 7)) / 5)
    assert (f.loc["tiny", "tpf_min"], f.loc["tiny", "tpf_max"]) == (1.0, 6.0)
    assert f.loc["ar-base", "aup"] == pytest.approx((16 * 2 / 23 - 1) / 5)
    assert f.loc["tiny", "front_runs"] == 3
    fixed, _ = annotate_fronts(collect([tmp_path]), tpf_range=(1.0, 4.0))
    assert fixed.set_index("run_name").loc["b0.1", "aup"] == pytest.approx((16 / 7 - 1 + 0.5 * (4 - 16 / 7)) / 3)


def test_pareto_figure_series(tmp_path):
    table, _ = annotate_fronts(collect([make_sweep(tmp_path)]))
    fig = pareto_figure(table, "tpf")
    ax = fig.axes[0]
    series = {c.get_label(): np.asarray(c.get_offsets()).ravel().tolist() for c in ax.collections}
    assert series["tiny · diffusion"] == pytest.approx([16 / 7, 1.0, 4.0, 0.5, 6.0, 0.0])
    assert series["ar-base · AR"] == pytest.approx([1.0, 1.0])
    assert series["ar-base · AR+MTP"] == pytest.approx([32 / 23, 1.0])
    # baselines and diffusion use distinct markers
    shapes = {c.get_label(): len(c.get_paths()[0].vertices) for c in ax.collections}
    assert len({shapes["tiny · diffusion"], shapes["ar-base · AR"], shapes["ar-base · AR+MTP"]}) == 3
    fronts = {ln.get_label(): ln for ln in ax.lines}
    tiny = next(ln for lbl, ln in fronts.items() if lbl.startswith("front: tiny (AUP 0.429 over TPF 1-6)"))
    assert tiny.get_drawstyle() == "steps-pre"
    assert list(tiny.get_xdata()) == pytest.approx([16 / 7, 4.0, 6.0])
    assert sorted(t.get_text() for t in ax.texts) == ["AR", "AR+MTP", "b=0.05", "b=0.1", "b=0.5"]
    assert ax.get_xlabel() == "tokens per forward (TPF)" and ax.get_ylabel() == "quality (prompts)"
    tps = pareto_figure(table, "tokens_per_second").axes[0]
    assert tps.get_xlabel() == "tokens / s"
    assert not any("AUP" in ln.get_label() for ln in tps.lines)


def test_steps_histogram_marks_the_cap():
    rows = [{"steps_per_canvas": [2, 4, 4], "step_cap_hits": 2}, {"steps_per_canvas": [1], "step_cap_hits": 0}]
    ax = steps_histogram_figure(rows, cap=4, title="t").axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert sum(heights) == 4 and max(heights) == 2
    assert any("step cap 4: 2 of 4 canvases hit it (50.0%)" == ln.get_label() for ln in ax.lines)
    assert steps_histogram_figure([{"steps_per_canvas": []}], cap=None, title="ar") is None


def test_canvas_evolution_marks_changed_tokens():
    traj = [
        {"canvas": 0, "step": 0, "argmax": [5, 6, 7], "mean_entropy": 2.0},
        {"canvas": 0, "step": 1, "argmax": [5, 1, 7], "mean_entropy": 1.0},
        {"canvas": 1, "step": 0, "argmax": [5, 1, 7], "mean_entropy": 3.0},
        {"canvas": 1, "step": 1, "argmax": [5, 1, 2], "mean_entropy": 0.5},
    ]
    fig = canvas_evolution_figure({"trajectory": traj}, "t")
    img = fig.axes[0].images[0].get_array()
    assert np.asarray(img).tolist() == [[1, 1, 1], [0, 1, 0], [1, 1, 1], [0, 0, 1]]
    ent = fig.axes[1].lines
    assert [list(ln.get_xdata()) for ln in ent[:2]] == [[2.0, 1.0], [3.0, 0.5]]
    assert canvas_evolution_figure({"trajectory": None}, "t") is None


@pytest.mark.slow
def test_make_report_writes_every_figure(tmp_path):
    sweep = make_sweep(tmp_path)
    report = make_report([sweep], tmp_path / "plots")
    names = {p.relative_to(tmp_path / "plots").as_posix() for p in report.files}
    for stem in (
        "pareto_prompts_tpf",
        "pareto_prompts_tokens_per_second",
        "runs/b0.05_steps",
        "runs/b0.5_steps",
        "runs/b0.05_canvas_q0",
    ):
        assert {f"{stem}.png", f"{stem}.svg"} <= names
    assert not any(n.startswith(("runs/ar_", "runs/b0.1_canvas")) for n in names)  # no steps for AR, no trajectory
    assert all(p.stat().st_size > 1000 for p in report.files if p.suffix in (".png", ".svg"))
    assert (tmp_path / "plots" / "pareto_prompts_tpf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "plots" / "pareto_prompts_tpf.svg").read_text()
    assert "front: tiny (AUP 0.429" in svg and "b=0.1" in svg and "AR+MTP" in svg
    assert "step cap 4: 2 of 4 canvases hit it" in (tmp_path / "plots" / "runs" / "b0.05_steps.svg").read_text()
    assert [p.name for p in report.pareto_pngs] == ["pareto_prompts_tpf.png", "pareto_prompts_tokens_per_second.png"]


def test_plot_labels_spell_knobs_as_run_names():
    """One knob vocabulary (samplers.knobs): a point label and a run name spell each knob the same way."""
    import pandas as pd

    from harness.pareto import point_label
    from samplers.knobs import label_part, run_name_part

    row = pd.Series(
        {
            "label": "diffusion",
            "sampler.max_steps": 8,
            "sampler.entropy_bound": 0.3,
            "sampler.remask_ratio": 0.1,
            "sampler.stop_entropy": np.nan,
        }
    )
    knobs = ["sampler.max_steps", "sampler.entropy_bound", "sampler.remask_ratio", "sampler.stop_entropy"]
    assert point_label(row, knobs) == "n=8 b=0.3 rm=0.1"
    assert [run_name_part(k, v) for k, v in (("max_steps", 8), ("entropy_bound", 0.3), ("stop_entropy", 0.01))] == [
        "n8",
        "b0.3",
        "stop_entropy0.01",
    ]
    assert label_part("threshold", 0.90) == "thr=0.9"


def _two_runs_one_broken(root):
    from tests.helpers.runs import make_run_dir

    sweep = root / "sweep"
    make_run_dir(sweep, "ok", [(16, 4, 1, [2, 2])], sampler={"name": "entropy_bound", "max_steps": 4})
    bad = make_run_dir(sweep, "bad", [(16, 8, 1, [4, 4])], sampler={"name": "entropy_bound", "max_steps": 4})
    (bad / "metrics.json").write_text('{"quality": 1.0, "tpf": 2.')  # truncated
    return sweep, (bad / "metrics.json").resolve()


def test_pareto_cli_lists_a_broken_run_and_plots_the_others(tmp_path, capsys):
    """Issue 16 item 10: `python -m harness.pareto` crashed on one truncated metrics.json."""
    from harness.pareto import main

    sweep, broken = _two_runs_one_broken(tmp_path)
    main([str(sweep), "--out", str(tmp_path / "plots")])
    out = capsys.readouterr().out
    assert f"{broken}:1: not valid JSON" in out and "1 broken run(s), not in the table" in out
    assert (tmp_path / "plots" / "pareto_prompts_tpf.png").exists()


def test_sweep_end_summary_survives_broken_runs(tmp_path, capsys):
    """The sweep-end callback lists broken runs and summarizes the rest; with none readable it logs nothing."""
    from omegaconf import OmegaConf

    from harness.callbacks import SweepSummary

    sweep, broken = _two_runs_one_broken(tmp_path)
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}})
    SweepSummary().on_multirun_end(config)
    out = capsys.readouterr().out
    assert f"{broken}:1: not valid JSON" in out and "wrote" in out
    assert (sweep / "summary" / "summary.csv").exists()
    (sweep / "ok" / "metrics.json").write_text("")
    SweepSummary(subdir="again").on_multirun_end(config)
    out = capsys.readouterr().out
    assert "2 broken run(s)" in out and "no readable finished runs" in out
