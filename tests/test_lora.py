"""LoRA fine-tuning (models.loading.lora, models.training.objectives, evals.sudoku.finetune) on tiny real models, CPU.

What the issue asks to show: only LoRA parameters move; merged and unmerged outputs agree (and peft's default
wrapping of the encoder/decoder-shared weights does not); the loss falls; adapters load for evaluation with
`model.adapter=PATH` (the run's name and identity include the adapter).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evals.sudoku.data import DataSpec, ExampleOrder, load_examples, make_training_csv
from evals.sudoku.finetune import diffusion_batch, train_lora
from evals.sudoku.train import TrainConfig
from models.loading.lora import LoraSpec, attach_lora, load_adapter, lora_parameters, merge_adapter, save_adapter
from models.training.objectives import DiffusionObjective, block_diffusion_loss, padded_context

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "checkpoints"  # trained 6x6 Sudoku models: never saw a 4x4 grid
OFFICIAL = DiffusionObjective(t_min=1e-4, t_max=1 - 1e-4, self_cond_prob=0.5, encoder_weight=1.0)


@pytest.fixture(scope="module")
def lora_base_dir(tmp_path_factory):
    """Tiny DiffusionGemma whose canvas holds a 4x4 answer + EOS (16 + 1 tokens) with padding after it."""
    from models.tiny import build_diffusion

    return build_diffusion(tmp_path_factory.mktemp("lora_base"), seed=3, canvas_length=20)


@pytest.fixture(scope="module")
def sudoku4_csv(tmp_path_factory):
    return make_training_csv(tmp_path_factory.mktemp("data") / "train.csv", size=4, count=64, blanks=(6, 10))


def _load(path):
    from transformers import DiffusionGemmaForBlockDiffusion

    return DiffusionGemmaForBlockDiffusion.from_pretrained(path).eval()


def _inputs(vocab: int, canvas: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(6, vocab - 3, (3, 11), generator=g), torch.randint(6, vocab - 3, (3, canvas), generator=g)


def _logits(model, prompt, canvas):
    with torch.no_grad():
        return model(input_ids=prompt, decoder_input_ids=canvas).logits


def _randomize(model, std: float = 0.1, seed: int = 1):
    """Adapter weights like a trained adapter's (fresh ones have B = 0, which would hide a double merge)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in lora_parameters(model).values():
            p.copy_(torch.randn(p.shape, generator=g) * std)


def test_one_adapter_per_shared_weight_covers_linears_and_experts(lora_base_dir):
    model = _load(lora_base_dir)
    attach_lora(model, LoraSpec(rank=8))
    enc, dec = model.model.encoder.language_model, model.model.decoder
    for i in range(len(dec.layers)):
        assert dec.layers[i].self_attn.q_proj is enc.layers[i].self_attn.q_proj  # one wrapper, both sides
        assert dec.layers[i].experts is enc.layers[i].experts
    names = list(lora_parameters(model))
    assert any(".experts." in n for n in names) and any("self_conditioning" in n for n in names)
    assert not any(n.startswith("model.decoder.layers") for n in names)  # each shared adapter once
    assert not any("vision" in n or "lm_head" in n for n in names)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(names)
    assert all(p.shape[0] == 8 for n, p in lora_parameters(model).items() if "lora_A" in n and "experts" not in n)


@pytest.mark.slow
def test_only_lora_parameters_change_under_the_official_objective(lora_base_dir, sudoku4_csv):
    """(a) A few optimizer steps over every trainable parameter, with the full recipe's loss (self-conditioning
    and the encoder's next-token term included): every base weight stays bit-identical, the adapters move."""
    torch.set_num_threads(1)
    from transformers import AutoTokenizer

    model = _load(lora_base_dir)
    base = [(n, p, p.detach().clone()) for n, p in model.named_parameters()]  # the tensors themselves, and copies
    attach_lora(model, LoraSpec(rank=8))
    before = {n: p.detach().clone() for n, p in lora_parameters(model).items()}
    assert {id(p) for p in model.parameters()} == {id(p) for _, p, _ in base} | {
        id(p) for p in lora_parameters(model).values()
    }
    examples = load_examples(
        DataSpec(path=str(sudoku4_csv), format="compact"), 4, AutoTokenizer.from_pretrained(lora_base_dir)
    )
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1)
    gen = torch.Generator().manual_seed(0)
    model.train()
    for step in range(3):
        batch = diffusion_batch(examples[8 * step : 8 * step + 8], 0, model.config.canvas_length, "cpu")
        loss, parts = block_diffusion_loss(model, OFFICIAL, batch, gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert parts["encoder_loss"] > 0 and parts["diffusion_loss"] > 0
    for name, param, copy in base:
        assert torch.equal(param.detach(), copy), f"base weight changed: {name}"
    moved = [n for n, p in lora_parameters(model).items() if not torch.equal(p.detach(), before[n])]
    assert len(moved) == len(before)  # every adapter tensor (A and B) moved


@pytest.mark.slow
def test_merged_equals_unmerged_and_peft_default_double_wrap_does_not(lora_base_dir, tmp_path):
    """(b) Saved, reloaded unmerged and merged: logits agree to <= 1e-5; peft's default wrapping gives the shared
    weights two adapters and its merge corrupts the model."""
    from peft import LoraConfig, get_peft_model

    torch.set_num_threads(1)
    prompt, canvas = _inputs(_load(lora_base_dir).config.text_config.vocab_size, 20)
    base_logits = _logits(_load(lora_base_dir), prompt, canvas)
    model = _load(lora_base_dir)
    peft_model = attach_lora(model, LoraSpec(rank=8))
    assert torch.equal(_logits(model, prompt, canvas), base_logits)  # B = 0: the wrapped model is the base
    _randomize(model)
    unmerged = _logits(model, prompt, canvas)
    shift = (unmerged - base_logits).abs().max().item()
    print(f"adapter vs base max |diff| = {shift:.3f}")
    assert shift > 0.1  # the adapter does change the model
    save_adapter(peft_model, tmp_path / "adapter")
    reloaded = _logits(load_adapter(_load(lora_base_dir), tmp_path / "adapter", merge=False), prompt, canvas)
    merged_model = load_adapter(_load(lora_base_dir), tmp_path / "adapter")
    merged = _logits(merged_model, prompt, canvas)
    in_place = _logits(merge_adapter(peft_model), prompt, canvas)
    diff = (merged - unmerged).abs().max().item()
    print(f"merged vs unmerged max |diff| = {diff:.2e}")
    assert torch.equal(reloaded, unmerged) and diff <= 1e-5 and (in_place - unmerged).abs().max() <= 1e-5
    # in float64 the two agree to the last float32 bit: what remains above is float32 rounding, not a wrong merge
    from transformers import DiffusionGemmaForBlockDiffusion

    def f64():
        m = DiffusionGemmaForBlockDiffusion.from_pretrained(
            lora_base_dir, dtype=torch.float64, experts_implementation="eager"
        )
        return m.eval()

    un64 = _logits(load_adapter(f64(), tmp_path / "adapter", merge=False), prompt, canvas)
    assert (_logits(load_adapter(f64(), tmp_path / "adapter"), prompt, canvas) - un64).abs().max() <= 1e-6
    enc, dec = merged_model.model.encoder.language_model, merged_model.model.decoder
    assert type(dec.layers[0].self_attn.q_proj) is torch.nn.Linear  # the plain model again
    assert dec.layers[0].self_attn.q_proj.weight is enc.layers[0].self_attn.q_proj.weight  # still shared
    assert dec.layers[0].experts.gate_up_proj is enc.layers[0].experts.gate_up_proj

    default = get_peft_model(
        _load(lora_base_dir),
        LoraConfig(
            r=8,
            lora_alpha=16,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "proj"],
            target_parameters=["experts.gate_up_proj", "experts.down_proj"],
            exclude_modules=r".*vision.*",
        ),
    )
    assert hasattr(default.base_model.model.model.decoder.layers[0].self_attn.q_proj, "lora_A")  # a 2nd adapter
    _randomize(default)
    default_unmerged = _logits(default, prompt, canvas)
    default_diff = (_logits(default.merge_and_unload(), prompt, canvas) - default_unmerged).abs().max().item()
    print(f"peft default wrap: merged vs unmerged max |diff| = {default_diff:.3f}")
    assert default_diff > 0.1


def test_left_padded_prompts_see_what_they_would_see_alone(lora_base_dir):
    """The trainer's masks/positions for a left-padded batch give each row the logits it gets unpadded."""
    torch.set_num_threads(1)
    model = _load(lora_base_dir)
    prompt, canvas = _inputs(model.config.text_config.vocab_size, 20)
    mask = torch.ones_like(prompt, dtype=torch.bool)
    mask[0, :4] = False  # row 0: a 7-token prompt, left-padded to 11
    padded = prompt.masked_fill(~mask, 0)
    with torch.no_grad():
        batch = model(input_ids=padded, decoder_input_ids=canvas, **padded_context(mask, 20)).logits
        alone = model(input_ids=prompt[:1, 4:], decoder_input_ids=canvas[:1]).logits
    assert (batch[0] - alone[0]).abs().max() <= 1e-4


def test_example_order_is_a_pure_function_of_the_step():
    order = ExampleOrder(10, seed=3)
    first = [order.batch(s, 4) for s in range(6)]
    again = ExampleOrder(10, seed=3)
    assert [again.batch(s, 4) for s in reversed(range(6))][::-1] == first
    assert sorted(first[0] + first[1] + first[2][:2]) == list(range(10))  # one epoch = every example once


def _recipe(tmp_path, base, csv_path, kind="diffusion", steps=30) -> TrainConfig:
    return TrainConfig(
        kind=kind,
        init_from=str(base),
        out_dir=str(tmp_path / f"lora_{kind}"),
        size=4,
        steps=steps,
        batch_size=8,
        lr=3e-3,
        min_lr_ratio=0.1,
        warmup_steps=4,
        weight_decay=1e-4,
        betas=[0.95, 0.99],
        t_min=1e-4,
        t_max=1 - 1e-4,
        encoder_loss_weight=1.0,
        lora=LoraSpec(rank=8),
        data=DataSpec(path=str(csv_path), format="compact", enable_thinking=None),
        threads=1,
        log_every=5,
        save_every=20,
        eval_every=0,
    )


@pytest.mark.slow
def test_lora_recipe_loss_falls_and_the_adapter_reloads(sudoku4_csv, tmp_path):
    """(c) The trainer (the 26B recipe's code path) on the shipped 6x6 model learning 4x4 answers: the loss falls;
    the saved adapter holds only adapter tensors, each shared weight's once. (A random tiny model is no use here:
    its tied, tiny embeddings cap how confident any adapter can make it.)"""
    torch.set_num_threads(1)
    cfg = _recipe(tmp_path, SHIPPED / "sudoku6_diffusion", sudoku4_csv)
    final = train_lora(cfg)
    out = Path(cfg.out_dir)
    rows = list(csv.DictReader(open(out / "train_log.csv")))
    losses = [float(r["loss"]) for r in rows]
    print("loss per 5 steps:", losses)
    assert final["step"] == 30 and final["trainable_parameters"] < 0.2 * final["parameters"]
    assert losses[-1] < 0.3 * losses[0] and all(r["encoder_loss"] for r in rows)
    assert not (out / "train_state.pt").exists() and json.loads((out / "train_config.json").read_text())["step"] == 30
    from safetensors.torch import load_file

    saved = load_file(out / "adapter_model.safetensors")
    assert saved and all("lora_" in k for k in saved) and not any(".decoder.layers." in k for k in saved)


@pytest.mark.slow
def test_ar_baseline_gets_the_same_recipe_and_loads_in_the_ar_decoder(sudoku4_csv, tmp_path):
    """The AR baseline: the same recipe with its next-token loss (shipped 6x6 AR model -> 4x4 answers); the
    adapter loads into the AR decoder with `adapter=`, merged into the targeted weights only."""
    from models.ar import ARDecoder

    torch.set_num_threads(1)
    base = str(SHIPPED / "sudoku6_ar")
    cfg = _recipe(tmp_path, base, sudoku4_csv, kind="ar", steps=20)
    train_lora(cfg)
    losses = [float(r["loss"]) for r in csv.DictReader(open(Path(cfg.out_dir) / "train_log.csv"))]
    print("AR loss per 5 steps:", losses)
    assert losses[-1] < 0.7 * losses[0]
    plain = ARDecoder(str(base), dtype="float32", device="cpu")
    tuned = ARDecoder(str(base), dtype="float32", device="cpu", adapter=cfg.out_dir)
    assert tuned.describe()["lora_adapter"] == cfg.out_dir
    changed = [
        n for n, p in tuned.model.named_parameters() if not torch.equal(p, dict(plain.model.named_parameters())[n])
    ]
    assert changed and all(n.endswith("proj.weight") for n in changed)  # merged into the targeted weights only


@pytest.mark.slow
def test_harness_train_and_run_with_an_adapter(lora_base_dir, sudoku4_csv, tmp_path):
    """`python -m harness.train` with a LoRA recipe, then `python -m harness.run ... model.adapter=PATH`: the run
    dir's name and identity name the adapter, apart from the base model's run."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    adapter = tmp_path / "adapter"
    train = [
        sys.executable, "-m", "harness.train", "train=sudoku4_lora_cpu", f"init_from={lora_base_dir}",
        f"data.path={sudoku4_csv}", f"out_dir={adapter}", "steps=3", "batch_size=4", "log_every=1", "save_every=3",
        f"hydra.run.dir={tmp_path}/hydra",
    ]  # fmt: skip
    proc = subprocess.run(train, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["step"] == 3
    runs = tmp_path / "runs"
    common = [
        sys.executable, "-m", "harness.run", "model=tiny_diffusion", f"model.path={lora_base_dir}", "eval=sudoku4",
        "eval.num_puzzles=2", f"paths.output_dir={runs}",
    ]  # fmt: skip
    for extra in ([], [f"model.adapter={adapter}"]):
        proc = subprocess.run(common + extra, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    dirs = sorted(p.name for p in (runs / "runs").iterdir())
    assert len(dirs) == 2 and sum("+lora-adapter" in d for d in dirs) == 1
    tuned = next(d for d in dirs if "+lora-" in d)
    identity = json.loads((runs / "runs" / tuned / "identity.json").read_text())
    assert any("adapter" in k for k in json.dumps(identity).split('"'))
    bad = subprocess.run(common + ["model.adapter=/nonexistent/adapter"], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "model.adapter" in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["sudoku9_lora", "sudoku9_lora_ar", "sudoku4_lora_cpu"])
def test_lora_recipes_compose_to_the_official_recipe(recipe):
    """The 26B recipes and their CPU twin share one schema and the official optimizer / objective settings; the
    26B recipes refuse to start without a data file."""
    from hydra import compose, initialize_config_dir

    from evals.sudoku.finetune import check
    from evals.sudoku.recipe import config_from, register_train_configs

    register_train_configs()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = config_from(compose("train", overrides=[f"train={recipe}", "data.path=quizzes.csv"]))
        if recipe != "sudoku4_lora_cpu":
            with pytest.raises(ValueError, match="data.path: required"):
                check(config_from(compose("train", overrides=[f"train={recipe}"])))
    check(cfg)
    assert cfg.lora == LoraSpec(rank=8, alpha=16.0, experts=True) and cfg.encoder_loss_weight == 1.0
    assert (cfg.t_min, cfg.t_max, cfg.self_cond_prob, cfg.betas, cfg.adam_eps) == (
        1e-4,
        0.9999,
        0.5,
        [0.95, 0.99],
        1e-8,
    )
    assert (cfg.weight_decay, cfg.grad_clip, cfg.min_lr_ratio) == (1e-4, 1.0, 0.1)
    if recipe != "sudoku4_lora_cpu":
        assert (cfg.steps, cfg.lr, cfg.warmup_steps, cfg.dtype, cfg.gradient_checkpointing) == (
            2000,
            1.5e-4,
            100,
            "bfloat16",
            True,
        )
        assert cfg.data.format == "report" and cfg.size == 9 and cfg.data.stop_token_id == 106


@pytest.mark.slow
def test_gradient_checkpointing_gives_the_same_adapter_gradients(lora_base_dir, sudoku4_csv):
    """The 26B recipe checkpoints the decoder layers: same loss and adapter gradients as without."""
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(lora_base_dir)
    examples = load_examples(DataSpec(path=str(sudoku4_csv), format="compact"), 4, tok)[:6]
    grads = []
    for checkpointing in (False, True):
        model = _load(lora_base_dir)
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        attach_lora(model, LoraSpec(rank=8))
        _randomize(model, std=0.05)
        model.train()
        assert all(layer.gradient_checkpointing == checkpointing for layer in model.model.decoder.layers)
        batch = diffusion_batch(examples, 0, model.config.canvas_length, "cpu")
        loss, _ = block_diffusion_loss(model, OFFICIAL, batch, torch.Generator().manual_seed(5))
        loss.backward()
        grads.append((loss.item(), {n: p.grad.clone() for n, p in lora_parameters(model).items()}))
    (loss_a, ga), (loss_b, gb) = grads
    assert loss_a == pytest.approx(loss_b, abs=1e-6) and ga.keys() == gb.keys()
    assert all(torch.allclose(ga[n], gb[n], atol=1e-6) for n in ga) and any(g.abs().sum() > 0 for g in ga.values())


@pytest.mark.slow
def test_a_run_without_an_adapter_never_imports_peft(tmp_path):
    """The GPU machine has a peft of its own, built for another transformers: the GPU check (and any run with no
    `model.adapter`) must not import it. With peft made unimportable, `bench.gpu.gpu_check --tiny` builds the
    released-shape model, its adapter and the engine, and runs its forwards."""
    code = (
        "import runpy, sys\n"
        "sys.modules['peft'] = None\n"  # `import peft` raises ImportError
        f"sys.argv = ['gpu_check', '--tiny', '--phases', 'forward', '--out-dir', {str(tmp_path)!r}]\n"
        "runpy.run_module('bench.gpu.gpu_check', run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    saved = json.loads((tmp_path / "gpu_check_tiny.json").read_text())
    assert saved["forward"] and all(r["denoise_ms"] > 0 for r in saved["forward"])
