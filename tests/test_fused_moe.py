"""`models.kernels.fused_moe` (`model.experts=triton`): the fused MoE kernels, run by Triton's interpreter on the CPU.

TRITON_INTERPRET must be set before triton (and the kernel module) is imported (conftest sets it); the
interpreter multiplies float32 copies of the tiles (its bfloat16 `tl.dot` is wrong in triton 3.9), so float32
checks the kernels' indexing and arithmetic exactly, and bfloat16 checks the storage casts around them."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch
from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaTextExperts

from models.kernels import fused_moe
from models.tiny import diffusion_config

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not fused_moe.available(), reason="needs triton (CUDA or TRITON_INTERPRET=1)")


def _experts(num_experts: int, top_k: int, dtype=torch.float32, hidden: int = 48, seed: int = 0):
    """A DiffusionGemma experts module (intermediate 32: gate/up 64) with random weights of O(1) outputs."""
    cfg = diffusion_config(100, hidden=hidden, intermediate=128, num_experts=num_experts).text_config
    cfg.top_k_experts = top_k
    torch.manual_seed(seed)
    ex = DiffusionGemmaTextExperts(cfg)
    with torch.no_grad():
        ex.gate_up_proj.normal_(0, 0.3)
        ex.down_proj.normal_(0, 0.3)
    return ex.to(dtype), cfg


def _routing(tokens: int, experts: int, top_k: int, seed: int = 0, hot: int | None = None):
    """Distinct experts per token (expert `hot` picked by every token: more pairs than one block holds)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(tokens):
        perm = torch.randperm(experts, generator=g)
        if hot is not None:
            perm = torch.cat([torch.tensor([hot]), perm[perm != hot]])
        rows.append(perm[:top_k])
    weights = torch.rand(tokens, top_k, generator=g).softmax(-1)
    return torch.stack(rows), weights


def _run(ex, cfg, impl: str, x, idx, w):
    cfg._experts_implementation = impl
    with torch.no_grad():
        return ex(x, idx, w)


@pytest.mark.parametrize("bm", [16, 32, 64])
def test_route_gives_each_sorted_pair_to_one_block_of_its_expert(bm):
    idx, _ = _routing(57, 9, 3, seed=bm, hot=4)
    order, table = fused_moe.route(idx, 9, bm)
    ids = idx.reshape(-1)
    assert table.shape == (3, math.ceil(ids.numel() / bm) + 9)
    assert torch.equal(ids[order], torch.sort(ids, stable=True).values)
    covered = torch.zeros(ids.numel(), dtype=torch.long)
    for e, first, end in table.T.tolist():
        if e < 0:
            continue
        rows = torch.arange(first, min(first + bm, end))
        assert len(rows) > 0 and bool((ids[order[rows]] == e).all())
        covered[rows] += 1
    assert bool((covered == 1).all())
    counts = torch.bincount(ids, minlength=9)
    assert int((table[0] >= 0).sum()) == int(((counts + bm - 1) // bm).sum())


def test_fused_experts_equal_transformers_in_float32():
    """Every pair once, an expert with no pairs, one with more pairs than a block: equal to the eager loop and to
    grouped_mm up to float32 summation order."""
    ex, cfg = _experts(7, 3)
    x = torch.randn(40, 48)
    idx, w = _routing(40, 6, 3, hot=2)  # expert 6 gets no pair; expert 2 gets all 40 tokens (3 blocks of 16)
    ours = _run(ex, cfg, "triton", x, idx, w)
    for impl in ("eager", "grouped_mm"):
        torch.testing.assert_close(ours, _run(ex, cfg, impl, x, idx, w), atol=2e-6, rtol=1e-5)


def test_fused_experts_in_bfloat16_are_as_close_to_exact_as_grouped_mm():
    """bf16 weights and states: against the float64 result of the same weights, our error is within what
    grouped_mm's own bf16 rounding gives (it rounds gate/up and the down output to bf16; we keep them in float32)."""
    ex, cfg = _experts(8, 2, torch.bfloat16)
    x = torch.randn(33, 48, dtype=torch.bfloat16)
    idx, w = _routing(33, 8, 2, seed=3)
    exact = _run(ex.double(), cfg, "eager", x.double(), idx, w.double())
    ex = ex.to(torch.bfloat16)
    ours = _run(ex, cfg, "triton", x, idx, w)
    assert ours.dtype == torch.bfloat16
    err = (ours.double() - exact).abs().max()
    theirs = (_run(ex, cfg, "grouped_mm", x, idx, w).double() - exact).abs().max()
    assert err <= 1.5 * theirs, (err, theirs)


def test_the_fused_experts_are_deterministic_and_per_token():
    """The same inputs give the same bits (no atomics: the top-k sum is torch's); a token's row does not depend on
    the other tokens beyond rounding (which block a pair lands in changes only its place in a tile; the
    interpreter's numpy matmul may round a row differently by its place, so not bit for bit here)."""
    ex, cfg = _experts(6, 2)
    x = torch.randn(20, 48)
    idx, w = _routing(20, 6, 2, seed=5)
    full = _run(ex, cfg, "triton", x, idx, w)
    assert torch.equal(full, _run(ex, cfg, "triton", x, idx, w))
    part = torch.tensor([3, 11, 17])
    torch.testing.assert_close(_run(ex, cfg, "triton", x[part], idx[part], w[part]), full[part], atol=4e-6, rtol=0)


@pytest.mark.slow
def test_the_fused_experts_compile_into_one_graph():
    """Under torch.compile(fullgraph=True) the two kernels are opaque custom ops: no graph break, same result."""
    ex, cfg = _experts(6, 2)
    cfg._experts_implementation = "triton"
    x = torch.randn(12, 48)
    idx, w = _routing(12, 6, 2, seed=7)
    report = torch._dynamo.explain(ex)(x, idx, w)
    assert report.graph_break_count == 0 and report.graph_count == 1
    with torch.no_grad():
        compiled = torch.compile(ex, fullgraph=True)(x, idx, w)
    torch.testing.assert_close(compiled, _run(ex, cfg, "triton", x, idx, w), atol=1e-6, rtol=1e-6)


def test_unsupported_experts_are_refused():
    ex, cfg = _experts(4, 2)
    cfg.hidden_activation = "silu"
    x = torch.randn(4, 48)
    idx, w = _routing(4, 4, 2)
    with pytest.raises(ValueError, match="GELU"):
        _run(ex, cfg, "triton", x, idx, w)


@pytest.mark.slow
def test_model_experts_is_checked_before_anything_loads(tmp_path):
    """A bad `model.experts`, or `triton` where it cannot run (a CPU without the interpreter), fails with the
    option's name before the checkpoint is even resolved (the path does not exist)."""
    from models.ar import ARDecoder
    from models.diffusion_gemma import DiffusionGemmaAdapter

    for decoder in (DiffusionGemmaAdapter, ARDecoder):
        with pytest.raises(ValueError, match="model.experts must be one of"):
            decoder(str(tmp_path / "missing"), experts="fast")
    code = (
        "from models.diffusion_gemma import DiffusionGemmaAdapter\n"
        "try:\n"
        f"    DiffusionGemmaAdapter({str(tmp_path / 'missing')!r}, experts='triton', device='cpu')\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert "refused: model.experts=triton needs Triton and a CUDA device" in out.stdout, out.stderr[-2000:]


@pytest.mark.slow
def test_the_whole_step_with_fused_experts_is_one_graph(adapter_factory, medium_diffusion_dir):
    """`model.experts=triton` under `model.compile=step`: decoder layers with the custom ops, self-conditioning,
    LM head and sampler trace as one graph with no break."""
    from tests.test_step_graph import _explain

    report = _explain(adapter_factory(medium_diffusion_dir, experts="triton"), 1)
    assert report.graph_break_count == 0, [r.reason for r in report.break_reasons]
    assert report.graph_count == 1


@pytest.mark.slow
def test_the_compiled_step_with_fused_experts_matches_the_eager_grouped_mm_step(adapter_factory, medium_diffusion_dir):
    """Two compiled steps with `model.experts=triton` (inductor calls the kernels as extern ops) against the
    engine's eager step with transformers' grouped_mm: the same tokens, history and stop flags, the logits within
    the step-graph tolerance."""
    from harness.engine.step_graph import WholeStep
    from samplers.config import EntropyBoundConfig
    from tests.test_step_graph import two_steps_match

    ours = adapter_factory(medium_diffusion_dir, experts="triton", compile="step")
    assert ours.describe()["experts_implementation"] == "triton"
    cfg = EntropyBoundConfig()
    two_steps_match(WholeStep(ours, cfg), ours, adapter_factory(medium_diffusion_dir), cfg, 2)


def test_no_tokens_give_an_empty_result():
    ex, cfg = _experts(4, 2)
    out = _run(ex, cfg, "triton", torch.randn(0, 48), torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, 2))
    assert out.shape == (0, 48)


@pytest.mark.slow
def test_the_engine_with_fused_experts_decodes_as_with_grouped_mm(adapter_factory, windowed_dir):
    """Continuous batching at batch 3, eager engine: every sample's tokens, forwards and accept counts equal those
    with transformers' grouped_mm experts (float32 tiny model: the experts' outputs differ by rounding only)."""
    from contract.records import GenerationRequest
    from harness.engine.decode import BlockDiffusionDecoder
    from samplers.config import EntropyBoundConfig

    prompts = ["hi", "a longer prompt here", "mid size", "x", "0123456789abcdef"]
    results = {}
    for experts in ("grouped_mm", "triton"):
        adapter = adapter_factory(windowed_dir, experts=experts)
        dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig())
        reqs = [
            GenerationRequest(f"s{i}", adapter.encode(p), seed=100 + i, max_new_tokens=8 * (1 + i % 3))
            for i, p in enumerate(prompts)
        ]
        results[experts] = {r.sample_id: (r.token_ids, r.nfe, r.accepted_per_step) for r in dec.stream(reqs, 3)}
    assert results["triton"] == results["grouped_mm"]


@pytest.mark.slow
def test_without_triton_models_load_and_the_option_is_refused():
    """Every model load imports models.kernels.fused_moe: with no importable triton it still imports, and only
    `model.experts=triton` is refused, by name."""
    code = (
        "import sys\n"
        "sys.modules['triton'] = None\n"  # `import triton` raises ImportError
        "from models.kernels import fused_moe\n"
        "assert not fused_moe.available('cuda')\n"
        "assert fused_moe.loading_kwargs('grouped_mm', 'cuda') == {'experts_implementation': 'grouped_mm'}\n"
        "try:\n"
        "    fused_moe.loading_kwargs('triton', 'cuda')\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert "refused: model.experts=triton needs Triton" in out.stdout, out.stderr[-2000:]
