"""Runs grouped by the environment they decoded in (their run cards, `harness.runner.run_card`).

Where the runs of one model in a table were decoded in more than one environment (another GPU, another torch, another
dtype...), each of its runs' `model` becomes `<model> [<field>=<value>, ...]`, naming the fields that differ between
that model's environments (other models differ in dtype or attention backend by design: they are not compared), so
every grouping downstream (fronts, AUP, figures, scaling curves) keeps the environments apart and
labels them: the "H200 vs A100" question is answered by the summary itself. `model_name` keeps the model's own name.
Runs without a card (stored before cards existed) keep their name; a run resumed across environments
(`resume_across_env=true`) is labelled `mixed`. With one environment the table is left as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.runner.run_card import ENV_FIELDS, read_card, short_sha

ENV_PREFIX = "env."


def card_columns(run_dir: str | Path) -> dict[str, Any]:
    """A run's environment as table columns: `env` (a hash naming the environment, None without a card),
    `env.<field>` per field and `env.mixed` (samples from more than one environment)."""
    card = read_card(run_dir)
    if card is None:
        return {"env": None}
    env = card.get("environment") or {}
    earlier = card.get("earlier_environments") or []
    cols = {f"{ENV_PREFIX}{k}": env.get(k) for k in ENV_FIELDS}
    cols[f"{ENV_PREFIX}mixed"] = bool(earlier)
    cols["env"] = short_sha([{k: env.get(k) for k in ENV_FIELDS}, earlier])[:8]
    return cols


def _shown(field: str, value: Any) -> str:
    return str(value)[:8] if field == "git_commit" and value else str(value)


def differing_fields(table: pd.DataFrame) -> list[str]:
    """The environment fields whose values differ between these carded runs."""
    carded = table[table["env"].notna()] if "env" in table else table.iloc[0:0]
    cols = [f"{ENV_PREFIX}{k}" for k in ENV_FIELDS if f"{ENV_PREFIX}{k}" in carded]
    return [c.removeprefix(ENV_PREFIX) for c in cols if carded[c].astype(str).nunique() > 1]


def label_environments(table: pd.DataFrame) -> pd.DataFrame:
    """In place (and returned): `model_name` (the model's own name) and, where a model's carded runs come from more
    than one environment, `env_label` and a `model` that names it (see the module docstring)."""
    if table.empty or "model" not in table:
        return table
    table["model_name"] = table["model"]
    if "env" not in table:
        return table
    for _, g in table.groupby("model_name", dropna=False, sort=False):
        if g["env"].dropna().nunique() > 1:
            _label(table, g)
    return table


def _label(table: pd.DataFrame, runs: pd.DataFrame) -> None:
    fields = differing_fields(runs)
    for i in runs.index[runs["env"].notna()]:
        parts = [f"{f}={_shown(f, table.at[i, ENV_PREFIX + f])}" for f in fields]
        if table.at[i, f"{ENV_PREFIX}mixed"]:
            parts.append("mixed")
        label = ", ".join(parts) or f"env {table.at[i, 'env']}"
        table.at[i, "env_label"] = label
        table.at[i, "model"] = f"{table.at[i, 'model_name']} [{label}]"


def format_environments(table: pd.DataFrame) -> str:
    """One line per model and environment where a model's runs come from several (its label and runs), else ''."""
    if "env_label" not in table:
        return ""
    groups = table[table["env_label"].notna()].groupby(["model_name", "env_label"], sort=True)
    return "\n".join(f"  {model} [{label}]: {len(g)} run(s)" for (model, label), g in groups)
