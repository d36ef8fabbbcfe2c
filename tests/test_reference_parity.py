"""The reference mode (`sampler.random_stream=reference`) is an exact parity tool past one canvas and past the window.

On the released-shape twin (`tests.test_batch_invariance.build_twin`: 6 layers in the 5:1 sliding/full pattern, head
dims 256 / 512 with 8 / 2 K/V heads, window 1024, 128 experts top-8, canvas 256, float32 CPU), prompts of 200, 700
and 1,300 tokens over three canvases: the lockstep loop equals `generate()` token for token (run with transformers'
stock `sdpa`). On its 2-layer cut (one sliding, one full layer) each canvas's first-step logits equal those of
transformers' incremental encoder / decoder calls bit for bit. The continuous engine's slot cache (chunked prefill,
sliding layers in a ring) is measured beside it: its logits differ by rounding once the prompt spans more than one
chunk or the context passes the window (and its tokens part from `generate()`'s at 6 layers).
"""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from contract.records import GenerationRequest
from harness.engine.decode import BlockDiffusionDecoder
from models.cache import slot_attention
from samplers.config import EntropyBoundConfig
from samplers.sampler_step import process_logits
from tests.test_batch_invariance import TWIN_VOCAB, _prompts, build_twin

pytestmark = pytest.mark.slow

LENGTHS = [200, 700, 1300]  # within the window for all three canvases; past it from the third; past it at once
CANVASES = 3


@pytest.fixture(scope="module")
def twin():
    """6 layers: rounding differences grow through them into other tokens (at 2 layers the slot cache's do not)."""
    return build_twin()


@pytest.fixture(scope="module")
def short_twin():
    """One sliding and one full layer: the released attention shapes; bitwise logits need no depth to tell."""
    return build_twin(layers=2)


@torch.no_grad()
def stock_generate(adapter, ids: torch.Tensor, seed: int, max_steps: int) -> list[list[int]]:
    """transformers' `generate()` with its stock `sdpa` (the adapter installed `slot_sdpa` on the shared config)."""
    model = adapter.model
    model.set_attn_implementation("sdpa")
    try:
        assert model.config.get_text_config()._attn_implementation == "sdpa"
        torch.manual_seed(seed)
        out = model.generate(
            ids,
            max_new_tokens=CANVASES * adapter.canvas_length,
            max_denoising_steps=max_steps,
            eos_token_id=TWIN_VOCAB,  # no EOS the model can sample: every canvas runs
            pad_token_id=0,
        )
    finally:
        slot_attention.install(model)
    return out.sequences[:, ids.shape[1] :].tolist()


@torch.no_grad()
def transformers_canvas_logits(model, prompt: list[int], canvases: torch.Tensor, noise: torch.Tensor) -> list:
    """Per canvas k, the softcapped first-step logits (C, V) of the noisy canvas noise[k] as `generate()` computes
    them: one encoder forward over the prompt into a `DynamicCache`, then per canvas transformers' decoder forward
    and the re-encoding of canvases[k] (written from `generate()`'s own calls, independently of the adapter)."""
    c = canvases.shape[1]
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    ids = torch.tensor([prompt])
    attn = torch.ones_like(ids, dtype=torch.bool)
    positions = torch.arange(len(prompt), dtype=torch.int32)[None]
    out = []
    for k in range(canvases.shape[0]):
        dummy = torch.empty((*ids.shape, 0), dtype=model.dtype)
        enc = model.model.encoder
        masks = enc.create_masks_for_generate(
            config=model.config, inputs_embeds=dummy, attention_mask=attn, past_key_values=cache, position_ids=positions
        )
        enc(input_ids=ids, attention_mask=masks, past_key_values=cache, position_ids=positions)
        start = int(positions[0, -1]) + 1
        positions = torch.arange(start, start + c, dtype=torch.int32)[None]
        dec_mask = model.model.decoder.create_diffusion_decoder_attention_mask(
            config=model.config,
            inputs_embeds=noise[k : k + 1, :, None],
            past_key_values=cache,
            decoder_attention_mask=torch.nn.functional.pad(attn, (0, c), value=True),
        )
        logits = model(
            decoder_input_ids=noise[k : k + 1],
            decoder_attention_mask=dec_mask,
            past_key_values=cache,
            decoder_position_ids=positions,
        ).logits
        out.append(logits[0])
        ids, attn = canvases[k : k + 1], torch.nn.functional.pad(attn, (0, c), value=True)
    return out


@torch.no_grad()
def adapter_canvas_logits(adapter, prompt: list[int], canvases: torch.Tensor, noise: torch.Tensor, whole: bool):
    """The same logits from the adapter: the reference mode's state (`whole`) or the continuous engine's slot cache."""
    c = canvases.shape[1]
    state = adapter.prefill_whole([prompt]) if whole else adapter.prefill([prompt])
    out = []
    for k in range(canvases.shape[0]):
        x = adapter.denoise(state, noise[k : k + 1], adapter.canvas_masks(state, c))
        out.append(process_logits(x, adapter.softcap, torch.ones(1))[0])
        if k < canvases.shape[0] - 1:
            state = adapter.commit(state, canvases[k : k + 1])
    return out


def compare(ours: list, theirs: list) -> list[tuple[float, float]]:
    """Per canvas: (max |logit difference|, share of positions whose argmax agrees)."""
    return [
        (float((a - b).abs().max()), float((a.argmax(-1) == b.argmax(-1)).float().mean()))
        for a, b in zip(ours, theirs, strict=True)
    ]


@pytest.mark.parametrize("length", LENGTHS)
def test_reference_mode_equals_generate_past_the_window(twin, length):
    ids = torch.tensor(_prompts(TWIN_VOCAB, [length]))
    hf = stock_generate(twin, ids, seed=3, max_steps=2)
    torch.manual_seed(3)
    dec = BlockDiffusionDecoder(twin, EntropyBoundConfig(random_stream="reference", draw="exact", max_steps=2))
    ours = dec.generate([GenerationRequest("0", ids[0].tolist(), seed=0, max_new_tokens=CANVASES * 256)])
    assert len(ours[0].token_ids) == CANVASES * 256
    assert ours[0].token_ids == hf[0]


def test_reference_logits_equal_transformers_bit_for_bit(short_twin):
    """Each canvas's first-step logits: the reference mode's are transformers' exactly; the slot cache's differ by
    rounding once its prefill is chunked or the context passes the window (printed: the README's figures)."""
    twin = short_twin
    g = torch.Generator().manual_seed(11)
    c, v = twin.canvas_length, twin.vocab_size
    slot_worst = 0.0
    for length in LENGTHS:
        prompt = _prompts(v, [length])[0]
        canvases = torch.randint(3, v - 3, (CANVASES, c), generator=g)
        noise = torch.randint(0, v, (CANVASES, c), generator=g)
        theirs = transformers_canvas_logits(twin.model, prompt, canvases, noise)
        ref = compare(adapter_canvas_logits(twin, prompt, canvases, noise, whole=True), theirs)
        slot = compare(adapter_canvas_logits(twin, prompt, canvases, noise, whole=False), theirs)
        print(f"prompt {length}: reference {ref}; slot cache {slot}")
        assert ref == [(0.0, 1.0)] * CANVASES
        slot_worst = max(slot_worst, *(d for d, _ in slot))
    assert slot_worst > 0.0  # the comparison can tell the two caches apart
