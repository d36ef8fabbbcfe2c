"""Masked ELBO throughput: our batched Monte-Carlo scorer against a plain loop over Monte-Carlo samples.

LLaDA's own `eval_llada.py` scores a request by looping over Monte-Carlo batches (one forward each); the plainest
form, timed here, runs one forward per sample. Both use the same masks (`models.likelihood_masked.elbo_masks`) on the
same tiny bidirectional masked model, so their estimates must agree to float rounding (checked and reported); then
they are timed interleaved, round by round, in one process. Requests per second at `mc_num` 128; ratio = loop wall
/ ours (> 1: ours faster), for Monte-Carlo batches of 32 and 128.

    python -m bench.cpu.likelihood_bench [--quick] [--out-dir DIR]
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.cpu.common import (
    OUT_DIR,
    interleaved,
    machine_info,
    median,
    print_machine,
    quick_cli,
    ratio_stats,
    table,
    write_json,
)
from contract.scoring import LikelihoodConfig, LikelihoodRequest
from models.likelihood import scorer_for
from models.likelihood_masked import elbo_masks
from models.masked_diffusion import MaskedDiffusionAdapter
from models.tiny import build_masked

FULL = {"requests": 8, "context": 64, "continuation": 8, "mc_num": 128, "mc_batches": [32, 128], "repeats": 3}
QUICK = {"requests": 2, "context": 16, "continuation": 4, "mc_num": 16, "mc_batches": [16], "repeats": 1}


@torch.no_grad()
def loop_estimate(ad: MaskedDiffusionAdapter, req: LikelihoodRequest, mc_num: int) -> float:
    """One forward per Monte-Carlo sample: mask, forward, masked cross-entropy / masking probability; minus the mean."""
    seq = torch.tensor(req.context_ids + req.continuation_ids)
    n, c = len(req.continuation_ids), len(req.context_ids)
    masks, counts = elbo_masks(req.seed, 0, n, mc_num)
    bias = torch.zeros((1, 1, len(seq), len(seq)))
    total = 0.0
    for i in range(mc_num):
        ids = seq.clone()
        ids[c:][masks[i]] = ad.mask_id
        logp = torch.log_softmax(ad.model(input_ids=ids[None], attention_mask=bias).logits[0, c:].float(), -1)
        ce = -logp[torch.arange(n), seq[c:]][masks[i]].sum()
        total += float(ce) * n / float(counts[i])
    return -total / mc_num


def _requests(cfg: dict, vocab: int) -> list[LikelihoodRequest]:
    rng = random.Random(0)
    draw = lambda k: [rng.randrange(3, vocab - 2) for _ in range(k)]  # noqa: E731
    return [
        LikelihoodRequest(f"r{i}", draw(cfg["context"]), draw(cfg["continuation"]), i) for i in range(cfg["requests"])
    ]


def run(quick: bool = False, out_dir: str | Path | None = None, quiet: bool = False) -> dict[str, Any]:
    cfg = QUICK if quick else FULL
    info = machine_info()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        ad = MaskedDiffusionAdapter(str(build_masked(Path(tmp) / "m", block_length=8)), dtype="float32",
                                    attention="bidirectional")  # fmt: skip
        reqs = _requests(cfg, ad.vocab_size)
        scorers = {b: scorer_for(ad, LikelihoodConfig(mc_num=cfg["mc_num"], mc_batch=b, greedy_check=False))
                   for b in cfg["mc_batches"]}  # fmt: skip
        loop = [loop_estimate(ad, r, cfg["mc_num"]) for r in reqs]
        diffs = {
            b: max(abs(x.logprob - y) for x, y in zip(s.score(reqs), loop, strict=True)) for b, s in scorers.items()
        }
        fns = {"loop": lambda: [loop_estimate(ad, r, cfg["mc_num"]) for r in reqs]}
        fns.update({f"batched@{b}": (lambda s=s: s.score(reqs)) for b, s in scorers.items()})
        times = interleaved(fns, repeats=cfg["repeats"], warmup=0)
    n = len(reqs)
    rows = [
        {
            "mc_batch": b,
            "mc_num": cfg["mc_num"],
            "loop_s": median(times["loop"]),
            "ours_s": median(times[f"batched@{b}"]),
            "loop_req_per_s": n / median(times["loop"]),
            "ours_req_per_s": n / median(times[f"batched@{b}"]),
            "max_abs_diff": diffs[b],
            **ratio_stats(times["loop"], times[f"batched@{b}"]),
        }  # fmt: skip
        for b in cfg["mc_batches"]
    ]
    payload = {"machine": info, "config": cfg, "rows": rows}
    out = write_json("likelihood_bench", payload, out_dir or OUT_DIR)
    if not quiet:
        print_machine(info)
        cols = ["mc_batch", "mc_num", "loop_req_per_s", "ours_req_per_s", "ratio_of_medians", "median_round_ratio"]
        print(table(rows, [*cols, "max_abs_diff"]))
        print(f"wrote {out}")
    return payload


def summary_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "bench": "masked_elbo",
            "setting": f"mc_num={r['mc_num']} mc_batch={r['mc_batch']}",
            "reference": f"{r['loop_req_per_s']:.2f} req/s (loop)",
            "ours": f"{r['ours_req_per_s']:.2f} req/s",
            "ratio": r["ratio_of_medians"],
            "note": f"same estimates: max |diff| {r['max_abs_diff']:.1e}",
        }
        for r in payload["rows"]
    ]


if __name__ == "__main__":
    quick_cli(__doc__, run)
