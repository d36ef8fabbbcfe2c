"""`batch_check`: a run's subset re-decoded at batch 1 after the run, recorded in metrics.json (token agreement,
exact-match share, paired quality difference) from its own file; on in the report presets, off elsewhere."""

from __future__ import annotations

import json

import pytest

from harness.runner.batch_check import BatchCheckConfig, compare, subset
from tests.helpers.app import compose_app, run_app
from tests.test_report_presets import PRESETS


def test_compare_pools_positions_and_pairs_scores():
    run = [{"sample_id": "a", "token_ids": [1, 2, 3, 4], "correct": 1.0}, {"sample_id": "b", "token_ids": [5, 6]}]
    one = [{"sample_id": "a", "token_ids": [1, 2, 9], "correct": 0.0}, {"sample_id": "b", "token_ids": [5, 6]}]
    run[1]["correct"], one[1]["correct"] = 1.0, 1.0
    out = compare(run, one)
    assert out["token_agreement"] == pytest.approx(4 / 6)  # 2 of 4 positions of a (the longer output), 2 of 2 of b
    assert out["exact_match"] == 0.5 and out["quality_delta"] == pytest.approx(0.5)
    assert [i["identical"] for i in out["items"]] == [False, True]
    assert compare(run[1:], one[1:])["quality_delta"] == 0.0


def test_subset_spreads_over_the_items():
    assert subset(list(range(10)), 3) == [0, 3, 6] and subset([1, 2], 5) == [1, 2]


@pytest.mark.parametrize(
    "node,key",
    [
        ({"samples": -1}, "samples"),
        ({"samples": 1.5}, "samples"),
        ({"samples": True}, "samples"),
        ({"sample": 3}, "batch_check.sample"),
    ],
)
def test_bad_batch_check_config_names_the_key(node, key):
    with pytest.raises(ValueError, match=f"batch_check.{key}" if "." not in key else key):
        BatchCheckConfig.from_config(node, ev=None)


@pytest.mark.slow
def test_on_in_every_report_preset_and_its_twin_off_by_default():
    assert compose_app().batch_check.samples == 0
    for name in PRESETS:
        for preset in (name, f"twin/{name}"):
            assert compose_app(f"experiment={preset}").batch_check.samples > 0, preset


@pytest.mark.slow
def test_run_records_the_check_beside_its_samples_and_reuses_it(tiny_diffusion_dir, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": "x" * (1 + 7 * i)}) + "\n" for i in range(5)))
    args = [
        f"model.path={tiny_diffusion_dir}",
        f"eval.path={prompts}",
        "eval.max_new_tokens=16",
        "sampler.max_steps=3",
        "batch_size=3",
        "batch_check.samples=3",
        f"hydra.run.dir={tmp_path}/run",
    ]
    run_app(*args)
    run_dir = tmp_path / "run"
    check = json.loads((run_dir / "metrics.json").read_text())["batch_check"]
    # per-sample random streams on a tiny model: batch 3 gives batch 1's samples
    assert check["samples"] == 3 and check["decoded_now"] == 3 and check["batch_size"] == 3
    assert check["token_agreement"] == check["exact_match"] == 1.0
    assert [i["sample_id"] for i in check["items"]] == ["p0", "p1", "p3"]
    assert len((run_dir / "samples.jsonl").read_text().splitlines()) == 5
    assert len((run_dir / "batch_check.jsonl").read_text().splitlines()) == 3
    run_app(*args)  # a repeated run decodes nothing again, at batch 3 or at batch 1
    again = json.loads((run_dir / "metrics.json").read_text())["batch_check"]
    assert again["decoded_now"] == 0 and again["items"] == check["items"]
    assert len((run_dir / "batch_check.jsonl").read_text().splitlines()) == 3
    # one global random stream (reference mode) makes samples depend on their batch: the check sees it
    run_app(*args[:-1], "sampler.random_stream=reference", f"hydra.run.dir={tmp_path}/ref")
    ref = json.loads((tmp_path / "ref" / "metrics.json").read_text())["batch_check"]
    assert ref["exact_match"] < 1.0 and ref["token_agreement"] < 1.0


@pytest.mark.slow
def test_bad_batch_check_fails_before_the_model_loads(tmp_path):
    proc = run_app("batch_check.samples=-2", f"hydra.run.dir={tmp_path}/run", check=False, timeout=120)
    assert proc.returncode != 0 and "batch_check.samples" in proc.stderr and "Loading weights" not in proc.stderr
