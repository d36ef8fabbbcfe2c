"""The field's strategies (samplers/strategies): each rule's `step` against a reference written here from its
paper / authors' code (plain per-row Python, none of our helpers), config validation naming the key, one Hydra
composition per strategy, and the guard that keeps them off an engine that would run another rule.

Parity with the authors' own code runs outside the test suite (it needs their files): `make strategies-check`."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.utils import instantiate

from harness.strategies_check.checks import CHECKS, Row, check
from samplers.config import SamplerConfigError
from samplers.masked_rule import BlockPlan, MaskedStepIn
from samplers.strategies import STRATEGIES
from tests.helpers.app import compose_app

MASK = 99


def cases(n: int = 40):
    """Random blocks (B rows, L positions, V vocab) with masks, at soft to saturated sharpness."""
    g = torch.Generator().manual_seed(0)
    for k in range(n):
        b, length, vocab = (1, 3, 2)[k % 3], (8, 16, 12)[k % 3], (5, 30, 11)[k % 3]
        scale = (0.5, 3.0, 15.0)[(k // 3) % 3]
        logits = torch.randn(b, length, vocab, generator=g) * scale
        block = torch.randint(0, vocab, (b, length), generator=g)
        block[torch.rand(b, length, generator=g) < 0.6] = MASK
        block[0, -1] = MASK  # every case has a masked position
        share = torch.randint(1, 5, (b,), generator=g)
        yield logits, block, share


def step_in(logits, block, share, seeded=False) -> MaskedStepIn:
    b = block.shape[0]
    plans = [BlockPlan(8, [int(s)], seeded) for s in share]
    keys = torch.zeros(3, b, dtype=torch.long)
    editable = torch.ones_like(block, dtype=torch.bool)
    return MaskedStepIn(logits, block, editable, plans, [0] * b, [True] * b, keys, MASK, [None] * b)


def probs_row(logits_row):
    """Per position: (argmax token, its probability, the distribution) in float64, by hand."""
    out = []
    for pos in logits_row.double().tolist():
        m = max(pos)
        e = [math.exp(v - m) for v in pos]
        z = sum(e)
        p = [v / z for v in e]
        t = max(range(len(p)), key=lambda i: (p[i], -i))
        out.append((t, p[t], p))
    return out


def ref_fast_dllm_v2(logits, block, share, sub=4, thr=0.9):
    """batch_sample's rule: the leftmost sub-block with a mask; its masks with p > thr, and its most probable mask."""
    rows = []
    for r in range(block.shape[0]):
        masked = [j for j, t in enumerate(block[r].tolist()) if t == MASK]
        cur = min(j // sub for j in masked)
        elig = [j for j in masked if j // sub == cur]
        pr = probs_row(logits[r])
        best = max(elig, key=lambda j: (pr[j][1], -j))
        rows.append({j for j in elig if pr[j][1] > thr} | {best})
    return rows


def entropy(p):
    return -sum(v * math.log(v + 1e-12) for v in p)


def ref_dparallel(logits, block, share, thr=0.5):
    """get_transfer_index_entropy with a threshold: the lowest-entropy mask, and every mask with entropy <= thr."""
    rows = []
    for r in range(block.shape[0]):
        pr = probs_row(logits[r])
        masked = [j for j, t in enumerate(block[r].tolist()) if t == MASK]
        h = {j: entropy(pr[j][2]) for j in masked}
        rows.append({j for j in masked if h[j] <= thr} | {min(masked, key=lambda j: (h[j], j))})
    return rows


def ref_eb(logits, block, share, gamma=0.3):
    """The paper's bound: the longest entropy-sorted prefix with sum - max <= gamma, at least one."""
    rows = []
    for r in range(block.shape[0]):
        pr = probs_row(logits[r])
        masked = sorted((entropy(pr[j][2]), j) for j, t in enumerate(block[r].tolist()) if t == MASK)
        k = 1
        while k < len(masked) and sum(h for h, _ in masked[: k + 1]) - masked[k][0] <= gamma:
            k += 1
        rows.append({j for _, j in masked[:k]})
    return rows


def ref_pc(logits, block, share, lambd=0.25, alpha=2.0):
    """PC-Sampler's score exp(-lambd i) * min(alpha, -p log f(t)), uniform f = 1/V here; the share's top ones."""
    rows = []
    for r in range(block.shape[0]):
        pr = probs_row(logits[r])
        vocab = logits.shape[-1]
        masked = [j for j, t in enumerate(block[r].tolist()) if t == MASK]
        score = {j: math.exp(-lambd * j) * min(alpha, -pr[j][1] * math.log(1 / vocab + 1e-9)) for j in masked}
        top = sorted(masked, key=lambda j: (-score[j], j))[: int(share[r])]
        rows.append(set(top))
    return rows


RULES = [
    ("fast_dllm_v2", {"sub_block_length": 4, "threshold": 0.9}, ref_fast_dllm_v2),
    ("dparallel", {"entropy_threshold": 0.5}, ref_dparallel),
    ("eb_sampler", {"gamma": 0.3}, ref_eb),
    ("pc_sampler", {"lambd": 0.25, "alpha": 2.0}, ref_pc),
]


@pytest.mark.parametrize("name,knobs,ref", RULES, ids=[r[0] for r in RULES])
def test_step_matches_the_rule_written_from_the_source(name, knobs, ref):
    cfg = STRATEGIES[name](**knobs)
    for logits, block, share in cases():
        out = cfg.step(step_in(logits, block.clone(), share))
        want = ref(logits, block, share)
        for r in range(block.shape[0]):
            assert set(out.filled[r].nonzero()[:, 0].tolist()) == want[r], (name, r)
            tokens = logits[r].argmax(-1)
            assert torch.equal(out.block[r], torch.where(out.filled[r], tokens, block[r]))
        assert not out.edited.any() and not out.remasked.any()


def test_a_row_without_masks_is_left_alone():
    logits, block = torch.randn(1, 8, 5), torch.randint(0, 5, (1, 8))
    for name, knobs, _ in RULES:
        out = STRATEGIES[name](**knobs).step(step_in(logits, block.clone(), torch.tensor([2])))
        assert torch.equal(out.block, block) and not out.filled.any(), name


@pytest.mark.parametrize(
    "name,knobs,key",
    [
        ("fast_dllm_v2", {"sub_block_length": 0}, "sampler.sub_block_length"),
        ("fast_dllm_v2", {"sub_block_length": 3, "block_length": 32}, "sampler.sub_block_length"),
        ("fast_dllm_v2", {"threshold": None}, "sampler.threshold"),
        ("fast_dllm_v2", {"remask_ratio": 0.2}, "sampler.remask_ratio"),
        ("dparallel", {"entropy_threshold": -0.1}, "sampler.entropy_threshold"),
        ("dparallel", {"threshold": 0.9}, "sampler.threshold"),
        ("dparallel", {"editing_threshold": 0.5}, "sampler.editing_threshold"),
        ("eb_sampler", {"gamma": "high"}, "sampler.gamma"),
        ("eb_sampler", {"gamma": -1.0}, "sampler.gamma"),
        ("pc_sampler", {"lambd": -1}, "sampler.lambd"),
        ("pc_sampler", {"alpha": 0}, "sampler.alpha"),
        ("pc_sampler", {"baseline": "no/such/file.json"}, "sampler.baseline"),
    ],
)
def test_bad_knobs_fail_at_construction_naming_the_key(name, knobs, key):
    with pytest.raises(SamplerConfigError, match=key):
        STRATEGIES[name](**knobs)


def test_pc_background_reads_its_json_layout(tmp_path):
    from samplers.strategies.pc_sampler import background

    f = tmp_path / "baseline.json"
    f.write_text('{"num_token": 100, "p_baseline_dict": {"2": 30, "7": 10}}')
    freq = background(str(f), 5)
    assert freq.shape == (8,) and freq[2] == pytest.approx(0.3) and freq[7] == pytest.approx(0.1)
    assert freq[0] == pytest.approx(0.01)  # an id it lacks: 1 / num_token, as its load_baseline


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_each_strategy_composes_from_its_yaml_with_a_knob_swept(name):
    knob = {
        "fast_dllm_v2": "sub_block_length=4", "dparallel": "entropy_threshold=0.25", "eb_sampler": "gamma=0.5",
        "wino": "threshold_back=0.8", "slowfast": "explore_steps=4", "klass": "kl_threshold=0.02",
    }  # fmt: skip
    override = knob.get(name, "lambd=0.5")
    cfg = instantiate(compose_app("model=tiny_masked", f"sampler={name}", f"sampler.{override}").sampler)
    assert type(cfg) is STRATEGIES[name] and cfg.name == name
    key, value = override.split("=")
    assert getattr(cfg, key) == type(getattr(cfg, key))(value)
    assert cfg.knobs()[key] == getattr(cfg, key)


@pytest.mark.parametrize("model", ["fast_dllm_v2_7b", "dparallel_llada_8b"])
def test_own_checkpoint_configs_name_it_and_fail_before_download_offline(model, monkeypatch):
    from harness.runner.configs import check_model_path

    cfg = compose_app(f"model={model}")
    assert "/" in cfg.model.path and cfg.sampler.name == {"fast_dllm_v2_7b": "fast_dllm_v2"}.get(model, "dparallel")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="model.path: .*HF_HUB_OFFLINE=1 forbids downloading"):
        check_model_path(cfg.model)


def test_wino_shadow_on_llada_8b_fails_before_loading_naming_what_the_yaml_lacks(tmp_path):
    """LLaDA 8B's own modeling takes a 2D key mask (`mask_form: padding`): WINO's shadow block cannot run there, and
    the CLI's plan says so before any weights load; `verify: self` runs, and so does the shadow with a 4D mask."""
    from harness.runner.plan import compose_plan

    (tmp_path / "config.json").write_text("{}")  # a local folder: the plan reads no weights
    base = ["model=llada_8b_instruct", f"model.path={tmp_path}", "model.device=cpu", "sampler=wino"]
    with pytest.raises(ValueError, match=r"sampler\.verify: shadow: .*a 4D mask \(mask_form bool or additive\); "):
        compose_plan(base)
    assert compose_plan([*base, "sampler.verify=self"]).sampler.shadow_queries is False
    assert compose_plan([*base, "model.mask_form=bool"]).sampler.shadow_queries is True


def test_the_end_to_end_cases_compose_through_the_cli_plan(tmp_path):
    """Each `*_e2e` check's case (its model yaml and `harness.run` overrides) plans as the CLI would, with the
    strategy and its knobs, without the authors' code (their modules load when a routine runs)."""
    from harness.hub_check import case_overrides
    from harness.runner.plan import compose_plan
    from harness.strategies_check import end_to_end

    (tmp_path / "config.json").write_text("{}")
    fams = end_to_end.families(tmp_path / "no_code")
    assert {f.name for f in fams} == {c.name.removesuffix("_e2e") for c in CHECKS if c.name.endswith("_e2e")}
    for fam in fams:
        over = [f"model={fam.model_yaml}", f"model.path={tmp_path}", "model.device=cpu", *case_overrides(fam, fam.case)]
        plan = compose_plan(over)
        assert type(plan.sampler) is STRATEGIES[fam.name] and plan.family.kind == "masked"
        for key, value in fam.case.knobs.items():
            assert getattr(plan.sampler, key) == value, (fam.name, key)


def test_a_seeded_block_commits_its_first_token_alone():
    """An AR-seeded plan (the layout's seed): its first forward fills position 0 only, the model's prediction."""
    logits = torch.randn(2, 8, 5) * 10
    block = torch.full((2, 8), MASK)
    for name, knobs, _ in RULES:
        out = STRATEGIES[name](**knobs).step(step_in(logits, block.clone(), torch.tensor([3, 3]), seeded=True))
        assert out.filled[:, 0].all() and out.filled.sum() == 2, name
        assert torch.equal(out.block[:, 0], logits[:, 0].argmax(-1))


def test_the_registry_and_every_masked_model_take_them():
    from contract.families import family_of
    from harness.runner.configs import SAMPLERS, samplers_of

    assert all(SAMPLERS[n] is c for n, c in STRATEGIES.items())
    assert set(STRATEGIES) <= set(samplers_of(family_of("masked")))


def test_strategies_check_reports_a_missing_code_folder(tmp_path):
    rows = [row for c in CHECKS for row in check(c, tmp_path)]
    assert [r.strategy for r in rows] == [c.name for c in CHECKS]
    assert all(not r.passed and "--code-dir lacks" in r.note for r in rows)
    assert Row("x", "s", "m", 2, 5, 5, 2).passed and not Row("x", "s", "m", 2, 4, 5, 1).passed


@pytest.mark.slow  # a real multirun of the four strategies (subprocess)
def test_every_strategy_decodes_through_the_engine(tmp_path):
    """`python -m harness.run -m model=tiny_masked eval=prompts sampler=...`: the engine calls each strategy's own
    step; every run ends with its knobs recorded, answers of tokens, TPF by the one rule."""
    import json

    from models.tiny import build_masked
    from tests.helpers.app import run_app

    path = build_masked(tmp_path / "m", block_length=8)
    # WINO, SlowFast, KLASS: their engine runs are tests/test_strategies_engine.py (WINO's shadow block needs a
    # bidirectional recompute model, which tiny_masked is not)
    own = [n for n in STRATEGIES if n not in ("wino", "slowfast", "klass")]
    names = ",".join(own)
    run_app(
        "-m", "model=tiny_masked", f"model.path={path}", "eval=prompts", f"sampler={names}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", "eval.max_new_tokens=16", timeout=600,
        check=True,
    )  # fmt: skip
    metrics = [json.loads(p.read_text()) for p in (tmp_path / "sweep").rglob("metrics.json")]
    assert sorted(m["run"]["sampler"]["name"] for m in metrics) == sorted(own)
    for m in metrics:
        assert m["num_tokens"] > 0 and m["tpf"] == pytest.approx(m["num_tokens"] / m["nfe"])
