"""MoE expert activation per forward (models.instruments.expert_counter) against a hand count from the routers' own
outputs,
on a tiny DiffusionGemma with 16 experts top-2, through the adapter calls the engine makes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.engine.decoders import decoder_for
from models.instruments.expert_counter import ExpertCounter, for_decoder

EXPERTS, TOP_K, C = 16, 2, 16


@pytest.fixture(scope="module")
def moe_adapter():
    from transformers import DiffusionGemmaForBlockDiffusion

    from models.diffusion_gemma import DiffusionGemmaAdapter
    from models.tiny import char_tokenizer, diffusion_config, vocab_size_for

    tok = char_tokenizer()
    config = diffusion_config(vocab_size_for(tok), layers=3, num_experts=EXPERTS, canvas_length=C)
    config.text_config.top_k_experts = TOP_K
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(config)
    with torch.no_grad():  # a random router is near uniform; spread its scores so the count means something
        for name, p in model.named_parameters():
            if name.endswith("router.proj.weight"):
                p.normal_(0, 2.0)
    return DiffusionGemmaAdapter.from_model(model, tok, name="moe16", eos_token_ids=[1])


class HandCount:
    """Every router call's top-k indices, grouped into forwards by side (the first layer starts one)."""

    def __init__(self, model):
        self.forwards: list[tuple[str, list]] = []  # (side, [per layer: (N, K) list])
        self.handles = []
        for name, m in model.named_modules():
            if type(m).__name__.endswith("TextRouter"):
                side = "decoder" if ".decoder." in name else "encoder"
                first = name.split(".layers.")[1].startswith("0.")
                self.handles.append(m.register_forward_hook(self._hook(side, first)))

    def _hook(self, side, first):
        def hook(_m, _a, out):
            if first:
                self.forwards.append((side, []))
            self.forwards[-1][1].append(out[2].tolist())

        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def hand_figures(layers: list, rows: int, valid: list[list[bool]] | None):
    """Per layer: distinct experts over the real tokens of the forward, and the mean over rows of each row's."""
    union, per_row = [], []
    for idx in layers:
        tokens = len(idx) // rows
        sets = [set() for _ in range(rows)]
        for n, experts in enumerate(idx):
            r, s = divmod(n, tokens)
            if valid is None or valid[r][s]:
                sets[r].update(experts)
        union.append(len(set().union(*sets)))
        per_row.append(sum(len(x) for x in sets) / rows)
    return union, per_row


def test_counts_match_a_hand_count_of_the_router_outputs(moe_adapter):
    a = moe_adapter
    counter = ExpertCounter(a.model)
    counter.label_calls(a, {"prefill": "prefill", "commit": "commit"})
    hand = HandCount(a.model)
    try:
        prompts = [[10, 11, 12, 13, 14], [20, 21, 22, 23, 24, 25, 26, 27, 28]]  # row 0 padded to the chunk
        gen = torch.Generator().manual_seed(0)
        state = a.prefill(prompts)
        masks = a.canvas_masks(state, C)
        canvas = torch.randint(6, a.vocab_size - 3, (2, C), generator=gen)
        a.denoise(state, canvas, masks)
        a.denoise(state, torch.randint(6, a.vocab_size - 3, (2, C), generator=gen), masks)
        state = a.commit(state, canvas[:1], [0])  # one row commits (the other is not computed)
        with counter.labelled("ar"):  # a one-token forward on every row, as AR decoding runs it (unlabelled call)
            type(a).commit(a, state, canvas[:, :1])
        raw = counter.raw()
    finally:
        hand.close()
        counter.close()
    assert "prefill" not in a.__dict__  # close() restored the methods
    assert counter.forwards() == {"prefill": 1, "denoise": 2, "commit": 1, "ar": 1}
    assert [s for s, _ in hand.forwards] == ["encoder", "decoder", "decoder", "encoder", "encoder"]
    assert all(len(layers) == 3 for _, layers in hand.forwards)

    valid = [[True] * 5 + [False] * 4, [True] * 9]  # the prefill's real tokens
    expected = {
        "prefill": [hand_figures(hand.forwards[0][1], 2, valid)],
        "denoise": [hand_figures(hand.forwards[i][1], 2, None) for i in (1, 2)],
        "commit": [hand_figures(hand.forwards[3][1], 1, None)],
        "ar": [hand_figures(hand.forwards[4][1], 2, None)],
    }
    for kind, figures in expected.items():
        union, per_row = raw[kind]
        assert union.tolist() == [u for u, _ in figures], kind
        np.testing.assert_allclose(per_row, [r for _, r in figures], err_msg=kind)
    # what the figures mean: one AR token touches top_k experts per layer; a 16-token canvas many more
    assert (raw["ar"][1] == TOP_K).all()
    assert raw["denoise"][1].mean() > 3 * TOP_K
    assert (raw["denoise"][0] >= raw["denoise"][1]).all()  # the batch union covers each row's set
    # padding is excluded: counting the prefill's pad tokens too would give a different figure
    padded = hand_figures(hand.forwards[0][1], 2, None)
    assert padded != expected["prefill"][0]


def test_summary_shape(moe_adapter):
    a = moe_adapter
    with ExpertCounter(a.model) as counter:
        state = a.prefill([[10, 11, 12]])
        masks = a.canvas_masks(state, C)
        for seed in range(5):
            a.denoise(state, torch.randint(6, 90, (1, C), generator=torch.Generator().manual_seed(seed)), masks)
        s = counter.summary()
    assert s["num_experts"] == EXPERTS and s["top_k"] == TOP_K and s["moe_layers"] == 3
    d = s["denoise"]
    assert d["forwards"] == 5 and len(d["per_layer_mean"]) == 3
    assert TOP_K <= d["p50"] <= d["p90"] <= EXPERTS and d["per_row"]["mean"] == pytest.approx(d["mean"])  # batch 1
    assert s["prefill"]["forwards"] == 1 and s["prefill"]["mean"] <= 3 * TOP_K


def test_engine_forward_kinds(moe_adapter):
    """Through the decode engine: one denoiser forward per engine step, one prefill, commits between canvases."""
    from contract.records import GenerationRequest
    from harness.engine.decoders import decoder_for
    from samplers.config import EntropyBoundConfig

    dec = decoder_for(moe_adapter, EntropyBoundConfig(max_steps=3, adaptive_stop=False))
    counter = for_decoder(dec)
    try:
        reqs = [GenerationRequest(f"r{i}", [10 + i, 11, 12], seed=i, max_new_tokens=2 * C) for i in range(3)]
        res = dec.generate(reqs)
        n = counter.forwards()
        s = counter.summary()
    finally:
        counter.close()
    assert n["prefill"] == 1 and n["denoise"] == max(r.nfe for r in res) == 6
    assert n["commit"] == 1  # every row commits its first canvas in the same step
    assert set(s) >= {"denoise", "prefill", "commit"} and s["denoise"]["p90"] <= EXPERTS


def test_metrics_and_per_layer_figure(moe_adapter, tmp_path):
    """A run's `experts_per_forward` record (as harness.run writes it) and the figure the sweep summary draws."""
    from harness.figures.experts_plot import experts_figures
    from tests.helpers.runs import make_run_dir

    a = moe_adapter
    with ExpertCounter(a.model) as counter:
        state = a.prefill([[10, 11, 12]])
        a.denoise(
            state, torch.randint(6, 90, (1, C), generator=torch.Generator().manual_seed(0)), a.canvas_masks(state, C)
        )
        record = counter.summary()
    with_metric = make_run_dir(
        tmp_path, "moe", [(16, 1, 1, [1])], model="moe16", extra_metrics={"experts_per_forward": record}
    )
    without = make_run_dir(tmp_path, "dense", [(16, 1, 1, [1])], model="dense")
    written = experts_figures([with_metric, without], tmp_path / "plots")
    assert [p.name for p in written] == ["experts_moe16.png"] and written[0].stat().st_size > 10_000


def test_gemma4_moe_ar_decoder(tmp_path):
    """A Gemma 4 MoE causal LM through the AR baseline (the AR engine): one prefill of the whole prompts, which
    yields each row's first token (its first NFE, as in `generate()`), then one-token forwards that touch exactly
    top_k experts per layer per row."""
    from transformers import Gemma4ForCausalLM

    from contract.records import GenerationRequest
    from models.ar import ARDecoder
    from models.tiny import ar_config, char_tokenizer, vocab_size_for

    tok = char_tokenizer()
    config = ar_config(vocab_size_for(tok))
    config.enable_moe_block, config.num_experts, config.top_k_experts, config.moe_intermediate_size = True, 16, 2, 16
    torch.manual_seed(0)
    Gemma4ForCausalLM(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    dec = decoder_for(ARDecoder(str(tmp_path), dtype="float32", device="cpu", eos_token_ids=[1]), None)
    counter = for_decoder(dec)
    try:
        res = dec.generate([GenerationRequest("a", [10, 11, 12, 13], 0, 6), GenerationRequest("b", [10, 11], 1, 6)])
        n, s = counter.forwards(), counter.summary()
    finally:
        counter.close()
    assert n == {"prefill": 1, "ar": max(r.nfe for r in res) - 1}
    assert s["ar"]["per_row"]["mean"] == TOP_K and s["ar"]["per_row"]["per_layer_mean"] == [TOP_K, TOP_K]
    assert TOP_K <= s["ar"]["mean"] <= 2 * TOP_K  # two rows
