"""Finished run dirs and a small sweep, written through ResultStore exactly as harness.runner.evaluate writes them."""

from __future__ import annotations

from pathlib import Path

from contract.records import GenerationResult, decode_metrics
from harness.runner.store import ResultStore


def make_run_dir(
    root: Path,
    run_name: str,
    samples: list[tuple[int, int, float, list[int]]],
    *,
    label: str = "diffusion",
    model: str = "tiny",
    eval_name: str = "prompts",
    sampler: dict | None = None,
    seed: int = 0,
    extra_metrics: dict | None = None,
    trajectory: bool = False,
) -> Path:
    """A finished run dir: per sample (tokens, nfe, correct, steps per canvas), stored as the eval loop stores it."""
    sampler = dict(sampler or {})
    cap = sampler.get("max_steps")
    store = ResultStore(root / run_name)
    rows = []
    for i, (ntok, nfe, correct, steps) in enumerate(samples):
        traj = None
        if trajectory:
            traj = [
                {
                    "canvas": c,
                    "step": s,
                    "argmax": [(c + k + (s >= 1) * (k % 2)) % 7 for k in range(8)],
                    "mean_entropy": 1.0 / (s + 1),
                }
                for c, n in enumerate(steps)
                for s in range(n)
            ]
        res = GenerationResult(
            sample_id=f"q{i}",
            token_ids=list(range(ntok)),
            text=f"answer {i} " * 5,
            nfe=nfe,
            encoder_forwards=len(steps) + 1,
            prompt_tokens=12,
            finished_by="eos",
            wall_time_s=0.02 * nfe,
            latency_s=0.03 * nfe + 0.01 * i,
            ttft_s=0.01 * nfe + 0.01 * i,
            steps_per_canvas=list(steps),
            step_cap_hits=sum(1 for s in steps if cap and s >= cap),
            trajectory=traj,
        )
        row = {**res.to_dict(), "meta": {"bucket": "easy" if i % 2 else "hard"}, "correct": float(correct)}
        store.append(row)
        rows.append(row)
    metrics = {
        **decode_metrics(rows),
        "quality": sum(r["correct"] for r in rows) / len(rows),
        **(extra_metrics or {}),
        "run": {
            "run_name": run_name,
            "label": label,
            "model": model,
            "eval": eval_name,
            "sampler": sampler,
            "seed": seed,
        },
    }
    store.write_metrics(metrics)
    return root / run_name


def make_sweep(root: Path) -> Path:
    """Three entropy-bound settings of one diffusion model, an AR and an AR+MTP baseline, one unfinished run."""
    sweep = root / "sweeps" / "bound_sweep"
    base = {"name": "entropy_bound", "max_steps": 4, "temperature_schedule": "linear", "adaptive_stop": True}
    make_run_dir(
        sweep,
        "b0.05",
        [(16, 8, 1, [4, 4]), (16, 6, 1, [3, 3])],
        sampler={**base, "entropy_bound": 0.05},
        trajectory=True,
    )
    make_run_dir(
        sweep,
        "b0.1",
        [(16, 4, 1, [2, 2]), (16, 4, 0, [2, 2])],
        sampler={**base, "entropy_bound": 0.1},
        extra_metrics={"solved_by_bucket": {"easy": 0.0, "hard": 1.0}},
    )
    make_run_dir(sweep, "b0.5", [(16, 2, 0, [1, 1]), (8, 2, 0, [1, 1])], sampler={**base, "entropy_bound": 0.5})
    make_run_dir(sweep, "ar", [(16, 16, 1, []), (16, 16, 1, [])], label="ar", model="ar-base")
    make_run_dir(sweep, "ar_mtp", [(16, 11, 1, []), (16, 12, 1, [])], label="ar+mtp", model="ar-base")
    ResultStore(sweep / "crashed").append({"sample_id": "q0", "num_tokens": 1, "nfe": 1, "wall_time_s": 0.1})
    return sweep
