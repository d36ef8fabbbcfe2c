"""Offline stand-ins for lm-eval's likelihood tasks: each built-in task's own YAML (prompt, choices, metrics,
`process_docs`) included as is, its dataset swapped for a few made-up documents in a local jsonl (no hub, no
benchmark question copied). Task names get a `dg_` prefix: `dg_arc_challenge` is lm-eval's `arc_challenge` on our
documents."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval

TASKS_ROOT = Path(lm_eval.__file__).parent / "tasks"
# built-in task -> (its YAML under lm_eval/tasks, the split names it reads)
BUILTIN = {
    "arc_challenge": "arc/arc_challenge.yaml",
    "hellaswag": "hellaswag/hellaswag.yaml",
    "piqa": "piqa/piqa.yaml",
    "winogrande": "winogrande/default.yaml",
    "mmlu": "mmlu/default/mmlu_anatomy.yaml",  # one subject: the group runs every subject the same way
    "gpqa_main_n_shot": "gpqa/n_shot/gpqa_main_n_shot.yaml",
}
COLORS = ["red", "blue", "green", "white", "black"]
THINGS = ["grass", "sky", "snow", "coal", "blood"]
TRUE_COLOR = dict(zip(THINGS, ["green", "blue", "white", "black", "red"], strict=True))


def _docs(task: str, n: int) -> list[dict]:
    docs = []
    for i in range(n):
        thing = THINGS[i % len(THINGS)]
        right = TRUE_COLOR[thing]
        wrong = [c for c in COLORS if c != right][:3]
        opts = [right, *wrong]
        k = i % 4
        opts[0], opts[k] = opts[k], opts[0]
        if task == "arc_challenge":
            docs.append({
                "id": f"d{i}", "question": f"What color is {thing}?", "answerKey": "ABCD"[k],
                "choices": {"text": opts, "label": list("ABCD")},
            })  # fmt: skip
        elif task == "hellaswag":
            docs.append({
                "ind": i, "activity_label": "Colors", "ctx_a": f"The {thing} is", "ctx_b": "", "ctx": f"The {thing} is",
                "endings": [f"{o}." for o in opts], "label": str(k), "split": "val", "split_type": "indomain",
                "source_id": f"d{i}",
            })  # fmt: skip
        elif task == "piqa":
            docs.append({"goal": f"Paint like {thing}", "sol1": f"use {opts[0]}", "sol2": f"use {opts[1]}",
                         "label": 0 if k == 0 else 1 if k == 1 else 0})  # fmt: skip
        elif task == "winogrande":
            docs.append({"sentence": f"The {thing} is _ today.", "option1": opts[0], "option2": opts[1],
                         "answer": "1" if k != 1 else "2"})  # fmt: skip
        elif task == "mmlu":
            docs.append({"question": f"What color is {thing}?", "subject": "anatomy", "choices": opts, "answer": k})
        elif task == "gpqa_main_n_shot":
            docs.append({"Question": f"What color is {thing}?", "Correct Answer": right,
                         "Incorrect Answer 1": wrong[0], "Incorrect Answer 2": wrong[1],
                         "Incorrect Answer 3": wrong[2]})  # fmt: skip
    return docs


def write_tasks(folder: Path, tasks=tuple(BUILTIN), n: int = 6) -> list[str]:
    """Write `dg_<task>.yaml` + its jsonl for each task under `folder`; returns the task names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for task in tasks:
        data = folder / f"{task}.jsonl"
        data.write_text("".join(json.dumps(d) + "\n" for d in _docs(task, n)))
        files = {split: str(data) for split in ("train", "validation", "test", "dev")}
        yaml = [
            f"include: {json.dumps(str(TASKS_ROOT / BUILTIN[task]))}",
            f"task: dg_{task}",
            "dataset_path: json",
            "dataset_name: null",
            f"dataset_kwargs: {json.dumps({'data_files': files})}",
        ]
        if task == "mmlu":
            yaml.append("tag: null")
        (folder / f"dg_{task}.yaml").write_text("\n".join(yaml) + "\n")
        names.append(f"dg_{task}")
    return names
