"""The benches run end to end at tiny sizes and write the JSON fields the reports read."""

from __future__ import annotations

import json

import pytest
import torch

from bench.cpu import decode_loop, eval_throughput, released_model
from bench.cpu import sampler_step_bench as sampler_step
from bench.gpu import gpu_check, gpu_engine_runs


def test_sampler_step_bench_tiny(tmp_path):
    payload = sampler_step.run(
        [1, 2], canvas=8, vocab=300, repeats=1, warmup=1, threads=None, out_dir=str(tmp_path), quiet=True, fused=False
    )
    saved = json.loads((tmp_path / "sampler_step.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(payload["rows"]))
    assert [r["batch"] for r in saved["rows"]] == [1, 2]
    for row in saved["rows"]:
        assert row["argmax_equal"] is True and row["argmax_agree_ours"] == 1.0
        assert row["max_abs_entropy_diff"] < 1e-5 and row["max_abs_confidence_diff"] < 1e-5  # vs float64 maths
        for key in (
            "reference_s",
            "ours_s",
            "copy_s",
            "ours_net_s",
            "ratio_of_medians",
            "median_round_ratio",
            "net_ratio_of_medians",
        ):
            assert row[key] > 0, key
        # ours = refill + step, so the step alone is cheaper, and the ratios follow from the medians
        assert row["ours_net_s"] <= row["ours_s"]
        assert row["ratio_of_medians"] == pytest.approx(row["reference_s"] / row["ours_s"])
        assert row["net_ratio_of_medians"] == pytest.approx(row["reference_s"] / row["ours_net_s"])
        assert row["fused_skipped"] == "disabled" and "fused_s" not in row
        assert len(row["rounds"]["reference"]) == 1
    assert {"cpu", "torch_threads", "torch", "transformers"} <= set(saved["machine"])


def _fused_runs_here() -> bool:
    return sampler_step.fused_status("cpu") is None


needs_fused = pytest.mark.skipif(
    not _fused_runs_here(), reason="the fused kernel needs CUDA or TRITON_INTERPRET=1 (conftest sets it)"
)


@needs_fused
def test_sampler_step_bench_runs_the_fused_kernel_under_the_interpreter(tmp_path):
    payload = sampler_step.run(
        [2], canvas=8, vocab=300, repeats=1, warmup=1, threads=None, out_dir=str(tmp_path), quiet=True, fused=True
    )
    row = payload["rows"][0]
    assert row["fused_skipped"] is None
    assert row["argmax_agree_fused"] == 1.0 and row["argmax_agree_ours"] == 1.0
    assert row["argmax_agree_fused_bf16"] > 0.9  # bf16 rounding may create ties
    assert row["max_abs_entropy_diff_fused"] < 1e-5 and row["max_abs_confidence_diff_fused"] < 1e-5
    for key in ("fused_s", "fused_bf16_s", "fused_ratio_of_medians", "fused_bf16_ratio_of_medians", "ours_over_fused"):
        assert row[key] > 0, key


def test_engine_step_is_the_decode_engines_step():
    """EngineStep returns what harness.engine.decode.sampler_step gives on the processed logits (torch path), and the
    reference step keeps the accept rule: accepted tokens are sampled ones, the rest fresh noise."""
    from samplers import streams
    from samplers.sampler_step import process_logits
    from samplers.sampler_step import sampler_step as engine_step

    raw = sampler_step.make_logits(2, 8, 300)
    canvas = torch.randint(0, 300, (2, 8))
    step = sampler_step.EngineStep(raw, "torch")
    new, argmax = step(raw, canvas)
    again, _ = step(raw, canvas)  # the workspace is refilled: the same keys give the same step
    assert torch.equal(new, again)
    x = process_logits(raw.clone(), sampler_step.SOFTCAP, step.temperature)
    assert torch.equal(argmax, x.argmax(-1))
    from samplers.fast_draw import draw_fast

    def direct(x, t, cap, u):
        return draw_fast(x, u)

    out = engine_step(step.cfg, direct, x, step.temperature, None, step.keys, canvas, step.history, 300)
    assert torch.equal(new, out.canvas)
    noise = streams.tokens(step.keys[0], step.keys[1], step.keys[2], 8, 300, streams.RENOISE)
    assert bool(((new == noise) | (new == out.canvas)).all())
    ref_new, ref_argmax = sampler_step.ReferenceStep(8, 300)(raw, canvas)
    assert torch.equal(ref_argmax, argmax) and ref_new.shape == (2, 8) and int(ref_new.max()) < 300


@pytest.mark.slow
def test_gpu_check_tiny_compiled_phase(tmp_path):
    """The last phase: model.compile=step's step vs the eager one, on the tiny model: one graph, no breaks, the
    same tokens, fewer host ops (captured with aot_eager on the CPU: the GPU check's inductor graphs are
    tests/test_step_graph.py's)."""
    cfg = gpu_check.CheckConfig.tiny_cpu()
    cfg.phases = ["compiled"]
    saved = gpu_check.run(cfg, out_dir=str(tmp_path), quiet=True)
    assert set(saved["phase_s"]) == {"compiled"} and saved["skipped"] == []
    (step,) = saved["compiled"]
    assert (step["batch"], step["graphs"], step["graph_breaks"], step["same_tokens"]) == (1, 1, 0, True)
    assert step["backend"] == "aot_eager"
    assert 0 < step["compiled_host_ops"] < step["eager_host_ops"] and step["max_logits_diff"] < 1e-4


@pytest.mark.slow
def test_gpu_check_tiny_runs_the_full_script_on_cpu(tmp_path):
    cfg = gpu_check.CheckConfig.tiny_cpu()
    cfg.phases = [p for p in gpu_check.PHASES if p != "compiled"]  # compiling: the slow test below
    payload = gpu_check.run(cfg, out_dir=str(tmp_path), quiet=True)
    saved = json.loads((tmp_path / "gpu_check_tiny.json").read_text())
    assert saved["tiny"] is True and saved["complete"] is True and saved["skipped"] == []
    assert saved["build"]["parameters"] == payload["build"]["parameters"] > 0
    assert saved["engine_sampling"] == "torch draw_fast"  # CPU: the engine's torch path
    assert set(saved["phase_s"]) == {"forward", "sampler", "experts", "agreement", "loop"}
    # the fused experts run in the interpreter here (conftest sets TRITON_INTERPRET=1): equal to grouped_mm
    assert [r["batch"] for r in saved["experts"]] == [1, 2]
    assert all(r["max_rel_diff"] < 1e-5 and r["pairs"] == r["batch"] * 16 for r in saved["experts"])
    mem = saved["memory"]
    assert mem["batches"] == [1, 2] and mem["generate_batches"] == [1, 2] and mem["notes"] == []
    assert mem["largest_batch_that_fits"] >= 8 and mem["agree_requests"] == 8
    for row in mem["rows"]:
        assert 0 < row["engine_estimate_gib"] <= row["generate_estimate_gib"]  # generate() holds more logits
    assert [r["batch"] for r in saved["forward"]] == [1, 2]
    for row in saved["forward"]:
        for key in ("denoise_ms", "denoise_selfcond_ms", "ar_token_ms", "ar_token_no_head_ms"):
            assert row[key] > 0, key
        assert row["denoise_over_ar"] == pytest.approx(row["denoise_ms"] / row["ar_token_ms"])
        assert row["denoise_over_ar_no_head"] == pytest.approx(row["denoise_ms"] / row["ar_token_no_head_ms"])
        assert row["logits_dtype"] == "torch.float32"
        assert 1 <= row["experts_per_layer_ar"] <= row["experts_per_layer_denoise"] <= 2  # tiny: 2 experts, top-1
    assert [r["batch"] for r in saved["loop"]] == [1, 2]
    for loop in saved["loop"]:
        assert loop["steps"] == 3 and loop["canvases"] == 2 and loop["sampling"] == "torch draw_fast"
        assert loop["engine_calls"] == {"prefill": 1, "denoise": 6, "commit": 1} and loop["calls_match"] is True
        assert loop["nfe_ok"] is True and loop["generate_forwards_ok"] is True
        for key in ("bare_s", "engine_s", "generate_s"):
            assert loop[key] > 0, key
        assert loop["engine_overhead"] == pytest.approx(loop["engine_s"] / loop["bare_s"] - 1)
        assert loop["engine_overhead_ms_per_step"] == pytest.approx(1e3 * (loop["engine_s"] - loop["bare_s"]) / 6)
    agree = saved["agreement"]  # CPU: the engine is batch-invariant, so alone == together exactly
    assert agree["requests"] == 8 and len(set(agree["prompt_lengths"])) == 8
    assert agree["same_tokens_share"] == agree["same_position_share"] == agree["same_nfe_share"] == 1.0
    assert agree["nfe_alone"] == agree["nfe_together"] == [4] * 8  # random weights: every canvas runs to the cap
    # batch-shaped CPU kernels round differently (not bitwise: ~1e-7 here), too little to move a token here
    assert agree["first_step_logits_max_abs_diff"] < 1e-5 and agree["first_step_same_argmax_share"] == 1.0
    assert [r["batch"] for r in saved["sampler"]] == [1, 2]
    for row in saved["sampler"]:
        assert (row["canvas"], row["vocab"]) == (16, 112)
        assert row["argmax_equal"] is True and row["argmax_agree_ours"] == 1.0
        assert row["fused_skipped"] is None or "fused_s" not in row  # the kernel runs only under the interpreter
        if row["fused_skipped"] is None:
            assert row["argmax_agree_fused"] == 1.0


@pytest.mark.slow
def test_gpu_check_drops_batches_that_do_not_fit(tmp_path):
    """A memory budget between the engine's estimate at batch 2 and generate()'s: batch 8 is dropped, generate()
    runs at batch 1 only, the agreement check shrinks to 2 requests, and the notes say so."""
    from models.planning.memory import GIB

    cfg = gpu_check.CheckConfig.tiny_cpu()
    cfg.batches, cfg.phases = [1, 2, 8], []
    rows = {r["batch"]: r for r in gpu_check.run(cfg, out_dir=str(tmp_path), quiet=True)["memory"]["rows"]}
    assert rows[2]["engine_estimate_gib"] < rows[2]["generate_estimate_gib"] < rows[8]["engine_estimate_gib"]
    cfg.memory_budget_gib = (rows[2]["engine_estimate_gib"] + rows[2]["generate_estimate_gib"]) / 2 / cfg.headroom
    cfg.phases = ["loop"]
    payload = gpu_check.run(cfg, out_dir=str(tmp_path), quiet=True)
    mem = payload["memory"]
    assert mem["budget_gib"] == pytest.approx(cfg.memory_budget_gib * cfg.headroom)
    assert mem["batches"] == [1, 2] and mem["generate_batches"] == [1]
    assert mem["largest_batch_that_fits"] == 2 and mem["agree_requests"] == 2
    assert any(n.startswith("batch 8 dropped") for n in mem["notes"])
    assert any(n.startswith("generate() at batch 2 skipped") for n in mem["notes"])
    assert [r["batch"] for r in payload["loop"]] == [1, 2]
    assert "generate_s" in payload["loop"][0] and "generate_s" not in payload["loop"][1]
    assert payload["forward"] == [] and payload["agreement"] is None and set(payload["phase_s"]) == {"loop"}
    assert mem["total_gib"] * GIB == pytest.approx(cfg.memory_budget_gib * GIB)


def test_gpu_check_skips_loop_batches_projected_past_the_deadline(tmp_path):
    cfg = gpu_check.CheckConfig.tiny_cpu()
    cfg.phases, cfg.deadline_s = ["forward", "loop"], 0.0
    payload = gpu_check.run(cfg, out_dir=str(tmp_path), quiet=True)
    assert [r["batch"] for r in payload["forward"]] == [1, 2] and payload["loop"] == []
    assert len(payload["skipped"]) == 2 and all("deadline" in n for n in payload["skipped"])
    projected = gpu_engine_runs.projected_loop_s(cfg, 2, payload["forward"], 16, with_generate=True)
    row = payload["forward"][1]
    assert projected == pytest.approx(1.3 * row["denoise_selfcond_ms"] / 1e3 * (6 + 8 / 16 + 1) * 2 * 3)
    saved = json.loads((tmp_path / "gpu_check_tiny.json").read_text())
    assert saved["complete"] is True and saved["skipped"] == payload["skipped"]


def test_gpu_check_keeps_the_engine_figures_when_generate_runs_out_of_memory(tmp_path, monkeypatch):
    from transformers import DiffusionGemmaForBlockDiffusion

    def oom(self, *a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(DiffusionGemmaForBlockDiffusion, "generate", oom)
    cfg = gpu_check.CheckConfig.tiny_cpu()
    cfg.batches, cfg.phases = [2], ["loop"]
    row = gpu_check.run(cfg, out_dir=str(tmp_path), quiet=True)["loop"][0]
    assert row["generate_skipped"].startswith("out of memory (CUDA out of memory")
    assert "generate_s" not in row and set(row["rounds"]) == {"bare", "engine"}
    assert row["nfe_ok"] and row["calls_match"] and row["engine_s"] > 0 and row["bare_s"] > 0


@pytest.mark.slow
@needs_fused
def test_gpu_check_tiny_with_the_fused_kernel_in_the_engine(tmp_path):
    """The GPU-only branches (fused engine, model-dtype self-conditioning buffers in the bare loop) on the CPU,
    through Triton's interpreter; the fused engine is batch-invariant too."""
    cfg = gpu_check.CheckConfig.tiny_cpu()
    cfg.draw, cfg.batches, cfg.phases = "fused", [2], ["agreement", "loop"]
    cfg.agree_max_steps, cfg.agree_requests = 2, 4
    payload = gpu_check.run(cfg, out_dir=str(tmp_path), quiet=True)
    assert payload["engine_sampling"] == "fused kernel"
    loop = payload["loop"][0]
    assert loop["sampling"] == "fused kernel" and loop["nfe_ok"] and loop["calls_match"]
    agree = payload["agreement"]
    assert agree["sampling"] == "fused kernel" and agree["same_tokens_share"] == 1.0


def test_full_config_is_the_26b_a4b_shape():
    cfg = released_model.model_config(tiny=False).text_config
    assert (cfg.vocab_size, cfg.num_hidden_layers, cfg.num_experts, cfg.top_k_experts) == (262_144, 30, 128, 8)
    assert (cfg.hidden_size, cfg.moe_intermediate_size, cfg.intermediate_size) == (2816, 704, 2112)
    assert cfg.layer_types.count("full_attention") == 5
    assert released_model.model_config(tiny=False).canvas_length == 256


@pytest.mark.slow
def test_decode_loop_bench_matches_generate_in_reference_mode(tmp_path, medium_diffusion_dir):
    payload = decode_loop.run(
        [2], repeats=1, threads=None, model_path=str(medium_diffusion_dir), out_dir=str(tmp_path), quiet=True
    )
    row = payload["rows"][0]
    assert row["same_outputs_reference_mode"] is True
    assert row["nfe_reference_mode"] == row["ours_reference_nfe"] == row["generate_nfe"] > 0  # NFE parity too
    assert row["fast_batch_invariant"] is True and row["exact_batch_invariant"] is True
    assert row["generate_s"] > 0 and row["ours_fast_s"] > 0 and row["ours_fast_nfe"] > 0
    assert row["ours_fast_ratio"] == pytest.approx(row["generate_s"] / row["ours_fast_s"])
    assert (tmp_path / "decode_loop.json").exists()


@pytest.mark.slow
def test_eval_throughput_bench_tiny(tmp_path, medium_diffusion_dir):
    payload = eval_throughput.run(
        [1, 2], samples=2, threads=None, out_dir=str(tmp_path), model_path=str(medium_diffusion_dir), quiet=True
    )
    assert payload["model"].startswith("checkpoint")
    assert [r["batch"] for r in payload["rows"]] == [1, 2]
    for row in payload["rows"]:
        assert row["samples"] == 2 and row["ours_samples_per_s"] > 0 and row["generate_samples_per_s"] > 0
        assert 0.0 <= row["ours_solved_rate"] <= 1.0
    assert (tmp_path / "eval_throughput.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(1500)  # nine benches, two with inductor compiles: minutes on a busy 2-core machine
def test_run_all_quick_prints_one_summary(tmp_path, monkeypatch, capsys, medium_diffusion_dir):
    from bench.cpu import run_all

    monkeypatch.setattr(decode_loop, "TINY_DIR", medium_diffusion_dir)  # reuse the session's tiny checkpoint
    monkeypatch.setattr(eval_throughput, "SHIPPED", medium_diffusion_dir)
    payload = run_all.main(["--quick", "--out-dir", str(tmp_path)])
    benches = {r["bench"] for r in payload["rows"]}
    assert benches == {
        "sampler_step",
        "decode_loop",
        "sudoku_throughput",
        "engine_memory",
        "engine_overhead",
        "ar_engine",
        "cache_copies",
        "step_graph",
        "masked_vs_llada2_pipeline",
        "masked_batch_scaling",
        "engine_vs_diffusion_gemma_pipeline",
    }
    no_ratio = {"engine_overhead", "cache_copies"}  # no reference run / a count (before: arithmetic)
    assert all(r["ratio"] > 0 for r in payload["rows"] if r["bench"] not in no_ratio)
    assert "ratio = reference wall / ours" in capsys.readouterr().out
    assert {p.name for p in tmp_path.iterdir()} >= {
        "summary.json",
        "sampler_step.json",
        "decode_loop.json",
        "eval_throughput.json",
        "step_graph.json",
        "engine.json",
        "ar_engine.json",
        "cache_copies.json",
        "masked_bench.json",
        "diffusers_bench.json",
    }
