"""GPQA through lm-eval: the built-in `gpqa_*` tasks on the gated hub set, or the same task on a local file.

The choice order comes from lm-eval's `process_docs` shuffle, seeded by the run seed (simple_evaluate's
random_seed); each row records it (`choices`, `correct_letter`, and the run `seed`) so any reply can be
checked against the exact prompt it answered.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from evals.gpqa.tasks import builtin_yaml, check_data_file, hub_dataset, hub_task, local_task_yaml
from evals.lmeval.eval import LmEvalEval

LOCAL_TASKS_DIR = "lm_eval_tasks"
STRICT = "strict-match"
# strict-match's extraction is one answer letter, up to the punctuation and case the metric ignores: "(D)", "D", "d."
LETTER = re.compile(r"[\W_]*[A-Da-d][\W_]*")


class GPQAEval(LmEvalEval):
    """`task`: a built-in GPQA task; `data_files`: a local .jsonl/.json in GPQA's schema (null = hub set)."""

    name = "gpqa"

    def __init__(
        self, task: str = "gpqa_diamond_cot_zeroshot", data_files: str | None = None, name: str = "gpqa", **kwargs
    ):
        builtin_yaml(task)
        self.task, self.data_files = task, str(check_data_file(data_files)) if data_files else None
        kwargs.setdefault("main_filter", "flexible-extract")
        kwargs.setdefault("main_metric", "exact_match")
        kwargs.setdefault("include_defaults", False)
        super().__init__(tasks=[task], name=name, **kwargs)

    def hub_datasets(self) -> list[str]:
        """The gated hub set the built-in task reads (none in local mode): checked for access before loading."""
        return [] if self.data_files else [d for d in [hub_dataset(self.task)] if d]

    def local_copy_hint(self, repo: str) -> str:
        return "or point the eval at a local copy in GPQA's schema: eval.data_files=my_gpqa.jsonl (docs/evals.md)"

    def task_source(self, run_dir: Path) -> tuple[list[str], list[str]]:
        if self.data_files:
            src = local_task_yaml(self.task, self.data_files, Path(run_dir) / LOCAL_TASKS_DIR)
        else:
            src = hub_task(self.task)
        self.tasks = src.tasks
        return src.tasks, src.include_path + self.include_path

    def format_ok(self, filters: dict[str, dict[str, Any]], main_filter: str) -> bool:
        """An answer letter found by the strict extraction ("The answer is (X)"), right or wrong."""
        answer = filters.get(STRICT, {}).get("answer")
        return isinstance(answer, str) and LETTER.fullmatch(answer) is not None

    def doc_fields(self, doc: dict[str, Any]) -> dict[str, Any]:
        return {
            "choices": doc.get("choices"),
            "correct_letter": doc.get("answer"),
            "question": doc.get("Question"),
            "record_id": doc.get("Record ID"),
        }
