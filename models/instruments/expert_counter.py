"""Distinct MoE experts touched per forward, per layer, by forward kind: the report's "84 of 128 experts per
denoiser forward vs 8 for an AR token", measured on the run's own forwards.

Forward hooks on every MoE router (`*TextRouter`, whose output is `(probs, top_k_weights, top_k_index)`)
scatter the forward's top-k indices into a `[layers, rows, experts]` bool tensor on the device; a pre-hook on
the token embedding gives the forward's `(rows, tokens)` shape and, for causal (encoder / AR) forwards, which
tokens are real (padding, `pad_token_id`, is excluded; denoiser canvases have no padding). Nothing is read
back until `summary()`: one host read per run, no sync per forward.

Per forward two figures per layer: `union` = distinct experts over every real token of the forward (the expert
weights the forward has to read, whatever the batch), and `per_row` = distinct experts over one row's tokens,
averaged over the rows (one sequence's canvas or token: the report's figure at any batch size; the two agree at
batch 1). Forward kinds: `denoise` (decoder routers), and for the causal encoder the label of the adapter call
that ran it (`prefill`, `commit`, `ar`); unlabelled causal forwards are `ar` for one token per row, else
`prefill` (plain `generate()`: exact). A forward is one pass over the layers of one side: it starts at the
first MoE layer's router call.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

DENOISE, PREFILL, COMMIT, AR = "denoise", "prefill", "commit", "ar"
_LAYER = re.compile(r"layers\.(\d+)\.")
_CHUNK = 256  # forwards per stacked chunk (keeps the on-device record a handful of tensors)


@dataclass
class _Forward:
    kind: str
    hits: torch.Tensor  # (L, B, E + 1) bool; column E collects padding tokens
    valid: torch.Tensor | None  # (B, S) bool: real tokens; None: all real


@dataclass
class _Records:
    union: list[torch.Tensor] = field(default_factory=list)  # (F, L) per chunk
    per_row: list[torch.Tensor] = field(default_factory=list)
    pending_union: list[torch.Tensor] = field(default_factory=list)  # (L,) per forward
    pending_row: list[torch.Tensor] = field(default_factory=list)

    def add(self, union: torch.Tensor, per_row: torch.Tensor) -> None:
        self.pending_union.append(union)
        self.pending_row.append(per_row)
        if len(self.pending_union) >= _CHUNK:
            self.stack()

    def stack(self) -> None:
        if self.pending_union:
            self.union.append(torch.stack(self.pending_union))
            self.per_row.append(torch.stack(self.pending_row))
            self.pending_union, self.pending_row = [], []


def _stats(x: np.ndarray) -> dict[str, Any]:
    """x: (forwards, layers). Each forward's figure is its mean over layers."""
    per_forward = x.mean(axis=1)
    return {
        "mean": float(per_forward.mean()),
        "p50": float(np.percentile(per_forward, 50)),
        "p90": float(np.percentile(per_forward, 90)),
        "per_layer_mean": [float(v) for v in x.mean(axis=0)],
    }


class ExpertCounter:
    """Hooks the MoE routers of `module` (a transformers model) until `close()`; `summary()` gives the figures."""

    def __init__(self, module: torch.nn.Module):
        text = module.config.get_text_config() if hasattr(module, "config") else None
        self.pad_id = getattr(text, "pad_token_id", None)
        self.label: str | None = None
        self._handles: list[Any] = []
        self._restore: list[tuple[Any, str]] = []
        self._pending: torch.Tensor | None = None  # the last token ids embedded (the next forward's tokens)
        self._current: dict[bool, _Forward] = {}
        self._records: dict[str, _Records] = {}
        routers = [(n, m) for n, m in module.named_modules() if type(m).__name__.endswith("TextRouter")]
        self.num_experts = routers[0][1].proj.out_features if routers else 0
        self.top_k = routers[0][1].config.top_k_experts if routers else 0
        self.layers: dict[bool, list[int]] = {}  # side (True: denoiser) -> layer numbers of its MoE layers
        for name, router in routers:
            denoiser = ".decoder." in f".{name}"
            layer = int(_LAYER.search(name).group(1))
            self.layers.setdefault(denoiser, []).append(layer)
            self._handles.append(router.register_forward_hook(self._router_hook(denoiser, layer)))
        for side in self.layers.values():
            side.sort()
        for name, m in module.named_modules():
            if name.endswith("embed_tokens") and isinstance(m, torch.nn.Embedding):
                self._handles.append(m.register_forward_pre_hook(self._embed_hook))

    @property
    def active(self) -> bool:
        return bool(self.layers)

    # ---------------------------------------------------------------------------------------------- hooks
    def _embed_hook(self, _module, args) -> None:
        self._pending = args[0] if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 2 else None

    def _router_hook(self, denoiser: bool, layer: int):
        layers = self.layers[denoiser]

        def hook(_module, _args, out) -> None:
            idx = out[2]  # (N, K) top-k expert indices of every token of the forward
            pos = layers.index(layer)
            if pos == 0:
                self._start(denoiser, idx)
            fwd = self._current.get(denoiser)
            if fwd is None:
                return
            b = fwd.hits.shape[1]
            rows = idx.reshape(b, -1, idx.shape[-1]).to(fwd.hits.device)  # (B, S, K); layers may sit on other GPUs
            if fwd.valid is not None:
                rows = rows.masked_fill(~fwd.valid[:, :, None], self.num_experts)  # padding -> spare column
            fwd.hits[pos].scatter_(1, rows.reshape(b, -1), True)
            if pos == len(layers) - 1:
                self._flush(denoiser)

        return hook

    def _start(self, denoiser: bool, idx: torch.Tensor) -> None:
        self._flush(denoiser)
        n, ids = idx.shape[0], self._pending
        self._pending = None
        if ids is None or ids.numel() != n:  # no token ids seen (embeddings passed in): one row, all real
            ids = None
        b, s = (ids.shape[0], ids.shape[1]) if ids is not None else (1, n)
        valid = ids != self.pad_id if not denoiser and ids is not None and self.pad_id is not None else None
        kind = DENOISE if denoiser else (self.label or (AR if s == 1 else PREFILL))
        hits = torch.zeros(len(self.layers[denoiser]), b, self.num_experts + 1, dtype=torch.bool, device=idx.device)
        valid = valid.to(idx.device) if valid is not None else None
        self._current[denoiser] = _Forward(kind, hits, valid)

    def _flush(self, denoiser: bool) -> None:
        fwd = self._current.pop(denoiser, None)
        if fwd is None:
            return
        hits = fwd.hits[..., : self.num_experts]
        union = hits.any(1).sum(-1)  # (L,)
        per_row = hits.sum(-1).float()  # (L, B)
        if fwd.valid is None:
            row_mean = per_row.mean(-1)
        else:
            w = fwd.valid.any(-1).float()  # rows with a real token
            row_mean = (per_row * w).sum(-1) / w.sum().clamp(min=1)
        self._records.setdefault(fwd.kind, _Records()).add(union, row_mean)

    # ------------------------------------------------------------------------------------------ labelling
    @contextmanager
    def labelled(self, label: str):
        """Causal forwards run inside are of kind `label`."""
        prev, self.label = self.label, label
        try:
            yield
        finally:
            self.label = prev

    def label_calls(self, obj: Any, labels: dict[str, str]) -> None:
        """Run `obj.<method>` under `labelled(label)` for each `{method: label}` (instance attributes shadow the
        methods until `close()`)."""
        for name, label in labels.items():
            fn = getattr(obj, name)

            def call(*a, _fn=fn, _label=label, **k):
                with self.labelled(_label):
                    return _fn(*a, **k)

            setattr(obj, name, call)
            self._restore.append((obj, name))

    # -------------------------------------------------------------------------------------------- results
    def forwards(self) -> dict[str, int]:
        """Forwards recorded per kind (a host-side count; no device read)."""
        for side in list(self._current):
            self._flush(side)
        return {k: sum(len(t) for t in r.union) + len(r.pending_union) for k, r in self._records.items()}

    def raw(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per kind: (union, per_row) as (forwards, layers) arrays: the one device read."""
        for side in list(self._current):
            self._flush(side)
        out = {}
        for kind, r in self._records.items():
            r.stack()
            out[kind] = (torch.cat(r.union).cpu().numpy(), torch.cat(r.per_row).cpu().numpy())
        return out

    def summary(self) -> dict[str, Any]:
        """`{kind: {mean, p50, p90, per_layer_mean, forwards, per_row: {...}}, num_experts, top_k, moe_layers}`:
        per forward, distinct experts per layer averaged over layers; `per_row` the same over one row's tokens."""
        out: dict[str, Any] = {}
        for kind, (union, per_row) in sorted(self.raw().items()):
            out[kind] = {**_stats(union), "forwards": int(union.shape[0]), "per_row": _stats(per_row)}
        return {
            **out,
            "num_experts": self.num_experts,
            "top_k": self.top_k,
            "moe_layers": max((len(v) for v in self.layers.values()), default=0),
        }

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        for obj, name in self._restore:
            delattr(obj, name)
        self._restore = []

    def __enter__(self) -> ExpertCounter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def for_decoder(decoder: Any) -> ExpertCounter | None:
    """A counter on the decoder's MoE model with its forward kinds labelled, or None (no MoE routers, or a
    decoder whose forward kinds cannot be told apart: AR + draft, whose verify forwards look like prefills)."""
    from models.ar import ARDecoder, AssistedARDecoder
    from models.diffusion_gemma import DiffusionGemmaAdapter
    from models.diffusion_gemma_ar import DiffusionGemmaARDecoder

    inner = getattr(decoder, "model", None)  # the adapter an engine decodes
    if isinstance(inner, DiffusionGemmaARDecoder):
        adapter, labels = inner.adapter, {"prefill": PREFILL, "commit": AR}
    elif isinstance(inner, DiffusionGemmaAdapter):
        # a hybrid run's commit forward is `encode_canvas` (it also verifies): still the canvas's causal re-encode
        adapter, labels = inner, {"prefill": PREFILL, "commit": COMMIT, "encode_canvas": COMMIT}
    elif isinstance(inner, ARDecoder) and not isinstance(inner, AssistedARDecoder):
        counter = ExpertCounter(inner.model)
        return counter if counter.active else counter.close()
    else:
        return None
    counter = ExpertCounter(adapter.model)
    if not counter.active:
        return counter.close()
    counter.label_calls(adapter, labels)
    return counter
