"""The block-diffusion decode loop: prefill, denoise each canvas with a sampler, commit, repeat.

    prefill(prompt) -> for each canvas: init random canvas -> up to N steps of
    [denoise -> temperature -> draw -> accept (+remask) -> re-noise the rest -> adaptive stop]
    -> commit the argmax canvas (re-encode into the cache) -> stop at EOS / stop string / max tokens.

Two random-stream modes. `reference` makes exactly transformers' `generate()` random calls from the
global RNG (bit-for-bit parity, batch-dependent). `per_sample` gives every request its own generator,
and a row draws only while it is still denoising, so its output does not depend on the batch.
"""

from __future__ import annotations

import time

import torch

from harness.records import GenerationRequest, GenerationResult
from models.base import cut_at_stop
from samplers.config import SamplerConfig
from samplers.draw import draw_exact, draw_reference


class BlockDiffusionDecoder:
    """Implements `models.base.Decoder` for any adapter with prefill / canvas_masks / denoise / commit."""

    label = "diffusion"

    def __init__(self, model, sampler: SamplerConfig):
        self.model, self.sampler = model, sampler
        self.tokenizer = model.tokenizer
        self.canvas_length = sampler.canvas_length or model.canvas_length
        if sampler.random_stream == "reference":
            self._draw = draw_reference
        elif sampler.draw == "fast":
            from samplers.fast_draw import draw_fast

            self._draw = draw_fast
        else:
            self._draw = draw_exact

    def encode(self, prompt) -> list[int]:
        return self.model.encode(prompt)

    def describe(self) -> dict:
        return {**self.model.describe(), "label": self.label, "sampler": self.sampler.knobs(), "canvas_length": self.canvas_length}

    @torch.no_grad()
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        t0 = time.perf_counter()
        dev = self.model.device
        b, c, cfg = len(requests), self.canvas_length, self.sampler
        reference = cfg.random_stream == "reference"
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((b, width), self.model.pad_id, dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.bool)
        for i, r in enumerate(requests):
            if not r.prompt_ids:
                raise ValueError(f"request {r.sample_id!r} has an empty prompt")
            ids[i, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[i, width - len(r.prompt_ids):] = True
        ids, mask = ids.to(dev), mask.to(dev)
        gens = None if reference else [torch.Generator(device=dev).manual_seed(r.seed) for r in requests]

        state = self.model.prefill(ids, mask)
        results = [GenerationResult(r.sample_id, [], "", 0, encoder_forwards=1, prompt_tokens=len(r.prompt_ids)) for r in requests]
        outputs: list[list[int]] = [[] for _ in requests]
        done = torch.zeros(b, dtype=torch.bool, device=dev)  # finished sequences (EOS / stop / length)
        max_canvases = -(-max(r.max_new_tokens for r in requests) // c)
        for k in range(max_canvases):
            canvas = self._denoise_canvas(state, done, gens, results, k)
            was_done = done.clone()
            for i, r in enumerate(requests):
                if not done[i]:
                    outputs[i].extend(canvas[i].tolist())
                    _, _, reason = cut_at_stop(self.tokenizer, outputs[i], self.model.eos_ids, r.stop_strings)
                    if reason != "length" or len(outputs[i]) >= r.max_new_tokens:
                        done[i] = True
            if bool(done.all()) or k == max_canvases - 1:
                break
            # as generate(): rows done earlier commit pads, rows ending here pad after their EOS
            pad = was_done[:, None] | (done[:, None] & self._after_eos(canvas))
            canvas = canvas.masked_fill(pad, self.model.pad_id)
            state = self.model.commit(state, canvas)
            for i in range(b):
                results[i].encoder_forwards += int(not done[i])

        for i, r in enumerate(requests):
            toks, text, reason = cut_at_stop(self.tokenizer, outputs[i][: r.max_new_tokens], self.model.eos_ids, r.stop_strings)
            res = results[i]
            res.token_ids = [t for t in toks if t != self.model.pad_id]  # TPF counts non-pad tokens (as generate())
            res.text, res.finished_by = text, reason
            res.wall_time_s = time.perf_counter() - t0
            res.extra["batch_size"] = b
        return results

    def _after_eos(self, canvas: torch.Tensor) -> torch.Tensor:
        """Positions strictly after the first EOS of each row (padded before re-encoding, as generate() does)."""
        is_eos = torch.isin(canvas, torch.tensor(sorted(self.model.eos_ids), device=canvas.device))
        cum = is_eos.long().cumsum(-1)
        return (cum > 0) & ~((cum == 1) & is_eos)

    def _denoise_canvas(self, state, done, gens, results, k) -> torch.Tensor:
        """Denoise one canvas for the whole batch; returns the committed (argmax) canvas (B, C)."""
        cfg, model, c = self.sampler, self.model, self.canvas_length
        b, dev = done.shape[0], done.device
        reference = gens is None
        canvas = self._random_tokens(torch.empty((b, c), dtype=torch.long, device=dev), gens, torch.ones_like(done))
        argmax = canvas
        sc_logits = None
        finished = torch.zeros(b, dtype=torch.bool, device=dev)  # finished denoising this canvas
        history = torch.full((cfg.stability_steps, b, c), -1, dtype=torch.long, device=dev)
        masks = model.canvas_masks(state, c)
        for res in (r for i, r in enumerate(results) if not done[i]):
            res.accepted_per_step.append([])
            res.renoised_per_step.append([])
            res.steps_per_canvas.append(0)
        for step in range(cfg.max_steps):
            active = ~(finished | done)
            logits = model.denoise(state, canvas, masks, sc_logits if cfg.self_conditioning else None)
            processed = logits.div_(cfg.temperature(cfg.max_steps - step))  # in place: saves a B*C*V copy
            draw = self._draw(processed, gens, active)
            keep = cfg.remask(cfg.accept(draw, step), draw.confidence)
            noise = self._random_tokens(canvas, gens, active)
            new_canvas = torch.where(keep, draw.sampled, noise)
            new_argmax = draw.argmax
            if cfg.adaptive_stop:  # rows that already stopped keep their canvas, argmax and logits
                new_argmax = torch.where(finished[:, None], argmax, new_argmax)
                new_canvas = torch.where(finished[:, None], canvas, new_canvas)
                if sc_logits is not None:
                    processed = torch.where(finished[:, None, None], sc_logits, processed)
                if cfg.stability_steps == 0:
                    stable = torch.ones(b, dtype=torch.bool, device=dev)
                else:
                    stable = (history == new_argmax[None]).all(-1).all(0)
                    history = torch.cat([history[1:], new_argmax[None]])
                # rows already stopped stay stopped, so their (frozen) entropy is irrelevant here
                finished = finished | (stable & (draw.entropy.mean(-1) < cfg.stop_entropy))
            self._record(results, active, keep, step, k, new_argmax, draw.entropy)
            canvas, argmax, sc_logits = new_canvas, new_argmax, processed.to(model.model.dtype)
            if bool(finished.all()) if reference else bool((finished | done).all()):
                break
        for i, res in enumerate(results):
            if not done[i] and res.steps_per_canvas[-1] == cfg.max_steps and not finished[i]:
                res.step_cap_hits += 1
        return argmax

    def _random_tokens(self, like: torch.Tensor, gens, active: torch.Tensor) -> torch.Tensor:
        """Uniform tokens shaped like `like`: one global draw for every row (reference mode, generate()'s
        call order), else one draw per active row from its own stream; inactive rows keep `like`."""
        v = self.model.vocab_size
        if gens is None:
            return torch.randint(0, v, like.shape, device=like.device)
        out = like.clone()
        for i, g in enumerate(gens):
            if active[i]:
                out[i] = torch.randint(0, v, like.shape[1:], generator=g, device=like.device)
        return out

    def _record(self, results, active, keep, step, k, argmax, entropy) -> None:
        kept = keep.sum(-1).tolist()
        for i, res in enumerate(results):
            if not active[i]:
                continue
            res.nfe += 1
            res.steps_per_canvas[-1] += 1
            res.accepted_per_step[-1].append(kept[i])
            res.renoised_per_step[-1].append(self.canvas_length - kept[i])
            if self.sampler.capture_trajectory:
                res.trajectory = res.trajectory or []
                res.trajectory.append({"canvas": k, "step": step, "argmax": argmax[i].tolist(),
                                       "mean_entropy": float(entropy[i].mean())})
