"""The benches run end to end at tiny sizes and write the JSON fields the reports read."""

from __future__ import annotations

import json

import torch

from bench import decode_loop, eval_throughput, gpu_check, sampler_step


def test_sampler_step_bench_tiny(tmp_path):
    payload = sampler_step.run([1, 2], canvas=8, vocab=300, repeats=1, warmup=1, threads=None, out_dir=str(tmp_path), quiet=True)
    saved = json.loads((tmp_path / "sampler_step.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(payload["rows"]))
    for row in saved["rows"]:
        assert row["argmax_equal"] is True
        assert row["max_abs_entropy_diff"] < 1e-4
        for key in ("reference_s", "ours_s", "ours_inplace_s", "ratio_of_medians", "median_round_ratio"):
            assert row[key] > 0, key
        assert len(row["rounds"]["reference"]) == 1
    assert {"cpu", "torch_threads", "torch", "transformers"} <= set(saved["machine"])


def test_reference_and_fast_steps_keep_shapes_and_accept_rule():
    logits = sampler_step.make_logits(2, 8, 300)
    canvas = torch.randint(0, 300, (2, 8))
    for step in (sampler_step.ReferenceStep(8, 300), sampler_step.FastStep(2), sampler_step.FastStep(2, inplace_scale=True)):
        new, argmax = step(logits, canvas)
        assert new.shape == argmax.shape == (2, 8)
        assert int(new.max()) < 300


def test_gpu_check_tiny_runs_the_full_script_on_cpu(tmp_path):
    payload = gpu_check.run(gpu_check.CheckConfig.tiny_cpu(), out_dir=str(tmp_path), quiet=True)
    saved = json.loads((tmp_path / "gpu_check_tiny.json").read_text())
    assert saved["tiny"] is True and saved["build"]["parameters"] == payload["build"]["parameters"] > 0
    assert [r["batch"] for r in saved["forward"]] == [1, 2]
    for row in saved["forward"]:
        for key in ("denoise_ms", "denoise_selfcond_ms", "ar_token_ms", "denoise_over_ar", "denoise_selfcond_over_ar"):
            assert row[key] > 0, key
        assert 1 <= row["experts_per_layer_ar"] <= row["experts_per_layer_denoise"] <= 2  # tiny: 2 experts, top-1
    loop = saved["loop"]
    assert loop["nfe_ok"] is True and loop["steps"] == 3
    for key in ("bare_s", "ours_fast_s", "ours_exact_s", "ours_reference_s", "generate_s"):
        assert loop[key] > 0, key
    assert all(r["argmax_equal"] for r in saved["sampler"])


def test_full_config_is_the_26b_a4b_shape():
    cfg = gpu_check.model_config(tiny=False).text_config
    assert (cfg.vocab_size, cfg.num_hidden_layers, cfg.num_experts, cfg.top_k_experts) == (262_144, 30, 128, 8)
    assert (cfg.hidden_size, cfg.moe_intermediate_size, cfg.intermediate_size) == (2816, 704, 2112)
    assert cfg.layer_types.count("full_attention") == 5
    assert gpu_check.model_config(tiny=False).canvas_length == 256


def test_decode_loop_bench_matches_generate_in_reference_mode(tmp_path, medium_diffusion_dir):
    payload = decode_loop.run([1], repeats=1, threads=None, model_path=str(medium_diffusion_dir), out_dir=str(tmp_path), quiet=True)
    row = payload["rows"][0]
    assert row["same_outputs_reference_mode"] is True
    assert row["generate_s"] > 0 and row["ours_fast_s"] > 0 and row["ours_reference_nfe"] > 0
    assert (tmp_path / "decode_loop.json").exists()


def test_eval_throughput_bench_tiny(tmp_path, medium_diffusion_dir):
    payload = eval_throughput.run([1, 2], samples=2, threads=None, out_dir=str(tmp_path), model_path=str(medium_diffusion_dir), quiet=True)
    assert payload["model"].startswith("checkpoint")
    assert [r["batch"] for r in payload["rows"]] == [1, 2]
    for row in payload["rows"]:
        assert row["samples"] == 2 and row["ours_samples_per_s"] > 0 and row["generate_samples_per_s"] > 0
        assert 0.0 <= row["ours_solved_rate"] <= 1.0
    assert (tmp_path / "eval_throughput.json").exists()


def test_run_all_quick_prints_one_summary(tmp_path, monkeypatch, capsys, medium_diffusion_dir):
    from bench import run_all

    monkeypatch.setattr(decode_loop, "TINY_DIR", medium_diffusion_dir)  # reuse the session's tiny checkpoint
    monkeypatch.setattr(eval_throughput, "SHIPPED", medium_diffusion_dir)
    payload = run_all.main(["--quick", "--out-dir", str(tmp_path)])
    benches = {r["bench"] for r in payload["rows"]}
    assert benches == {"sampler_step", "decode_loop", "sudoku_throughput"}
    assert all(r["ratio"] > 0 for r in payload["rows"])
    assert "ratio = reference wall / ours" in capsys.readouterr().out
    assert {p.name for p in tmp_path.iterdir()} >= {"summary.json", "sampler_step.json", "decode_loop.json", "eval_throughput.json"}
