"""models.planning.memory: the pre-load peak-memory estimate and the batch-size choice, checked against real tiny
models.

Tiny DiffusionGemma configs are built in memory (no weights saved, no downloads). Memory is measured on the CPU
by `LiveBytes`, a dispatch mode that tracks the storage of every tensor an op creates until its last view dies,
so views that pin a larger storage (the sliding-window cache) count at their real size.
"""

from __future__ import annotations

import subprocess
import sys
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
from transformers.cache_utils import DynamicCache

from models.planning import memory
from models.planning.memory import (
    GIB,
    check_batch_fits,
    count_parameters,
    estimate_decode_peak,
    forward_activation_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    largest_batch_that_fits,
    text_config_of,
)
from models.tiny import TINY_VISION, ar_config, diffusion_config

WINDOW = 24


def small_config(hidden: int = 64, canvas: int = 16, vocab: int = 512) -> DiffusionGemmaConfig:
    """5 layers (3 sliding, 2 full), GQA 4:2 with head 16 on sliding layers, 4:1 with head 64 on full layers."""
    text = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=64,
        num_global_key_value_heads=1,
        num_experts=4,
        top_k_experts=2,
        moe_intermediate_size=hidden // 2,
        sliding_window=WINDOW,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    return DiffusionGemmaConfig(
        text_config=text,
        vision_config=TINY_VISION,
        canvas_length=canvas,
        boi_token_id=vocab - 3,
        eoi_token_id=vocab - 2,
        image_token_id=vocab - 1,
    )


def config_26b_shape() -> DiffusionGemmaConfig:
    """The text tower of google/diffusiongemma-26B-A4B-it as the brief and bench/gpu/gpu_check.py give it (Gemma 4 26B
    A4B: 30 layers 5 sliding : 1 full, 128 experts top-8). Not read from the checkpoint's config.json (no network
    here): a plausibility check only. The default Gemma 4 vision tower (~0.17B) stands in for the real one."""
    from bench.cpu.released_model import FULL_TEXT

    text = {**FULL_TEXT, "layer_types": ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(30)]}
    return DiffusionGemmaConfig(text_config=text, canvas_length=256)


@pytest.fixture(scope="module")
def big():
    cfg = config_26b_shape()
    return cfg, count_parameters(cfg)


class LiveBytes(TorchDispatchMode):
    """Current and peak bytes of the tensor storages created inside the mode that are still referenced."""

    def __init__(self, ignore=()):
        super().__init__()
        self.ignore = {t.untyped_storage().data_ptr() for t in ignore}
        self.live: dict[int, list[int]] = {}
        self.cur = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key == 0 or key in self.ignore:
            return
        entry = self.live.get(key)
        if entry is None:
            entry = self.live[key] = [storage.nbytes(), 0]
            self.cur += entry[0]
            self.peak = max(self.peak, self.cur)
        entry[1] += 1
        weakref.finalize(t, self._release, key, entry)

    def _release(self, key: int, entry: list[int]) -> None:
        entry[1] -= 1
        if entry[1] == 0 and self.live.get(key) is entry:
            del self.live[key]
            self.cur -= entry[0]


def _tiny_model(cfg, dtype=torch.float32, attn="sdpa"):
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(cfg).to(dtype).eval()
    for c in (model.config, model.config.text_config):
        c._attn_implementation = attn
    return model


# ---------------------------------------------------------------------------------------------- parameters


def test_count_parameters_equals_the_real_model_with_tied_weights_once():
    cfg = diffusion_config(72)
    model = DiffusionGemmaForBlockDiffusion(cfg)
    real = sum(p.numel() for p in model.parameters())
    untied = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert untied > 1.5 * real  # encoder and decoder share their text weights: the check below means something
    assert count_parameters(cfg) == real

    ar = ar_config(72)  # a causal LM through AutoModelForCausalLM.from_config, tied embeddings
    from transformers import Gemma4ForCausalLM

    assert count_parameters(ar) == sum(p.numel() for p in Gemma4ForCausalLM(ar).parameters())


@pytest.mark.slow
def test_load_config_reads_a_local_folder_offline(tmp_path):
    cfg = small_config()
    cfg.save_pretrained(tmp_path)  # config.json only: no weights
    loaded = memory.load_config(str(tmp_path))
    assert count_parameters(loaded) == count_parameters(cfg)
    assert kv_bytes_per_token(text_config_of(loaded), 2) == kv_bytes_per_token(text_config_of(cfg), 2)


# ---------------------------------------------------------------------------------------------- KV cache


def test_kv_bytes_per_token_by_hand():
    tc = text_config_of(small_config())
    # full layers (2): 2 (K, V) x 1 global KV head x 64 global head dim x 2 bytes; sliding (3): 2 x 2 x 16 x 2
    assert kv_bytes_per_token(tc, 2) == (2 * (2 * 1 * 64 * 2), 3 * (2 * 2 * 16 * 2), WINDOW)
    assert kv_bytes_per_token(tc, 4) == (2 * (2 * 1 * 64 * 4), 3 * (2 * 2 * 16 * 4), WINDOW)
    # the 26B shape: 5 full layers x 2 x 2 heads x 512, 25 sliding layers x 2 x 8 heads x 256, bf16
    big_tc = text_config_of(config_26b_shape())
    assert kv_bytes_per_token(big_tc, 2) == (5 * 2 * 2 * 512 * 2, 25 * 2 * 8 * 256 * 2, 1024)


@pytest.mark.slow
@pytest.mark.parametrize("compile", [False, "step"])
@pytest.mark.parametrize("prompt", [40, 10])
def test_kv_estimate_matches_the_measured_cache(prompt, compile):
    """The adapter's slot cache after a prefill and three commits: full layers hold context + C slots per row,
    sliding layers a ring of min(context, window - 1) + C, exactly what the estimate says; under compile=step
    (commits fold into the step: 2C positions per forward) context + 2C and min(context, window - 1) + 2C."""
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from models.tiny import char_tokenizer

    c, b = 16, 2
    cfg = small_config(canvas=c)
    tc = text_config_of(cfg)
    adapter = DiffusionGemmaAdapter.from_model(_tiny_model(cfg), char_tokenizer(), compile=compile)
    chunk = 2 * c if compile else c
    prompts = [[5 + (i + j) % 50 for j in range(prompt - i)] for i in range(b)]
    state = adapter.prefill(prompts, adapter.open(b), grow=3 * c)
    for _ in range(3):
        state = adapter.commit(state, torch.randint(3, 500, (b, c)))
    context = prompt + 3 * c
    assert state.lengths == [context - i for i in range(b)]
    assert state.cache.max_chunk == chunk
    assert state.cache.nbytes() == kv_cache_bytes(tc, b, context, c, 4, chunk)
    assert state.cache.bytes_moved == 0  # reserved at admission: the cache never grew


# ---------------------------------------------------------------------------------------------- activations


@pytest.mark.slow
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_allowance_bounds_measured_forwards(attn, dtype):
    """Prefill, one denoiser forward and one commit of a real model: the estimate is above the measured peak of
    live tensors (cache included where the phase grows it) and not absurdly above it."""
    b, p, c = 3, 100, 32
    cfg = small_config(hidden=256, canvas=c)
    tc = text_config_of(cfg)
    model = _tiny_model(cfg, dtype, attn)
    db = 2 if dtype == torch.bfloat16 else 4
    weights = list(model.parameters()) + list(model.buffers())
    cache = DynamicCache(config=tc)
    with torch.no_grad():
        with LiveBytes(ignore=weights) as prefill:
            model.model.encoder(input_ids=torch.randint(3, 500, (b, p)), past_key_values=cache)
        cached = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        with LiveBytes(ignore=weights + cached) as denoise:
            model.model.decoder(decoder_input_ids=torch.randint(3, 500, (b, c)), past_key_values=cache)
        with LiveBytes(ignore=weights) as commit:
            model.model.encoder(input_ids=torch.randint(3, 500, (b, c)), past_key_values=cache)
    step = forward_activation_bytes(tc, b, c, p, db, attn, min(p, WINDOW - 1))
    estimates = {
        "prefill": (kv_cache_bytes(tc, b, p, c, db) + forward_activation_bytes(tc, b, p, 0, db, attn), prefill),
        "denoise": (step, denoise),
        "commit": (kv_cache_bytes(tc, b, p + c, c, db) + step, commit),
    }
    for phase, (est, mode) in estimates.items():
        assert mode.peak <= est <= 2.5 * mode.peak, (phase, mode.peak, est)


@pytest.mark.slow
def test_estimate_bounds_the_real_engine():
    """The whole decode engine (harness.engine.decode, continuous batching, self-conditioning, fast draw) on a real
    small
    model whose logits dominate: the measured peak of everything but the weights stays under the estimate."""
    from contract.records import GenerationRequest
    from harness.engine.decode import BlockDiffusionDecoder
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from models.tiny import char_tokenizer
    from samplers.config import EntropyBoundConfig

    b, p, new, c, vocab = 4, 40, 96, 32, 8192
    cfg = small_config(hidden=64, canvas=c, vocab=vocab)
    model = _tiny_model(cfg, torch.bfloat16)
    adapter = DiffusionGemmaAdapter.from_model(model, char_tokenizer(), eos_token_ids=[vocab + 1])
    engine = BlockDiffusionDecoder(adapter, EntropyBoundConfig(max_steps=3))
    requests = [GenerationRequest(str(i), [5 + (i + j) % 50 for j in range(p - i)], i, new) for i in range(b)]
    with LiveBytes(ignore=list(model.parameters()) + list(model.buffers())) as mode:
        engine.generate(requests)
    est = estimate_decode_peak(cfg, b, p + new, c, 2, prompt_tokens=p)
    assert b * c * vocab * 4 < mode.peak <= est.total - est.weights <= 2 * mode.peak


# ---------------------------------------------------------------------------------------------- the estimate


def test_estimate_terms_and_phases(big):
    cfg, params = big
    e = estimate_decode_peak(cfg, 8, 4096, 256, 2, prompt_tokens=512, parameters=params)
    u = 8 * 256 * 262_144 * 4
    assert e.weights == params * 2
    assert e.total == e.weights + e.kv_cache + e.logits + e.activations
    row = 256 * 262_144 * 4
    assert e.phase in ("decode", "commit") and e.logits in (int(1.5 * u) + memory.ROW_LOGITS_BUFFERS * row, u)
    # a long prompt makes the prefill (B x P tokens through the MoE at once) the peak; eager adds its scores
    long = estimate_decode_peak(cfg, 8, 4096, 256, 2, prompt_tokens=3840, parameters=params)
    assert long.phase == "prefill" and long.total > e.total
    eager = estimate_decode_peak(
        cfg, 8, 4096, 256, 2, prompt_tokens=3840, parameters=params, attn_implementation="eager"
    )
    scores = 8 * 16 * 3840 * 3840 * (2 * 2 + 4)  # B x heads x P x P: bf16 scores, float32 softmax, bf16 cast
    assert eager.activations > max(scores, long.activations)
    assert "GiB peak at" in e.describe() and "batch_size=8" in e.describe()


def test_a_compiled_step_is_planned_at_its_bucket_of_rows(big):
    """`model.compile=step` computes the power-of-two bucket at or above the batch: batch 5 costs what batch 8
    costs (cache, logits, activations), and the message says so. Its cache is sized for forwards of 2C positions
    per row (a commit folds into the step)."""
    cfg, params = big
    five = estimate_decode_peak(cfg, 5, 4096, 256, 2, 3.0, prompt_tokens=512, parameters=params, whole_step=True)
    eight = estimate_decode_peak(cfg, 8, 4096, 256, 2, 3.0, prompt_tokens=512, parameters=params, whole_step=True)
    assert five.kv_cache == kv_cache_bytes(text_config_of(cfg), 8, 4096, 256, 2, chunk=512)
    assert (five.kv_cache, five.logits, five.activations, five.total) == (
        eight.kv_cache,
        eight.logits,
        eight.activations,
        eight.total,
    )
    assert five.batch_size == 5 and five.rows == 8
    assert "batch_size=5 (a compiled step computes 8 rows)" in five.describe()
    eager = estimate_decode_peak(cfg, 5, 4096, 256, 2, 3.0, prompt_tokens=512, parameters=params)
    assert eager.total < five.total and "computes" not in eager.describe()


@pytest.mark.slow
def test_26b_shape_is_plausible_and_batch_32_does_not_fit_80gb(big):
    cfg, params = big
    assert abs(params - 25.2e9) / 25.2e9 < 0.15
    free = 80 * GIB
    check_batch_fits(cfg, 1, 4096, 256, 2, free)  # no error
    with pytest.raises(ValueError) as err:
        check_batch_fits(cfg, 32, 4096, 256, 2, free)
    fits = largest_batch_that_fits(cfg, 4096, 256, 2, free, max_batch=256, parameters=params)
    msg = str(err.value)
    assert 1 <= fits < 32
    assert f"set batch_size={fits}" in msg and "batch_size=32 does not fit" in msg
    for part in ("weights", "KV cache", "logits", "activations", "80.0 GiB"):
        assert part in msg


def test_error_when_not_even_batch_1_fits_names_the_weights(big):
    cfg, params = big
    with pytest.raises(ValueError, match=r"Even batch_size=1 does not fit: the weights alone are 47\.\d GiB"):
        check_batch_fits(cfg, 4, 4096, 256, 2, 40 * GIB, parameters=params)
    with pytest.raises(ValueError, match="batch_size=auto: no batch size fits"):
        largest_batch_that_fits(cfg, 4096, 256, 2, 40 * GIB, max_batch=64, parameters=params)


@pytest.mark.slow
def test_largest_batch_is_monotone_and_tight(big):
    cfg, params = big
    kw = dict(prompt_tokens=1024, parameters=params)
    previous = 0
    for free_gib in (56, 64, 80, 96, 141, 200):
        free = free_gib * GIB
        best = largest_batch_that_fits(cfg, 4096, 256, 2, free, max_batch=128, **kw)
        assert best >= previous
        previous = best
        assert estimate_decode_peak(cfg, best, 4096, 256, 2, **kw).total <= 0.9 * free
        if best < 128:
            assert estimate_decode_peak(cfg, best + 1, 4096, 256, 2, **kw).total > 0.9 * free
            with pytest.raises(ValueError, match=f"set batch_size={best}"):
                check_batch_fits(cfg, best + 1, 4096, 256, 2, free, **kw)
    assert largest_batch_that_fits(cfg, 4096, 256, 2, 10_000 * GIB, max_batch=128, **kw) == 128


# ---------------------------------------------------------------------------------------------- devices, imports


def test_free_memory_cpu_and_bad_device():
    free = memory.free_memory_bytes("cpu")
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    assert 0 < free <= total
    with pytest.raises(ValueError, match="unsupported device"):
        memory.free_memory_bytes("tpu")


def test_dtype_bytes():
    assert memory.dtype_bytes_of("bfloat16") == 2 and memory.dtype_bytes_of("float32") == 4
    cfg = small_config()
    cfg.dtype = "bfloat16"
    assert memory.dtype_bytes_of("auto", cfg) == 2
    with pytest.raises(ValueError, match="dtype"):
        memory.dtype_bytes_of("int8")


def test_module_import_does_not_import_torch():
    code = "import sys, models.planning.memory; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=memory.__file__.rsplit("/models/", 1)[0])
