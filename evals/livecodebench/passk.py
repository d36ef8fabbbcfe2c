"""The unbiased pass@k estimator (Chen et al., 2021), averaged over problems as LiveCodeBench reports it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n, c of them correct, is correct)
    = 1 - C(n-c, k) / C(n, k), computed as a stable product."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def mean_pass_at_k(results: Mapping[str, Iterable[bool]], ks: Iterable[int] = (1,)) -> dict[str, float]:
    """{"pass@k": mean over problems} for each k that every problem has enough samples for."""
    per_problem = {qid: [bool(x) for x in graded] for qid, graded in results.items()}
    if not per_problem:
        return {}
    fewest = min(len(g) for g in per_problem.values())
    out = {}
    for k in ks:
        if k <= fewest:
            scores = [pass_at_k(len(g), sum(g), k) for g in per_problem.values()]
            out[f"pass@{k}"] = sum(scores) / len(scores)
    return out
