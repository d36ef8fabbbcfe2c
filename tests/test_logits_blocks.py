"""models.kernels.logits_blocks through `DiffusionGemmaAdapter.denoise`: the LM head and the self-conditioning matmul
read
their (V, H) weight once per step for the whole batch (not once per row and block), a forced-small budget splits
them into the expected number of blocks, the logits equal a plain per-row loop's, and the extra memory at the real
vocabulary stays within 1.5 U (U = one float32 B x C x V tensor)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from models.diffusion_gemma import DiffusionGemmaAdapter
from models.kernels import logits_blocks
from models.tiny import char_tokenizer
from tests.test_memory import LiveBytes, _tiny_model, small_config

MM = (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm, torch.ops.aten.matmul)


class WeightReads(TorchDispatchMode):
    """Counts the matmuls with an operand on the storage of `weight`: (V, H) = the embedding (self-conditioning),
    (H, V) = the LM head (tied: the same tensor, transposed)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.ptr, self.shape = weight.untyped_storage().data_ptr(), tuple(weight.shape)
        self.counts = {"embedding": 0, "lm_head": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in MM:
            for a in args:
                if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == self.ptr:
                    self.counts["embedding" if tuple(a.shape[-2:]) == self.shape else "lm_head"] += 1
        return func(*args, **(kwargs or {}))


def _adapter(dtype=torch.float32, vocab=512, canvas=8, hidden=64) -> DiffusionGemmaAdapter:
    model = _tiny_model(small_config(hidden=hidden, canvas=canvas, vocab=vocab), dtype)
    return DiffusionGemmaAdapter.from_model(model, char_tokenizer(), eos_token_ids=[1])


@pytest.fixture(scope="module")
def f32():
    return _adapter()


@pytest.fixture(scope="module")
def bf16():
    return _adapter(torch.bfloat16)


def _prompts(b: int) -> list[list[int]]:
    return [[5 + (i + j) % 40 for j in range(6 + 3 * i)] for i in range(b)]


def _inputs(a: DiffusionGemmaAdapter, b: int, seed: int = 0, prompts=None):
    c, v = a.canvas_length, a.vocab_size
    state = a.prefill(prompts or _prompts(b))
    g = torch.Generator().manual_seed(seed)
    canvas = torch.randint(3, v - 3, (b, c), generator=g)
    sc = torch.randn(b, c, v, generator=g) * 3
    return state, a.canvas_masks(state, c), canvas, sc


def _layout(kind: str, sc: torch.Tensor, model_dtype: torch.dtype):
    """(sc, out) as the callers pass them: the torch path (one float32 workspace, out is sc), the fused path (raw
    and sc separate, in the model dtype), a separate float32 out, none, and a float64 out (head result cast)."""
    if kind == "same":
        return sc, sc
    if kind == "fused":
        return sc.to(model_dtype), torch.empty(sc.shape, dtype=model_dtype)
    return sc, {"sep": torch.empty(sc.shape), "none": None, "f64": torch.empty(sc.shape, dtype=torch.float64)}[kind]


def reference_denoise(a: DiffusionGemmaAdapter, state, canvas, masks, sc, sc_rows) -> torch.Tensor:
    """The old path: self-conditioning and LM head one batch row at a time (transformers' numerics)."""
    dec = a.model.model.decoder
    w = dec.embed_tokens.weight
    embeds = dec.embed_tokens(canvas)
    soft = torch.zeros_like(embeds)
    scale = dec.embed_tokens.embed_scale.to(embeds.dtype)
    for i in range(canvas.shape[0]):
        if sc is not None and sc_rows[i]:
            probs = sc[i].to(w.dtype).softmax(dim=-1, dtype=torch.float32).to(w.dtype)
            soft[i] = torch.matmul(probs, w) * scale
    hidden = dec.self_conditioning(embeds, soft)
    starts = state.lengths[: canvas.shape[0]]
    state.cache.begin(None, starts, canvas.shape[1])
    positions = torch.tensor(starts)[:, None] + torch.arange(canvas.shape[1])
    hidden = a._decoder_layers(hidden, positions, masks, state.cache)
    head = a.model.lm_head.weight
    return torch.stack([torch.matmul(hidden[i], head.t()).float() for i in range(canvas.shape[0])])


@pytest.mark.slow
@pytest.mark.parametrize("b", [1, 8])
@pytest.mark.parametrize("kind", ["same", "fused", "sep"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_each_weight_is_read_once_per_step(request, dtype, kind, b):
    """Every layout the engine passes (torch path: out is sc; fused path: separate model-dtype buffers; a
    separate float32 out): one embedding and one LM-head matmul per denoise call (the per-row path made B each)."""
    a = request.getfixturevalue(dtype)
    state, masks, canvas, sc = _inputs(a, b)
    sc, out = _layout(kind, sc, a.dtype)
    weight = a.model.lm_head.weight
    assert weight is a.model.model.decoder.embed_tokens.weight  # tied: the shape tells the two reads apart
    with torch.no_grad(), WeightReads(weight) as reads:
        a.denoise(state, canvas, masks, sc, [True] * b, out=out)
    assert reads.counts == {"embedding": 1, "lm_head": 1}


@pytest.mark.parametrize("b", [1, 8])
def test_a_small_budget_splits_into_ceil_blocks(f32, monkeypatch, b):
    """Budget m positions' worth of float32 logits: the LM head into a float64 out (its float32 result is the
    transient) takes ceil(B C / m) matmuls; the self-conditioning without scratch (out=None) gives a quarter of
    the budget to the softmax chunk and the rest to the probabilities: ceil(B C / (m - m // 4))."""
    m, c = 8, f32.canvas_length
    monkeypatch.setattr(logits_blocks, "budget_bytes", lambda rows, canvas, vocab: m * vocab * 4)
    state, masks, canvas, sc = _inputs(f32, b)
    weight = f32.model.lm_head.weight
    expected = {}
    for kind in ("f64", "none"):
        _, out = _layout(kind, sc, f32.dtype)
        with torch.no_grad(), WeightReads(weight) as reads:
            x = f32.denoise(state, canvas, masks, sc, [True] * b, out=out)
        expected[kind] = reads.counts
        torch.testing.assert_close(x.float(), reference_denoise(f32, state, canvas, masks, sc, [True] * b))
    n = b * c
    assert expected["f64"] == {"embedding": 1, "lm_head": math.ceil(n / m)}  # the probabilities go into out
    assert expected["none"] == {"embedding": math.ceil(n / (m - m // 4)), "lm_head": 1}


@pytest.mark.slow
@pytest.mark.parametrize("budget", ["default", "small"])
@pytest.mark.parametrize("kind", ["same", "fused", "sep", "none", "f64"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_logits_equal_the_per_row_loop(request, monkeypatch, dtype, kind, budget):
    """Mixed rows (some without self-conditioning), every caller layout, default and tiny budgets: the logits are
    the per-row loop's to float32 rounding (bit for bit at the default budget on this CPU; blocks of 3 positions
    round differently, ~1e-6), rows without self-conditioning see zeros, and `sc` is left unchanged unless it is
    `out`."""
    a = request.getfixturevalue(dtype)
    if budget == "small":
        monkeypatch.setattr(logits_blocks, "budget_bytes", lambda rows, canvas, vocab: 3 * vocab * 4)
    b = 5
    sc_rows = [True, False, True, True, False]
    state, masks, canvas, sc0 = _inputs(a, b, seed=1)
    sc, out = _layout(kind, sc0.clone(), a.dtype)
    ref = reference_denoise(a, state, canvas, masks, sc, sc_rows)
    before = sc.clone()
    with torch.no_grad():
        x = a.denoise(state, canvas, masks, sc, sc_rows, out=out)
        plain = a.denoise(state, canvas, masks, None, sc_rows)
    if out is not None:
        assert x is out
    if kind != "same":
        assert torch.equal(sc, before)
    diff = (x.double() - ref.double()).abs().max().item()
    assert diff <= 1e-5 * max(1.0, ref.abs().max().item()), diff
    for i in (1, 4):  # no self-conditioning: the same as a forward without it
        torch.testing.assert_close(x[i].float(), plain[i].float(), rtol=0, atol=1e-5 * ref.abs().max().item())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("vocab", [512, 262_144])
def test_a_rows_blocks_depend_on_its_batch_no_more_than_rounding(dtype, vocab):
    """Row 2's self-conditioning signal and logits in a batch of 8 (one matmul over all rows' positions) vs alone
    (one over its own 8): a matmul over more rows may round differently (on this CPU at K = 262,144 in float32,
    ~1e-6 at values ~0.1), but the two differ by no more than either differs from the float64 result."""
    b, c, h = 8, 8, 64
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(vocab, h, generator=g) * 0.05).to(dtype)
    scale = torch.tensor(8.0, dtype=dtype)
    sc = torch.randn(b, c, vocab, generator=g) * 3
    hidden = torch.randn(b, c, h, generator=g).to(dtype)
    soft = [torch.zeros(n, c, h, dtype=dtype) for n in (b, 1)]
    logits = [torch.empty(n, c, vocab) for n in (b, 1)]
    for i, n in enumerate((b, 1)):
        budget = logits_blocks.budget_bytes(n, c, vocab)
        logits_blocks.self_conditioning_into(soft[i], sc[2:3] if i else sc, list(range(n)), w, scale, budget)
        logits_blocks.lm_head_into(logits[i], hidden[2:3] if i else hidden, w, budget)
    probs = sc[2].to(dtype).softmax(dim=-1, dtype=torch.float32).to(dtype).double()
    for (batched, alone), exact in (
        ((soft[0][2], soft[1][0]), probs @ w.double() * scale.item()),
        ((logits[0][2], logits[1][0]), hidden[2].double() @ w.double().t()),
    ):
        rounding = max((batched.double() - exact).abs().max(), (alone.double() - exact).abs().max())
        assert (batched.double() - alone.double()).abs().max() <= rounding


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dtype", "kind"),
    [(torch.float32, "same"), (torch.bfloat16, "same"), (torch.bfloat16, "fused")],
    ids=["f32-torch-path", "bf16-torch-path", "bf16-fused-path"],
)
def test_extra_memory_at_the_real_vocabulary_is_within_1_5_u(dtype, kind):
    """V = 262,144, B = 2, C = 64 on a narrow model: the workspace (1 U, allocated by the caller) plus the peak of
    what one denoise call allocates (LiveBytes, as in tests/test_memory.py) stays within 1.5 U, besides a few
    hidden-state-sized activations. The torch path in bfloat16 (float32 workspace, bf16 head) holds the one
    full-batch transient, the head's bf16 result (0.5 U); the others hold a softmax chunk at most."""
    b, c, v = 2, 64, 262_144
    a = _adapter(dtype, vocab=v, canvas=c, hidden=16)
    state, masks, canvas, sc = _inputs(a, b)
    sc, out = _layout(kind, sc, a.dtype)
    u = b * c * v * 4
    workspace = out.nbytes + (sc.nbytes if sc is not out else 0)
    held = list(a.model.parameters()) + list(a.model.buffers()) + [sc, out]
    held += [t for t in state.cache.keys + state.cache.values if t is not None]
    with torch.no_grad(), LiveBytes(ignore=held) as mode, WeightReads(a.model.lm_head.weight) as reads:
        a.denoise(state, canvas, masks, sc, [True] * b, out=out)
    assert reads.counts == {"embedding": 1, "lm_head": 1}
    activations = 4 * b * c * a.config.text_config.hidden_size * 4
    assert workspace + mode.peak <= 1.5 * u + activations, (workspace / u, mode.peak / u)
    if not (dtype == torch.bfloat16 and kind == "same"):
        assert mode.peak <= 0.2 * u
