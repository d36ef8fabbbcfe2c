"""Adapter over masked (absorbing-state) block-diffusion LMs: LLaDA 2.x, SDAR, LLaDA, Dream, and our tiny twins.

The model is any module taking `input_ids`, a 4D float `attention_mask` (0 seen, the dtype's minimum hidden:
`additive`) and `position_ids` and returning `.logits` (the contract diffusers' LLaDA2Pipeline relies on).
Attention is chosen by config, never guessed:
`block_causal` (LLaDA 2.x, SDAR: a query in block i sees keys in blocks <= i; blocks are aligned at absolute
position 0, prompt included, as in LLaDA2Pipeline), `bidirectional` (LLaDA, Dream) or `prefix_causal`
(Nemotron-Labs-Diffusion's block diffusion with a causal context: everything before the current block is encoded
causally, as an AR model reads it, the current block attends that context and itself bidirectionally; blocks start
at the prompt's end and each block's first token is the AR prediction of the position before it, `ar_seeded`).
Three context paths (`context`, recorded in `describe()`):

- `recompute`: every step runs the row's whole prefix plus its current block (LLaDA2Pipeline's way; exact).
- `cache`: block-causal and prefix-causal models only. A committed block's K/V never change, so they are kept per
  row and a step runs only the current block, plus the positions committed since the row's last step (the prompt's whole
  blocks at its first step, the previous block at the first step of a block): no extra forward. Exact. The K/V
  live in `models.cache.row_cache.RowCache` (preallocated per-row slots, slot = position): the model's attention
  writes a step's new K/V in place and attends the rows' slots, so no step copies the cached prefix.
- `prefix_cache`: the same on a bidirectional model, Fast-dLLM's approximate prefix cache (a block's K/V are
  computed once, at the step after its commit, and never refreshed; Fast-dLLM refreshes at each block start).

`shifted_logits` (Dream): logits at position i predict token i + 1 (recompute path only).

The decode layout is the family's own, named in its yaml (`harness.engine.masked` follows it): `canvas: block` runs
the prefix and the current block (LLaDA2Pipeline), `canvas: answer` the whole answer with later blocks' positions as
mask tokens (LLaDA's generate.py, Dream's diffusion_generate: a bidirectional model sees them; recompute path
only); `block_origin: absolute` aligns blocks at position 0 (LLaDA 2.x), `prompt` at the prompt's end (LLaDA, Dream);
`block_length: answer` makes the whole answer one block (Dream). `schedule` and `confidence` are the family's fill
schedule and ranking (`samplers.masked`), the defaults a sampler's null ones take. `sub_block`: the rule fills a
block as sub-blocks of that many positions, left to right, each forward running the whole block (Fast-dLLM v2's
small blocks). One object answers all of it, `models.loading.masked_checks.DecodeLayout` (`self.layout`), the
shift and the AR seed included: both context paths and the engine read it, nothing else.
`tail`: where prompt + new tokens ends inside a block, the positions past that length up to the block's end (mask
tokens, filled like any other, never returned). `visible` (LLaDA 2.1's own `generate`, SDAR's
`block_diffusion_generate`): they are ordinary positions of the last block, attending and attended. `hidden`
(diffusers' LLaDA2Pipeline, whose 2D mask marks them 0, read as transformers reads padding): their keys are hidden
from every query, themselves included; their queries still see the prompt and the real positions, so no query is
left without a key (a softmax over no key would be NaN).

What a model's own forward takes is read from its signature, not assumed: `position_ids` are passed where it takes
them (LLaDA 8B's remote code does not; it numbers positions 0 .. T - 1 itself, so it runs on the recompute path
only), `logits_to_keep` or `num_logits_to_keep` (Dream) where it takes one. Remote code that reads the mask its own
way is configured, never guessed: `mask_form: bool` passes True = seen (SDAR calls `.bool()` on the mask, which
would invert the additive form), `mask_form: padding` passes a 2D (B, K) key mask, 1 = seen (LLaDA 8B flattens
any mask to (B, 1, 1, -1); only a fully bidirectional model on the recompute path can be told its mask that way),
and `forward_kwargs` go to every forward (SDAR writes its cache only with `store_kv: true`); `module_attrs` are set
on every submodule that has them after loading (Nemotron-Labs-Diffusion switches each attention between its modes
with a `diffusion_lm` flag and drops any mask in diffusion mode: set false, it attends as our mask says). Loading
goes through `models.loading.remote_load`: packages the code imports are checked first (`requires`,
`torch_fallbacks`), 4.x
remote classes are fitted, and non-persistent buffers (rotary `inv_freq`) are repaired from a fresh init or the
model is refused. docs/masked.md lists what each hub model's remote code needs, checked against its source.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from contract.decoding import DecoderKind
from contract.paths import resolve_model_ref
from contract.text import Prompt, encode_prompt
from models.cache.row_cache import RowCache
from models.compat import remote_compat
from models.loading import remote_load
from models.loading.masked_checks import DecodeLayout, check_masked_model, shadow_gaps
from models.masked_masks import BlockQuery, additive, block_mask, canvas_ids, mask_rows, shadowed

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "auto": "auto"}
AUTO_CLASSES = {"causal_lm": AutoModelForCausalLM, "model": AutoModel}


def set_module_attrs(model: torch.nn.Module, attrs: dict[str, Any]) -> dict[str, Any]:
    """Set each attribute on every submodule that has it (a mode flag remote code reads per layer); an attribute
    no submodule has is refused, naming the key (a renamed flag would otherwise be silently left as it was)."""
    for name, value in attrs.items():
        owners = [m for m in model.modules() if hasattr(m, name)]
        if not owners:
            raise ValueError(f"model.module_attrs.{name}: no submodule of {type(model).__name__} has it")
        for m in owners:
            setattr(m, name, value)
    return attrs


class MaskedDiffusionAdapter:
    """Loads a masked block-diffusion LM (hub id or local folder) and runs one refinement forward for many rows."""

    kind = DecoderKind.MASKED

    def __init__(
        self,
        path: str,
        name: str | None = None,
        dtype: str = "auto",
        device: str = "cpu",
        attention: str = "block_causal",
        context: str = "recompute",
        mask_token_id: int | None = None,
        block_length: int | str | None = None,  # int, or 'answer' (one block: the whole answer)
        shifted_logits: bool = False,
        trust_remote_code: bool = False,
        auto_class: str = "causal_lm",
        eos_token_ids: list[int] | None = None,
        enable_thinking: bool | None = None,
        num_threads: int | None = None,
        revision: str | None = None,
        attn_implementation: str | None = None,
        mask_form: str = "additive",
        forward_kwargs: dict[str, Any] | None = None,
        canvas: str = "block",
        block_origin: str = "absolute",
        schedule: str = "even",
        confidence: str = "prob",
        module_attrs: dict[str, Any] | None = None,
        requires: list[str] | None = None,
        torch_fallbacks: list[str] | None = None,
        tail: str = "visible",
        sub_block: int | None = None,
    ):
        seeded, shifted = attention == "prefix_causal", bool(shifted_logits)
        self.layout = DecodeLayout(canvas, block_origin, schedule, confidence, sub_block, seeded, shifted)
        check_masked_model(
            attention, context, shifted_logits, block_length, mask_form, forward_kwargs, self.layout, module_attrs,
            requires, torch_fallbacks, tail,
        )  # fmt: skip
        if dtype not in DTYPES:
            raise ValueError(f"model.dtype: must be one of {sorted(DTYPES)}, got {dtype!r}")
        if auto_class not in AUTO_CLASSES:
            raise ValueError(f"model.auto_class: must be one of {sorted(AUTO_CLASSES)}, got {auto_class!r}")
        if num_threads:
            torch.set_num_threads(num_threads)
        path = resolve_model_ref(path, "model.path")
        self.path, self.name, self.revision = path, name or Path(path).name, revision
        self.torch_fallbacks = remote_load.install_fallbacks(torch_fallbacks)
        kwargs: dict[str, Any] = {"dtype": DTYPES[dtype], "revision": revision}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        model = remote_load.load_pretrained(AUTO_CLASSES[auto_class], path, trust_remote_code, **kwargs).eval()
        self.buffer_check = remote_load.repair_buffers(model)  # before any forward: refuses what it cannot repair
        model = model.to(device)
        self.module_attrs = set_module_attrs(model, dict(module_attrs or {}))
        tok = AutoTokenizer.from_pretrained(path, revision=revision, trust_remote_code=trust_remote_code)
        self.attention, self.context, self.shifted_logits = attention, context, shifted_logits
        self.mask_form, self.forward_kwargs, self.tail = mask_form, dict(forward_kwargs or {}), tail
        self.bind(model, tok, mask_token_id, block_length, eos_token_ids, enable_thinking)

    def bind(self, model, tokenizer, mask_token_id, block_length, eos_token_ids, enable_thinking=None) -> None:
        """Mask id and block length: the config yaml's, else the checkpoint config's, else the tokenizer's."""
        self.model, self.tokenizer, self.enable_thinking = model, tokenizer, enable_thinking
        params = inspect.signature(model.forward).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.takes_positions = "position_ids" in params or takes_any
        if not self.takes_positions and self.context != "recompute":
            raise ValueError(
                f"model.context={self.context}: {type(model).__name__}.forward takes no position_ids (it numbers "
                "positions 0 .. T - 1 itself), so only context=recompute runs its positions right"
            )
        # the LM head runs only on the columns a step reads (not the prompt's), where the model's forward allows it
        self.keep_arg = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
        self.trims_logits = self.keep_arg is not None
        cfg = model.config
        self.mask_id = mask_token_id if mask_token_id is not None else getattr(cfg, "mask_token_id", None)
        self.mask_id = self.mask_id if self.mask_id is not None else tokenizer.mask_token_id
        if self.mask_id is None:
            raise ValueError("model.mask_token_id: none in the config yaml, the checkpoint's config or its tokenizer")
        if tokenizer.mask_token_id is not None and tokenizer.mask_token_id != self.mask_id:
            raise ValueError(
                f"model.mask_token_id: {self.mask_id}, but the tokenizer's mask token {tokenizer.mask_token!r} is "
                f"{tokenizer.mask_token_id}"
            )
        self.block_length = block_length or getattr(cfg, "block_length", None) or getattr(cfg, "block_size", None)
        if not self.block_length:
            raise ValueError("model.block_length: none in the config yaml or the checkpoint's config")
        self.layout = replace(self.layout, block_length=self.block_length)
        self.device, self.dtype = model.device, model.dtype
        self.vocab_size = cfg.get_text_config().vocab_size
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else -1
        path, revision = getattr(self, "path", None), getattr(self, "revision", None)
        self.eos_ids = set(eos_token_ids or remote_load.eos_ids_of(model, tokenizer, path, revision))

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, self.enable_thinking)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "path": self.path,
            "dtype": str(self.dtype),
            "device": str(self.device),
            "attention": self.attention,
            "context": self.context,
            "context_exact": self.context != "prefix_cache",
            "shifted_logits": self.shifted_logits,
            "mask_form": self.mask_form,
            "module_attrs": getattr(self, "module_attrs", {}),
            "ar_seeded": self.ar_seeded,
            "tail": self.tail,
            "forward_kwargs": self.forward_kwargs,
            "buffers_checked": self.buffer_check.checked,
            "buffers_repaired": self.buffer_check.repaired,
            "remote_compat": remote_compat.fitted(self.model),
            "torch_fallbacks": self.torch_fallbacks,
            "position_ids": self.takes_positions,
            "mask_token_id": self.mask_id,
            "block_length": self.block_length,
            **self.layout.describe(),
            "vocab_size": self.vocab_size,
            "parameters": sum(p.numel() for p in self.model.parameters()),
        }

    @property
    def ar_seeded(self) -> bool:
        """Blocks start at the prompt's end and a block's first token is the AR prediction of the position before it
        (`prefix_causal`): the decoder commits it alone at the block's first forward (the layout's `seeded`)."""
        return self.layout.seeded

    # ----------------------------------------------------------------------------------------------

    def open(self, rows: int) -> RowCache:
        """The rows' context: their cached K/V (`models.cache.row_cache`; the recompute path keeps none)."""
        return RowCache(rows)

    def release(self, cache: RowCache, row: int) -> None:
        cache.release(row)

    @torch.no_grad()
    def forward(
        self, cache: RowCache, queries: list[BlockQuery], block_length: int, ahead: int = 0, shadow: bool = False
    ) -> torch.Tensor:
        """(len(queries), L, V) logits of each row's current block (L = `block_length`, the decode block; for a
        block-causal model also its attention block); with `ahead`, the recompute path adds the next `ahead`
        positions' (L + ahead columns: a whole-answer canvas computes them anyway), the cached path never does;
        with `shadow` (recompute, `shadow_refusal` None), the block's then its shadow's (2L columns: WINO)."""
        if self.context == "recompute":
            return self._recompute(queries, block_length, ahead, shadow)
        return self._cached(cache, queries, block_length)

    def shadow_refusal(self) -> str | None:
        """Why this model cannot run WINO's shadow block (None: it can): the verify queries need the recompute path,
        every position seeing every other, a 4D mask and position ids, no logit shift, whole blocks."""
        lay = self.layout
        missing = shadow_gaps(
            self.context, self.attention, self.mask_form, lay.shifted, lay.sub_block, self.takes_positions
        )
        return f"the shadow block needs {', '.join(missing)}" if missing else None

    def _call(self, ids, qpos, mask, keep: int, keys=None, **kwargs) -> torch.Tensor:
        """Logits of (at least) the last `keep` columns: exactly those when the model can trim its LM head. The mask
        is expanded to the batch (a view: remote code may check its first dimension). `mask_form=padding` passes the
        rows' valid keys `keys` (1 = seen) instead."""
        if self.keep_arg:
            kwargs[self.keep_arg] = keep
        if self.takes_positions:
            kwargs["position_ids"] = qpos
        if self.mask_form == "padding":
            mask = keys.long().expand(ids.shape[0], -1)
        else:
            mask = additive(mask, self.dtype) if self.mask_form == "additive" else mask
            mask = mask.expand(ids.shape[0], -1, -1, -1)
        logits = self.model(input_ids=ids, attention_mask=mask, **kwargs, **self.forward_kwargs).logits
        return logits[:, -keep:]

    def _key_end(self, q: BlockQuery, seq_end: int) -> int:
        """Where row q's keys end: its sequence so far, cut at the request's length where the tail is hidden or where
        blocks start at the prompt (nothing real lies past the request there: only the filler of a shorter block)."""
        visible = self.tail == "visible" and self.layout.block_origin == "absolute"
        return seq_end if visible else min(seq_end, q.valid_end)

    def _recompute(self, queries: list[BlockQuery], block: int, ahead: int = 0, shadow: bool = False) -> torch.Tensor:
        """A row's canvas cut inside its block (`canvas_end`) is padded to the batch's width with hidden keys; the
        logits past the cut (and past a row's canvas) are those of the last column, no real position."""
        dev = self.device
        seqs = [canvas_ids(q, self.mask_id) for q in queries]
        w = max(map(len, seqs))
        ids = torch.tensor([s + [self.mask_id] * (w - len(s)) for s in seqs], device=dev)
        pos = torch.arange(w, device=dev).expand(len(seqs), -1)
        ends = [self._key_end(q, len(s)) for s, q in zip(seqs, queries, strict=True)]
        m = mask_rows(ends)  # every row's positions are 0 .. w - 1: rows of one end share one mask row
        ends = torch.tensor(ends[:m], device=dev)
        keys = pos[:m] < ends[:, None]
        mask = block_mask(pos[:m], pos[:m], keys, block, self.attention == "block_causal")
        shift = int(self.layout.shifted)
        cols = torch.arange(block + ahead, device=dev)
        starts = torch.tensor([q.start for q in queries], device=dev)
        at = (starts[:, None] + cols - shift).clamp(min=0, max=w - 1)
        if shadow:
            ids, pos, mask = shadowed(ids, pos, mask, starts, block, self.mask_id)
            at = torch.cat([at, w + torch.arange(block, device=dev).expand(len(queries), -1)], dim=1)
        keep = ids.shape[1] - int(at.min())
        logits = self._call(ids, pos, mask, keep, keys, use_cache=False)
        return logits.gather(1, (at - (ids.shape[1] - keep))[..., None].expand(-1, -1, logits.shape[-1]))

    def _cached(self, cache: RowCache, queries: list[BlockQuery], block: int) -> torch.Tensor:
        """Rows starting a prompt (more than a block not yet cached) run in a forward of their own beside the
        decoding rows: in one forward every row would be padded to the longest prompt, so a row refilled
        mid-run would cost the whole batch a prefill (16 rows x 544 columns for one 512-token prompt)."""
        fresh = [q.start - cache.lengths[q.row] > block for q in queries]
        if all(fresh) or not any(fresh):
            return self._cached_group(cache, queries, block)
        groups = [[k for k, f in enumerate(fresh) if f == want] for want in (True, False)]
        parts = [self._cached_group(cache, [queries[k] for k in g], block) for g in groups]
        logits = parts[0].new_empty((len(queries), *parts[0].shape[1:]))
        for g, part in zip(groups, parts, strict=True):
            logits[g] = part
        return logits

    def _cached_group(self, cache: RowCache, queries: list[BlockQuery], block: int) -> torch.Tensor:
        """The current blocks plus each row's not yet cached prefix (left-padded so every row's block is the last L
        columns), over the rows' cached K/V in `cache`. Keys sit at their positions' slots, so the mask is
        built from positions alone."""
        dev = self.device
        rows = [q.row for q in queries]
        pend = [q.prefix[cache.lengths[r] :] for q, r in zip(queries, rows, strict=True)]
        w = max(map(len, pend)) + block
        pads = [w - len(p) - block for p in pend]
        ids = [[self.mask_id] * pad + p + q.block for q, p, pad in zip(queries, pend, pads, strict=True)]
        qpos = [
            [0] * pad + list(range(cache.lengths[r], q.start + block))
            for q, r, pad in zip(queries, rows, pads, strict=True)
        ]
        cache.plan(rows, pads, w, dev)
        # a query sees the slots below its row's key end and, block-causally, its block's end (a padding query sits
        # at position 0: it sees the row's first block, never nothing)
        lims = [self._key_end(q, q.start + block) for q in queries]
        m = mask_rows(lims, qpos)
        qpos = torch.tensor(qpos, device=dev)
        lim = torch.tensor(lims[:m], device=dev)[:, None]
        if self.attention == "block_causal":
            lim = torch.minimum(lim, (qpos[:m] // block + 1) * block)
        elif self.attention == "prefix_causal":  # a context query sees up to itself, a block query all before lim
            starts = torch.tensor([q.start for q in queries[:m]], device=dev)[:, None]
            lim = torch.where(qpos[:m] < starts, qpos[:m] + 1, lim)
        slot = torch.arange(cache.span, device=dev)
        mask = (slot < lim[..., None]).expand(-1, qpos.shape[1], -1)[:, None]
        ids = torch.tensor(ids, device=dev)
        keep = block + int(self.layout.seeded and w > block)
        logits = self._call(ids, qpos, mask, keep, past_key_values=cache, use_cache=True)
        cache.advance(rows, [len(p) for p in pend])
        return self._seeded(logits, [len(p) > 0 for p in pend]) if keep > block else logits

    def _seeded(self, logits: torch.Tensor, opening: list[bool]) -> torch.Tensor:
        """The block's logits; a row opening its block (its context up to the block runs in this forward, the
        previous block or the prompt) gets for column 0 the causal logits of the position before the block: the AR
        prediction that opens every block of `prefix_causal` decoding."""
        out = logits[:, 1:]
        opening = torch.tensor(opening, device=logits.device)
        out[:, 0] = torch.where(opening[:, None], logits[:, 0], out[:, 0])
        return out


class ReferenceModel(torch.nn.Module):
    """The adapter's model as diffusers' LLaDA2Pipeline calls it (`input_ids`, a 2D mask, `position_ids`), the 2D mask
    read as transformers reads padding: transformers' own mask functions build the 4D mask (block-causal through
    `block_sequence_ids`, bidirectional otherwise) and a 0 in the 2D mask hides that key from every query. None of
    our mask code runs, so a parity test against the pipeline checks our masks against transformers'."""

    def __init__(self, adapter: MaskedDiffusionAdapter, block_length: int):
        super().__init__()
        self.inner, self.block_length, self.attention = adapter.model, block_length, adapter.attention
        self.config = adapter.model.config

    @property
    def device(self) -> torch.device:
        return self.inner.device

    @property
    def dtype(self) -> torch.dtype:
        return self.inner.dtype

    def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
        from transformers.masking_utils import create_bidirectional_mask, create_causal_mask

        pos = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        pos = pos if position_ids is None else position_ids
        embeds = self.inner.get_input_embeddings()(input_ids)
        kw = {"config": self.inner.config, "inputs_embeds": embeds, "attention_mask": attention_mask}
        if self.attention == "block_causal":
            mask = create_causal_mask(
                **kw, past_key_values=None, position_ids=pos, block_sequence_ids=pos // self.block_length,
                allow_is_causal_skip=False,
            )  # fmt: skip
        else:
            mask = create_bidirectional_mask(**kw, allow_is_bidirectional_skip=False)
        return self.inner(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=False)
