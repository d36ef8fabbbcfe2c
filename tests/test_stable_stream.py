"""Streaming what is already stable (`sampler.stream_after_stable`): the decode is unchanged, the stream ends on the
final output, and time to first visible token and revisions are counted as `harness.engine.stable_stream` defines
them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hydra.utils import instantiate

from contract.paths import REPO_ROOT
from contract.records import GenerationRequest, GenerationResult, StreamEvent, decode_metrics
from harness.engine.decode import BlockDiffusionDecoder
from harness.engine.stable_stream import StableRuns, StableStream
from samplers.config import EntropyBoundConfig, SamplerConfigError
from tests.helpers.app import compose_app, run_app

SUDOKU = REPO_ROOT / "models/checkpoints/sudoku6_diffusion"


def decoded(res: GenerationResult) -> tuple:
    """Everything a sample decoded (not when): tokens, text, forwards and every step's accepted count."""
    return res.token_ids, res.text, res.nfe, res.steps_per_canvas, res.accepted_per_step, res.finished_by


class Viewer:
    """The consumer side: applies each event and recounts, from the events alone, the shown positions changed."""

    def __init__(self):
        self.visible: dict[str, list[int]] = {}
        self.revised: dict[str, set[int]] = {}
        self.final: dict[str, int] = {}

    def __call__(self, ev: StreamEvent) -> None:
        assert ev.sample_id not in self.final, "no event after a sample's final one"
        old = self.visible.get(ev.sample_id, [])
        new = ev.apply(old)
        assert ev.start <= len(old) and (new != old or ev.final)
        changed = {p for p in range(ev.start, len(old)) if p >= len(new) or new[p] != old[p]}
        self.revised.setdefault(ev.sample_id, set()).update(changed)
        assert ev.revised_tokens == len(self.revised[ev.sample_id])
        self.visible[ev.sample_id] = new
        if ev.final:
            self.final[ev.sample_id] = ev.revised_tokens


def check_stream(results: list[GenerationResult], viewer: Viewer) -> None:
    for res in results:
        assert viewer.visible[res.sample_id] == res.token_ids  # what is left visible is the final output
        assert viewer.final[res.sample_id] == res.revised_tokens == len(viewer.revised[res.sample_id])
        assert 0 < res.ttfv_s <= res.ttft_s <= res.latency_s


@pytest.fixture(scope="module")
def sudoku():
    from evals.sudoku.io import load_puzzles
    from models.diffusion_gemma import DiffusionGemmaAdapter

    adapter = DiffusionGemmaAdapter(str(SUDOKU), dtype="float32")
    puzzles = load_puzzles(REPO_ROOT / "evals/sudoku/data/sudoku6_test.jsonl", limit=24)
    tok = adapter.tokenizer
    reqs = [
        GenerationRequest(f"p{i}", tok(p.puzzle, add_special_tokens=False)["input_ids"], seed=i, max_new_tokens=36)
        for i, p in enumerate(puzzles)
    ]
    return adapter, reqs


# entropy_bound 3.0 accepts uncertain tokens, so some shown tokens are revised (the default bound revises none)
@pytest.mark.slow
@pytest.mark.parametrize("bound", [0.1, 3.0])
def test_streaming_leaves_the_sudoku_decode_unchanged(sudoku, bound):
    """S = 1, 2, 4 at batch 1 and 8: every sample's tokens, NFE and steps equal the unstreamed batch-1 decode;
    a larger S shows later and revises no more."""
    adapter, reqs = sudoku
    plain = {
        r.sample_id: decoded(r)
        for r in BlockDiffusionDecoder(adapter, EntropyBoundConfig(entropy_bound=bound)).stream(reqs, 1)
    }
    revised = {}
    for s in (1, 2, 4):
        for batch in (1, 8):
            viewer = Viewer()
            dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig(entropy_bound=bound, stream_after_stable=s))
            results = list(dec.stream(reqs, batch, on_visible=viewer))
            assert {r.sample_id: decoded(r) for r in results} == plain
            check_stream(results, viewer)
            counts = {r.sample_id: r.revised_tokens for r in results}
            assert revised.setdefault(s, counts) == counts  # the same decode revises the same at any batch size
    # a larger S shows a prefix of what a smaller one shows at each step, so it revises a subset of its positions
    for sid in plain:
        assert revised[1][sid] >= revised[2][sid] >= revised[4][sid]
    assert (sum(revised[1].values()) > 0) == (bound == 3.0)


@pytest.mark.slow
def test_streaming_shows_committed_canvases_and_the_open_one(medium_diffusion_dir, adapter_factory):
    """Canvas 8, up to three canvases per sample, stopping after varying steps: decode unchanged, and before the last
    canvas ends the visible output already holds the committed canvases plus a stable prefix of the open one."""
    adapter = adapter_factory(medium_diffusion_dir)
    tok = adapter.tokenizer
    reqs = [GenerationRequest(f"s{i}", tok(f"prompt {i}")["input_ids"], i, 24) for i in range(5)]
    plain = {r.sample_id: decoded(r) for r in BlockDiffusionDecoder(adapter, EntropyBoundConfig()).stream(reqs, 1)}
    for s in (1, 2):
        viewer = Viewer()
        lengths: list[int] = []

        def watch(ev: StreamEvent, viewer=viewer, lengths=lengths) -> None:
            viewer(ev)
            lengths.append(len(viewer.visible[ev.sample_id]))

        results = list(BlockDiffusionDecoder(adapter, EntropyBoundConfig(stream_after_stable=s)).stream(reqs, 3, watch))
        assert {r.sample_id: decoded(r) for r in results} == plain
        check_stream(results, viewer)
        assert any(n > 8 and n % 8 for n in lengths)  # a committed canvas and part of the next one


def test_a_new_canvas_starts_with_nothing_stable(tiny_diffusion_dir):
    """S = max_steps = 2, adaptive stop off, a random model made certain of token 5 in the first half of each canvas:
    a position is stable only at its canvas's last step, the commit, so every event but the final ones ends on a
    canvas boundary. (Were a committed canvas's counts carried over, the next canvas's certain half would show
    after its first step.)"""
    from models.diffusion_gemma import DiffusionGemmaAdapter

    adapter = DiffusionGemmaAdapter(str(tiny_diffusion_dir), dtype="float32", eos_token_ids=[1])
    denoise = adapter.denoise

    def certain_first_half(*args, **kwargs):
        x = denoise(*args, **kwargs)
        x[:, :4, 5] += 100.0
        return x

    adapter.denoise = certain_first_half
    tok = adapter.tokenizer
    reqs = [GenerationRequest(f"s{i}", tok(f"prompt {i}")["input_ids"], i, 32) for i in range(4)]
    viewer, ends = Viewer(), []

    def watch(ev: StreamEvent) -> None:
        viewer(ev)
        ends.append((ev.final, len(viewer.visible[ev.sample_id])))

    cfg = EntropyBoundConfig(max_steps=2, adaptive_stop=False, stream_after_stable=2)
    results = list(BlockDiffusionDecoder(adapter, cfg).stream(reqs, 2, watch))
    check_stream(results, viewer)
    assert all(r.token_ids[:4] == [5] * 4 for r in results)
    assert sum(not final for final, _ in ends) >= 3 and all(final or n % 8 == 0 for final, n in ends)
    # S = 1: the certain half (and the one more position the entropy bound always accepts) shows after a first step
    viewer, ends = Viewer(), []
    cfg = EntropyBoundConfig(max_steps=2, adaptive_stop=False, stream_after_stable=1)
    check_stream(list(BlockDiffusionDecoder(adapter, cfg).stream(reqs, 2, watch)), viewer)
    assert any(not final and n % 8 in (4, 5) for final, n in ends)


def test_stable_runs_count_accepted_unchanged_steps():
    """S = 2: a position is stable once it was accepted with the same argmax in the last two steps; the prefix
    stops at the first position that is not."""
    runs = StableRuns(2, 4, torch.device("cpu"))
    runs.grow(2)
    steps = [  # (keep, argmax) for rows 0 and 1
        ([[1, 1, 1, 0], [1, 0, 1, 1]], [[5, 6, 7, 8], [1, 2, 3, 4]]),
        ([[1, 1, 1, 1], [1, 1, 1, 1]], [[5, 6, 9, 8], [1, 2, 3, 4]]),  # row 0 position 2 changed its argmax
        ([[1, 1, 1, 1], [0, 1, 1, 1]], [[5, 6, 9, 8], [1, 2, 3, 4]]),  # row 1 position 0 re-noised
    ]
    got = [runs.update(torch.tensor(k, dtype=torch.bool), torch.tensor(a)).tolist() for k, a in steps]
    assert got == [[0, 0], [2, 1], [4, 0]]
    runs.reset(torch.tensor([0]))  # a new canvas in row 0
    assert runs.update(torch.ones(2, 4, dtype=torch.bool), torch.tensor([[5, 6, 9, 8], [1, 2, 3, 4]])).tolist() == [
        0,
        0,
    ]


def test_visible_output_revisions_are_counted_once_per_position():
    events: list[StreamEvent] = []
    stream = StableStream(eos_ids={1}, callback=events.append)
    stream.open("a")
    stream.denoised(0, "a", 0, [5, 6, 7, 8], prefix=3, limit=4, at=1.0)  # shows 5 6 7
    stream.denoised(0, "a", 0, [5, 6, 7, 8], prefix=1, limit=4, at=2.0)  # prefix shrinks: nothing taken back
    stream.denoised(0, "a", 0, [5, 9, 7, 8], prefix=2, limit=4, at=3.0)  # 6 -> 9 at position 1; 7 stays shown
    stream.denoised(0, "a", 0, [5, 6, 7, 8], prefix=4, limit=3, at=4.0)  # back to 6 (counted once), capped at 3
    stream.denoised(0, "a", 0, [5, 6, 1, 8], prefix=4, limit=4, at=5.0)  # EOS at 2: nothing after it is shown
    assert [(e.start, e.token_ids, e.revised_tokens) for e in events] == [
        (0, (5, 6, 7), 0),
        (1, (9, 7), 1),
        (1, (6, 7), 1),
        (2, (1,), 2),
    ]
    res = GenerationResult("a", [5, 6], "", nfe=5, ttft_s=5.5)
    stream.finished(0, res, admitted=0.5, at=6.0)  # the final output ends before position 2
    assert events[-1] == StreamEvent("a", 0, 2, (), final=True, revised_tokens=2)
    assert (res.ttfv_s, res.revised_tokens) == (0.5, 2)


def test_streaming_figures_per_run():
    rows = [
        {"num_tokens": 4, "nfe": 2, "wall_time_s": 1.0, "latency_s": 1.0, "ttfv_s": t, "revised_tokens": n}
        for t, n in ((0.1, 0), (0.4, 3), (0.2, 0), (0.3, 1))
    ]
    m = decode_metrics(rows)
    for q in (50, 95, 99):
        assert m[f"ttfv_p{q}_s"] == pytest.approx(float(np.percentile([0.1, 0.4, 0.2, 0.3], q)))
    assert (m["revision_rate"], m["mean_revised_tokens"]) == (0.5, 1.0)
    plain = decode_metrics([{k: v for k, v in r.items() if k not in ("ttfv_s", "revised_tokens")} for r in rows])
    assert plain["ttfv_p50_s"] is None and plain["revision_rate"] is None


@pytest.mark.parametrize("value", [-1, 1.5, True, "'2'", 49])
def test_bad_values_are_refused_naming_the_key(value):
    from hydra.errors import InstantiationException  # Hydra wraps the sampler's own SamplerConfigError

    cfg = compose_app("model=sudoku6_diffusion", "eval=sudoku6", f"sampler.stream_after_stable={value}")
    with pytest.raises(InstantiationException, match="sampler.stream_after_stable: must be"):
        instantiate(cfg.sampler)


@pytest.mark.slow
def test_a_bad_value_fails_before_the_model_is_even_looked_for(tmp_path):
    proc = run_app(
        "model=sudoku6_diffusion",
        "model.path=no/such/checkpoint_here",
        "eval=sudoku6",
        "sampler.stream_after_stable=-2",
        f"paths.output_dir={tmp_path}",
        check=False,
    )
    assert proc.returncode != 0 and "sampler.stream_after_stable: must be" in proc.stderr
    assert "local model folder" not in proc.stderr  # the model path check comes after the sampler's


def test_reference_mode_and_callbacks_without_streaming_are_refused(sudoku):
    with pytest.raises(SamplerConfigError, match="random_stream=reference"):
        EntropyBoundConfig(stream_after_stable=2, random_stream="reference")
    adapter, reqs = sudoku
    with pytest.raises(ValueError, match="stream_after_stable"):
        list(BlockDiffusionDecoder(adapter, EntropyBoundConfig()).stream(reqs[:1], 1, on_visible=print))


def test_run_names_keep_their_identity_when_not_streaming():
    """Run dirs made before the knob existed still resume; streaming runs are named apart."""
    base = ("model=sudoku6_diffusion", "eval=sudoku6")
    name = compose_app(*base).run_name
    assert name == "sudoku6_diffusion__entropy_bound__sudoku6__s0__bs8__4c1249"  # its name before the knob existed
    assert compose_app(*base, "sampler.stream_after_stable=0").run_name == name
    assert compose_app(*base, "sampler.stream_after_stable=null").run_name == name
    assert "__entropy_bound-stream2__" in compose_app(*base, "sampler.stream_after_stable=2").run_name


def test_api_streams_visible_text(sudoku):
    from harness import api

    adapter, reqs = sudoku
    dec = BlockDiffusionDecoder(adapter, EntropyBoundConfig(stream_after_stable=1))
    puzzles = [adapter.tokenizer.decode(r.prompt_ids) for r in reqs[:3]]
    view = api.VisibleText(adapter.tokenizer)
    results = api.generate(dec, puzzles, max_new_tokens=36, on_visible=view)
    assert [view.text(str(i)) for i in range(3)] == [r.text for r in results]
    assert any(not e.final for e in view.events)  # something was shown before its canvas ended
    assert [decoded(r) for r in results] == [decoded(r) for r in api.generate(dec, puzzles, max_new_tokens=36)]


@pytest.mark.slow
def test_run_records_streaming_figures(tmp_path):
    """Through `python -m harness.run`: per-sample ttfv_s / revised_tokens in samples.jsonl, and the run's
    percentiles and revision rate in metrics.json, beside TTFT."""
    run_app(
        "model=sudoku6_diffusion",
        "eval=sudoku6",
        "eval.limit=8",
        "sampler.stream_after_stable=2",
        f"paths.output_dir={tmp_path}",
    )
    (run_dir,) = (tmp_path / "runs").iterdir()
    m = json.loads((run_dir / "metrics.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert 0 < m["ttfv_p50_s"] <= m["ttfv_p95_s"] <= m["ttfv_p99_s"] and m["ttfv_p50_s"] <= m["ttft_p50_s"]
    assert m["revision_rate"] == sum(r["revised_tokens"] > 0 for r in rows) / len(rows)
    assert m["run"]["sampler"]["stream_after_stable"] == 2
