"""Tiny masked twins the decode tests share."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from models.tiny import build_masked


def sharp_bidirectional(out: Path, block_length: int) -> Path:
    """The tiny bidirectional twin with its layers' weights scaled up: at the builder's scale every mask position
    predicts the same token, and any fill order would give the same answer."""
    out = build_masked(out, block_length=block_length, attention="bidirectional")
    model = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        for name, w in model.named_parameters():
            if ".layers." in name and "norm" not in name:
                w.mul_(15)
    model.save_pretrained(out)
    return out
