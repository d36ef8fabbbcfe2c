"""diffusers' `DiffusionGemmaPipeline` as a decoder (`decoder=diffusers`): the same model, a second implementation.

The pipeline decodes a batch in lockstep, as diffusers batches it: the prompts of a batch together, one
`torch.Generator` for the batch, every row computed until the whole batch has stopped (a row that stopped early
stays frozen), canvases appended until every row has produced EOS. Its scheduler and knobs come from the sampler
group (`samplers.diffusers_config`). What is ours: the prompts are our token ids (`RawTokenPipeline` skips the
processor's chat template, so compact Sudoku prompts and chat prompts both arrive as `encode()` renders them), and
the records follow the one TPF rule: output cut at EOS / stop string / `max_new_tokens` (`contract.text.cut_at_stop`),
and a sample's `nfe` the denoiser forwards of the steps it was still denoising, up to the canvas its output ends in.
Forwards are counted from `callback_on_step_end`, called once per predictor step: the step's forward plus the
corrector sweeps the pipeline ran before it (`DiffusersSamplerConfig.forwards_at`); the test checks the count
against a forward hook on the model.

Not resumable: a sample's random numbers depend on its batch neighbours (one generator per batch, seeded from the
batch's first request), so a partly done run is refused rather than mixed (`contract.decoding.decode_and_store`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version

import torch

from contract.decoding import DecoderKind, stream_in_batches
from contract.records import GenerationRequest, GenerationResult, check_requests
from contract.text import cut_at_stop
from samplers.diffusers_config import DiffusersSamplerConfig


def _pipeline_class():
    """`DiffusionGemmaPipeline` with raw token prompts and the frozen-row flags visible to the step callback."""
    from diffusers import DiffusionGemmaPipeline

    class RawTokenPipeline(DiffusionGemmaPipeline):
        # `finished_denoising` (rows whose canvas already stopped) is a local of the denoising loop like `canvas`
        _callback_tensor_inputs = [*DiffusionGemmaPipeline._callback_tensor_inputs, "finished_denoising"]

        def _prepare_inputs(self, *, prompt, messages, image, add_generation_prompt):
            """`prompt` is a list of token-id lists: left-padded to one length (pad masked out), no template."""
            width = max(len(p) for p in prompt)
            pad = self.processor.pad_token_id or 0
            ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompt], dtype=torch.long)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt], dtype=torch.long)
            return ids, mask, {}

    return RawTokenPipeline


@dataclass
class _StepLog:
    """What the step callback saw: per predictor step, its canvas index, forwards and which rows still denoised."""

    sampler: DiffusersSamplerConfig
    canvas: list[int] = field(default_factory=list)
    forwards: list[int] = field(default_factory=list)
    active: list[list[bool]] = field(default_factory=list)

    def __call__(self, pipe, global_step: int, step: int, tensors: dict) -> dict:
        self.canvas.append((self.canvas[-1] + 1 if step == 0 else self.canvas[-1]) if self.canvas else 0)
        self.forwards.append(self.sampler.forwards_at(step))
        self.active.append((~tensors["finished_denoising"]).tolist())
        return {}

    def charge(self, res: GenerationResult, row: int, canvases: int) -> None:
        """Fill `res`'s forward counts from the steps of its first `canvases` canvases."""
        cap = self.sampler.predictor_steps
        res.steps_per_canvas = [0] * canvases
        for k, f, active in zip(self.canvas, self.forwards, self.active, strict=True):
            if k >= canvases:
                break
            res.row_forwards += f
            if active[row]:
                res.nfe += f
                res.steps_per_canvas[k] += 1
        res.step_cap_hits = sum(s == cap for s in res.steps_per_canvas)
        res.accepted_per_step = [[] for _ in range(canvases)]  # the schedulers' accept masks are not exposed
        res.renoised_per_step = [[] for _ in range(canvases)]


class DiffusersDecoder:
    """`contract.decoding.Decoder` over a `models.diffusion_gemma.DiffusionGemmaAdapter`'s model and tokenizer."""

    label = DecoderKind.DIFFUSION  # block diffusion of the same model; its family on the fronts is the sampler name
    resumable = False
    why_not_resumable = "the diffusers pipeline draws a batch's random numbers from one generator"

    def __init__(self, adapter, sampler: DiffusersSamplerConfig):
        import diffusers

        self.adapter, self.sampler, self.tokenizer = adapter, sampler, adapter.tokenizer
        self.canvas_length = adapter.canvas_length
        scheduler = getattr(diffusers, sampler.scheduler)(**sampler.scheduler_config())
        self.pipe = _pipeline_class()(model=adapter.model, scheduler=scheduler, processor=adapter.tokenizer)
        self.pipe.set_progress_bar_config(disable=True)
        eos = adapter.tokenizer.eos_token_id
        self.eos_id = eos if eos in adapter.eos_ids else min(adapter.eos_ids)  # the pipeline stops on one id

    def encode(self, prompt) -> list[int]:
        return self.adapter.encode(prompt)

    def describe(self) -> dict:
        return {
            **self.adapter.describe(),
            "label": self.label,
            "implementation": "diffusers",
            "diffusers_version": version("diffusers"),
            "pipeline": "DiffusionGemmaPipeline",
            "scheduler": self.sampler.scheduler,
            "sampler": self.sampler.knobs(),
            "canvas_length": self.canvas_length,
        }

    def stream(self, requests: Iterable[GenerationRequest], batch_size: int) -> Iterator[GenerationResult]:
        """Consecutive batches of `batch_size`, each one pipeline call; a batch's results when it ends."""
        return stream_in_batches(self.generate, requests, batch_size)

    @torch.no_grad()
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """One pipeline call for the batch; results in request order."""
        check_requests(requests)
        log = _StepLog(self.sampler)
        generator = torch.Generator(self.adapter.device).manual_seed(requests[0].seed)
        out = self.pipe(
            prompt=[r.prompt_ids for r in requests],
            gen_length=max(r.max_new_tokens for r in requests),
            eos_token_id=self.eos_id,
            generator=generator,
            output_type="seq",
            callback_on_step_end=log,
            callback_on_step_end_tensor_inputs=["finished_denoising"],
            **self.sampler.call_kwargs(),
        )
        decoded = out.sequences.shape[1] // self.canvas_length  # canvases the batch ran
        return [self._result(r, i, out.sequences[i].tolist(), log, decoded) for i, r in enumerate(requests)]

    def _result(self, req: GenerationRequest, row: int, ids: list[int], log: _StepLog, decoded: int):
        toks, text, reason = cut_at_stop(
            self.tokenizer, ids[: req.max_new_tokens], self.adapter.eos_ids, req.stop_strings
        )
        canvases = min(decoded, max(1, -(-len(toks) // self.canvas_length)))  # the canvas its output ends in
        res = GenerationResult(req.sample_id, [], text, 0, encoder_forwards=canvases, prompt_tokens=len(req.prompt_ids))
        res.token_ids = [t for t in toks if t != self.adapter.pad_id]  # TPF counts non-pad tokens (as generate())
        res.finished_by = reason
        log.charge(res, row, canvases)
        return res
