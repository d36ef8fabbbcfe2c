"""Typed records at the boundaries: what a decoder returns per sample, and how it is counted.

One TPF rule everywhere: benchmark TPF = total valid output tokens / total decoder (or
target) forward passes, summed over samples, not a mean of per-sample ratios. Valid tokens are the new
tokens cut after the first EOS (the EOS itself counts, as in `transformers`' `tokens_per_forward`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GenerationRequest:
    """One prompt to decode. `seed` feeds this sample's own random stream (batch-invariant decoding)."""

    sample_id: str
    prompt_ids: list[int]
    seed: int
    max_new_tokens: int
    stop_strings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StreamEvent:
    """What a streaming callback receives (`sampler.stream_after_stable`): the sample's visible output changed.

    One rule for the consumer: the visible token ids are now `previous[:start] + token_ids` (an append when `start`
    is the previous length; a revision, which rewrites the tail, when it is less). The last event of a sample has
    `final` set, and after it the visible ids equal the result's `token_ids`."""

    sample_id: str
    row: int  # the batch row decoding the sample when the event was made
    start: int  # output position of token_ids[0]
    token_ids: tuple[int, ...]
    final: bool = False
    revised_tokens: int = 0  # shown positions changed or taken back so far (the result's count once final)

    def apply(self, visible: list[int]) -> list[int]:
        """The visible token ids after this event, from those before it."""
        return visible[: self.start] + list(self.token_ids)


def check_request(r: GenerationRequest) -> None:
    """A request every decoder can serve: a prompt and at least one new token."""
    if not r.prompt_ids:
        raise ValueError(f"request {r.sample_id!r} has an empty prompt")
    if r.max_new_tokens < 1:
        raise ValueError(f"request {r.sample_id!r}: max_new_tokens must be >= 1, got {r.max_new_tokens}")


def check_requests(requests: list[GenerationRequest]) -> None:
    """`check_request` for each, and sample ids unique (results are matched to requests by id)."""
    ids = [r.sample_id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate sample_id in one generate() call")
    for r in requests:
        check_request(r)


@dataclass
class GenerationResult:
    """What any decoder (diffusion, AR, AR+draft) returns for one request."""

    sample_id: str
    token_ids: list[int]  # valid new tokens, cut after EOS / stop string
    text: str
    nfe: int  # decoder (diffusion) or target (AR) forward passes spent on this sample
    encoder_forwards: int = 0
    prompt_tokens: int = 0
    finished_by: str = "length"  # "eos" | "stop" | "length"
    wall_time_s: float = 0.0  # this sample's share of the decode wall time (shares sum to the run's wall time)
    latency_s: float = 0.0  # admitted -> finished: what one user waits (per-user tokens/s = tokens / latency)
    # admitted -> the first output token is final (AR: the first accepted token; diffusion: the first committed
    # canvas; whole-batch decoders: the batch's end): what a streaming user waits before seeing anything
    ttft_s: float | None = None
    # sampler.stream_after_stable only (`StreamEvent`): admitted -> the first token the stream showed, and the output
    # positions at which a shown token was later changed or taken back (each counted once)
    ttfv_s: float | None = None
    revised_tokens: int | None = None
    row_forwards: int = 0  # batch rows computed while this sample was in flight (nfe of them did work)
    steps_per_canvas: list[int] = field(default_factory=list)
    step_cap_hits: int = 0  # canvases that used every allowed denoising step
    accepted_per_step: list[list[int]] = field(default_factory=list)  # per canvas, per step
    renoised_per_step: list[list[int]] = field(default_factory=list)
    # sampler.capture_trajectory only: per denoising step (all canvases in order) {"canvas": index, "step": index in
    # the canvas, "argmax": argmax canvas (the last step's is the committed canvas), "mean_entropy", "temperature",
    # "accepted": positions that kept their sampled token (the others were re-noised), "tokens": the canvas after the
    # step (accepted positions hold their kept token)}; masked decoders: "argmax" = "tokens" = the block (mask id where
    # masked), "accepted" = its filled positions, "offset" = its start in the output, "mask_id". Films:
    # harness/figures/films.py; self-correction counts: evals/corrections.py
    trajectory: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tpf(self) -> float:
        return self.num_tokens / self.nfe if self.nfe else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["num_tokens"] = self.num_tokens
        d["tpf"] = self.tpf
        return d


def decode_metrics(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """Benchmark-level decode figures from per-sample result dicts (as stored in samples.jsonl)."""
    n = len(results)
    tokens = sum(r["num_tokens"] for r in results)
    nfe = sum(r["nfe"] for r in results)
    wall = sum(r["wall_time_s"] for r in results)
    steps = [s for r in results for s in r.get("steps_per_canvas", [])]
    canvases = len(steps)
    row_forwards = sum(r.get("row_forwards", 0) for r in results)
    latency = sorted(r.get("latency_s", 0.0) for r in results)
    user_tps = [r["num_tokens"] / r["latency_s"] for r in results if r.get("latency_s")]
    ttft = [r["ttft_s"] for r in results if r.get("ttft_s") is not None]
    ttfv = [r["ttfv_s"] for r in results if r.get("ttfv_s") is not None]
    revised = [r["revised_tokens"] for r in results if r.get("revised_tokens") is not None]
    return {
        "num_samples": n,
        "num_tokens": tokens,
        "nfe": nfe,
        "tpf": tokens / nfe if nfe else 0.0,
        "tokens_per_second": tokens / wall if wall else 0.0,
        "wall_time_s": wall,
        "mean_tokens_per_sample": tokens / n if n else 0.0,
        "mean_steps_per_canvas": sum(steps) / canvases if canvases else 0.0,
        "step_cap_hit_rate": sum(r.get("step_cap_hits", 0) for r in results) / canvases if canvases else 0.0,
        "encoder_forwards": sum(r.get("encoder_forwards", 0) for r in results),
        # row-forwards that did work / row-forwards computed (1.0: no batch row was computed in vain)
        "row_utilization": nfe / row_forwards if row_forwards else 0.0,
        "median_latency_s": latency[len(latency) // 2] if latency else 0.0,
        "mean_user_tokens_per_second": sum(user_tps) / len(user_tps) if user_tps else 0.0,
        **latency_percentiles(latency, ttft, user_tps),
        **verify_figures(results),
        **streaming_figures(ttfv, revised),
        **interval_figures(results),
    }


def interval_figures(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """Bootstrap 95% intervals over samples (`contract.intervals`) for the benchmark ratios: `tpf_lo` / `tpf_hi`
    (tokens / forwards) and `tokens_per_second_lo` / `_hi` (tokens / wall-time shares, where every sample has
    one); None where a ratio has no denominator. The step-cap share beside them is `step_cap_hit_rate`."""
    from contract.intervals import ratio_interval

    tokens = [r["num_tokens"] for r in results]
    tpf = ratio_interval(tokens, [r["nfe"] for r in results])
    wall = [r.get("wall_time_s") or 0.0 for r in results]
    tps = ratio_interval(tokens, wall) if results and all(w > 0 for w in wall) else None
    return {
        "tpf_lo": tpf.lo if tpf else None,
        "tpf_hi": tpf.hi if tpf else None,
        "tokens_per_second_lo": tps.lo if tps else None,
        "tokens_per_second_hi": tps.hi if tps else None,
    }


def verify_figures(results: list[dict[str, Any]]) -> dict[str, float]:
    """Hybrid decoding (the AR mode verifies diffusion-drafted canvases): how many verify forwards ran and the
    drafts they accepted on average. Empty for runs without verification, whose metrics stay as they were."""
    accepted = [a for r in results for a in (r.get("extra") or {}).get("accepted_per_verify", [])]
    if not accepted:
        return {}
    canvases = sum(len(r.get("steps_per_canvas", [])) for r in results)
    return {
        "verify_forwards": len(accepted),
        "mean_accepted_per_verify": sum(accepted) / len(accepted),
        "verified_canvas_share": len(accepted) / canvases if canvases else 0.0,
    }


LATENCY_QUANTILES = (50, 95, 99)
# per-user tokens/s: the median and the rate that 95% / 99% of users get at least (the slow tail is low)
USER_RATE_QUANTILES = (50, 5, 1)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_percentiles(latency: list[float], ttft: list[float], user_tps: list[float]) -> dict[str, float | None]:
    """What users see, per run: `latency_p50_s`.. (admitted -> finished), `ttft_p50_s`.. (admitted -> first token)
    and `user_tokens_per_second_p50` / `_p5` / `_p1` (tokens / latency per sample); None where not recorded."""
    out: dict[str, float | None] = {}
    for q in LATENCY_QUANTILES:
        out[f"latency_p{q}_s"] = percentile(latency, q)
        out[f"ttft_p{q}_s"] = percentile(ttft, q)
    for q in USER_RATE_QUANTILES:
        out[f"user_tokens_per_second_p{q}"] = percentile(user_tps, q)
    return out


def streaming_figures(ttfv: list[float], revised: list[int]) -> dict[str, float | None]:
    """What a streaming user sees, per run (`sampler.stream_after_stable`): `ttfv_p50_s`.. (admitted -> first
    visible token), `revision_rate` (share of samples with any shown token revised) and `mean_revised_tokens`;
    None where the run did not stream."""
    out: dict[str, float | None] = {f"ttfv_p{q}_s": percentile(ttfv, q) for q in LATENCY_QUANTILES}
    out["revision_rate"] = sum(n > 0 for n in revised) / len(revised) if revised else None
    out["mean_revised_tokens"] = sum(revised) / len(revised) if revised else None
    return out


def item_sha(sample_id: str, prompt: Any, target: Any = None) -> str:
    """Hash of what a sample is made from (id, prompt, target): stored with the sample, compared on resume."""
    text = json.dumps([sample_id, prompt, target], sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def items_sha(shas: list[str]) -> str:
    """One hash for an item set (order-free): part of the eval identity that groups runs into fronts."""
    return hashlib.sha256("\n".join(sorted(shas)).encode()).hexdigest()[:12]


def changed_items(done: dict[str, dict[str, Any]], current: dict[str, str]) -> list[str]:
    """Stored samples whose `item_sha` differs from the item the eval now gives under the same id."""
    return sorted(
        sid for sid, row in done.items() if sid in current and row.get("item_sha", current[sid]) != current[sid]
    )


def stale_inputs_error(changed: list[str]) -> RuntimeError:
    return RuntimeError(
        f"{len(changed)} stored samples were made from other prompts or targets than the eval now gives under the "
        f"same ids (e.g. {changed[:3]}): the data changed since they were decoded. Resuming would score them "
        f"against the new items; re-run with resume=false to start afresh"
    )
