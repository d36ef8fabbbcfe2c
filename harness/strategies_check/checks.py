"""`make strategies-check`: does each ported strategy's rule (`samplers.strategies`) pick what its authors' code picks?

    python -m harness.strategies_check --code-dir DIR [--strategies fast_dllm_v2 dparallel ...]

DIR holds the authors' files, one folder per source (never committed here; docs/samplers.md lists the revisions):
`fast_dllm_v2/` (NVlabs/Fast-dLLM's v2/ folder), `dparallel/` (czg1225/dParallel's LLaDA/ folder), `pc_sampler/`
(NEUIR/PC-Sampler's root) and `llada/` (GSAI-ML/LLaDA-8B-Instruct's config.json, as `make hub-check` reads it).

Their own generate function runs, unmodified, on a model that records each forward: at every forward our `step`
gets the same logits and block and its answer is kept; the block their loop hands to its next forward (or returns)
must be the same, token for token. Two models per strategy: a tiny random model of its family (LLaDA's shape from
the authors' modeling file for the LLaDA-based ones; a tiny Qwen2 behind Fast-dLLM v2's forward signature) and
random logits of several sharpness levels (many more cases, ties and multi-token fills included). Greedy: their
draws use torch's global RNG (Gumbel-max / multinomial), which our counter-based streams do not reproduce.
One row per strategy (strategy | source | model | cases | identical steps X/Y | identical cases X/Y); the exit status
is non-zero unless every row passes. The `*_e2e` rows run the CLI instead: `python -m harness.run` against their
generate on the same tiny LLaDA (`end_to_end.py`). Adding a strategy is one `StrategyCheck` entry in `CHECKS`
(`replay.py`, `fast_dllm_v2.py` and `end_to_end.py` beside this module hold the runners).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.strategies_check import end_to_end as e2e
from harness.strategies_check import fast_dllm_v2 as sp_v2
from harness.strategies_check import replay as sp

REPO = Path(__file__).resolve().parents[2]


@dataclass
class StrategyCheck:
    name: str  # the sampler name (samplers.strategies.STRATEGIES)
    source: str  # the authors' repo@commit and the function run
    folders: tuple[str, ...]  # sub-folders of --code-dir it reads
    run: Callable[[Path], list[sp.Tally]]  # one tally per model


CHECKS = [
    StrategyCheck(
        "fast_dllm_v2",
        "NVlabs/Fast-dLLM@8292f3c v2/generation_functions.py: Fast_dLLM_QwenForCausalLM.batch_sample",
        ("fast_dllm_v2",),
        sp_v2.run,
    ),
    StrategyCheck(
        "dparallel",
        "czg1225/dParallel@2ca4d14 LLaDA/generate.py: generate(threshold=...)",
        ("dparallel", "llada"),
        sp.run_dparallel,
    ),
    StrategyCheck(
        "eb_sampler",
        "NEUIR/PC-Sampler@8b106b0 src/generate.py: generate_with_eb_sampler (no code from EB-Sampler's authors)",
        ("pc_sampler", "dparallel", "llada"),
        sp.run_eb_sampler,
    ),
    StrategyCheck(
        "pc_sampler",
        "NEUIR/PC-Sampler@8b106b0 src/generate.py: generate_with_pc_sampler",
        ("pc_sampler", "dparallel", "llada"),
        sp.run_pc_sampler,
    ),
    *(
        StrategyCheck(
            f"{name}_e2e",
            f"{source} vs python -m harness.run",
            ("dparallel", "llada", folder),
            functools.partial(e2e.run, name=name),
        )
        for name, source, folder in (  # folder: the routine's repository (PC-Sampler's for the first three)
            ("dparallel", "czg1225/dParallel@2ca4d14 generate", "pc_sampler"),
            ("eb_sampler", "NEUIR/PC-Sampler@8b106b0 generate_with_eb_sampler", "pc_sampler"),
            ("pc_sampler", "NEUIR/PC-Sampler@8b106b0 generate_with_pc_sampler", "pc_sampler"),
            ("slowfast", "LiangrunFlora/Slow-Fast-Sampling@dd9958f generate_slow_fast_sampling", "slowfast"),
            ("klass", "shkim0116/KLASS@ad87ecb stable_confident_decode", "klass"),
        )
    ),
]


@dataclass
class Row:
    strategy: str
    source: str
    model: str
    cases: int
    steps_same: int
    steps: int
    cases_same: int
    note: str = ""

    @property
    def identical(self) -> bool:
        return self.cases > 0 and self.steps_same == self.steps and self.cases_same == self.cases

    @property
    def passed(self) -> bool:
        return not self.note and self.identical


def check(c: StrategyCheck, code_dir: Path) -> list[Row]:
    missing = [f for f in c.folders if not (code_dir / f).is_dir()]
    if missing:
        return [Row(c.name, c.source, "-", 0, 0, 0, 0, f"--code-dir lacks {', '.join(missing)}/")]
    try:
        tallies = c.run(code_dir)
    except Exception as err:  # one strategy failing does not stop the others
        return [Row(c.name, c.source, "-", 0, 0, 0, 0, f"{type(err).__name__}: {str(err).splitlines()[0][:160]}")]
    return [Row(c.name, c.source, t.model, t.cases, t.steps_same, t.steps, t.cases_same, t.first_diff) for t in tallies]


def table(rows: list[Row]) -> str:
    lines = ["| strategy | source | model | cases | identical steps | identical cases | result |", "|---" * 7 + "|"]
    for r in rows:
        result = "pass" if r.passed else f"FAIL: {r.note}"
        lines.append(
            f"| {r.strategy} | {r.source} | {r.model} | {r.cases} | {r.steps_same}/{r.steps} | "
            f"{r.cases_same}/{r.cases} | {result} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    names = [c.name for c in CHECKS]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code-dir", type=Path, required=True, help="the authors' files, one folder per source")
    p.add_argument("--strategies", nargs="+", default=names, choices=names)
    p.add_argument("--out", type=Path, default=REPO / "outputs" / "strategies_check")
    a = p.parse_args(argv)
    rows = [row for c in CHECKS if c.name in a.strategies for row in check(c, a.code_dir)]
    print(table(rows))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "strategies_check.json").write_text(json.dumps([asdict(r) | {"passed": r.passed} for r in rows], indent=2))
    return 0 if rows and all(r.passed for r in rows) else 1
