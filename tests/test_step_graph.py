"""The whole denoising step in one graph (`model.compile=step`, harness.engine.step_graph): no graph breaks at B=1 and
B=8, one compiled graph per batch bucket, and the compiled step gives the eager step's results.

Tolerance: the compiled step attends over every slot of the cache (masked) and inductor fuses and reorders the
float32 maths, so its logits differ from eager by rounding only (LOGITS_ATOL); the tokens it draws, accepts
and commits are the same, which the engine test checks sample by sample."""

from __future__ import annotations

import pytest
import torch

from contract.records import GenerationRequest
from harness.engine.commit_graph import WholeCommit
from harness.engine.decode import BlockDiffusionDecoder
from harness.engine.step_graph import WholeStep
from samplers import streams
from samplers.config import EntropyBoundConfig
from samplers.fast_draw import draw_fast, draw_whole
from samplers.sampler_step import sampler_step, torch_sampling

LOGITS_ATOL = 1e-4  # float32 logits of O(10): measured differences are ~1e-6
PROMPTS = ["hi", "a longer prompt here", "mid size", "x", "0123456789abcdef", "zz top", "q", "lorem ipsum dolor"]


def _inputs(adapter, b: int, cfg):
    """A state with b prefilled rows and one step's inputs (canvas, history, workspace, keys, temperature)."""
    c, v = adapter.canvas_length, adapter.vocab_size
    state = adapter.prefill([adapter.encode(p) for p in (PROMPTS * 2)[:b]], adapter.open(b, c), grow=2 * c)
    torch.manual_seed(b)
    keys = torch.tensor([[7 + i for i in range(b)], [0] * b, [0] * b])
    return {
        "state": state,
        "canvas": torch.randint(0, v, (b, c)),
        "history": torch.full((cfg.stability_steps, b, c), -1),
        "logits": torch.zeros(b, c, v),
        "keys": keys,
    }


def _eager_step(adapter, cfg, state, canvas, history, logits, sc_rows, keys):
    """What the engine runs without `compile=step`: `denoise`, then `sampler_step` with the CPU draw."""
    masks = adapter.canvas_masks(state, canvas.shape[1], canvas.shape[0])
    x = adapter.denoise(state, canvas, masks, logits if any(sc_rows) else None, sc_rows, out=logits)
    temperature = cfg.temperatures(keys[2])
    return sampler_step(
        cfg, torch_sampling(draw_fast), x, temperature, adapter.softcap, keys, canvas, history, adapter.vocab_size
    )


def _assert_same_step(o, e, ours: dict, eager: dict, where=None) -> None:
    """A compiled step's output `o` against the eager step's `e`: the processed logits (each side's workspace)
    within LOGITS_ATOL, the tokens, history, stop flags and accepted positions equal."""
    torch.testing.assert_close(ours["logits"], eager["logits"], atol=LOGITS_ATOL, rtol=0)
    for name in ("canvas", "argmax", "history", "finished", "kept", "keep"):
        assert torch.equal(getattr(o, name), getattr(e, name)), (where, name)


def two_steps_match(compiled: WholeStep, ours_adapter, eager_adapter, cfg, b: int) -> dict:
    """Two steps of `compiled` (over `ours_adapter`'s states; the second self-conditioned on all rows but one)
    against the engine's eager step over `eager_adapter`'s: the same tokens, accept counts and stop flags, the
    processed logits within LOGITS_ATOL, one graph. Returns the compiled side's inputs."""
    eager, ours = _inputs(eager_adapter, b, cfg), _inputs(ours_adapter, b, cfg)
    sc_rows = [False] * b
    for step in range(2):
        e = _eager_step(eager_adapter, cfg, sc_rows=sc_rows, **eager)
        temperature = cfg.temperatures(ours["keys"][2])
        o = compiled(ours["state"], ours["canvas"], ours["history"], ours["logits"], sc_rows, ours["keys"], temperature)
        _assert_same_step(o, e, ours, eager, step)
        torch.testing.assert_close(o.mean_entropy, e.mean_entropy, atol=1e-5, rtol=1e-5)
        for i in (eager, ours):
            i["canvas"], i["history"] = e.canvas.clone(), e.history.clone()
            i["keys"] = i["keys"] + torch.tensor([[0], [0], [1]])
        sc_rows = [r != b - 1 for r in range(b)]
    assert compiled.graphs == 1
    return ours


def _capture_with_aot_eager(dec: BlockDiffusionDecoder, adapter, mode: str | None = None) -> None:
    """The decoder's step and commit graphs captured by dynamo with the `aot_eager` backend (seconds, where
    inductor's CPU compiles take about a minute each): for tests of the engine's graph logic, not of inductor."""
    dec._whole = WholeStep(adapter, dec.sampler, backend="aot_eager", mode=mode)
    dec._commit_graph = WholeCommit(adapter, backend="aot_eager", mode=mode)


def _explain(adapter, b: int):
    cfg = EntropyBoundConfig()
    step = WholeStep(adapter, cfg, compile=False)
    i = _inputs(adapter, b, cfg)
    flags = [r % 2 == 0 for r in range(b)]
    temperature = cfg.temperatures(i["keys"][2])
    args = step.graph_args(i["state"], i["canvas"], i["history"], i["logits"], flags, i["keys"], temperature)
    return torch._dynamo.explain(step.step)(*args)


@pytest.mark.slow  # dynamo traces the whole model step (3-7 s at batch 1)
@pytest.mark.parametrize("b", [1, 8])
def test_the_whole_step_traces_as_one_graph(adapter_factory, medium_diffusion_dir, b):
    """Decoder layers (MoE experts included), self-conditioning, LM head and sampler: one graph, no breaks."""
    report = _explain(adapter_factory(medium_diffusion_dir), b)
    assert report.graph_break_count == 0, [r.reason for r in report.break_reasons]
    assert report.graph_count == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "fixture, b, mode",
    [
        ("medium_diffusion_dir", 8, None),
        ("windowed_dir", 1, None),
        ("windowed_dir", 2, "reduce-overhead"),
    ],
)
def test_the_compiled_step_matches_the_eager_step(adapter_factory, request, fixture, b, mode):
    """Two steps (the second self-conditioned on all rows but one), compiled vs the engine's eager step: the same
    tokens, accept counts and stop flags, the processed logits (the next self-conditioning input) within
    LOGITS_ATOL. Inductor compiles the MoE model at batch 8 and the windowed one at batch 1 (`windowed_dir` has a
    sliding window shorter than the context: ring slots); each CPU compile takes about a minute, so the other two
    pairings are not run. `reduce-overhead` (the engine's mode on CUDA): the buffers written in place are static
    addresses, dynamo's marks before any backend, so `aot_eager` captures it, and the results are the same."""
    adapter = adapter_factory(request.getfixturevalue(fixture))
    cfg = EntropyBoundConfig()
    compiled = WholeStep(adapter, cfg, mode=mode, backend="aot_eager" if mode else "inductor")
    ours = two_steps_match(compiled, adapter, adapter, cfg, b)
    if mode == "reduce-overhead":
        state = ours["state"]
        for t in (ours["logits"], *state.cache.keys, *state.cache.values):
            assert getattr(t, "_dynamo_static_input_type", None) == "unguarded"


@pytest.mark.slow
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_the_engine_with_a_compiled_step_decodes_as_eager(adapter_factory, windowed_dir, mode):
    """Continuous batching: every sample's tokens, steps and accept counts equal the eager engine's, and one graph
    is compiled per bucket. Inductor runs the engine at batch 2 (buckets 2 and 1: each CPU compile takes about a
    minute; padded buckets under inductor are the commit tests'). `reduce-overhead` is the engine's mode on CUDA:
    its static-address marks and dynamo's guards are the same here, where no CUDA graph runs, so a graph compiled
    per step (a guard on the per-step view of the logits workspace) shows here; that run captures with `aot_eager`
    (the guards are dynamo's, before any backend) at batch 3 (bucket 4 with a padding row, then 2 and 1)."""
    eager = adapter_factory(windowed_dir)
    whole = adapter_factory(windowed_dir, compile="step")
    results = {}
    for name, adapter in (("eager", eager), ("step", whole)):
        dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig())
        if name == "step" and mode:  # as BlockDiffusionDecoder sets them up on a CUDA model
            _capture_with_aot_eager(dec, adapter, mode)
        reqs = [
            GenerationRequest(f"s{i}", adapter.encode(p), seed=100 + i, max_new_tokens=8 * (1 + i % 3))
            for i, p in enumerate(PROMPTS)
        ]
        results[name] = {r.sample_id: r for r in dec.stream(reqs, batch_size=3 if mode else 2)}
    for sid, res in results["eager"].items():
        got = results["step"][sid]
        assert (got.token_ids, got.nfe, got.accepted_per_step) == (res.token_ids, res.nfe, res.accepted_per_step)
    shapes = dec._whole.shapes
    assert dec._whole.graphs == len(shapes) <= 9, shapes  # per (bucket, commit bucket); capacity fixed
    assert any(k for _, k, _ in shapes), "no commit folded into a step"


@pytest.mark.slow
def test_the_sampler_step_compiles_right_at_a_wide_canvas():
    """At C >= 32 inductor's CPU code for the random streams built in the graph is wrong (a signed overflow
    gcc -O3 exploits: segfaults, out-of-range indices); with `streams.position_keys` passed in it is exact."""
    cfg = EntropyBoundConfig()
    b, c, v = 2, 64, 112
    torch.manual_seed(0)
    logits = torch.randn(b, c, v) * 4
    keys = torch.tensor([[11, 12], [0, 3], [1, 5]])
    canvas, history = torch.randint(0, v, (b, c)), torch.full((1, b, c), -1)
    temperature = cfg.temperatures(keys[2])

    def step(x, keys, canvas, history, positions):
        out = sampler_step(cfg, torch_sampling(draw_whole), x, temperature, 30.0, keys, canvas, history, v, positions)
        return out.canvas, out.argmax, out.kept

    positions = streams.position_keys(c)
    eager = step(logits.clone(), keys, canvas, history, None)
    compiled = torch.compile(step, fullgraph=True, dynamic=False)(logits.clone(), keys, canvas, history, positions)
    for a, b_ in zip(eager, compiled, strict=True):
        assert torch.equal(a, b_)


@pytest.mark.slow
def test_the_compiled_commit_writes_what_the_eager_commit_writes(adapter_factory, windowed_dir):
    """Rows 4, 0 and 2 of 8 commit (bucket 4: row 1 pads): the hidden states and the committing rows' new K/V
    equal the eager commit's within LOGITS_ATOL; every other slot of every row is untouched, except the padding
    row's own canvas slots (which its next denoising step writes before anything reads them)."""
    adapter = adapter_factory(windowed_dir)
    c, v = adapter.canvas_length, adapter.vocab_size
    prompts = [adapter.encode(p) for p in PROMPTS[:6]]
    canvas = torch.randint(3, v, (3, c), generator=torch.Generator().manual_seed(5))
    rows = [4, 0, 2]
    eager = adapter.prefill(prompts, adapter.open(8, c), grow=2 * c)
    ours = adapter.prefill(prompts, adapter.open(8, c), grow=2 * c)
    before = [t.clone() for t in ours.cache.keys + ours.cache.values]
    expected = adapter.encode_canvas(eager, canvas, rows)
    commit = WholeCommit(adapter)
    got = commit(ours, canvas, rows)
    torch.testing.assert_close(got, expected, atol=LOGITS_ATOL, rtol=0)
    assert commit.graphs == 1 and ours.cache.written == eager.cache.written
    cache = ours.cache
    for i, (new, ref, old) in enumerate(zip(cache.keys + cache.values, eager.cache.keys + eager.cache.values, before)):
        modulus = cache.modulus(cache.layer_types[i % len(cache.layer_types)])
        for r in range(8):
            length = ours.lengths[r]
            canvas_slots = sorted({p % modulus for p in range(length, length + c)})
            rest = [s for s in range(new.shape[2]) if s not in canvas_slots]
            if r in rows:
                torch.testing.assert_close(new[r][:, canvas_slots], ref[r][:, canvas_slots], atol=1e-3, rtol=1e-3)
            if r in rows or r == 1:  # the committing rows and the padding row: nothing outside their canvas slots
                assert torch.equal(new[r][:, rest], old[r][:, rest]), (i, r)
            else:
                assert torch.equal(new[r], old[r]), (i, r)


@pytest.mark.slow
@pytest.mark.parametrize("rows", [[3, 0, 2], [1]])
def test_a_commit_folded_into_the_step_equals_commit_then_step(adapter_factory, windowed_dir, rows):
    """Rows `rows` of 4 commit a canvas and denoise their next one in one forward (`with_commit`; [3, 0, 2] pads to
    4 entries with row 1): every row's processed logits within LOGITS_ATOL of the eager commit followed by the eager
    step, the same tokens, accept counts and stop flags; the committed canvases' hidden states within LOGITS_ATOL
    and their K/V within 1e-3; the lengths and highest positions the same afterwards. The window (6) is shorter
    than the canvas (8), so the sliding rings wrap inside the joint forward."""
    adapter = adapter_factory(windowed_dir, compile="step")
    assert adapter.commit_folds
    cfg = EntropyBoundConfig()
    c, b = adapter.canvas_length, 4
    eager, ours = _inputs(adapter, b, cfg), _inputs(adapter, b, cfg)
    assert ours["state"].cache.max_chunk == 2 * c  # the ring holds window - 1 + 2C
    committed = torch.randint(3, adapter.vocab_size, (len(rows), c), generator=torch.Generator().manual_seed(9))
    sc_rows = [r not in rows for r in range(b)]  # a committing row's next canvas has no self-conditioning yet
    temperature = cfg.temperatures(ours["keys"][2])

    hidden_ref = adapter.encode_canvas(eager["state"], committed, rows)
    adapter.advance(eager["state"], rows, [c] * len(rows), hidden_ref)
    e = _eager_step(adapter, cfg, sc_rows=sc_rows, **eager)

    step = WholeStep(adapter, cfg)
    args = (ours["state"], ours["canvas"], ours["history"], ours["logits"], sc_rows, ours["keys"], temperature)
    o, hidden = step.with_commit(*args, committed, rows)
    adapter.advance(ours["state"], rows, [c] * len(rows), hidden)

    _assert_same_step(o, e, ours, eager)
    torch.testing.assert_close(hidden, hidden_ref, atol=LOGITS_ATOL, rtol=0)
    assert ours["state"].lengths == eager["state"].lengths
    assert ours["state"].cache.written == eager["state"].cache.written
    cache, ref = ours["state"].cache, eager["state"].cache
    for i, (new, old) in enumerate(zip(cache.keys + cache.values, ref.keys + ref.values, strict=True)):
        modulus = cache.modulus(cache.layer_types[i % len(cache.layer_types)])
        for r in rows:
            start = eager["state"].lengths[r] - c  # the committed canvas: positions start .. start + C - 1
            slots = sorted({p % modulus for p in range(start, start + c)})
            torch.testing.assert_close(new[r][:, slots], old[r][:, slots], atol=1e-3, rtol=1e-3)
    assert step.graphs == 1 and step.shapes == {(b, len(rows) if len(rows) != 3 else 4, cache.capacity)}


@pytest.mark.slow
def test_the_attended_span_follows_the_longest_row_in_one_graph(adapter_factory, windowed_dir):
    """The full layers attend the slots up to the longest row (rounded up to `span_quantum`), not the whole cache:
    three steps with a commit between them attend three spans, each compiled step equal to the eager step, and one
    graph serves every span below the capacity (the span is a dynamic size); the last span is the whole cache, where
    the slice is contiguous, a guard of its own (a second graph)."""
    adapter = adapter_factory(windowed_dir)
    cfg = EntropyBoundConfig()
    c, b = adapter.canvas_length, 2
    eager, ours = _inputs(adapter, b, cfg), _inputs(adapter, b, cfg)
    step = WholeStep(adapter, cfg, span_quantum=4)
    capacity = ours["state"].cache.capacity
    sc_rows = [False] * b
    for _ in range(3):
        e = _eager_step(adapter, cfg, sc_rows=sc_rows, **eager)
        temperature = cfg.temperatures(ours["keys"][2])
        o = step(ours["state"], ours["canvas"], ours["history"], ours["logits"], sc_rows, ours["keys"], temperature)
        _assert_same_step(o, e, ours, eager)
        for i in (eager, ours):  # both commit the same canvases: every row's context grows by C
            adapter.commit(i["state"], e.argmax.clone())
    assert ours["state"].cache.capacity == capacity  # reserved at the prefill: no new buffers
    longest = max(_inputs(adapter, b, cfg)["state"].lengths)
    assert step.spans == {-(-(longest + c * (n + 1)) // 4) * 4 for n in range(3)}, step.spans
    assert max(step.spans) == capacity and step.graphs == 2


def test_a_model_dtype_workspace_gives_the_float32_workspace_results(windowed_dir):
    """The compiled step's logits workspace only feeds the next step's self-conditioning, which casts it to the
    model dtype first: kept in bf16 (what the engine does under compile=step) it holds exactly the float32
    workspace's values cast, and two self-conditioned steps give the same tokens, at half the bytes."""
    from models.diffusion_gemma import DiffusionGemmaAdapter

    adapter = DiffusionGemmaAdapter(str(windowed_dir), dtype="bfloat16", eos_token_ids=[1])
    cfg = EntropyBoundConfig()
    b = 2
    step = WholeStep(adapter, cfg, compile=False)
    runs = {}
    for dtype in (torch.float32, torch.bfloat16):
        i = _inputs(adapter, b, cfg)
        i["logits"] = i["logits"].to(dtype)
        sc_rows, outs = [False] * b, []
        for _ in range(2):
            o = step(
                i["state"], i["canvas"], i["history"], i["logits"], sc_rows, i["keys"], cfg.temperatures(i["keys"][2])
            )
            outs.append((o.canvas, o.argmax, o.kept))
            i["canvas"], i["history"], sc_rows = o.canvas, o.history, [True] * b
            i["keys"] = i["keys"] + torch.tensor([[0], [0], [1]])
        runs[dtype] = (outs, i["logits"])
    (f_outs, f_ws), (h_outs, h_ws) = runs[torch.float32], runs[torch.bfloat16]
    for a, b_ in zip(f_outs, h_outs, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b_, strict=True))
    assert h_ws.dtype == torch.bfloat16 and torch.equal(h_ws, f_ws.to(torch.bfloat16))


@pytest.mark.slow
def test_a_pending_commit_is_run_before_its_row_moves(adapter_factory, tiny_diffusion_dir):
    """A folded commit waits for the next step; if the queue is empty and a lower row just left, its row is packed
    down first, so the commit runs on its own before the move (the commit graph). Never-confident model: both rows
    finish their first canvas on the same step, one ends there and the other commits and moves to row 0. Tokens,
    NFE and accept counts equal the eager engine's."""
    results, decoders = {}, {}
    for name, kw in (("eager", {}), ("step", {"compile": "step"})):
        adapter = adapter_factory(tiny_diffusion_dir, **kw)
        dec = decoders[name] = BlockDiffusionDecoder(adapter, EntropyBoundConfig())
        if name == "step":  # the order of commit, move and step is the engine's; aot_eager captures it in seconds
            _capture_with_aot_eager(dec, adapter)
        reqs = [
            GenerationRequest("short", adapter.encode("hi"), seed=1, max_new_tokens=8),
            GenerationRequest("long", adapter.encode("a longer one"), seed=2, max_new_tokens=24),
        ]
        results[name] = {r.sample_id: r for r in dec.stream(reqs, batch_size=2)}
    for sid, res in results["eager"].items():
        got = results["step"][sid]
        assert (got.token_ids, got.nfe, got.accepted_per_step) == (res.token_ids, res.nfe, res.accepted_per_step)
    assert decoders["step"]._commit_graph.graphs == 1  # the commit before the move ran on its own
    assert any(k for _, k, _ in decoders["step"]._whole.shapes)  # the later commits folded


def test_a_cuda_graph_step_refuses_experts_that_sync_with_the_host(medium_diffusion_dir):
    """`model.compile=step` on CUDA with transformers' default experts and float32 weights would fail at the first
    capture (their fallback reads offsets back to the host): refused when the model is bound. The rule runs on a
    real model's config; only the device is a stand-in, as no CUDA device runs here."""
    from types import SimpleNamespace

    from transformers import DiffusionGemmaForBlockDiffusion

    from models.diffusion_gemma import check_graph_experts

    model = DiffusionGemmaForBlockDiffusion.from_pretrained(str(medium_diffusion_dir), dtype=torch.float32)
    on_cuda = SimpleNamespace(device=torch.device("cuda"), dtype=model.dtype, config=model.config)
    with pytest.raises(ValueError, match="model.compile=step on CUDA needs model.dtype=bfloat16"):
        check_graph_experts("step", on_cuda)
    check_graph_experts("layers", on_cuda)  # no CUDA graphs
    check_graph_experts("step", model)  # the CPU: no CUDA graphs either
    check_graph_experts("step", SimpleNamespace(**{**vars(on_cuda), "dtype": torch.bfloat16}))
    model.set_experts_implementation("batched_mm")
    check_graph_experts("step", on_cuda)
