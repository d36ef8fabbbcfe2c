"""Import the strategies' authors' generate functions from a folder of their repositories (never committed here:
`STRATEGIES_CODE_DIR`, one sub-folder per repository as `git archive` writes it), and the stand-in model they call.

What the CPU / this environment needs, nothing of their logic: SlowFast's module imports `seaborn` (plots only)
and `transformers.tokenization_utils.PaddingStrategy` (gone in transformers 5; unused by its sampler), so both are
put where its imports look. Their code calls LLaDA's forward (`model(x, attention_mask=..., position_ids=...)`):
`LLaDAStandin` gives a tiny Llama that call, as LLaDA's modeling reads it (no mask or an all-ones padding mask:
every position sees every other; a 4D bool mask: True seen, WINO's modified modeling; 1D position ids).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import torch

REPOS = {  # repository folder -> (the file with the generate function, its name)
    "wino": ("WINO-DLLM", "LLaDA/decoding.py", "decoding_wino"),
    "slowfast": (
        "Slow-Fast-Sampling",
        "slow-fast-sampling/sampling_utils/generate_slow_fast_sampling.py",
        "generate_slow_fast_sampling",
    ),
    "klass": ("KLASS", "src/model/llada_klass.py", "stable_confident_decode"),
}


def code_dir() -> Path | None:
    d = os.environ.get("STRATEGIES_CODE_DIR")
    return Path(d) if d and Path(d).is_dir() else None


def _env_stubs(repo_root: Path) -> None:
    """SlowFast's imports that this environment lacks (none touches its sampling)."""
    sys.modules.setdefault("seaborn", types.ModuleType("seaborn"))
    import transformers.tokenization_utils as tu
    from transformers.utils import PaddingStrategy, TensorType  # noqa: F401

    tu.PaddingStrategy = getattr(tu, "PaddingStrategy", PaddingStrategy)
    if not hasattr(tu, "TruncationStrategy"):
        from transformers.tokenization_utils_base import TruncationStrategy

        tu.TruncationStrategy = TruncationStrategy
    root = str(repo_root / "slow-fast-sampling")
    if root not in sys.path:
        sys.path.insert(0, root)


def authors_generate(strategy: str, root: Path):
    """The authors' generate function for `strategy`, imported from `root`/<repo>/<file>."""
    repo, rel, name = REPOS[strategy]
    path = root / repo / rel
    if not path.is_file():
        raise FileNotFoundError(f"{strategy}: {path} missing (STRATEGIES_CODE_DIR holds one folder per repository)")
    if strategy == "slowfast":
        _env_stubs(root / repo)
    spec = importlib.util.spec_from_file_location(f"authors_{strategy}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


class LLaDAStandin(torch.nn.Module):
    """A tiny Llama called as LLaDA's forward is: `model(x, attention_mask=None | (B, T) ones | (B, 1, T, T) bool,
    position_ids=None | (T,))`; `.device`, `.lm_head`, `.config` as their code reads them."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.inner = model
        self.config = model.config
        self.lm_head = model.lm_head

    @property
    def device(self) -> torch.device:
        return next(self.inner.parameters()).device

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        t = input_ids.shape[1]
        if attention_mask is None or attention_mask.dim() == 2:
            if attention_mask is not None and not bool(attention_mask.all()):
                raise ValueError("a padded batch: LLaDA's forward takes none (the authors run batch 1)")
            seen = torch.ones(1, 1, t, t, dtype=torch.bool)
        else:
            seen = attention_mask.bool()
        dtype = next(self.inner.parameters()).dtype
        mask = torch.zeros(seen.shape, dtype=dtype).masked_fill(~seen, torch.finfo(dtype).min)
        pos = torch.arange(t)[None] if position_ids is None else position_ids.reshape(1, -1)
        return self.inner(input_ids=input_ids, attention_mask=mask, position_ids=pos)
