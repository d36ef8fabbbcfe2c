"""A pure-torch stand-in for the two flash_attn functions SDAR's modeling file calls at inference, for machines
without flash_attn (it needs CUDA to build): opted in with `model.torch_fallbacks: [flash_attn]`, never implicit.

SDAR's `modeling_sdar.py` imports, at top level, `flash_attn.ops.triton.layer_norm.rms_norm_fn` (every RMSNorm) and,
in a try block, `flash_attn_func` / `flash_attn_varlen_func` (and `flash_attn.bert_padding`, whose failed import the
try block swallows). At inference it calls only:

- `rms_norm_fn(x, weight=w, bias=None, eps=eps)`: here as flash_attn's Triton kernel computes it, in float32
  (`x * rsqrt(mean(x^2) + eps) * w`), the result in x's dtype;
- `flash_attn_func(q, k, v, causal=False, softmax_scale=s)` where every key is seen (its "decoding" branch): here
  scaled-dot-product attention over all keys with grouped K/V heads, in the layout flash_attn takes, (B, L, H, D).

Anything else (a residual, dropout, causal, windows, `flash_attn_varlen_func`) raises instead of guessing. The stand-in
is a module tree put in `sys.modules` only where flash_attn is not installed, so transformers' import check and the
remote file's imports find it; a real flash_attn is always used where there is one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

import torch
import torch.nn.functional as F

MODULES = ("flash_attn", "flash_attn.ops", "flash_attn.ops.triton", "flash_attn.ops.triton.layer_norm")


def _refuse_unless_default(**given) -> None:
    defaults = {"residual": None, "dropout_p": 0.0, "prenorm": False, "causal": False, "window_size": (-1, -1)}
    defaults |= {"softcap": 0.0, "alibi_slopes": None, "return_attn_probs": False, "deterministic": False}
    defaults |= {"residual_in_fp32": False, "x1": None, "weight1": None, "bias1": None, "rowscale": None}
    for name, value in given.items():
        if name not in defaults or value != defaults[name]:
            raise NotImplementedError(f"flash_attn torch fallback: {name}={value!r} is not covered (docs/masked.md)")


def rms_norm_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float = 1e-6, **rest):
    """RMSNorm as flash_attn's kernel: float32 arithmetic, output in x's dtype."""
    _refuse_unless_default(**rest)
    h = x.float()
    y = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps) * weight.float()
    return (y if bias is None else y + bias.float()).to(x.dtype)


def flash_attn_func(q, k, v, dropout_p: float = 0.0, softmax_scale: float | None = None, **rest) -> torch.Tensor:
    """Attention over every key, (B, L, H, D) in and out; K/V may have fewer heads (grouped)."""
    _refuse_unless_default(dropout_p=dropout_p, **rest)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=softmax_scale, enable_gqa=True
    )
    return out.transpose(1, 2)


def flash_attn_varlen_func(*args, **kwargs):
    raise NotImplementedError("flash_attn torch fallback: flash_attn_varlen_func is not covered (docs/masked.md)")


def install() -> bool:
    """Puts the stand-in in place where flash_attn is not installed; returns whether it is the one in use."""
    if "flash_attn" in sys.modules:
        return getattr(sys.modules["flash_attn"], "__torch_fallback__", False)
    if importlib.util.find_spec("flash_attn") is not None:
        return False
    for name in MODULES:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=True)
        module.__path__ = []
        module.__torch_fallback__ = True
        sys.modules[name] = module
        if "." in name:
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, module)
    sys.modules["flash_attn"].flash_attn_func = flash_attn_func
    sys.modules["flash_attn"].flash_attn_varlen_func = flash_attn_varlen_func
    sys.modules["flash_attn.ops.triton.layer_norm"].rms_norm_fn = rms_norm_fn
    return True
