"""One strategy's figures on one model, as every check table reports them (`checks.Row`, `llada_checks.Row`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Tally:
    """Cases, forwards compared (`steps`: per case the longer run's) and how many of them ran on the same input
    before the first difference, cases identical throughout, the first difference; what the cases exercised
    (`remasked`: WINO's re-masked tokens, `cut`: SlowFast's forwards on a cut canvas).

    Built per case from two traces (`compare`) or by summing per-case tallies (`add`)."""

    model: str
    cases: int = 0
    steps: int = 0
    steps_same: int = 0
    cases_same: int = 0
    first_diff: str = ""
    remasked: int = 0
    cut: int = 0

    def compare(self, theirs: list[list[int]], ours: list[list[int]], answer_same: bool, what: str) -> None:
        """One case from both runs' per-forward inputs: identical when every forward and the answer are."""
        same = next(
            (i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b), min(map(len, (theirs, ours)))
        )
        self.cases += 1
        self.steps += max(len(theirs), len(ours))
        self.steps_same += same
        ok = same == len(theirs) == len(ours) and answer_same
        self.cases_same += ok
        if not ok and not self.first_diff:
            self.first_diff = f"{what}: forward {same} of {len(theirs)} (ours {len(ours)})"

    def add(self, case: Tally) -> None:
        """One case's tally (its forwards compared step by step): identical when every forward was."""
        self.cases += 1
        self.steps += case.steps
        self.steps_same += case.steps_same
        self.cases_same += int(case.steps == case.steps_same and case.steps > 0)
        self.first_diff = self.first_diff or case.first_diff
        self.remasked += case.remasked
        self.cut += case.cut
