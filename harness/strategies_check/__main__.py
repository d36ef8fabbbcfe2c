"""`python -m harness.strategies_check --code-dir DIR [--strategies ...] [--cases N]`: both tables of checks
(`checks.CHECKS`: Fast-dLLM v2, dParallel, EB-Sampler, PC-Sampler and the `*_e2e` rows through the CLI;
`llada_checks.CHECKS`: WINO, SlowFast, KLASS),
DIR holding every source's folder; non-zero unless every chosen check passes."""

import argparse
from pathlib import Path

from harness.strategies_check import checks, llada_checks


def main(argv: list[str] | None = None) -> int:
    first, second = [c.name for c in checks.CHECKS], sorted({c.name for c in llada_checks.CHECKS})
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--code-dir", type=Path, required=True, help="the authors' files, one folder per source")
    p.add_argument("--strategies", nargs="+", default=first + second, choices=first + second)
    p.add_argument("--cases", type=int, default=24, help="random cases per model for the LLaDA-based checks")
    p.add_argument("--out", type=Path, default=checks.REPO / "outputs" / "strategies_check")
    a = p.parse_args(argv)
    common = ["--code-dir", str(a.code_dir)]
    status = 0
    if picked := [s for s in a.strategies if s in first]:
        status |= checks.main([*common, "--strategies", *picked, "--out", str(a.out / "rules")])
    if picked := [s for s in a.strategies if s in second]:
        more = ["--cases", str(a.cases), "--out", str(a.out / "llada")]
        status |= llada_checks.main([*common, "--strategies", *picked, *more])
    return status


raise SystemExit(main())
