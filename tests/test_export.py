"""Exports (`python -m harness.export FORMAT PATH`) of real runs: a `make sweep`-style sweep of the shipped Sudoku
models and an lm-eval run. Every Eval Ever records validate with the package's own schema
(tests/fixtures/every_eval_ever); the d3LLM rows carry the AUP the sweep summary prints, recounted from the samples;
Hugging Face `.eval_results` files name their benchmark; a run whose metrics.json disagrees with its samples is
refused."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from harness.export.__main__ import export

SCHEMA = Path(__file__).parent / "fixtures" / "every_eval_ever" / "eval.schema.json"
SWEEP = (["sampler.max_steps=1"], ["sampler.max_steps=2"], ["sampler.max_steps=3"])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Three points of `make sweep`'s denoising-steps axis and its AR baseline, on 6 held-out puzzles."""
    from harness.run import run
    from tests.helpers.app import compose_app

    out = tmp_path_factory.mktemp("sudoku_sweep")
    configs = [compose_app("experiment=sudoku_sweep", "eval.num_puzzles=6", "batch_size=6", *ov) for ov in SWEEP]
    configs.append(compose_app("experiment=sudoku_baselines", "model=sudoku6_ar", "eval.num_puzzles=6", "batch_size=6"))
    for cfg in configs:
        run(cfg, out / cfg.run_name)
    return out


def _validate(path: Path) -> dict:
    record = json.loads(path.read_text())
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(record)
    return record


def test_eee_records_of_a_sweep_validate_with_the_package_schema(sweep, tmp_path):
    files = export(["eee", str(sweep), "--out", str(tmp_path)])
    assert len(files) == 4
    for path in files:
        parts = path.relative_to(tmp_path).parts  # the datastore's data/<eval>/<developer>/<model>/<uuid4>.json
        assert parts[:3] == ("data", "sudoku6", "local") and parts[3] in ("sudoku6_diffusion", "sudoku6_ar")
        record = _validate(path)
        results = {r["evaluation_result_id"]: r for r in record["evaluation_results"]}
        run_dir = Path(record["source_metadata"]["additional_details"]["run_dir"])
        stored = json.loads((run_dir / "metrics.json").read_text())
        assert results["quality"]["score_details"]["score"] == pytest.approx(stored["quality"])
        assert results["tpf"]["score_details"]["score"] == pytest.approx(stored["tpf"])
        assert results["tpf"]["metric_config"]["metric_id"] == "dgharness.tokens_per_forward"
        details = results["tpf"]["generation_config"]["additional_details"]
        assert details["decoder"] in ("diffusion", "ar")
        assert record["model_info"]["additional_details"]["env.dtype"] == "float32"


def test_eee_record_that_breaks_the_schema_is_caught(sweep, tmp_path):
    """The validation can fail: a record missing what the schema requires does not pass."""
    record = json.loads(export(["eee", str(sweep), "--out", str(tmp_path)])[0].read_text())
    del record["model_info"]["additional_details"]["deployment_type"]
    with pytest.raises(jsonschema.ValidationError, match="deployment_type"):
        jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(record)


def test_d3llm_rows_carry_the_aup_the_summary_prints(sweep, tmp_path):
    from harness.analysis.aggregate import summarize
    from harness.analysis.aup import aup_d3llm

    _, fronts, _ = summarize([sweep], tmp_path / "summary")
    printed = {row["model"]: row["aup_d3llm"] for _, row in fronts.iterrows()}
    csv_path, points_path = export(["d3llm", str(sweep), "--out", str(tmp_path / "d3llm")])[:2]  # + dropped points
    lines = list(csv.reader(csv_path.open(encoding="utf-8")))
    assert lines[1][2] == "sudoku6" and lines[2][2:6] == ["token/forward (TPF)", "Acc", "AUP", "TPF=1时的Acc"]
    rows = {line[1]: line[2:6] for line in lines[3:]}
    assert set(rows) == set(printed) == {"sudoku6_diffusion", "sudoku6_ar"}
    for model, aup in printed.items():
        assert float(rows[model][2]) == pytest.approx(aup, abs=5e-5)
    assert float(rows["sudoku6_diffusion"][0]) > 1 and float(rows["sudoku6_ar"][0]) == 1.0
    # their data_*.yaml: every point the AUP integrates, so their get_aup recomputes it
    points = yaml.safe_load(points_path.read_text())["sudoku6"]
    y_max = max(y for pts in points.values() for _, y in pts)
    for model, pts in points.items():
        assert aup_d3llm(*zip(*pts), y_max) == pytest.approx(printed[model])


def test_an_export_refuses_a_run_whose_metrics_disagree_with_its_samples(sweep, tmp_path):
    import shutil

    from harness.export.runs import StaleRun

    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    run_dir = next(p.parent for p in copy.glob("sudoku6_ar*/metrics.json"))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["quality"] = 0.99  # a figure the samples do not give
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(StaleRun, match=f"{run_dir.name}.*quality"):
        export(["d3llm", str(copy), "--out", str(tmp_path / "out")])


def test_hf_eval_results_name_their_benchmark(sweep, tmp_path, capsys):
    assert export(["hf", str(sweep), "--out", str(tmp_path)]) == []  # Sudoku is no Hub benchmark by itself
    assert "no Hub dataset" in capsys.readouterr().out
    files = export(["hf", str(sweep), "--out", str(tmp_path), "--hf-dataset", "sudoku6=example-org/sudoku6:six"])
    assert len(files) == 4 and all(p.parent.name == ".eval_results" for p in files)
    entry = yaml.safe_load(next(p for p in files if "sudoku6_ar" in p.parts).read_text())[0]
    assert entry["dataset"] == {"id": "example-org/sudoku6", "task_id": "six"}
    run_dir = next(sweep.glob("sudoku6_ar*"))
    assert entry["value"] == pytest.approx(100 * json.loads((run_dir / "metrics.json").read_text())["quality"])
    assert "TPF 1" in entry["notes"] and "float32" in entry["notes"]


def test_parallelbench_export_of_a_sweep_without_its_tasks_says_so(sweep):
    with pytest.raises(SystemExit, match="parallelbench: no finished ParallelBench runs"):
        export(["parallelbench", str(sweep)])


def echo_task(folder: Path) -> Path:
    """The made-up generative lm-eval task `dg_echo` (tests/fixtures/lm_eval) on three local documents."""
    data = folder / "echo.jsonl"
    data.write_text("".join(json.dumps({"word": w}) + "\n" for w in ("alpha", "beta", "gamma")))
    tasks = folder / "tasks"
    tasks.mkdir()
    fixture = Path(__file__).parent / "fixtures" / "lm_eval" / "echo_task.yaml"
    (tasks / "echo_task.yaml").write_text(fixture.read_text().replace("PLACEHOLDER", json.dumps(str(data))))
    return tasks


def test_eee_record_of_an_lm_eval_run_validates(tmp_path, tiny_diffusion_dir):
    from harness.run import run
    from tests.helpers.app import compose_app

    tasks = echo_task(tmp_path)
    args = [f"model.path={tiny_diffusion_dir}", "eval=lm_eval", "eval.tasks=[dg_echo]", f"eval.include_path=[{tasks}]"]
    args += ["eval.include_defaults=false", "eval.apply_chat_template=false", "sampler.max_steps=2"]
    run(compose_app(*args), tmp_path / "runs" / "echo")
    (path,) = export(["eee", str(tmp_path / "runs"), "--out", str(tmp_path / "eee")])
    record = _validate(path)
    assert record["eval_library"]["name"] == "lm_eval"
    ids = {r["evaluation_result_id"] for r in record["evaluation_results"]}
    assert {"quality", "tpf", "lm_eval/dg_echo/exact_match,none"} <= ids
    card = json.loads((tmp_path / "runs" / "echo" / "run_card.json").read_text())
    assert card["prompts"]["task_files"] and card["environment"]["lm_eval"]


# issue 54 item 8: likelihood runs (lm-eval's multiple-choice tasks) of every family, in a sweep with a generation run
LIKELIHOOD = {"tiny_ar": "exact", "tiny_masked": "mc_elbo", "tiny_diffusion": "decision_read"}


@pytest.fixture(scope="module")
def mixed_sweep(tmp_path_factory):
    """One sweep dir: the arc / hellaswag stand-ins (tests/helpers/likelihood_tasks.py, 2 questions each) scored by
    each family's scorer, and a generation run (`dg_echo`) beside them."""
    from harness.run import run
    from models.tiny import build_ar, build_diffusion, build_masked
    from tests.helpers.app import compose_app
    from tests.helpers.likelihood_tasks import write_tasks

    root = tmp_path_factory.mktemp("mixed")
    ll_tasks = root / "ll_tasks"
    ll_tasks.mkdir()
    write_tasks(ll_tasks)
    paths = {"tiny_ar": build_ar(root / "ar"), "tiny_masked": build_masked(root / "masked", block_length=4),
             "tiny_diffusion": build_diffusion(root / "diffusion", canvas_length=8)}  # fmt: skip
    common = ["eval=lm_eval", "eval.include_defaults=false", "eval.apply_chat_template=false", "eval.limit=2"]
    for model, path in paths.items():
        args = [f"model={model}", f"model.path={path}", "eval.tasks=[dg_arc_challenge,dg_hellaswag]"]
        run(compose_app(*args, *common, f"eval.include_path=[{ll_tasks}]", "eval.likelihood.mc_num=4"),
            root / "sweep" / f"ll_{model}")  # fmt: skip
    gen = [f"model.path={paths['tiny_diffusion']}", "eval.tasks=[dg_echo]", "sampler.max_steps=2"]
    run(compose_app(*gen, *common, f"eval.include_path=[{echo_task(root)}]"), root / "sweep" / "gen_echo")
    return root / "sweep"


def _stored(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.slow
def test_eee_writes_likelihood_runs_of_every_family_and_the_generation_run(mixed_sweep, tmp_path):
    files = export(["eee", str(mixed_sweep), "--out", str(tmp_path)])
    records = {Path(r["source_metadata"]["additional_details"]["run_dir"]).name: r for r in map(_validate, files)}
    assert set(records) == {f"ll_{m}" for m in LIKELIHOOD} | {"gen_echo"}
    for model, method in LIKELIHOOD.items():
        record = records[f"ll_{model}"]
        results = {r["evaluation_result_id"]: r for r in record["evaluation_results"]}
        stored = _stored(mixed_sweep / f"ll_{model}")
        assert results["quality"]["score_details"]["score"] == pytest.approx(stored["quality"])
        assert results["quality"]["score_details"]["uncertainty"]["num_samples"] == 2  # questions, not requests
        assert {"lm_eval/dg_arc_challenge/acc,none", "lm_eval/dg_hellaswag/acc_norm,none"} <= set(results)
        assert "tpf" not in results and "tokens_per_second" not in results  # nothing generated
        details = results["quality"]["generation_config"]["additional_details"]
        assert details["likelihood.method"] == method and not any(k.startswith("sampler.") for k in details)
    assert "tpf" in {r["evaluation_result_id"] for r in records["gen_echo"]["evaluation_results"]}


@pytest.mark.slow
def test_hf_writes_likelihood_runs_of_every_family(mixed_sweep, tmp_path):
    files = export(["hf", str(mixed_sweep), "--out", str(tmp_path), "--hf-dataset", "lm_eval=allenai/ai2_arc:ARC"])
    assert len(files) == 4
    entries = {p: yaml.safe_load(p.read_text())[0] for p in files}
    scored = {p.parts[-3]: e for p, e in entries.items() if "scored by likelihood" in e["notes"]}
    assert set(scored) == set(LIKELIHOOD)  # the fourth: the generation run, with its sampler and TPF
    for model, method in LIKELIHOOD.items():
        entry = scored[model]
        assert entry["value"] == pytest.approx(100 * _stored(mixed_sweep / f"ll_{model}")["quality"])
        assert f"scored by likelihood: {method} (" in entry["notes"] and "TPF" not in entry["notes"]
        assert "2 questions" in entry["notes"]


@pytest.mark.slow
def test_d3llm_writes_likelihood_runs_beside_the_generation_run(mixed_sweep, tmp_path):
    csv_path, points_path = export(["d3llm", str(mixed_sweep), "--out", str(tmp_path)])
    lines = list(csv.reader(csv_path.open(encoding="utf-8")))
    tasks = [t for t in lines[1][2:] if t]
    cells = {line[1]: line[2:] for line in lines[3:]}
    assert set(cells) == {f"{m} ({method})" for m, method in LIKELIHOOD.items()} | {"tiny_diffusion"}
    for model, method in LIKELIHOOD.items():
        row = cells[f"{model} ({method})"]
        k = 4 * next(i for i, t in enumerate(tasks) if row[4 * i + 1])
        assert row[k] == row[k + 2] == row[k + 3] == ""  # no TPF, no AUP: nothing was decoded
        assert float(row[k + 1]) == pytest.approx(100 * _stored(mixed_sweep / f"ll_{model}")["quality"], abs=5e-3)
    assert float(next(c for c in cells["tiny_diffusion"] if c)) > 0  # the generation run: its TPF first
    points = yaml.safe_load(points_path.read_text())
    assert [list(p) for p in points.values()] == [["tiny_diffusion"]]


@pytest.mark.slow
def test_a_likelihood_run_stored_before_rows_named_their_task_still_exports(mixed_sweep, tmp_path):
    """Runs scored before `doc_row` wrote `task` read the task from the row's sample id `<task>/<doc_id>`."""
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(mixed_sweep / "ll_tiny_masked", copy)
    scored = copy / "samples_scored.jsonl"
    rows = [json.loads(line) for line in scored.read_text().splitlines()]
    assert all(r["task"] == r["sample_id"].split("/")[0] for r in rows)
    scored.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "task"}) + "\n" for r in rows))
    (path,) = export(["eee", str(copy), "--out", str(tmp_path / "eee")])
    assert _validate(path)["evaluation_results"][0]["score_details"]["score"] == pytest.approx(_stored(copy)["quality"])
