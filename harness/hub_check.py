"""`make hub-check`: does each masked hub family load, keep sane buffers, decode through `harness.run`, and decode
as its authors' own code does? A pre-flight before the first real hub run (docs/masked.md, "make hub-check").

    python -m harness.hub_check [--code-dir DIR] [--families llada2 sdar ...] [--revision llada2=SHA ...]

For each family (`harness.hub_families`): its code and config files are downloaded from the hub (no weights:
`snapshot_download` with allow_patterns; a routine kept in the authors' GitHub repo is fetched at a pinned commit), or
read from `--code-dir DIR/<family>/` on a machine without hub access. A tiny random copy is built from the real config
keys (`models.tiny_remote`), loaded through `MaskedDiffusionAdapter` with the family's shipped `conf/model` yaml
(only path, device=cpu and dtype=float32 overridden), its buffers compared with the in-memory build's (finite and
equal) and its logits with the in-memory model's; a few prompts are decoded by `python -m harness.run eval=prompts`
(records read back) and by the family's own routine on the in-memory model (buffers as its own `__init__` set them),
greedy, and compared token for token. One family failing does not stop the others: each row says what failed, in one
line. The table is printed and written as JSON under outputs/hub_check/; `--record` appends it to
docs/hub_revisions.md, the list of remote-code revisions last checked.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from contract.text import encode_prompt
from harness.hub_families import FAMILIES, SHAPES, Case, HubFamily, Shape
from models.tiny_remote import TOKENIZER_FILES, TinyRemote, buffer_report, build_tiny_remote

REPO = Path(__file__).resolve().parents[1]
PROMPTS = ["Hello", "The quick brown fox jumps", "1 2 3 4 5 6 7 8 9 10 11 12 13"]
HUB_PATTERNS = ["*.py", "*.json", "*.txt", "*.jinja", "*.model", *TOKENIZER_FILES]

# read at import, before any tiny copy puts the pure-torch stand-in in sys.modules
NO_FLASH_ATTN = importlib.util.find_spec("flash_attn") is None


@dataclass
class HubCheckRow:
    """One family's result: each stage yes / no / None (not reached), and the first failure in one line."""

    family: str
    source: str
    revision: str
    shape: str = ""
    loads: bool | None = None
    buffers_ok: bool | None = None
    decodes: bool | None = None
    identical: int | None = None
    prompts: int = len(PROMPTS)
    by_design: int = 0  # prompts that differ as their case documents (and match the routine with `explain`)
    note: str = ""
    cases: list[dict[str, Any]] = field(default_factory=list)  # per case: label, identical, prompts, by_design
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        ok = self.loads and self.buffers_ok and self.decodes and self.identical is not None
        return bool(ok and self.identical + self.by_design == self.prompts)


def one_line(stage: str, err: BaseException) -> str:
    """`stage: Type: first line`, of the innermost cause (Hydra wraps the adapter's own error)."""
    while err.__cause__ is not None:
        err = err.__cause__
    lines = [s.strip() for s in str(err).splitlines() if s.strip()]
    return f"{stage}: {type(err).__name__}: {(lines or [''])[0][:240]}"


def file_digest(folder: Path) -> str:
    """sha256[:12] over the folder's code files: what `--code-dir` was checked at when there is no hub commit."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:12]


def obtain_code(fam: HubFamily, code_dir: Path | None, revision: str | None, work: Path) -> tuple[Path, str, str]:
    """(folder, source, revision): `code_dir/<family>` as it is, or the hub repo's code and config files (plus the
    routine kept on GitHub) downloaded into `work`."""
    if code_dir is not None:
        folder = code_dir / fam.name
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder}/config.json: no such family folder")
        return folder, str(folder), f"files {file_digest(folder)}"
    from huggingface_hub import snapshot_download

    snap = Path(snapshot_download(fam.repo, revision=revision, allow_patterns=HUB_PATTERNS))
    folder = work / "code" / fam.name
    folder.mkdir(parents=True, exist_ok=True)
    for f in snap.iterdir():  # a snapshot already in the cache holds whatever was fetched before: weights stay out
        if f.is_file() and any(fnmatch.fnmatch(f.name, pat) for pat in HUB_PATTERNS):
            (folder / f.name).write_bytes(f.read_bytes())
    if fam.routine_url:
        import urllib.request

        with urllib.request.urlopen(fam.routine_url, timeout=60) as r:
            (folder / Path(fam.routine_url).name).write_bytes(r.read())
    return folder, fam.repo, snap.name


def run_overrides(fam: HubFamily, path: Path) -> dict[str, Any]:
    """The model keys the check sets on the shipped yaml: path, the CPU, float32, a stand-in's own overrides and, where
    the yaml requires flash_attn and this machine lacks it, its documented pure-torch stand-in (docs/masked.md)."""
    shipped = OmegaConf.load(REPO / "conf" / "model" / f"{fam.model_yaml}.yaml")
    over: dict[str, Any] = {"path": str(path), "device": "cpu", "dtype": "float32", **fam.model_overrides}
    if "flash_attn" in (shipped.get("requires") or []) and NO_FLASH_ATTN:
        over["torch_fallbacks"] = ["flash_attn"]
    return over


def model_config(fam: HubFamily, path: Path) -> Any:
    """The family's shipped yaml with only `run_overrides` set."""
    cfg = OmegaConf.load(REPO / "conf" / "model" / f"{fam.model_yaml}.yaml")
    cfg.pop("defaults", None)  # the model's default sampler: Hydra's composition, not an adapter argument
    for k, v in run_overrides(fam, path).items():
        OmegaConf.update(cfg, k, v)
    return cfg


def check_loaded(fam: HubFamily, tiny: TinyRemote, row: HubCheckRow) -> Any:
    """Load through the adapter; its buffers and a probe's logits against the in-memory build."""
    try:
        adapter = instantiate(model_config(fam, tiny.path))
    except Exception as e:  # any loading failure is this family's result, not the check's end
        row.loads, row.note = False, one_line("load", e)
        return None
    row.loads = True
    ok, what = buffer_report(adapter.model, tiny.model)
    try:
        diff = probe_diff(adapter, tiny.model)
    except Exception as e:  # a forward the probe cannot call: reported, the buffers still decide
        diff, what = None, f"{what}; {one_line('probe forward', e)}"
    row.details["buffers"], row.details["probe_logits_max_diff"] = what, diff
    row.buffers_ok = ok and (diff is None or diff <= 1e-4)
    if not row.buffers_ok:
        row.note = (
            f"buffers: {what}" if not ok else f"buffers: loaded logits differ from the built model's by {diff:.3g}"
        )
    return adapter


@torch.no_grad()
def probe_diff(adapter: Any, built: torch.nn.Module) -> float:
    """Max |logits| difference, loaded vs built, on 12 tokens every position sees (the mask in the adapter's form:
    SDAR reads a boolean one; a model that takes none, LLaDA 8B, gets none)."""
    ids = torch.randint(0, 90, (1, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(1, 1, 12, 12, dtype=torch.bool)
    mask = mask if adapter.mask_form == "bool" else torch.zeros(1, 1, 12, 12, dtype=adapter.dtype)
    kwargs = {"attention_mask": mask} if adapter.takes_positions else {}
    if adapter.takes_positions:
        kwargs["position_ids"] = torch.arange(12)[None]
    return (adapter.model(input_ids=ids, **kwargs).logits - built(input_ids=ids, **kwargs).logits).abs().max().item()


def prompt_texts(case: Case, tokenizer: Any) -> list[str]:
    """The case's prompts: `PROMPTS`, or texts of exactly `case.prompt_lengths` tokens (seeded letters, joined or
    space-separated, whichever this tokenizer reads as one token per letter)."""
    if case.prompt_lengths is None:
        return list(PROMPTS)
    g = torch.Generator().manual_seed(len(case.prompt_lengths))
    texts = []
    for k in case.prompt_lengths:
        letters = [chr(97 + int(i)) for i in torch.randint(0, 26, (k,), generator=g)]
        fits = [t for t in ("".join(letters), " ".join(letters)) if len(encode_prompt(tokenizer, t)) == k]
        if not fits:
            raise ValueError(f"no prompt text of {k} tokens for this tokenizer")
        texts.append(fits[0])
    return texts


def case_overrides(fam: HubFamily, case: Case) -> list[str]:
    """The sampler overrides, and `model.block_length` where the case's differs from the shipped yaml's."""
    shipped = OmegaConf.load(REPO / "conf" / "model" / f"{fam.model_yaml}.yaml").get("block_length")
    block = [] if case.block_length in (None, shipped) else [f"model.block_length={case.block_length}"]
    return [*case.overrides(), *block]


def decode_with_run(
    fam: HubFamily, tiny: TinyRemote, work: Path, batch_size: int, case: Case | None = None, texts=None
) -> dict[str, list[int]]:
    """`python -m harness.run eval=prompts` in a subprocess (as a user runs it); the records' token ids by prompt id."""
    case, texts = case or fam.case, texts or PROMPTS
    work.mkdir(parents=True, exist_ok=True)
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": p}) + "\n" for i, p in enumerate(texts)))
    run_dir = work / "run"
    m = run_overrides(fam, tiny.path)
    args = [f"model={fam.model_yaml}", *(f"model.{k}={_value(v)}" for k, v in m.items())]
    args += ["eval=prompts", f"eval.path={prompts}", f"eval.max_new_tokens={case.max_new_tokens}"]
    args += [*case_overrides(fam, case), f"batch_size={case.batch or batch_size}", "resume=false"]
    args += [f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.run", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=1800
    )
    (work / "run.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"harness.run exited {proc.returncode}: {run_error(proc.stderr)} ({work / 'run.log'})")
    records = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines() if line.strip()]
    return {r["sample_id"]: r["token_ids"] for r in records}


def run_error(stderr: str) -> str:
    """The line of a failed run that names the error (Hydra ends with advice, tracebacks with the error)."""
    lines = [s.strip() for s in stderr.splitlines() if s.strip() and "HYDRA_FULL_ERROR" not in s]
    named = [s for s in lines if "Error" in s.split(":")[0] or "Error(" in s or "Exception" in s.split(":")[0]]
    return ((named or lines or ["?"])[-1])[:240]


def _value(v: Any) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def cut_at_eos(ids: list[int], eos: set[int], limit: int) -> list[int]:
    """The records' rule: new tokens up to the limit, cut after the first EOS (kept)."""
    ids = ids[:limit]
    return next((ids[: i + 1] for i, t in enumerate(ids) if t in eos), ids)


def first_diff(a: list[int], b: list[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def own_rows(fam: HubFamily, tiny: TinyRemote, folder: Path, adapter: Any, case: Case, ids, args) -> list[list[int]]:
    """The family's routine on the case's prompts (in-memory model, greedy), each cut as the records are."""
    eos, n = set(adapter.eos_ids), case.max_new_tokens
    with torch.no_grad():
        return [cut_at_eos(t, eos, n) for t in fam.own(tiny.model, ids, case, adapter.mask_id, folder, args)]


def compare_case(
    fam: HubFamily, tiny: TinyRemote, folder: Path, adapter: Any, case: Case, texts: list[str], ours: dict
) -> dict[str, Any]:
    """One case: the routine against the records, prompt by prompt; where the case documents a difference by
    design, the prompts that differ are run again with `explain` and count as by design only if they then match."""
    ids = [encode_prompt(adapter.tokenizer, t) for t in texts]
    theirs = own_rows(fam, tiny, folder, adapter, case, ids, case.routine)
    mine = [ours[str(i)] for i in range(len(texts))]
    differ = [i for i in range(len(texts)) if mine[i] != theirs[i]]
    explained: list[list[int]] = []
    if differ and case.by_design:
        explained = own_rows(fam, tiny, folder, adapter, case, ids, case.routine | case.explain)
    by_design = [i for i in differ if explained and explained[i] == mine[i]]
    mismatches = [
        {"prompt": i, "prompt_tokens": len(ids[i]), "first_diff": first_diff(mine[i], theirs[i])}
        | {"ours": mine[i], "theirs": theirs[i], "by_design": i in by_design}
        for i in differ
    ]
    return {"label": case.label, "prompt_tokens": [len(x) for x in ids], "batch": case.batch or 1} | {
        "identical": len(texts) - len(differ), "prompts": len(texts), "by_design": len(by_design),
        "why": case.by_design if by_design else "", "mismatches": mismatches,
    }  # fmt: skip


def compare_own(
    fam: HubFamily, tiny: TinyRemote, folder: Path, adapter: Any, ours: dict[str, list[int]], row: HubCheckRow
) -> None:
    """The family's default case against the records (kept for callers that decode it themselves)."""
    record_case(row, compare_case(fam, tiny, folder, adapter, fam.case, list(PROMPTS), ours))


def record_case(row: HubCheckRow, res: dict[str, Any]) -> None:
    """Add a case's counts to the row; the first unexplained difference becomes the row's note."""
    row.cases.append(res)
    row.identical = (row.identical or 0) + res["identical"]
    row.prompts = sum(c["prompts"] for c in row.cases)
    row.by_design += res["by_design"]
    row.details.setdefault("mismatches", []).extend({"case": res["label"]} | m for m in res["mismatches"])
    bad = [m for m in res["mismatches"] if not m["by_design"]]
    if bad and not row.note:
        d = bad[0]
        row.note = (
            f"parity: {res['label']}: prompt {d['prompt']} differs from token {d['first_diff']} "
            f"({len(bad)} of {res['prompts']})"
        )


def check_family(
    fam: HubFamily,
    code_dir: Path | None,
    revision: str | None,
    out: Path,
    batch_size: int = 1,
    shape: Shape | None = None,
) -> HubCheckRow:
    """Every stage for one family at one shape, every case; a failure ends this row, never the check."""
    name = shape.name if shape is not None and not isinstance(fam.shrink, dict) else ""
    work = out / fam.name / name if name else out / fam.name
    row = HubCheckRow(fam.name, fam.repo if code_dir is None else str(code_dir / fam.name), revision or "main", name)
    try:
        folder, row.source, row.revision = obtain_code(fam, code_dir, revision, work)
        fallbacks = run_overrides(fam, work).get("torch_fallbacks")
        shrink = fam.shrink_for(shape)
        tiny = build_tiny_remote(folder, work / "tiny", shrink, fam.auto_class, fam.mask_id, fam.eos_ids, fallbacks)
    except Exception as e:
        row.loads, row.note = False, one_line("build", e)
        return row
    adapter = check_loaded(fam, tiny, row)
    if adapter is None:
        return row
    row.details["sampler"] = fam.case.sampler_name()
    row.identical, row.prompts, done = None, 0, {}
    for k, case in enumerate(fam.cases):
        try:
            texts = prompt_texts(case, adapter.tokenizer)
            key = json.dumps([case_overrides(fam, case), case.max_new_tokens, case.batch, texts])
            if key not in done:  # cases that differ only in the routine's arguments share one harness.run
                done[key] = decode_with_run(fam, tiny, work / f"case{k}", batch_size, case, texts)
            row.decodes = row.decodes is not False
        except Exception as e:
            row.decodes, row.note = False, row.note or one_line(f"decode ({case.label})", e)
            continue
        try:
            record_case(row, compare_case(fam, tiny, folder, adapter, case, texts, done[key]))
        except Exception as e:
            row.details.setdefault("own_routine_error", one_line(f"own routine ({fam.routine}, {case.label})", e))
            row.note = row.note or row.details["own_routine_error"]
    return row


def _mark(v: bool | None) -> str:
    return "-" if v is None else "yes" if v else "NO"


def table(rows: list[HubCheckRow]) -> str:
    lines = [
        "| family | shape | source @ revision | loads | buffers ok | decodes | parity | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        parity = "-" if r.identical is None else f"{r.identical}/{r.prompts}"
        parity += f" (+{r.by_design} by design)" if r.by_design else ""
        lines.append(
            f"| {r.family} | {r.shape or '-'} | {r.source} @ {r.revision} | {_mark(r.loads)} | {_mark(r.buffers_ok)} | "
            f"{_mark(r.decodes)} | {parity} | {r.note or 'ok'} |"
        )
    return "\n".join(lines)


def case_table(rows: list[HubCheckRow]) -> str:
    """One line per family, shape and case: prompts' token counts, batch, identical X/Y, and why where by design."""
    lines = [
        "| family | shape | case | prompt tokens, batch | identical | differs by design |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for c in r.cases:
            why = f"{c['by_design']}: {c['why']}" if c["by_design"] else ""
            lines.append(
                f"| {r.family} | {r.shape or '-'} | {c['label']} | {c['prompt_tokens']}, {c['batch']} | "
                f"{c['identical']}/{c['prompts']} | {why} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code-dir", type=Path, help="a folder with one sub-folder of code files per family (no hub)")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--revision", action="append", default=[], help="FAMILY=REV: pin a hub revision")
    p.add_argument("--batch-size", type=int, default=1, help="harness.run's batch for cases that set none")
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES), help="tiny model shapes")
    p.add_argument("--out", type=Path, default=REPO / "outputs" / "hub_check")
    p.add_argument("--record", type=Path, help="append the table's rows to this markdown list (docs/hub_revisions.md)")
    a = p.parse_args(argv)
    revisions = dict(r.split("=", 1) for r in a.revision)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    out = a.out / stamp
    rows: list[HubCheckRow] = []
    for f in a.families:
        for s in a.shapes if not isinstance(FAMILIES[f].shrink, dict) else a.shapes[:1]:
            rows.append(check_family(FAMILIES[f], a.code_dir, revisions.get(f), out, a.batch_size, SHAPES[s]))
            out.mkdir(parents=True, exist_ok=True)  # after every row: a long check's finished rows are kept
            (out / "hub_check.json").write_text(json.dumps([asdict(r) | {"passed": r.passed} for r in rows], indent=2))
    print(table(rows), case_table(rows), sep="\n\n")
    print(f"-> {out / 'hub_check.json'}")
    if a.record:
        record(a.record, rows, stamp[:10])
    return 0 if all(r.passed for r in rows) else 1


def record(path: Path, rows: list[HubCheckRow], date: str) -> None:
    """One row per family (family | source | revision | date | result) added under the file's table's last row."""
    lines = path.read_text().splitlines() if path.exists() else ["| family | source | revision | date | result |"]
    new = [
        f"| {r.family}{' ' + r.shape if r.shape else ''} | {r.source} | {r.revision} | {date} | "
        f"{'pass' if r.passed else 'FAIL: ' + r.note} ({r.identical}/{r.prompts}"
        f"{f', +{r.by_design} by design' if r.by_design else ''}) |"
        for r in rows
    ]
    at = max((i for i, line in enumerate(lines) if line.startswith("|")), default=len(lines) - 1) + 1
    path.write_text("\n".join([*lines[:at], *new, *lines[at:]]) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
