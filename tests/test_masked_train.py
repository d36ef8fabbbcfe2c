"""The masked Sudoku objective (evals.sudoku.masked): answer-only masking, CE on masked positions, block-causal
attention; a short run through the trainer saves a checkpoint the masked adapter loads and decodes."""

from __future__ import annotations

import pytest
import torch

from evals.sudoku.masked import add_mask_token, answer_block, build_masked_model, masked_loss
from evals.sudoku.train import DigitCodec, ModelShape, TrainConfig, train
from models.masked_diffusion import block_mask
from models.tiny import char_tokenizer

TINY = ModelShape(hidden=32, layers=2, heads=2, head_dim=16, intermediate=64)
SHAPE = dict(hidden=32, layers=2, heads=2, head_dim=16, intermediate=64, max_position=64)


def _model(size=4):
    torch.manual_seed(0)
    tok = char_tokenizer()
    add_mask_token(tok)
    return build_masked_model(TrainConfig(kind="masked", size=size), tok, SHAPE), tok


def test_mask_token_fits_the_padded_vocabulary_and_the_block_is_the_answer():
    model, tok = _model()
    assert tok.mask_token_id < model.config.vocab_size == 112  # the AR baseline's vocabulary: same parameter count
    assert model.config.block_length == 16 and model.config.attention == "block_causal"
    assert answer_block(TrainConfig(size=6, block_length=6)) == 6
    with pytest.raises(ValueError, match="block_length"):
        answer_block(TrainConfig(size=6, block_length=7))


def test_loss_counts_masked_answer_positions_only():
    model, tok = _model()
    codec = DigitCodec(tok)
    prompt = codec.encode(["1200340000000000", "0000000000000021"], "cpu")
    clean = codec.encode(["1243341221344321", "3412214312344321"], "cpu")
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    assert masked_loss(model, prompt, clean, g(), (0.0, 0.0)).item() == 0.0  # nothing masked: nothing to learn
    full = masked_loss(model, prompt, clean, g(), (1.0, 1.0))
    # every answer position masked: the loss is the CE of the fully masked block, whatever the answer's digits
    other = codec.encode(["4321432143214321", "1111222233334444"], "cpu")
    manual = masked_loss(model, prompt, other, g(), (1.0, 1.0))
    assert full.item() > 0 and manual.item() > 0 and full.item() != manual.item()
    # the prompt's block never sees the answer (block-causal): its logits do not move when the answer does
    ids = torch.cat([prompt, clean], 1)
    pos = torch.arange(32).expand(2, -1)
    mask = block_mask(pos, pos, torch.ones_like(ids, dtype=torch.bool), 16, True)
    a = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    b = model(input_ids=torch.cat([prompt, other], 1), attention_mask=mask, position_ids=pos).logits
    assert torch.equal(a[:, :16], b[:, :16]) and not torch.equal(a[:, 16:], b[:, 16:])


def test_short_run_loads_through_the_masked_adapter_and_decodes(tmp_path):
    from contract.records import GenerationRequest
    from harness.engine.masked import MaskedDiffusionDecoder
    from models.masked_diffusion import MaskedDiffusionAdapter
    from samplers.masked import LowConfidenceConfig

    torch.set_num_threads(1)
    cfg = TrainConfig(
        kind="masked", out_dir=str(tmp_path / "m"), size=4, steps=3, batch_size=8, warmup_steps=1, t_min=0.0,
        curriculum_start=[4, 8], curriculum_end=[6, 10], model=TINY, threads=1, log_every=1, save_every=3,
        eval_every=3, eval_puzzles=4, eval_blanks=[6, 8], fresh_per_batch=1,
    )  # fmt: skip
    assert train(cfg)["step"] == 3
    ad = MaskedDiffusionAdapter(str(tmp_path / "m"), dtype="float32", context="cache", num_threads=1)
    assert ad.block_length == 16 and ad.mask_id == ad.tokenizer.mask_token_id
    req = GenerationRequest("0", ad.encode("1200340000000000"), seed=0, max_new_tokens=16)
    (res,) = MaskedDiffusionDecoder(ad, LowConfidenceConfig(steps_per_block=4)).generate([req])
    assert len(res.token_ids) == 16 and res.nfe == 4 and ad.mask_id not in res.token_ids
