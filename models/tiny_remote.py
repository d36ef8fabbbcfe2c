"""A tiny random copy of a hub model that ships its own modeling code (`trust_remote_code`), built offline.

Input: a folder holding the family's code and config as the hub has them (`modeling_*.py`, `configuration_*.py`,
`config.json` with `auto_map`, tokenizer files where there are some). Output: a local checkpoint with the same files,
the real config keys with only the sizes shrunk (`shrink`), random weights and a tokenizer. `harness.hub_check` loads
it through our adapter and through the family's own code, so a loading or decoding gap shows up on a laptop-sized model
instead of on the first real run.

The vocabulary keeps its real size (the mask and EOS ids sit near its top); where the folder has no tokenizer, a
character tokenizer is built whose vocabulary covers every id, with the mask and EOS tokens at their real ids.
"""

from __future__ import annotations

import json
import re
import shutil
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model")
CODE_SUFFIXES = (".py", ".json", ".txt", ".jinja", ".model")
MASK, EOS = "<|mask|>", "<|endoftext|>"
# the final norm (not a layer's): scaling it spreads a random model's confidences over (0, 1)
FINAL_NORM = re.compile(r"^(model\.)?(norm|transformer\.ln_f)\.weight$")


@dataclass
class TinyRemote:
    """A built tiny checkpoint: where it is, the in-memory model it was saved from (its buffers were set by the
    model's own `__init__`, as transformers 4.x left them), and its token ids."""

    path: Path
    model: torch.nn.Module
    mask_id: int
    eos_ids: list[int] = field(default_factory=list)


def model_class(folder: Path, auto_class: str) -> type:
    """The class `auto_map` names for `auto_class` ("AutoModelForCausalLM" / "AutoModel"), imported from `folder`."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    auto_map = json.loads((folder / "config.json").read_text()).get("auto_map") or {}
    if auto_class not in auto_map:
        raise ValueError(f"config.json: auto_map has no {auto_class} (has {sorted(auto_map)})")
    return get_class_from_dynamic_module(auto_map[auto_class], str(folder))


def char_vocab_tokenizer(vocab_size: int, mask_id: int, eos_ids: list[int]):
    """Printable characters at ids 0.., the mask and EOS tokens at their real ids, filler tokens elsewhere: every id
    the model can emit decodes to something."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokens = [f"<|t{i}|>" for i in range(vocab_size)]
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    tokens[: len(chars)] = chars
    specials = {mask_id: MASK, **{e: EOS if k == 0 else f"<|eos{k}|>" for k, e in enumerate(eos_ids)}}
    for i, name in specials.items():
        if i < len(chars) or i >= vocab_size:
            raise ValueError(f"special id {i} ({name}) must lie in [{len(chars)}, {vocab_size})")
        tokens[i] = name
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(tokens)}, unk_token=tokens[len(chars)]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=EOS,
        mask_token=MASK,
        additional_special_tokens=[n for n in specials.values() if n not in (MASK, EOS)],
    )


def copy_code(src: Path, dst: Path) -> None:
    """The folder's code, config and tokenizer files (never weights)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and (f.suffix in CODE_SUFFIXES or f.name in TOKENIZER_FILES):
            shutil.copy2(f, dst / f.name)


def build_tiny_remote(
    code_dir: str | Path,
    out_dir: str | Path,
    shrink: dict[str, Any],
    auto_class: str,
    mask_id: int,
    eos_ids: list[int],
    torch_fallbacks: list[str] | None = None,
    seed: int = 0,
    sharpen: float = 8.0,
) -> TinyRemote:
    """Copy `code_dir` to `out_dir`, shrink its config.json by `shrink` (every other key as the hub has it), build
    the model class `auto_map` names with random weights (seeded; every matrix N(0, 0.1), the final norm scaled by
    `sharpen` so confidences spread), and save weights (+ a tokenizer if none).

    The model is built by its own `__init__` and saved with safetensors directly, not `save_pretrained`: building
    and saving must not depend on the loading path under test."""
    from safetensors.torch import save_file
    from transformers import AutoConfig

    from models.compat import remote_compat
    from models.loading import remote_load

    remote_compat.apply()  # the 4.x names such code imports (the adapter puts them back the same way)
    remote_load.install_fallbacks(torch_fallbacks)  # the model's `torch_fallbacks`, as the adapter installs them
    src, out = Path(code_dir), Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    copy_code(src, out)
    remote_load.fit_remote_classes(str(out), "AutoModel" if auto_class == "model" else "AutoModelForCausalLM")
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(shrink)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    config = AutoConfig.from_pretrained(out, trust_remote_code=True)
    torch.manual_seed(seed)
    model = model_class(out, auto_class)(config).eval()
    with torch.no_grad():  # one init for every family (some leave torch's defaults, whose logits are degenerate)
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
            elif FINAL_NORM.match(name):
                p.mul_(sharpen)
    if has_tokenizer(out):
        silence_untokenized(model, out)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    if not has_tokenizer(out):
        char_vocab_tokenizer(cfg["vocab_size"], mask_id, eos_ids).save_pretrained(out)
    return TinyRemote(out, model, mask_id, list(eos_ids))


def has_tokenizer(folder: Path) -> bool:
    return any((folder / f).exists() for f in ("tokenizer.json", "vocab.json", "tokenizer.model"))


def silence_untokenized(model: torch.nn.Module, folder: Path) -> None:
    """Zero the output rows of ids past the real tokenizer's last token (the vocabulary is padded: SDAR's 151,936 rows
    over about 151,670 tokens). A trained model never predicts them; a random one would, and its text could not be
    decoded. Zero rows score 0, below the largest of ~150k random logits."""
    from transformers import AutoTokenizer

    n = len(AutoTokenizer.from_pretrained(folder, trust_remote_code=True))
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[n:] = 0.0


def buffer_report(loaded: torch.nn.Module, fresh: torch.nn.Module) -> tuple[bool, str]:
    """Every buffer of the loaded model finite and equal to the fresh build's: (ok, one line saying which not)."""
    want = dict(fresh.named_buffers())
    bad, n = [], 0
    for name, buf in loaded.named_buffers():
        n += 1
        if buf.is_floating_point() and not torch.isfinite(buf).all():
            bad.append(f"{name} not finite")
        elif name in want and not torch.equal(buf.to(want[name].dtype).cpu(), want[name].cpu()):
            diff = (buf.double().cpu() - want[name].double().cpu()).abs().max().item()
            bad.append(f"{name} differs from a fresh init (max {diff:.3g})")
    return not bad, "; ".join(bad[:3]) + (f" (+{len(bad) - 3})" if len(bad) > 3 else "") or f"{n} buffers equal"
