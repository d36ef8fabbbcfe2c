"""lm-eval bridge: generative lm-eval tasks decoded by our decoders (see evals.lmeval.eval).

Names are resolved on first use (PEP 562): `LmEvalEval`'s config checks (and GPQA's, which builds on it) need only
`evals.lmeval.eval`; `DecoderLM` imports lm-eval's model API (about 0.5 s), needed only once decoding starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evals.lmeval.eval import LmEvalEval
    from evals.lmeval.model import DecoderLM
    from evals.lmeval.thoughts import split_thoughts

_WHERE = {
    "DecoderLM": "evals.lmeval.model",
    "LmEvalEval": "evals.lmeval.eval",
    "split_thoughts": "evals.lmeval.thoughts",
}
__all__ = ["DecoderLM", "LmEvalEval", "split_thoughts"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
