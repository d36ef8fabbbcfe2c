"""Any generative lm-eval task as one of our evals: lm-eval prompts and scores, our decoders decode.

`run` hands lm-eval a `DecoderLM`, then joins lm-eval's per-sample scores (per filter: the metric values
and the extracted answer) with our per-sample decode records on (task, doc_id). Files in the run dir:
- samples.jsonl: the raw decode log, appended while decoding (the resume log; key `<task>/<doc_id>`);
- samples_scored.jsonl: the same rows joined with lm-eval's scores, written atomically at the end;
- lm_eval_results.json: lm-eval's aggregate results, task configs and versions.
Datasets caching is switched off while lm-eval loads tasks: a cached `process_docs` map (GPQA's choice
shuffle reads Python's global `random`) would otherwise replay the first seed's order for every seed. lm-eval
runs `process_docs` again each time it reads a task's docs (at load, when it builds the requests, and once per
filter when it scores), so without the cache every read would shuffle anew and replies would be scored against
another choice order than their prompt showed: each task's docs are processed once per run (`docs_processed_once`).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from contract.files import atomic_write, jsonl_objects
from contract.records import decode_metrics, items_sha
from contract.scoring import LikelihoodConfig
from evals.base import Eval, EvalItem
from evals.diagnostics import run_diagnostics
from evals.lmeval.likelihood import doc_row, scoring_report

INVALID = "[invalid]"  # lm-eval's regex filters' fallback when nothing matched
SAMPLES_SCORED = "samples_scored.jsonl"
LM_EVAL_RESULTS = "lm_eval_results.json"


class LmEvalEval(Eval):
    """`eval.tasks=[...]` from lm-eval (generate_until tasks only); `quality` = the main metric of the first task.

    `main_metric` / `main_filter` pick it (default: `exact_match`, else the first metric; filter
    `flexible-extract` if the task has it, else the first one). `include_path` adds task folders;
    `include_defaults=false` skips indexing lm-eval's ~13 s of built-in tasks when those folders suffice.
    """

    name = "lm_eval"

    def __init__(
        self,
        tasks: list[str],
        name: str = "lm_eval",
        num_fewshot: int | None = None,
        limit: int | float | None = None,
        apply_chat_template: bool = True,
        include_path: list[str] | str | None = None,
        include_defaults: bool = True,
        max_new_tokens: int = 256,
        stop_strings: list[str] | None = None,
        gen_kwargs: dict[str, Any] | None = None,
        main_metric: str | None = None,
        main_filter: str | None = None,
        bootstrap_iters: int = 0,
        system_instruction: str | None = None,
        likelihood: dict[str, Any] | None = None,
    ):
        super().__init__(max_new_tokens=max_new_tokens, stop_strings=stop_strings, limit=limit)
        tasks = [tasks] if isinstance(tasks, str) else list(tasks or [])
        if not tasks or not all(isinstance(t, str) and t for t in tasks):
            raise ValueError(f"eval.tasks: a non-empty list of lm-eval task names, got {tasks!r}")
        if limit is not None and not limit > 0:
            raise ValueError(f"eval.limit: must be > 0 (a count, or a fraction < 1), got {limit!r}")
        if max_new_tokens < 1:
            raise ValueError(f"eval.max_new_tokens: must be >= 1, got {max_new_tokens}")
        paths = [include_path] if isinstance(include_path, str) else list(include_path or [])
        for p in paths:
            if not Path(p).is_dir():
                raise FileNotFoundError(f"eval.include_path: {p} is not a folder")
        if not paths and not include_defaults and type(self).task_source is LmEvalEval.task_source:
            raise ValueError("eval.include_defaults=false needs eval.include_path (no task folder to index)")
        self.name, self.tasks, self.num_fewshot = name, tasks, num_fewshot
        self.apply_chat_template, self.include_path, self.include_defaults = (
            apply_chat_template,
            paths,
            include_defaults,
        )
        self.gen_kwargs, self.main_metric, self.main_filter = dict(gen_kwargs or {}), main_metric, main_filter
        self.bootstrap_iters, self.system_instruction = bootstrap_iters, system_instruction
        self.likelihood = LikelihoodConfig.from_dict(likelihood)  # loglikelihood tasks' scoring knobs (issue 47)

    # lm-eval builds the items and scores them; the generic loop (items/score) does not apply.
    def items(self) -> list[EvalItem]:
        raise NotImplementedError("LmEvalEval items come from lm-eval; call run()")

    def score(self, item: EvalItem, text: str) -> dict[str, Any]:
        raise NotImplementedError("LmEvalEval samples are scored by lm-eval; call run()")

    def hub_datasets(self) -> list[str]:
        """The hub data sets its tasks read (their YAMLs' `dataset_path`, `evals.lmeval.task_types`): checked before
        any model loads (`harness.runner.configs.check_eval_hub_access`), since lm-eval reads them only after."""
        from evals.lmeval.task_types import task_hub_datasets

        self._hub_tasks = task_hub_datasets(self.tasks, self.include_path, self.include_defaults)
        return list(self._hub_tasks)

    def local_copy_hint(self, repo: str) -> str:
        """How to run a task on a local copy of `repo` (the offline refusal's last words)."""
        return local_copy_hint(repo, getattr(self, "_hub_tasks", {}).get(repo, []), "eval.include_path")

    def task_source(self, run_dir: Path) -> tuple[list[str], list[str]]:
        """(task names, include paths) for this run; subclasses may generate task YAMLs under `run_dir`."""
        return self.tasks, self.include_path

    def check_tasks(self, task_manager, tasks: list[str]) -> None:
        missing = [t for t in tasks if t not in task_manager.all_tasks]
        if missing:
            raise ValueError(f"eval.tasks: unknown to lm-eval (with include_path={self.include_path}): {missing}")

    def run(self, decoder, store, batch_size: int, seed: int) -> dict[str, Any]:
        import lm_eval
        from lm_eval.tasks import TaskManager

        from evals.lmeval.model import DecoderLM

        tasks, include = self.task_source(store.run_dir)
        tm = TaskManager(include_path=include or None, include_defaults=self.include_defaults)
        self.check_tasks(tm, tasks)
        lm = DecoderLM(
            decoder,
            store,
            seed=seed,
            batch_size=batch_size,
            chat=self.apply_chat_template,
            max_gen_toks=self.max_new_tokens,
            extra_stop=self.stop_strings,
            likelihood=self.likelihood,
        )
        with datasets_caching_off(), docs_processed_once():
            out = lm_eval.simple_evaluate(
                model=lm,
                tasks=tasks,
                task_manager=tm,
                num_fewshot=self.num_fewshot,
                limit=self.limit,
                log_samples=True,
                random_seed=seed,
                numpy_random_seed=seed,
                torch_random_seed=seed,
                fewshot_random_seed=seed,
                bootstrap_iters=self.bootstrap_iters,
                gen_kwargs=self.gen_kwargs or None,
                system_instruction=self.system_instruction,
            )
        rows = self.merge(out, lm.rows, seed)
        run_dir = Path(store.run_dir)
        atomic_write(run_dir / SAMPLES_SCORED, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        atomic_write(
            run_dir / LM_EVAL_RESULTS,
            json.dumps(
                {
                    k: out.get(k)
                    for k in ("results", "groups", "configs", "versions", "n-samples", "higher_is_better", "config")
                },
                indent=2,
                default=str,
            ),
        )
        shas = [r.get("item_sha", r["sample_id"]) for r in rows]
        generated = [r for r in rows if r.get("request") != "loglikelihood"]
        scored = [r for r in rows if r.get("request") == "loglikelihood"]
        return {
            **decode_metrics(generated),
            **run_diagnostics(generated),
            **(scoring_report(lm, scored, bool(generated)) if scored else {}),
            **self.summarize_lm_eval(out, rows, tasks),
            "items_sha": items_sha(shas),
        }

    def scored_rows(self, store) -> list[dict[str, Any]]:
        path = Path(store.run_dir) / SAMPLES_SCORED
        return [row for _, row in jsonl_objects(path)]

    def doc_fields(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Facts of lm-eval's processed doc worth keeping per row (none by default; GPQA keeps its choice order)."""
        return {}

    def merge(self, out: dict[str, Any], produced: dict[str, dict[str, Any]], seed: int) -> list[dict[str, Any]]:
        """Our decode rows joined with lm-eval's per-sample scores, in lm-eval's order."""
        rows = []
        for task, samples in out["samples"].items():
            metric, filt = self.main_key(out, task)
            by_doc: dict[int, dict[str, Any]] = {}
            for s in samples:
                d = by_doc.setdefault(s["doc_id"], {"target": s["target"], "doc": s["doc"], "filters": {}})
                answers = s["filtered_resps"][0] if s["filtered_resps"] else None
                d["filters"][s["filter"]] = {"answer": answers, **{m: s[m] for m in s["metrics"] if m in s}}
            for doc_id, d in sorted(by_doc.items()):
                sids = [sid for sid in produced if sid == f"{task}/{doc_id}" or sid.startswith(f"{task}/{doc_id}/")]
                if not sids:
                    raise RuntimeError(f"lm-eval scored {task}/{doc_id} but no decode row exists for it")
                if produced[sids[0]].get("request") == "loglikelihood":
                    rows.append({**doc_row(task, doc_id, [produced[s] for s in sids], d, metric, filt), "seed": seed})
                    continue
                main = d["filters"].get(filt, {})
                answer = main.get("answer")
                format_ok = self.format_ok(d["filters"], filt)
                for sid in sids:
                    rows.append(
                        {
                            **produced[sid],
                            "sample_id": sid,
                            "seed": seed,
                            "target": d["target"],
                            "lm_eval": d["filters"],
                            "main_metric": f"{metric},{filt}",
                            "correct": float(main.get(metric, 0.0)),
                            "answer": answer,
                            "no_answer": _no_match(answer),
                            "format_ok": format_ok,
                            **self.doc_fields(d["doc"]),
                        }
                    )
        return rows

    def format_ok(self, filters: dict[str, dict[str, Any]], main_filter: str) -> bool:
        """The reply has the form the scorer reads: the main filter matched something (right or wrong)."""
        return not _no_match(filters.get(main_filter, {}).get("answer"))

    def main_key(self, out: dict[str, Any], task: str) -> tuple[str, str]:
        """(metric, filter) of `task` that defines `correct` and `quality`."""
        keys = [k for k in out["results"].get(task, {}) if "," in k and "_stderr" not in k]
        pairs = [tuple(k.split(",", 1)) for k in keys]
        if not pairs:
            raise RuntimeError(f"lm-eval returned no metrics for task {task!r}")
        metrics = [m for m, _ in pairs]
        filters = [f for _, f in pairs]
        metric = self.main_metric or ("exact_match" if "exact_match" in metrics else metrics[0])
        filt = self.main_filter or ("flexible-extract" if "flexible-extract" in filters else filters[0])
        if (metric, filt) not in pairs:
            raise ValueError(f"eval.main_metric/main_filter: {metric},{filt} not among {task}'s {keys}")
        return metric, filt

    def summarize_lm_eval(self, out: dict[str, Any], rows: list[dict[str, Any]], tasks: list[str]) -> dict[str, Any]:
        metric, filt = self.main_key(out, tasks[0])
        per_task = {t: {k: v for k, v in res.items() if k != "alias"} for t, res in out["results"].items()}
        n = len(rows)
        return {
            "quality": per_task[tasks[0]][f"{metric},{filt}"],
            "quality_metric": f"{tasks[0]}/{metric},{filt}",
            "lm_eval": per_task,
            "no_answer": sum(r["no_answer"] for r in rows),
            "no_answer_rate": sum(r["no_answer"] for r in rows) / n if n else 0.0,
            "unclosed_thought": sum(bool(r.get("unclosed_thought")) for r in rows),
            "unclosed_thought_rate": sum(bool(r.get("unclosed_thought")) for r in rows) / n if n else 0.0,
            "with_thought": sum(bool(r.get("has_thought")) for r in rows),
        }


def local_copy_hint(repo: str, tasks: list[str], include_flag: str) -> str:
    """A task on a local copy of its hub set: a task YAML of its own that includes the built-in one and reads a file."""
    task = tasks[0] if tasks else "<task>"
    more = f" (and {len(tasks) - 1} more tasks)" if len(tasks) > 1 else ""
    return (
        f"or point {task}{more} at a local copy: a task YAML in a folder named by {include_flag} with "
        f"`include: <{task}'s YAML>`, `task: my_{task}`, `dataset_path: json`, `dataset_name: null` and "
        "`dataset_kwargs: {data_files: {test: my_copy.jsonl}}` (the task's split names; docs/evals.md)"
    )


def _no_match(answer: Any) -> bool:
    """A filter's answer that is no match: missing, empty, or the regex filters' fallback."""
    return answer is None or str(answer).strip() in ("", INVALID)


@contextlib.contextmanager
def datasets_caching_off():
    """Recompute `process_docs` maps (no replay of another seed's shuffle from the datasets cache)."""
    import datasets

    was = datasets.is_caching_enabled()
    datasets.disable_caching()
    try:
        yield
    finally:
        if was:
            datasets.enable_caching()


DOC_SPLITS = ("training_docs", "validation_docs", "test_docs")


@contextlib.contextmanager
def docs_processed_once():
    """While lm-eval runs, each task's processed docs per split are computed once (the first read, at task load,
    under simple_evaluate's seed) and every later read returns the same docs: prompt and scoring see one order."""
    from lm_eval.api.task import ConfigurableTask

    originals = {name: getattr(ConfigurableTask, name) for name in DOC_SPLITS}

    def once(name, read):
        def docs(self):
            memo = self.__dict__.setdefault("_docs_once", {})
            if name not in memo:
                memo[name] = read(self)
            return memo[name]

        return docs

    for name, read in originals.items():
        setattr(ConfigurableTask, name, once(name, read))
    try:
        yield
    finally:
        for name, read in originals.items():
            setattr(ConfigurableTask, name, read)
