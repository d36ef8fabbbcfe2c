"""ParallelBenchEval: one of the 17 ParallelBench tasks (`task`), its prompt, in-context examples and metric.

Items come from ParallelBench's official test files (`data_dir`: a checkout, checksum checked) or, for tests and the
CPU twin, from our own generator (`num_samples`, `seed`; Waiting Line and Puzzle tasks only); `official: true`
refuses to run without the official files. The prompt is
ParallelBench's: the in-context examples as earlier user / assistant turns, then the task (`chat: false` joins the
turns as plain text for models without a chat template). Each row keeps the reference (`meta.reference`), so any
scorer can re-score the stored text. A metric part that needs what is not here (LanguageTool, BERTScore) is said at
config time (a warning naming it), stored as None, listed in the run's `skipped_metrics`, never averaged as 0.
"""

from __future__ import annotations

import logging
from typing import Any

from contract.intervals import wilson_interval
from evals.base import Eval, EvalItem
from evals.parallelbench.data import checked_file, read_samples
from evals.parallelbench.instances import generate
from evals.parallelbench.metrics import MISSING, score_sample
from evals.parallelbench.tasks import task as find_task

log = logging.getLogger(__name__)


def messages_for(prompt: str, sample: dict[str, Any]) -> list[dict[str, str]]:
    """ParallelBench's chat: each in-context example as a user turn and its answer (or a right `example`) as the
    assistant's, then the sample's user turn."""
    out: list[dict[str, str]] = []
    for ex in sample["input"].get("icl_examples") or []:
        answer = ex["answer"] if isinstance(ex["answer"], str) else ex["answer"]["example"]
        out += [{"role": "user", "content": prompt.format(**ex["input"])}, {"role": "assistant", "content": answer}]
    return out + [{"role": "user", "content": prompt.format(**sample["input"])}]


def as_text(messages: list[dict[str, str]]) -> str:
    """The turns as plain text, for models without a chat template."""
    return "".join(f"{m['role']}: {m['content'].strip()}\n" for m in messages) + "assistant: "


class ParallelBenchEval(Eval):
    name = "parallelbench"

    def __init__(
        self,
        task: str = "waiting_line/copy",
        data_dir: str | None = None,
        num_samples: int = 100,
        seed: int = 0,
        chat: bool = True,
        max_new_tokens: int | None = None,
        stop_strings: list[str] | None = None,
        limit: int | None = None,
        name: str | None = None,
        official: bool = False,
    ):
        self.spec = find_task(task)
        if official and not data_dir:
            raise ValueError(
                "eval.data_dir: eval.official=true needs ParallelBench's test files: set it to a checkout of "
                "github.com/furiosa-ai/ParallelBench (or eval.official=false for instances generated here)"
            )
        max_new_tokens = self.spec.max_tokens if max_new_tokens is None else max_new_tokens  # null: ParallelBench's
        super().__init__(max_new_tokens=max_new_tokens, stop_strings=stop_strings, limit=limit)
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"eval.num_samples: must be an integer >= 1, got {num_samples!r}")
        self.path = checked_file(data_dir, self.spec) if data_dir else None
        if self.path is None:
            generate(self.spec.name, 1, seed)  # refuses a task without a generator, naming eval.task / data_dir
        self.num_samples, self.seed, self.chat = num_samples, seed, chat
        self.name = name or f"pb_{self.spec.short}"
        self.skipped = MISSING.get(self.spec.metric, ())
        for what in self.skipped:
            log.warning("eval %s (%s): %s; stored as skipped, the rest is scored", self.name, self.spec.name, what)

    def samples(self) -> list[dict[str, Any]]:
        if self.path is not None:
            return read_samples(self.path)
        return generate(self.spec.name, self.num_samples, self.seed)

    def items(self) -> list[EvalItem]:
        out = []
        for i, sample in enumerate(self.samples()):
            messages = messages_for(self.spec.prompt, sample)
            meta = {"task": self.spec.name, "reference": sample["answer"], **(sample.get("metadata") or {})}
            prompt = messages if self.chat else as_text(messages)
            out.append(EvalItem(f"{self.name}-{i:04d}", prompt, target=sample["answer"], meta=meta))
        return out[: self.limit] if self.limit else out

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        scores = {f"pb_{k}": v for k, v in score_sample(self.spec.metric, text, item.target).items()}
        parsed = "pb_score_strict" not in scores or scores["pb_score_strict"] is not None
        return {"correct": scores["pb_score"], "format_ok": parsed, **scores}

    def summarize(self, scored: list[dict[str, Any]]) -> dict[str, Any]:
        """Mean scores in [0, 1] with Wilson intervals where the score is 0/1; `quality` is None (and the parts
        that were not computed are in `skipped_metrics`) where some score needs what is not here; both speed axes."""
        keys = sorted({k for r in scored for k in r if k.startswith("pb_")})
        out: dict[str, Any] = {"pb_task": self.spec.name, "pb_site_id": self.spec.site_id}
        for key in keys:
            values = [r[key] for r in scored if r.get(key) is not None]
            out[key] = sum(values) / len(values) if values and len(values) == len(scored) else None
            out[f"{key}_known"] = len(values)
        score = out.get("pb_score")
        out["quality"] = score
        if score is not None and all(r["pb_score"] in (0.0, 1.0) for r in scored):
            out["quality_lo"], out["quality_hi"] = wilson_interval(score, len(scored))
        out["skipped_metrics"] = [k for k in keys if out[k] is None]
        # ParallelBench's speed axis: max_tokens / mean NFE (a canvas padded to max_tokens); ours is `tpf`
        nfe = sum(r.get("nfe", 0) for r in scored)
        out["pb_max_tokens"] = self.max_new_tokens
        out["pb_tokens_per_step"] = self.max_new_tokens * len(scored) / nfe if nfe else None
        return out
