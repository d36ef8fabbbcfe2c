"""The 17 ParallelBench tasks: each one's prompt, metric, official test file (with its sha256) and leaderboard id.

Prompts are ParallelBench's own (`data/output/test/*/task_config.yaml` of furiosa-ai/ParallelBench at 72de8f7); a
prompt is formatted with the sample's `input` fields. Sums are of the files at that commit: a checkout whose files
differ is refused rather than scored as if it were the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

_DESK = "You are managing a waiting line at a customer service desk.\n"


@dataclass(frozen=True)
class TaskSpec:
    name: str  # ParallelBench's task name, also the test file's path under data/output/test/ (+ .jsonl)
    prompt: str
    metric: str  # evals.parallelbench.metrics.score_sample's key
    sha256: str
    site_id: str  # the task's id on parallelbench.github.io (data/metadata.json)

    @property
    def group(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def short(self) -> str:
        return self.name.split("/", 1)[1]

    @property
    def max_tokens(self) -> int:
        """ParallelBench's generation length for the task (its cfg/paper/benchmark configs): 32 for Waiting Line,
        64 for the others; its tokens-per-step divides this by the forwards."""
        return 32 if self.group == "waiting_line" else 64


def _line(name: str, body: str, metric: str, sha: str) -> TaskSpec:
    return TaskSpec(f"waiting_line/{name}", _DESK + body, metric, sha, f"waitingline-{name}")


_W2S = "Construct a single, coherent sentence using the words {words}."
TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        _line(
            "copy",
            "You need to record the following people in the order they arrived:\n{context}\n"
            "Please copy the list exactly and provide only the final list.\n",
            "list_match_score",
            "074fa401607e9fa7ff150bda50053b204a2a3790857a1a13afca6dffbe2c6fba",
        ),
        _line(
            "insert_index",
            'A new person "{word}" is inserted into the line at position {index}:\n{context}\n'
            "Please put the new person at the specified position and provide only the final list.\n",
            "list_match_score",
            "3cc2116638f4455b77f8ae80a9361fd40a747d0d3494173818ed637f6b777e0e",
        ),
        _line(
            "insert_random",
            'A new person "{word}" is inserted into the line at a random position:\n{context}\n'
            "Please put the new person in the random position and provide only the final list.\n",
            "list_random_insert_score",
            "5b8faea874d019953ac3560ff215d036b20a9b4e4a099610e5c99d3206ed1fd6",
        ),
        _line(
            "remove_index",
            "The person at position {index} has left the waiting line:\n{context}\n"
            "Please remove the person at the specified position and provide only the final list.\n",
            "list_match_score",
            "38e6d45f19d26b37d7fb0ca52d458a7390b5b136488cf9b7f79d6818a4f396f4",
        ),
        _line(
            "remove_random",
            "One person has left the waiting line:\n{context}\nPlease remove a random person and provide only the "
            "final list.\n",
            "list_random_remove_score",
            "f41a4dcc95b5d44e55b984d5be5146fc479e35b7a1ff7f82d38711d961910e6f",
        ),
        _line(
            "replace_index",
            'The person at position {index} must be replaced with "{word}":\n{context}\n'
            'Please replace the person at the specified position with "{word}" and provide only the final list.\n',
            "list_match_score",
            "176b08c9eaa4858890f349ae2584a982dc4f469472c792e422a9167041631c0c",
        ),
        _line(
            "replace_random",
            'One person in the waiting line must be replaced with "{word}":\n{context}\n'
            'Please replace one random person with "{word}" and provide only the final list.',
            "list_random_replace_score",
            "8e4e750684e47af48596ef50bcfa3cac23890863a510c51f9f88b9b813188120",
        ),
        _line(
            "reverse",
            "The previous staff member put the waiting line in the wrong order.\nPlease reverse the order of the "
            "following people in the waiting line to correct it:\n{context}\n"
            "Please reverse the order of the list and provide only the final list.\n",
            "list_match_score",
            "6afdfc90ed8bf61a7b19a125d54553a5b5f2bf16740b259fb066ead6a592b43b",
        ),
        _line(
            "shuffle",
            "The waiting line should be randomly shuffled to ensure fair service distribution:\n{context}\n"
            "Please randomly shuffle the list and provide only the final list.\n"
            "Ensure the sequence is different from the original.\n",
            "list_shuffle_score",
            "4061e5c91660f1eed89a528d73d011a74e4ea71f69ad34b00f9c010012b24ffb",
        ),
        _line(
            "sort",
            "The following people should be organized alphabetically by last name for efficient processing:\n"
            "{context}\nPlease sort the list in alphabetical order and provide only the final list.\n",
            "list_match_score",
            "b69682817799a402a283651610d2210bb5c8e4eababff9fca6de3ab3dcba9ec1",
        ),
        TaskSpec(
            "paraphrase_summarize/chatgpt-paraphrases",
            "Paraphrase the following sentence. Only output the final result.\n\nSentence: {text}\n\nParaphrase:",
            "paraphrase_score",
            "86956a6b5ee1d07618350989639dcff0aa7c77d1c3937078c58c25b4cee272db",
            "textwriting-paraphrasing",
        ),
        TaskSpec(
            "paraphrase_summarize/samsum",
            "Summarize the following conversation. Only output the final result.\n\n{text}\n\nSummary:",
            "summary_score",
            "f197ca311163967486dc946fd37afb95b96e98c3b13da30a9a47772446809fdb",
            "textwriting-summarization",
        ),
        *(
            TaskSpec(f"words_to_sentence/{level}", _W2S, "sentence_to_words_score", sha, f"textwriting-w2s_{level}")
            for level, sha in (
                ("easy", "627f47242a35bc19be993bf69e5809af01dcdf789f65925db608172fc81f2ed9"),
                ("medium", "9f4f01ae296af5574a7242e5b776c11340ff1d6c6aec8f8b14e3647c93691891"),
                ("hard", "6ea95e898d9e918ab3d3293137d585dcb5f1055c75c88bbeb83de11e653afe8b"),
            )
        ),
        TaskSpec(
            "puzzle/latin_square_n4",
            "Generate a Latin square of size {size} with the symbols {symbols}. Only output the final result as CSV.",
            "latin_square_score",
            "869aec5d644c2437352b02c831f40d964c9228f77ad2af4981fb1802b4cdfabf",
            "puzzles-latin_square",
        ),
        TaskSpec(
            "puzzle/sudoku_n4_12",
            "Fill the positions where the values are 0 in a 4x4 grid with digits 1-4 so that each column, each row, "
            "and each of the four 2x2 subgrids that compose the grid contains all of the digits from 1 to 4.\n\n"
            "Input:\n{sudoku}\nOutput:\n",
            "sudoku_score",
            "5b9ffbe9ffda0cbf60f181a56c4dcd529d3d7fec11a553d8ca6e9f7651d4b836",
            "puzzles-sudoku",
        ),
    )
}
# the tasks our generator makes instances of (the CPU twin; text tasks need real text and real scorers)
GENERATED = tuple(n for n in TASKS if n.startswith(("waiting_line/", "puzzle/")))


def task(name: str) -> TaskSpec:
    """The task by ParallelBench's name, or its short name where unique (`copy`, `sudoku_n4_12`)."""
    if name in TASKS:
        return TASKS[name]
    hits = [t for t in TASKS.values() if t.short == name]
    if len(hits) != 1:
        raise ValueError(f"eval.task: unknown ParallelBench task {name!r}; one of {sorted(TASKS)}")
    return hits[0]
