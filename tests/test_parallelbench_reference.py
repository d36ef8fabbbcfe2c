"""Agreement with ParallelBench's own scorers: every reply of `tests.helpers.parallelbench_outputs` on generated
instances (and on the official files, where the copy has them) scored by our code and by theirs, run in a separate
process from a copy OUTSIDE the repo (PARALLELBENCH_REF, default /work/refs/parallelbench: a checkout of
furiosa-ai/ParallelBench). Skipped where that copy is absent. Their `evaluate` (hub metrics) and LanguageTool are
replaced by inert stand-ins in that process: only what does not depend on them is compared (see below)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evals.parallelbench.data import TEST_DIR, read_samples
from evals.parallelbench.instances import generate
from evals.parallelbench.metrics import score_sample
from evals.parallelbench.tasks import GENERATED, TASKS
from tests.helpers.parallelbench_outputs import variants

REF = Path(os.environ.get("PARALLELBENCH_REF", "/work/refs/parallelbench"))
pytestmark = pytest.mark.skipif(
    not (REF / "dataset/parallel_bench/metrics.py").is_file(), reason=f"no ParallelBench copy at {REF}"
)

THEIRS = r"""
import json, sys, types
sys.path.insert(0, sys.argv[1])
evaluate = types.ModuleType("evaluate"); evaluate.load = lambda name: object()
sys.modules["evaluate"] = evaluate
grammar = types.ModuleType("utils.grammar_check"); grammar.grammar_check = lambda text: True
sys.modules["utils.grammar_check"] = grammar
from dataset.parallel_bench.metrics import parallel_bench_metric_func_map as M
out = []
for metric, pred, ref in json.load(sys.stdin):
    fn = M[metric]
    if isinstance(fn, type):
        fn = fn()
    if metric == "summary_score":
        out.append({})  # needs evaluate's rouge from the hub
        continue
    s = fn(pred, ref)
    out.append({"score": float(s), "score_strict": float(fn(pred, ref, strict=True))} if not isinstance(s, dict) else s)
print(json.dumps(out))
"""


def cases() -> list[tuple[str, str, object]]:
    rng = random.Random(0)
    refs = [(TASKS[n].metric, s["answer"]) for n in GENERATED for s in generate(n, 25, seed=1)]
    for name, spec in TASKS.items():
        path = REF / TEST_DIR / f"{name}.jsonl"
        if path.is_file():
            refs += [(spec.metric, s["answer"]) for s in read_samples(path)]
    out = []
    for metric, ref in refs:
        replies = variants(ref, rng)
        if metric == "paraphrase_score":
            replies = ["", "  "]  # the only replies whose score does not need BLEU, BERTScore and LanguageTool
        out += [(metric, reply, ref) for reply in replies]
    return out


def test_scores_equal_parallelbench_on_generated_replies():
    todo = cases()
    run = subprocess.run(
        [sys.executable, "-c", THEIRS, str(REF)], input=json.dumps(todo), capture_output=True, text=True, check=True
    )
    theirs = json.loads(run.stdout)
    compared = agree = 0
    for (metric, reply, ref), their in zip(todo, theirs, strict=True):
        ours = score_sample(metric, reply, ref)
        for key, value in their.items():
            if ours.get(key) is None:  # a part we do not compute here (grammar with words present, BLEU...)
                continue
            compared += 1
            agree += ours[key] == pytest.approx(float(value))
            assert ours[key] == pytest.approx(float(value)), (metric, key, reply, ref, ours, their)
    assert compared > 3000 and agree == compared
    print(f"agreement {agree}/{compared} scores on {len(todo)} replies")


def test_official_files_load_with_their_checksums_and_prompts():
    """Every official file passes its checksum, formats its prompt, and its right answers score 1 (list / puzzle)."""
    from evals.parallelbench import ParallelBenchEval

    for name, spec in TASKS.items():
        ev = ParallelBenchEval(task=name, data_dir=str(REF), official=True)
        items = ev.items()
        assert len(items) == (108 if name.endswith("sudoku_n4_12") else 100), name
        placeholder = re.compile(r"\{(context|word|words|index|text|sudoku|size|symbols)\}")
        assert not any(placeholder.search(m["content"]) for it in items for m in it.prompt), name
        if spec.metric in ("sentence_to_words_score", "summary_score", "paraphrase_score"):
            continue
        for it in items:
            right = it.target if isinstance(it.target, str) else it.target["example"]
            assert ev.score(it, right)["correct"] == 1.0, (name, it.sample_id)
