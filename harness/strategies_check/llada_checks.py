"""`make strategies-check`: does each ported strategy's rule (`samplers.strategies`) decode as its authors' code?

    python -m harness.strategies_check --code-dir DIR [--strategies wino slowfast klass] [--cases N]

DIR holds the authors' repositories, one folder per strategy (never committed here; docs/samplers.md lists the
revisions): `wino/` (Feng-Hong/WINO-DLLM), `slowfast/` (LiangrunFlora/Slow-Fast-Sampling), `klass/`
(shkim0116/KLASS), each the repository's root as `git archive` writes it.

Their own generate function runs, unmodified, on a tiny random LLaDA-style model; ours runs the same prompts
(1-3 at a time, in one step call) through `rule_loop` (LLaDA's layout) and through our engine; every
forward's input and the answer must be the same, token for token (`llada`: the runs of the authors' LLaDA-based
functions). Greedy: their draws use torch's global RNG (Gumbel-max), which our counter-based streams do not
reproduce. One row per strategy and model (strategy | source | model | cases | identical steps X/Y | identical
cases X/Y); a row whose difference is a stated gap (`known`) is reported, not failed; the exit status is non-zero
unless every other row passes. Adding a strategy is one `StrategyCheck` in `CHECKS`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.strategies_check import checks, llada
from harness.strategies_check.tally import Tally

REPO = Path(__file__).resolve().parents[2]
WINO_GAP = "verify=self: this forward's logits at the token's own position, not the shadow block's (docs/samplers.md)"
KLASS_GAP = (
    "a step's share over the masks left: theirs tops up from committed positions (their top-k over -inf), ours fills "
    "the masks left (docs/samplers.md)"
)


@dataclass
class StrategyCheck:
    name: str  # the sampler name (samplers.strategies)
    source: str  # the authors' repo@commit and the function run
    folders: tuple[str, ...]  # sub-folders of --code-dir it reads
    run: Callable[[Path, int], list[Tally]]  # one tally per model
    known: str = ""  # a stated gap: its rows are reported, never failed


CHECKS = [
    StrategyCheck(
        "wino",
        "Feng-Hong/WINO-DLLM@9549a1d LLaDA/decoding.py: decoding_wino",
        ("wino",),
        lambda d, n: llada.run("wino", d, n),
    ),
    StrategyCheck(
        "wino",
        "Feng-Hong/WINO-DLLM@9549a1d LLaDA/decoding.py: decoding_wino, ours with verify=self",
        ("wino",),
        lambda d, n: llada.run("wino", d, n, seeds=(0,), ours_knobs={"verify": "self"}),
        known=WINO_GAP,
    ),
    StrategyCheck(
        "slowfast",
        "LiangrunFlora/Slow-Fast-Sampling@dd9958f sampling_utils/generate_slow_fast_sampling.py",
        ("slowfast",),
        lambda d, n: llada.run("slowfast", d, n),
    ),
    StrategyCheck(
        "klass",
        "shkim0116/KLASS@ad87ecb src/model/llada_klass.py: stable_confident_decode (one block)",
        ("klass",),
        lambda d, n: llada.run("klass", d, max(1, n // 2), blocks=(1,)),
    ),
    StrategyCheck(
        "klass",
        "shkim0116/KLASS@ad87ecb src/model/llada_klass.py: stable_confident_decode (2-3 blocks)",
        ("klass",),
        lambda d, n: llada.run("klass", d, max(1, n // 2), seeds=(0,), blocks=(2, 3)),
        known=KLASS_GAP,
    ),
]


def _engine(strategy: str, blocks: tuple[int, ...] = (1,), ours: dict | None = None):
    """A run through our engine (one tally)."""

    def run(code_dir: Path, n: int) -> list[Tally]:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            return [llada.run_engine(strategy, code_dir, Path(tmp), max(1, n // 3), blocks, ours)]

    return run


CHECKS += [
    StrategyCheck(
        "klass", "KLASS@ad87ecb stable_confident_decode vs our engine (one block)", ("klass",), _engine("klass"),
    ),
    StrategyCheck(
        "klass", "KLASS@ad87ecb stable_confident_decode vs our engine (2-3 blocks)", ("klass",),
        _engine("klass", (2, 3)), known=KLASS_GAP,
    ),
    StrategyCheck(
        "wino", "WINO-DLLM@9549a1d decoding_wino vs our engine (the shadow block)", ("wino",), _engine("wino", (1, 2)),
    ),
    StrategyCheck(
        "wino", "WINO-DLLM@9549a1d decoding_wino vs our engine, verify=self", ("wino",),
        _engine("wino", (1, 2), {"verify": "self"}), known=WINO_GAP,
    ),
    StrategyCheck(
        "slowfast", "Slow-Fast-Sampling@dd9958f vs our engine", ("slowfast",), _engine("slowfast", (1, 2)),
    ),
]  # fmt: skip


@dataclass
class Row(checks.Row):
    """`checks.Row` with a stated gap: a row whose difference is `known` is reported, not failed."""

    known: str = ""

    @property
    def passed(self) -> bool:
        return bool(self.known) or (not self.note.startswith("error") and self.identical)


def check(c: StrategyCheck, code_dir: Path, n: int) -> list[Row]:
    missing = [f for f in c.folders if not (code_dir / f).is_dir()]
    if missing:
        return [Row(c.name, c.source, "-", 0, 0, 0, 0, f"error: --code-dir lacks {', '.join(missing)}/")]
    try:
        tallies = c.run(code_dir, n)
    except Exception as err:  # one strategy failing does not stop the others
        return [Row(c.name, c.source, "-", 0, 0, 0, 0, f"error: {type(err).__name__}: {str(err).splitlines()[0]}")]
    return [
        Row(c.name, c.source, t.model, t.cases, t.steps_same, t.steps, t.cases_same, t.first_diff, c.known)
        for t in tallies
    ]


def table(rows: list[Row]) -> str:
    lines = ["| strategy | source | model | cases | identical steps | identical cases | result |", "|---" * 7 + "|"]
    for r in rows:
        result = "pass" if r.identical else (f"known gap: {r.known}; {r.note}" if r.known else f"FAIL: {r.note}")
        lines.append(
            f"| {r.strategy} | {r.source} | {r.model} | {r.cases} | {r.steps_same}/{r.steps} | "
            f"{r.cases_same}/{r.cases} | {result} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    names = sorted({c.name for c in CHECKS})
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code-dir", type=Path, required=True, help="the authors' repositories, one folder per strategy")
    p.add_argument("--strategies", nargs="+", default=names, choices=names)
    p.add_argument("--cases", type=int, default=24, help="random cases per model (1-3 prompts each)")
    p.add_argument("--out", type=Path, default=REPO / "outputs" / "strategies_check")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = [row for c in CHECKS if c.name in a.strategies for row in check(c, a.code_dir, a.cases)]
    print(table(rows))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "strategies_check.json").write_text(json.dumps([asdict(r) | {"passed": r.passed} for r in rows], indent=2))
    return 0 if rows and all(r.passed for r in rows) else 1
