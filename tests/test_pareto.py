"""Pareto fronts, area under the front, and the figures (checked through their artists and SVG text)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from contract.intervals import wilson_interval
from harness.analysis.aggregate import collect
from harness.analysis.fronts import annotate_fronts, area_under_front, front_mask
from harness.figures.pareto import canvas_evolution_figure, make_report, pareto_figure, steps_histogram_figure
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
    assert f.loc["tiny", "front_area"] == pytest.approx((16 / 7 - 1 + 0.5 * (4 - 16 / 7)) / 5)
    assert (f.loc["tiny", "tpf_min"], f.loc["tiny", "tpf_max"]) == (1.0, 6.0)
    assert f.loc["ar-base", "front_area"] == pytest.approx((16 * 2 / 23 - 1) / 5)
    assert f.loc["tiny", "front_runs"] == 3
    # the leaderboard's AUP of each front, y_max = the eval's best quality (100%) for both models: tiny's front is
    # (16/7, 100%), (4, 50%), (6, 0%); the two slower-by-quality points are > 5 points below the first: dropped
    assert f.loc["tiny", "aup_d3llm"] == pytest.approx(16 / 7 * 100)
    assert f.loc["ar-base", "aup_d3llm"] == pytest.approx(32 / 23 * 100)  # AR+MTP's point; AR is dominated
    assert f["aup_y_max"].tolist() == [100.0, 100.0]
    assert table.set_index("run_name").loc["b0.5", "aup_d3llm"] == pytest.approx(16 / 7 * 100)  # its model's
    fixed, _ = annotate_fronts(collect([tmp_path]), tpf_range=(1.0, 4.0))
    b01 = fixed.set_index("run_name").loc["b0.1"]
    assert b01["front_area"] == pytest.approx((16 / 7 - 1 + 0.5 * (4 - 16 / 7)) / 3)
    assert b01["aup_d3llm"] == pytest.approx(16 / 7 * 100)  # the TPF range is front_area's alone


def _containers(fig):
    """Every errorbar container of a Pareto figure: (axes, container) pairs (one per series and panel)."""
    return [(ax, c) for ax in fig.axes for c in ax.containers]


def _plotted_points(fig) -> list[tuple[float, float, float, float]]:
    """(x, y, bar bottom, bar top) of every plotted point, read from the errorbar artists themselves."""
    out = []
    for _, c in _containers(fig):
        data, _caps, barcols = c.lines  # the markers, the caps, the (horizontal and) vertical bars
        bars = barcols[-1]
        xy = data.get_xydata()
        segments = bars.get_segments()
        assert len(segments) == len(xy)  # one bar per point
        for (px, py), seg in zip(xy, segments):
            (x0, y0), (x1, y1) = seg
            assert x0 == pytest.approx(px) and x1 == pytest.approx(px) and min(y0, y1) <= py <= max(y0, y1)
            out.append((px, py, min(y0, y1), max(y0, y1)))
    return out


def test_pareto_figure_series(tmp_path):
    table, _ = annotate_fronts(collect([make_sweep(tmp_path)]))
    fig = pareto_figure(table, "tpf")
    (ax,) = fig.axes  # all runs in one quality band: no broken axis
    series = {c.get_label(): c.lines[0].get_xydata().ravel().tolist() for _, c in _containers(fig)}
    assert series["_tiny·entropy_bound"] == pytest.approx([16 / 7, 1.0, 4.0, 0.5, 6.0, 0.0])
    assert series["_ar-base·ar"] == pytest.approx([1.0, 1.0])
    assert series["_ar-base·ar+mtp"] == pytest.approx([32 / 23, 1.0])
    # a marker shape per decoder kind, a colour per family (baselines grey)
    markers = {c.get_label(): c.lines[0].get_marker() for _, c in _containers(fig)}
    assert (markers["_tiny·entropy_bound"], markers["_ar-base·ar"], markers["_ar-base·ar+mtp"]) == ("o", "s", "^")
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    # front area per series: each family's own front over the model's range [1, 6]; both areas per model, named
    eb = area_under_front([16 / 7, 4, 6], [1, 0.5, 0], 1, 6)
    assert f"entropy bound  (front area {eb:.3f})" in legend and "AR  (front area 0.000)" in legend
    assert "front: tiny (front area 0.429 over TPF 1-6 · AUP(d3LLM) 228.6, y_max 100)" in legend
    assert "bars: Wilson 95% interval (n=2 samples per run)" in legend
    fronts = [ln for ln in ax.lines if ln.get_label().startswith("front: tiny")]
    assert fronts[0].get_drawstyle() == "steps-pre"
    assert list(fronts[0].get_xdata()) == pytest.approx([16 / 7, 4.0, 6.0])
    # labels: the one knob that varies within the entropy-bound family; baselines by kind
    assert sorted(t.get_text() for t in ax.texts) == ["AR", "AR+MTP", "b=0.05", "b=0.1", "b=0.5"]
    assert ax.get_xlabel() == "tokens per forward (TPF)" and fig.get_supylabel() == "quality (prompts)"
    assert not any(ln.get_linestyle() == "--" for ln in ax.lines)  # no default run in this sweep: no default line
    tps = pareto_figure(table, "tokens_per_second")
    assert tps.axes[-1].get_xlabel() == "tokens / s"
    assert not any("AUP" in t.get_text() or "area" in t.get_text() for t in tps.legends[0].get_texts())


def _crowded_table():
    """A sweep shaped like `make sweep`'s: four sampler families crowded into a small TPF x quality box, the
    default sampler among them, two baselines far below (so the y-axis breaks), 200 samples per run."""

    from harness.analysis.dominance import default_knobs

    ref = {f"sampler.{k}": v for k, v in default_knobs().items() if k != "name"}
    rows = []

    def add(name, label, sampler, tpf, quality, **knobs):
        rows.append(
            {
                **(ref if label == "diffusion" else {}),
                **{f"sampler.{k}": v for k, v in knobs.items()},
                "run_name": name,
                "label": label,
                "model": "dg" if label == "diffusion" else f"{label}-model",
                "eval": "sudoku",
                "sampler": sampler,
                "tpf": tpf,
                "tokens_per_second": 400 * tpf,
                "quality": quality,
                "num_samples": 200,
            }
        )

    for i, b in enumerate((0.03, 0.1, 0.3, 1.0, 3.0)):
        for j, n in enumerate((48, 8, 4)):
            add(
                f"b{b}-n{n}",
                "diffusion",
                "entropy_bound",
                6.8 + 1.6 * j + 0.03 * i,
                0.955 - 0.005 * i - 0.04 * j,
                entropy_bound=b,
                max_steps=n,
            )
    for k, q in ((3, 0.955), (6, 0.945), (12, 0.935)):
        add(f"k{k}", "diffusion", "confidence_topk", 6.85, q, tokens_per_step=k)
    for t, q in ((0.5, 0.905), (0.8, 0.925), (0.95, 0.945)):
        add(f"thr{t}", "diffusion", "confidence_threshold", 6.3 + t / 3, q, threshold=t)
    for rm, q in ((0.1, 0.95), (0.3, 0.96)):
        add(f"rm{rm}", "diffusion", "entropy_bound", 6.7, q, remask_ratio=rm)
    add("ar", "ar", "ar", 1.0, 0.24)
    add("ar_draft", "ar+draft", "ar+draft", 3.56, 0.24)
    table, _ = annotate_fronts(pd.DataFrame(rows))
    return table


@pytest.mark.slow
def test_crowded_pareto_labels_never_overlap_and_every_point_has_its_wilson_bar(tmp_path):
    """Issue 15 'done when': the rendered label boxes do not intersect, and every plotted point has an error bar
    (its Wilson 95% interval, checked against scipy's)."""
    import io

    from scipy.stats import binomtest

    from harness.figures.plot_labels import overlapping_pairs

    table = _crowded_table()
    for x in ("tpf", "tokens_per_second"):
        fig = pareto_figure(table, x)
        fig.savefig(io.BytesIO(), format="png", dpi=fig.dpi)  # render exactly as the saved PNG
        renderer = fig.canvas.get_renderer()
        texts = [t for ax in fig.axes for t in ax.texts]
        assert overlapping_pairs(texts, renderer) == []
        shown = sorted(t.get_text() for t in texts if t.get_visible())
        assert len(shown) == len(table)  # no label had to be left out
        assert not any("left out" in t.get_text() for t in fig.texts)  # ... so no note says so
        for ax in fig.axes:  # labels stay inside their panel
            frame = ax.get_window_extent(renderer)
            for t in ax.texts:
                box = t.get_window_extent(renderer)
                assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        points = _plotted_points(fig)
        assert len(points) == len(table)
        for _, py, lo, hi in points:
            ci = binomtest(round(py * 200), 200).proportion_ci(method="wilson")
            assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-9)
        assert len(fig.axes) == 2  # baselines at 0.24, diffusion above 0.8: the y-axis is broken between them
        assert max(fig.axes[1].get_ylim()) < 0.5 < min(fig.axes[0].get_ylim())
    # labels state only the knobs that vary within the family
    assert {"rm=0.1", "rm=0.3", "k=3", "thr=0.95", "b=3 n=4", "default b=0.1 n=48", "AR", "AR+draft"} <= set(shown)
    assert not any(s.startswith(("k=", "thr=", "rm=")) and " " in s for s in shown)


def test_the_default_is_starred_with_a_dashed_line_and_dominating_runs_are_ringed():
    table = _crowded_table()
    fig = pareto_figure(table, "tpf")
    top = fig.axes[0]
    stars = [c.lines[0] for _, c in _containers(fig) if c.lines[0].get_marker() == "*"]
    assert len(stars) == 1 and stars[0].get_xydata().tolist() == [[6.8 + 0.03, 0.95]]  # b=0.1 n=48
    dashed = [ln for ln in top.lines if ln.get_linestyle() == "--"]
    assert [ln.get_ydata()[0] for ln in dashed] == [0.95]
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert "default quality: 0.950 [0.910, 0.973]" in legend
    rings = [c for c in top.collections if c.get_gid() == "dominates_default"]
    assert not rings and "dominates the default" not in legend  # no dominance column: nothing ringed
    # issue 13's column, where present: those runs get a red ring
    marked = table.assign(dominates_default=table["run_name"].isin(["rm0.3", "k3"]))
    fig = pareto_figure(marked, "tpf")
    (ring,) = [c for c in fig.axes[0].collections if c.get_gid() == "dominates_default"]
    assert sorted(map(tuple, ring.get_offsets().tolist())) == [(6.7, 0.96), (6.85, 0.955)]
    assert "dominates the default" in {t.get_text() for t in fig.legends[0].get_texts()}
    # faster at no quality loss (harness.analysis.dominance's faster_not_worse): a dashed green ring of its own
    quick = table.assign(faster_not_worse=table["run_name"] == "rm0.3")
    fig = pareto_figure(quick, "tpf")
    (ring,) = [c for c in fig.axes[0].collections if c.get_gid() == "faster_not_worse"]
    assert ring.get_offsets().tolist() == [[6.7, 0.96]]
    assert not [c for c in fig.axes[0].collections if c.get_gid() == "dominates_default"]


def test_plot_points_families_default_and_intervals():

    from contract.intervals import wilson_interval
    from harness.analysis.dominance import default_knobs
    from harness.figures.plot_points import family_name, is_default, plot_points

    ref = {f"sampler.{k}": v for k, v in default_knobs().items() if k != "name"}
    base = {"label": "diffusion", "sampler": "entropy_bound", "eval": "e", "model": "m", "num_samples": 200}
    assert is_default({**base, **ref})
    for knob, value in (("entropy_bound", 0.3), ("max_steps", 8), ("remask_ratio", 0.1), ("t_min", 0.5)):
        assert not is_default({**base, **ref, f"sampler.{knob}": value}), knob
    assert not is_default({**base, **ref, "label": "ar"})
    assert not is_default({**base, **ref, "sampler": "confidence_topk"})
    # where the dominance test named its reference run, that run is the default (one definition for star and ring)
    assert is_default({**base, "run_name": "r", "reference_run": "r"})
    assert not is_default({**base, **ref, "run_name": "twin", "reference_run": "r"})
    lo, hi = wilson_interval(0.945, 200)  # the 200 puzzles: SE ~1.6 points, a 95% interval ~+-3.2
    assert (round(lo, 4), round(hi, 4)) == (0.9042, 0.969)
    assert wilson_interval(0.0, 10)[0] == pytest.approx(0.0) and wilson_interval(1.0, 10)[1] == pytest.approx(1.0)
    assert all(np.isnan(v) for v in wilson_interval(1.5, 10) + wilson_interval(0.5, 0))
    table = pd.DataFrame(
        [
            {**base, **ref, "run_name": "default", "quality": 0.945},
            {**base, **ref, "run_name": "rm", "quality": 0.96, "sampler.remask_ratio": 0.3},
            {**base, **ref, "run_name": "b", "quality": 0.95, "sampler.entropy_bound": 0.03, "sampler.draw": "exact"},
            {"label": "ar+mtp", "sampler": "ar+mtp", "eval": "e", "model": "ar", "quality": 0.9, "num_samples": 200},
        ]
    )
    pts = plot_points(table).set_index("run_name")
    assert pts["family"].tolist() == ["entropy_bound", "entropy_bound+remask", "entropy_bound", "ar+mtp"]
    assert family_name("entropy_bound+remask") == "entropy bound + remask" and family_name("ar+mtp") == "AR+MTP"
    assert pts["is_default"].tolist() == [True, False, False, False]
    # the remask family has one run: nothing varies in it, so no knob is printed; draw is not a knob worth a label
    assert pts["point_label"].tolist() == ["b=0.1", "", "b=0.03", "AR+MTP"]
    assert pts.loc["default", ["quality_lo", "quality_hi"]].tolist() == pytest.approx([lo, hi])
    assert not pts["dominates_default"].any()


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
    assert "front: tiny (front area 0.429" in svg and "AUP(d3LLM) 228.6" in svg and "b=0.1" in svg and "AR+MTP" in svg
    assert "step cap 4: 2 of 4 canvases hit it" in (tmp_path / "plots" / "runs" / "b0.05_steps.svg").read_text()
    assert [p.name for p in report.pareto_pngs] == ["pareto_prompts_tpf.png", "pareto_prompts_tokens_per_second.png"]
    # the interactive twin: the same points (with their intervals and knobs on hover), plotly.js beside it
    html = (tmp_path / "plots" / "pareto_prompts_tpf.html").read_text()
    assert {"pareto_prompts_tpf.html", "pareto_prompts_tokens_per_second.html", "plotly.min.js"} <= names
    assert 'src="plotly.min.js"' in html and "b0.05" in html and "Wilson 95%" in html
    # the table the figures were drawn from, written with their point columns
    csv = pd.read_csv(tmp_path / "plots" / "summary.csv").set_index("run_name")
    assert csv.loc["b0.1", "family"] == "entropy_bound" and csv.loc["ar_mtp", "point_label"] == "AR+MTP"
    assert csv.loc["b0.1", "quality_lo"] == pytest.approx(wilson_interval(0.5, 2)[0])
    # canvases per step count, per run (the W&B summary draws its step histograms from it)
    steps = report.steps.set_index(["run_name", "steps"])["canvases"].to_dict()
    assert steps == {("b0.05", 3): 2, ("b0.05", 4): 2, ("b0.1", 2): 4, ("b0.5", 1): 4}


def test_plot_labels_spell_knobs_as_run_names():
    """One knob vocabulary (samplers.knobs): a point label and a run name spell each knob the same way."""

    from harness.figures.plot_points import point_label
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


@pytest.mark.slow
def test_pareto_cli_lists_a_broken_run_and_plots_the_others(tmp_path, capsys):
    """Issue 16 item 10: `python -m harness.pareto` crashed on one truncated metrics.json."""
    from harness.figures.pareto import main

    sweep, broken = _two_runs_one_broken(tmp_path)
    main([str(sweep), "--out", str(tmp_path / "plots")])
    out = capsys.readouterr().out
    assert f"{broken}:1: not valid JSON" in out and "1 broken run(s), not in the table" in out
    assert (tmp_path / "plots" / "pareto_prompts_tpf.png").exists()


@pytest.mark.slow
def test_sweep_end_summary_survives_broken_runs(tmp_path, capsys):
    """The sweep-end callback lists broken runs and summarizes the rest; with none readable it logs nothing."""
    from omegaconf import OmegaConf

    from harness.tracking.callbacks import SweepSummary

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


@pytest.mark.parametrize("n", [12, 100, 200])
def test_wilson_interval_holds_a_rate_of_zero_or_one(n):
    """At p = 0 or 1 rounding once put the interval's end past p: a negative error bar that matplotlib refuses."""
    from contract.intervals import wilson_interval

    for p in (0.0, 1.0):
        lo, hi = wilson_interval(p, n)
        assert lo <= p <= hi and 0.0 <= lo and hi <= 1.0
