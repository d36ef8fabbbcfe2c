"""`python -m harness.export FORMAT PATH... [--out DIR]`: see `harness.export`."""

from __future__ import annotations

import argparse
from pathlib import Path

FORMATS = {  # every format `export` writes, as --help lists them (docs/run_card.md has the fields of each)
    "eee": "Every Eval Ever aggregate records (schema 0.3.0): data/<eval>/<developer>/<model>/<uuid>.json",
    "hf": "Hugging Face .eval_results/ YAML, one file per run: <model>/.eval_results/<task>__<run>.yaml",
    "d3llm": "d3LLM's AUP leaderboard: d3llm_leaderboard.csv (their dLLM_Results.csv) and d3llm_points.yaml",
    "parallelbench": "ParallelBench's site files: data/leaderboard/<model>.json, data/figures/, metadata_entry.json",
}


def parser() -> argparse.ArgumentParser:
    formats = "\n".join(f"  {name:<14} {what}" for name, what in FORMATS.items())
    ap = argparse.ArgumentParser(
        prog="python -m harness.export",
        description=__doc__,
        epilog=f"formats:\n{formats}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("format", choices=list(FORMATS), help="one of the formats below")
    ap.add_argument("paths", nargs="+", help="run dirs or sweep dirs (every finished run under them)")
    ap.add_argument("--out", help="where the files go (default: <first path>/export/<format>)")
    ap.add_argument("--organization", default="unknown", help="eee: source_organization_name")
    ap.add_argument(
        "--relationship",
        default="third_party",
        choices=("first_party", "third_party", "collaborative", "other"),
        help="eee: evaluator_relationship (us to the model's developer)",
    )
    ap.add_argument("--hf-dataset", action="append", default=[], metavar="EVAL=ORG/NAME[:TASK]", help="hf: benchmark")
    return ap


def export(argv: list[str] | None = None) -> list[Path]:
    args = parser().parse_args(argv)
    out = Path(args.out) if args.out else Path(args.paths[0]) / "export" / args.format
    if args.format == "parallelbench":  # the site's leaderboard files (harness.analysis.parallelbench_export)
        from harness.analysis.parallelbench_export import export_parallelbench

        files = export_parallelbench(args.paths, out)
        if not files:
            raise SystemExit(f"parallelbench: no finished ParallelBench runs under {', '.join(args.paths)}")
        return files
    from harness.export.runs import load_records

    records, table = load_records(args.paths)
    if not records:
        raise SystemExit(f"no finished runs under {', '.join(args.paths)}")
    if args.format == "eee":
        from harness.export.eee import export_eee

        return export_eee(records, out, args.organization, args.relationship)
    if args.format == "hf":
        from harness.export.hf_eval_results import export_hf, parse_datasets

        return export_hf(records, out, parse_datasets(args.hf_dataset))
    from harness.export.d3llm import export_d3llm

    return export_d3llm(table, out, Path(args.paths[0]).resolve().name)


def main() -> None:
    files = export()
    print("\n".join(f"wrote {p}" for p in files) or "wrote nothing")


if __name__ == "__main__":
    main()
