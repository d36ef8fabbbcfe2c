"""experiment=sudoku_strategies (make strategies-sweep) and twin/parallelbench_strategies: every ported strategy has a
`fam` option that sweeps its main knob on the masked model; the Sudoku summary draws one front per (model, sampler)
beside the other samplers' runs (harness.analysis.strategies, harness.figures.strategies_plot), the twin's gives PBx
per strategy."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from omegaconf import OmegaConf

from harness.analysis.aup import aup_d3llm
from harness.analysis.strategies import strategy_table
from samplers.strategies import STRATEGIES
from tests.helpers.app import REPO, compose_app, run_app

# experiment -> (its fam options' prefix, the level key, its levels, the masked model)
SWEEPS = {
    "sudoku_strategies": ("masked_", "level", ("l1", "l2", "l3", "l4"), "sudoku6_masked"),
    "twin/parallelbench_strategies": ("pb_twin_masked_", "pb_level", ("p1", "p2", "p3", "p4", "p5"), "pb_twin_masked"),
}


@pytest.mark.parametrize("experiment", sorted(SWEEPS))
def test_every_strategy_is_swept_by_its_own_fam_option(experiment):
    cfg = OmegaConf.load(REPO / "conf" / "experiment" / f"{experiment}.yaml")
    fams = [f.strip() for f in cfg.hydra.sweeper.params.fam.split(",")]
    assert sorted(fams) == sorted(f"{SWEEPS[experiment][0]}{name}" for name in STRATEGIES)


@pytest.mark.slow  # 63 Hydra composes
@pytest.mark.parametrize("experiment", sorted(SWEEPS))
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_each_level_sets_the_strategys_knob_on_the_masked_model(name, experiment):
    prefix, key, levels, model = SWEEPS[experiment]
    seen = set()
    for level in levels:
        cfg = compose_app(f"experiment={experiment}", f"fam={prefix}{name}", f"{key}={level}")
        assert cfg.model.name == model and cfg.sampler.name == name
        knobs = OmegaConf.to_container(cfg.sampler, resolve=True)
        seen.add(tuple(sorted((k, str(v)) for k, v in knobs.items())))
        STRATEGIES[name](**{k: v for k, v in knobs.items() if k != "_target_"}).validate()
    assert len(seen) == len(levels), f"{name}: the levels do not change its knob"


def _row(sampler, tpf, quality, model="m", ev="e", n=100):
    return {"eval": ev, "model": model, "sampler": sampler, "tpf": tpf, "quality": quality, "num_samples": n}


def test_one_front_per_model_and_sampler_with_matched_tpf_and_aup():
    table = pd.DataFrame(
        [
            _row("wino", 2.0, 0.9),
            _row("wino", 6.0, 0.7),
            _row("wino", 3.0, 0.6),  # dominated by (6.0, 0.7)
            _row("low_confidence", 1.0, 0.95),
            _row("low_confidence", 4.5, 0.8),
            _row("entropy_bound", 8.0, 0.96, model="u"),
            _row("block_refinement", 5.0, 0.5, ev="other"),  # an eval without strategy runs: left out
        ]
    )
    st = strategy_table(table).set_index("sampler")
    assert set(st.index) == {"wino", "low_confidence", "entropy_bound"}
    wino = st.loc["wino"]
    assert wino["strategy"] and wino["runs"] == 3 and wino["front"] == "2:0.9 | 6:0.7"
    assert wino["best"] == 0.9 and wino["best_tpf"] == 2.0
    assert wino["q@4"] == 0.7 and wino["tpf@4"] == 6.0 and math.isnan(wino["q@8"])
    lo, hi = (float(x) for x in wino["q@4_ci"].strip("[]").split(","))
    assert lo < 0.7 < hi
    assert wino["aup_d3llm"] == pytest.approx(aup_d3llm([2.0, 6.0], [90.0, 70.0], 96.0))
    # front_area over [1, the eval's fastest TPF 8]: 0.9 up to 2, 0.7 up to 6, 0 to 8
    assert wino["front_area"] == pytest.approx((0.9 * 1 + 0.7 * 4) / 7)
    assert not st.loc["low_confidence", "strategy"] and st.loc["entropy_bound", "model"] == "u"


@pytest.mark.slow
def test_the_sweep_runs_and_its_summary_draws_the_strategy_fronts(tmp_path):
    from harness.figures.pareto import make_report

    run_app(
        "experiment=sudoku_strategies",
        "fam=masked_dparallel,masked_eb_sampler",
        "level=l1,l4",
        "eval.num_puzzles=6",
        "batch_size=6",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "hydra.callbacks={}",
        timeout=600,
    )
    report = make_report([tmp_path / "sweep"], tmp_path / "summary", html=False)
    st = pd.read_csv(tmp_path / "summary" / "strategies.csv")
    assert sorted(st["sampler"]) == ["dparallel", "eb_sampler"] and (st["runs"] == 2).all()
    assert any(p.name.startswith("strategies_") and p.suffix == ".png" for p in report.files)


@pytest.mark.slow
def test_the_twin_sweep_gives_pbx_per_strategy(tmp_path):
    sweep = tmp_path / "sweep"
    run_app(
        "-m",
        "experiment=twin/parallelbench_strategies",
        "fam=pb_twin_masked_klass,pb_twin_masked_eb_sampler",
        "eval.task=copy",
        "pb_level=p1,p5",
        "eval.num_samples=2",
        f"hydra.sweep.dir={sweep}",
        timeout=600,
    )
    pbx = pd.read_csv(sweep / "summary" / "parallelbench_pbx.csv")
    assert sorted(pbx["sampler"]) == ["eb_sampler", "klass"] and (pbx["settings"] == 2).all()
