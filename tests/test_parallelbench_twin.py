"""experiment=parallelbench and its CPU twin: the GPU preset composes for the released models and refuses to start
without ParallelBench's data, naming the key; a cut-down twin runs end to end (real Hydra, the tiny models) and its
summary has PBx per family, each task's score with an interval, the decode-order figures, the matched-speed table and
the figure, and W&B's summary run the PBx table."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.helpers.app import compose_app, run_app
from tests.helpers.wandb_offline import find_offline_runs, read_offline_run


@pytest.mark.slow  # 20 Hydra composes
def test_gpu_preset_composes_for_the_released_models():
    cfg = compose_app("experiment=parallelbench", with_hydra=True)
    params = cfg.hydra.sweeper.params
    assert len(params["eval.task"].split(",")) == 17
    models = {compose_app("experiment=parallelbench", f"fam={f}").model.name for f in params.fam.split(",")}
    assert models == {"diffusiongemma_26b", "llada2_mini", "sdar", "gemma4_ar"}
    for fam, knob in (
        ("pb_diffusiongemma", "entropy_bound"),
        ("pb_llada2_mini", "threshold"),
        ("pb_sdar", "threshold"),
    ):
        values = {
            compose_app("experiment=parallelbench", f"fam={fam}", f"pb_level={p}").sampler[knob]
            for p in params.pb_level.split(",")
        }
        assert len(values) == 5, fam  # each family's parallelism knob really moves


@pytest.mark.slow  # a real `python -m harness.run` subprocess
def test_gpu_preset_without_data_fails_before_loading_naming_the_key():
    proc = run_app("experiment=parallelbench", "hydra.mode=RUN", "fam=pb_tiny_masked", check=False)
    assert proc.returncode != 0 and "eval.data_dir" in proc.stderr


@pytest.mark.slow  # a Hydra multirun and its sweep summary (62 s on the busy 2-core machine)
def test_twin_runs_end_to_end_with_pbx_scores_and_decode_order(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_app(
        "-m",
        "experiment=twin/parallelbench",
        f"hydra.sweep.dir={sweep}",
        "eval.num_samples=2",
        "eval.task=copy,shuffle",
        "pb_level=p1,p3",
        "logger=wandb",  # offline (tests.helpers.app): the sweep's summary run gets the PBx table and the figure
        timeout=600,
    )
    assert "ParallelBench (PBx" in proc.stdout
    pbx = pd.read_csv(sweep / "summary" / "parallelbench_pbx.csv")
    assert set(pbx["label"]) == {"diffusion", "masked", "ar", "ar+draft"} and (pbx["tasks"] == 2).all()
    assert set(pbx[pbx["label"].isin(["diffusion", "masked"])]["settings"]) == {2}
    assert "ParallelBench at matched tokens-per-step" in proc.stdout
    assert (sweep / "summary" / "parallelbench.png").is_file()
    (path,) = find_offline_runs(sweep / "summary" / "wandb")
    summary = read_offline_run(path, wait_s=20.0)
    assert summary.table("parallelbench")["PB80"].tolist() == pbx["PB80"].tolist()
    for path in sweep.glob("*/metrics.json"):
        m = json.loads(path.read_text())
        assert m["pb_task"] in ("waiting_line/copy", "waiting_line/shuffle")
        assert m["quality_lo"] <= m["quality"] <= m["quality_hi"]
        assert ("mean_order_l2r" in m) == (m["run"]["label"] in ("diffusion", "masked"))
        rows = [json.loads(line) for line in (path.parent / "samples.jsonl").read_text().splitlines()]
        assert all(r["meta"]["reference"] is not None and "text" in r for r in rows)
    from harness.export.__main__ import export  # the export command's parallelbench target on the same sweep

    files = export(["parallelbench", str(sweep), "--out", str(tmp_path / "pb")])
    boards = [json.loads(f.read_text()) for f in files if f.parent.name == "leaderboard"]
    assert boards and all(b["thresholds"] == [80, 75, 70] for b in boards)
