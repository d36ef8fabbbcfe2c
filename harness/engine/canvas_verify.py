"""Self-speculative and routed decoding: the same weights' AR mode verifies canvases the diffusion mode drafted.

When a canvas finishes, the engine re-encodes it causally into the cache anyway (the commit). That forward is the
AR mode's forward over the canvas (the causal encoder + LM head, `model=*_ar`), so it also gives the AR mode's
next-token logits at every canvas position: the canvas is a draft that the commit verifies for free. A row keeps
the longest prefix the AR mode agrees with plus the AR token after it (the standard speculative rule, greedy or
sampled: `samplers.token_draw.verify`), the K/V of the rejected positions is dropped by the row's length alone
(nothing is copied, no other row is touched), and the next canvas is drafted from there with that AR token pinned
at its position 0 (already emitted; its K/V is written by the next canvas's forward). Greedy verification is
lossless: the output is greedy AR mode's, token for token (to float tolerance), at more tokens per forward.

`sampler.verify`: `always` verifies every canvas (self-speculative); `steps` and `step_cap` are routing rules that
send only the canvases they judge hard to the AR mode and commit the others as drafted (pure diffusion there).
NFE counts the denoiser forwards plus the verify forwards (one TPF rule everywhere); a routed canvas committed as
drafted costs no NFE for its commit, as in pure diffusion.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from samplers.config import SamplerConfig
from samplers.token_draw import TokenSampling, verify


@dataclass
class Verified:
    """One row's verified canvas."""

    emitted: list[int]  # tokens final now: the accepted drafts, then the AR token after them
    kept: int  # encoded canvas positions kept in the context (the pinned token and the accepted drafts)
    accepted: int  # draft tokens the AR mode accepted (the pinned token excluded)
    pin: int  # the AR token after them: emitted now, it opens the next canvas at position 0


def wants_verify(cfg: SamplerConfig, finished: bool, steps: int, mean_entropy: float | None) -> bool:
    """Whether a canvas that stopped after `steps` steps (`finished`: by the adaptive stop) goes to the AR mode."""
    if cfg.verify == "always":
        return True
    if cfg.verify == "steps":
        return steps >= cfg.route_steps
    if cfg.verify == "step_cap":
        return not finished and (mean_entropy is None or mean_entropy > cfg.route_entropy)
    return False


def sampling_of(cfg: SamplerConfig) -> TokenSampling:
    """The AR mode's token choice the verification is lossless against."""
    t = cfg.verify_temperature
    return TokenSampling(do_sample=True, temperature=t) if t > 0 else TokenSampling()


@torch.no_grad()
def verify_canvases(
    model,
    state,
    canvases: torch.Tensor,
    hidden: torch.Tensor,
    rows: list[int],
    pins: list[int | None],
    seeds: list[int],
    sampling: TokenSampling,
    group: int,
) -> list[Verified]:
    """Verify canvases (n, C) of `rows` from `hidden` (n, C, H), their causal forward (`model.encode_canvas`),
    before `model.advance` moves the contexts. Row i's canvas predicts positions from state.lengths[rows[i]];
    where pins[i] is set, position 0 holds that already-emitted AR token and only positions 1.. are drafts.

    The AR logits are float32 (g, C + 1, V) per group of at most `group` rows (the caller sizes it to its
    memory plan); pinned and unpinned rows go in separate groups, as their drafts start at different offsets."""
    n, c = canvases.shape
    dev = canvases.device
    out: list[Verified | None] = [None] * n
    for pinned in (False, True):
        idx = [i for i in range(n) if (pins[i] is not None) == pinned]
        for lo in range(0, len(idx), max(1, group)):
            part = idx[lo : lo + max(1, group)]
            h = hidden[part]
            if pinned:  # h[j] predicts position j + 1: drafts are positions 1..C-1, plus the bonus after them
                logits, drafts, offset = model.ar_logits(h), canvases[part, 1:], 1
            else:  # the context's last hidden state predicts position 0
                last = model.last_hidden_of(state, [rows[i] for i in part])
                logits, drafts, offset = model.ar_logits(torch.cat([last[:, None], h], 1)), canvases[part], 0
            k = drafts.shape[1]
            starts = torch.tensor([state.lengths[rows[i]] + offset for i in part], device=dev)
            positions = starts[:, None] + torch.arange(k + 1, device=dev)
            num = torch.full((len(part),), k, device=dev)
            seed = torch.tensor([seeds[i] for i in part], device=dev)
            accepted, tokens = verify(logits, drafts, None, num, sampling, seed, positions)
            del logits
            for j, (m, toks) in enumerate(zip(accepted.tolist(), tokens.tolist(), strict=True)):
                out[part[j]] = Verified(toks[: m + 1], m + offset, m, toks[m])
    return out  # type: ignore[return-value]
