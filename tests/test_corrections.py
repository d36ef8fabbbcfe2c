"""Self-correction counts (evals.corrections) on hand-made trajectories, and the records both decoders write."""

from __future__ import annotations

import pytest

from contract.records import GenerationRequest
from evals.corrections import count_corrections, run_corrections, sample_corrections


def _step(canvas, step, tokens, accepted, argmax=None, **kw):
    return {"canvas": canvas, "step": step, "argmax": argmax or tokens, "tokens": tokens, "accepted": accepted, **kw}


RIGHT = [5, 6, 7]


def test_wrong_then_right_is_one_repair():
    traj = [
        _step(0, 0, [4, 9, 9], [0]),  # cell 0 committed wrong
        _step(0, 1, [8, 9, 9], []),  # re-noised: not committed, nothing changes
        _step(0, 2, [5, 6, 7], [0, 1, 2]),  # cell 0 recommitted right
    ]
    assert count_corrections(traj, RIGHT) == {"changed": 1, "repairs": 1, "breaks": 0}


def test_right_then_wrong_is_a_break_and_wrong_to_wrong_is_neither():
    traj = [_step(0, 0, [5, 1, 9], [0, 1]), _step(0, 1, [4, 2, 7], [0, 1, 2])]
    assert count_corrections(traj, RIGHT) == {"changed": 2, "repairs": 0, "breaks": 1}
    assert count_corrections(traj) == {"changed": 2}  # no answer key: changes only


def test_the_committed_argmax_of_a_canvas_counts_and_canvases_do_not_share_positions():
    # accepted 4 at cell 0, but the canvas stopped with argmax 5 there: the final commit repaired it
    traj = [_step(0, 0, [4, 6, 7], [0, 1, 2], argmax=[5, 6, 7]), _step(1, 0, [1, 1, 1], [0, 1, 2])]
    assert count_corrections(traj, RIGHT + [1, 2, 3]) == {"changed": 1, "repairs": 1, "breaks": 0}


def test_masked_offsets_remask_and_masks_commit_nothing():
    m = 99
    traj = [  # the first block holds 2 prompt tokens (offset -2): they are never output positions
        _step(0, 0, [3, 3, 4, m], [2], offset=-2, mask_id=m),
        _step(0, 1, [3, 3, m, m], [], offset=-2, mask_id=m),  # re-masked
        _step(0, 2, [3, 3, 5, 6], [2, 3], offset=-2, mask_id=m),  # refilled differently: a repair
        _step(1, 0, [7, m, m, m], [0], offset=2, mask_id=m),  # EOS stop mid-block: masks commit nothing
    ]
    assert count_corrections(traj, RIGHT + [8]) == {"changed": 1, "repairs": 1, "breaks": 0}


def test_rows_without_trajectory_are_not_measured_and_runs_sum_the_measured():
    assert sample_corrections(None, RIGHT) == {"corr_changed": None, "corr_repairs": None, "corr_breaks": None}
    rows = [
        {"corr_changed": 2, "corr_repairs": 1, "corr_breaks": 0, "nfe": 4, "renoised_per_step": [[3, 1, 0, 0]]},
        {"corr_changed": 0, "corr_repairs": 0, "corr_breaks": 0, "nfe": 2, "renoised_per_step": [[2, 0]]},
    ]
    out = run_corrections(rows)
    assert out["committed_changed"] == 2 and out["repairs"] == 1 and out["breaks"] == 0
    assert out["changed_sample_rate"] == 0.5 and out["renoised_per_step"] == pytest.approx(6 / 6)
    assert run_corrections([{"corr_changed": None, "nfe": 36}]) == {}  # AR: nothing measured, no zeros


@pytest.fixture(scope="module")
def masked_adapter(tmp_path_factory):
    from models.masked_diffusion import MaskedDiffusionAdapter
    from models.tiny import build_masked

    path = build_masked(tmp_path_factory.mktemp("m") / "L4", block_length=4)
    return MaskedDiffusionAdapter(str(path), dtype="float64", context="cache", eos_token_ids=[1], num_threads=1)


def test_masked_decoder_records_a_trajectory_that_ends_in_its_output(masked_adapter):
    from harness.engine.masked import MaskedDiffusionDecoder
    from samplers.masked import ReMDMConfig

    cfg = ReMDMConfig(steps_per_block=4, remask_ratio=0.5, capture_trajectory=True, eos_early_stop=False)
    ad = masked_adapter
    req = GenerationRequest("0", ad.encode("Hello"), seed=0, max_new_tokens=8)
    (res,) = MaskedDiffusionDecoder(ad, cfg).generate([req])
    traj = res.trajectory
    assert len(traj) == res.nfe and all(e["mask_id"] == ad.mask_id for e in traj)
    out: dict[int, int] = {}
    for e in traj:  # the last entry of each block is what the output holds there
        out.update({e["offset"] + p: t for p, t in enumerate(e["argmax"]) if e["offset"] + p >= 0})
    assert [out[i] for i in range(len(res.token_ids))] == res.token_ids
    assert sum(map(sum, res.renoised_per_step)) == res.extra.get("remasked", 0) > 0
    # an off run records nothing and decodes the same
    off = MaskedDiffusionDecoder(ad, ReMDMConfig(steps_per_block=4, remask_ratio=0.5)).generate([req])[0]
    assert off.trajectory is None and off.token_ids == res.token_ids
