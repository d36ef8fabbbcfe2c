"""Counter-based random streams: every random number is a pure function of where it is used.

A uniform or a re-noise token is `hash(seed, canvas, step, position, stream)` (splitmix64 on int64
tensors), so a sample draws the same numbers whatever its batch, its batch neighbours, the moment it
was admitted or whether the run was resumed. There is no `torch.Generator` and no per-row Python loop:
one call makes the numbers of the whole batch, on any device, and traces under `torch.compile`.

`seed` is the request's own seed (`sample_seed(run seed, sample id)`), so the sample id is in the key.
"""

from __future__ import annotations

import torch

# Which draw a number feeds; part of the key, so the streams never overlap. The AR streams key a number by
# (seed, 0, absolute position): TOKEN samples a target token, DRAFT a draft token, ACCEPT the speculative
# acceptance test of a draft token and RESIDUAL the token drawn where a draft was rejected.
SAMPLE, RENOISE, INIT = 0, 1, 2
TOKEN, DRAFT, ACCEPT, RESIDUAL = 3, 4, 5, 6
# likelihood scoring (models.likelihood_masked, models.likelihood_uniform): ELBO_COUNT draws a Monte-Carlo
# estimate's stratified masking offset, ELBO_ORDER which continuation positions a sample masks.
ELBO_COUNT, ELBO_ORDER = 7, 8

_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB


def _signed(x: int) -> int:
    """A 64-bit constant as the int64 value with the same bits (torch has no uint64 arithmetic)."""
    return x - (1 << 64) if x >= 1 << 63 else x


GOLDEN, MUL1, MUL2 = _signed(_GOLDEN), _signed(_MUL1), _signed(_MUL2)


def _shr(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical right shift on int64 (torch's >> is arithmetic: mask off the copied sign bits)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (multiplication wraps modulo 2**64, as in C)."""
    x = x ^ _shr(x, 30)
    x = x * MUL1
    x = x ^ _shr(x, 27)
    x = x * MUL2
    return x ^ _shr(x, 31)


def position_keys(width: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(width,) int64 `(position + 1) * GOLDEN` (wrapping), the per-position part of every key.

    A compiled graph should receive these as an input tensor: built inside it from `arange`, inductor's CPU
    code folds the product into a loop-index expression whose signed overflow gcc -O3 treats as undefined
    (wrong values and segfaults at widths >= 32 with torch 2.13; tests/test_step_graph.py)."""
    return (torch.arange(width, device=device, dtype=torch.long) + 1) * GOLDEN


def _bits(
    seed: torch.Tensor,
    canvas: torch.Tensor,
    step: torch.Tensor,
    width: int,
    stream: int,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, width) int64 hash bits for rows keyed by (seed, canvas, step) (each (B,) int64), positions 0..width-1
    (`positions`: their `position_keys`, else computed here)."""
    h = mix64(seed.long() + _signed(_GOLDEN * (stream + 1) % (1 << 64)))
    h = mix64(h + canvas.long() * GOLDEN)
    h = mix64(h + (step.long() + 1) * GOLDEN)
    pos = position_keys(width, seed.device) if positions is None else positions
    return mix64(h[:, None] + pos[None, :])


def uniforms(
    seed: torch.Tensor,
    canvas: torch.Tensor,
    step: torch.Tensor,
    width: int,
    stream: int = SAMPLE,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, width) float64 uniforms in [0, 1) with 53 random bits each."""
    return _shr(_bits(seed, canvas, step, width, stream, positions), 11).double() * (2.0**-53)


def tokens(
    seed: torch.Tensor,
    canvas: torch.Tensor,
    step: torch.Tensor,
    width: int,
    vocab: int,
    stream: int,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, width) int64 tokens uniform over [0, vocab) (modulo bias below 2**-40 for any real vocabulary)."""
    return torch.remainder(_shr(_bits(seed, canvas, step, width, stream, positions), 1), vocab)
