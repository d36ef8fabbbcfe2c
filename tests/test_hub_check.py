"""`make hub-check` (harness/hub_check.py) on a stand-in family written here, never on copies of remote files: a
4.x-style modeling file with `auto_map` (a Llama subclass) at sizes the check shrinks, and an own `generate` routine
in a `generate.py` beside it. The check builds a tiny copy, loads it through the adapter, decodes through
`harness.run` and compares with the routine; a routine that decodes otherwise is reported, so the check can fail."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from harness import hub_check
from harness.hub_families import Case, HubFamily, load_routine_module
from models.tiny_remote import buffer_report

MASK_ID, EOS_ID = 120, 121

MODELING = """
from transformers import LlamaConfig, LlamaForCausalLM


class StandinConfig(LlamaConfig):
    model_type = "standin_masked"


class StandinForCausalLM(LlamaForCausalLM):
    config_class = StandinConfig
"""

# The stand-in's own routine: blocks aligned at position 0, a block-causal additive mask over the canvas so far, one
# token per step at the most confident masked position (`pick="confident"`) or at the leftmost (`"leftmost"`).
GENERATE = """
import torch


def generate(model, prompt, mask_id, gen_length, block_length, pick="confident"):
    p = prompt.shape[1]
    total = p + gen_length
    x = torch.full((1, total), mask_id)
    x[0, :p] = prompt[0]
    pos = torch.arange(total)
    blk = pos // block_length
    hidden = blk[None, :] > blk[:, None]
    for b in range(p // block_length, (total - 1) // block_length + 1):
        lo, hi = max(b * block_length, p), min((b + 1) * block_length, total)
        mask = torch.zeros(hi, hi).masked_fill(hidden[:hi, :hi], torch.finfo(torch.float32).min)[None, None]
        while (x[0, lo:hi] == mask_id).any():
            logits = model(input_ids=x[:, :hi], attention_mask=mask, position_ids=pos[None, :hi]).logits
            conf, tok = logits[0, lo:hi].softmax(-1).max(-1)
            open_ = x[0, lo:hi] == mask_id
            if pick == "confident":
                at = int(torch.where(open_, conf, -torch.inf).argmax())
            else:
                at = int(open_.nonzero()[0])
            x[0, lo + at] = tok[at]
    return x[0, p:].tolist()
"""


@pytest.fixture(scope="module")
def code_dir(tmp_path_factory):
    """A code folder as a hub snapshot holds it: config.json (real-size keys, auto_map), modeling, generate.py."""
    root = tmp_path_factory.mktemp("hub_code")
    folder = root / "standin"
    folder.mkdir()
    (folder / "modeling_standin.py").write_text(MODELING)
    (folder / "generate.py").write_text(GENERATE)
    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
    ).to_dict()
    cfg |= {"model_type": "standin_masked", "architectures": ["StandinForCausalLM"], "mask_token_id": MASK_ID}
    cfg |= {"block_length": 4, "auto_map": {"AutoConfig": "modeling_standin.StandinConfig"}}
    cfg["auto_map"]["AutoModelForCausalLM"] = "modeling_standin.StandinForCausalLM"
    (folder / "config.json").write_text(json.dumps(cfg))
    return root


def standin(pick: str, name: str = "standin", cases: list[Case] | None = None) -> HubFamily:
    def own(model, prompts, case, mask_id, code_dir, args):
        how = args.get("pick", pick)
        gen = load_routine_module(code_dir, f"standin_{how}")
        return [
            gen.generate(model, torch.tensor([p]), mask_id, case.max_new_tokens, case.block_length, pick=how)
            for p in prompts
        ]

    return HubFamily(
        name=name,
        model_yaml="tiny_masked",
        repo="local/standin",
        auto_class="AutoModelForCausalLM",
        mask_id=MASK_ID,
        eos_ids=[EOS_ID],
        shrink={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
        | {"num_key_value_heads": 2, "head_dim": 16},
        cases=cases or [Case(10, "low_confidence", {"steps_per_block": 4, "eos_early_stop": False}, block_length=4)],
        own=own,
        routine=f"generate.py: generate(pick={pick})",
        # its routine runs x[:, :hi]: the last block's positions past the request are hidden (tiny_masked: visible)
        model_overrides={"trust_remote_code": True, "tail": "hidden"},
    )


@pytest.mark.slow  # builds, loads and runs harness.run in a subprocess: ~15 s
def test_a_family_decoding_as_its_own_routine_passes(code_dir, tmp_path):
    row = hub_check.check_family(standin("confident"), code_dir, None, tmp_path)
    assert (row.loads, row.buffers_ok, row.decodes) == (True, True, True), row.note
    assert row.identical == row.prompts == len(hub_check.PROMPTS) and row.passed
    assert row.revision.startswith("files ") and row.details["probe_logits_max_diff"] <= 1e-4
    cfg = json.loads((tmp_path / "standin" / "tiny" / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["mask_token_id"], cfg["block_length"]) == (64, 2, 120, 4)
    assert cfg["auto_map"]["AutoModelForCausalLM"] == "modeling_standin.StandinForCausalLM"


@pytest.mark.slow
def test_a_routine_that_decodes_otherwise_is_reported(code_dir, tmp_path):
    row = hub_check.check_family(standin("leftmost"), code_dir, None, tmp_path)
    assert row.loads and row.buffers_ok and row.decodes
    assert row.identical < row.prompts and not row.passed
    assert row.note.startswith("parity: default: prompt ") and row.details["mismatches"]


KNOBS = {"steps_per_block": 4, "eos_early_stop": False}


@pytest.mark.slow  # one build and one harness.run (the three cases share it): ~20 s
def test_cases_at_a_shape_batched_unequal_prompts_and_documented_differences(code_dir, tmp_path):
    """Issue 54 item 7's machinery: a shape the family maps onto its keys, prompts of given token counts in one
    batch of 3, and cases whose routine differs by design: counted as such only when the routine with `explain`
    (the documented cause taken away) then matches ours; otherwise a parity failure named in the note."""
    from harness.hub_families import SHAPES

    batched = Case(10, "low_confidence", KNOBS, 4, "batch 3", (5, 9, 3), 3)
    documented = Case(
        10, "low_confidence", KNOBS, 4, "leftmost, documented", (5, 9, 3), 3, {"pick": "leftmost"}, "why",
        {"pick": "confident"},
    )  # fmt: skip
    unexplained = Case(
        10, "low_confidence", KNOBS, 4, "leftmost, wrongly explained", (5, 9, 3), 3, {"pick": "leftmost"}, "why",
        {"pick": "leftmost"},
    )  # fmt: skip
    fam = standin("confident", cases=[batched, documented, unexplained])
    fam.shrink = lambda s: {"hidden_size": s.hidden, "intermediate_size": s.ffn, "num_hidden_layers": s.layers} | {
        "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads, "head_dim": s.hidden // s.heads
    }  # fmt: skip
    row = hub_check.check_family(fam, code_dir, None, tmp_path, shape=SHAPES["h96-l3"])
    cfg = json.loads((tmp_path / "standin" / "h96-l3" / "tiny" / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (96, 6, 3)
    assert row.shape == "h96-l3" and [c["prompt_tokens"] for c in row.cases] == [[5, 9, 3]] * 3
    assert len(list((tmp_path / "standin" / "h96-l3").glob("case*"))) == 1  # one harness.run for the three
    assert [(c["identical"], c["by_design"]) for c in row.cases][:1] == [(3, 0)]
    doc, wrong = row.cases[1], row.cases[2]
    assert doc["identical"] < 3 and doc["identical"] + doc["by_design"] == 3 and doc["why"] == "why"
    assert wrong["by_design"] == 0 and wrong["identical"] == doc["identical"]
    assert not row.passed and row.note.startswith("parity: leftmost, wrongly explained: prompt ")
    assert "| standin | h96-l3 | leftmost, documented | [5, 9, 3], 3 |" in hub_check.case_table([row])
    documented_only = dict(loads=True, buffers_ok=True, decodes=True, identical=4, prompts=6, by_design=2)
    assert hub_check.HubCheckRow("f", "s", "r", **documented_only).passed


def test_one_family_failing_does_not_stop_the_others(code_dir, tmp_path, monkeypatch, capsys):
    """A family whose modeling file imports a missing package fails at build, named in one line; a family whose
    folder is missing fails too; both rows are printed, written as JSON and recorded under the revisions table,
    and the exit status says not every family passed."""
    broken = code_dir / "broken"
    broken.mkdir(exist_ok=True)
    for f in ("config.json", "generate.py"):
        (broken / f).write_text((code_dir / "standin" / f).read_text())
    (broken / "modeling_standin.py").write_text("import not_a_real_package_xyz\n" + MODELING)
    monkeypatch.setitem(hub_check.FAMILIES, "broken", standin("confident", "broken"))
    monkeypatch.setitem(hub_check.FAMILIES, "absent", standin("confident", "absent"))
    revisions = tmp_path / "hub_revisions.md"
    revisions.write_text("# list\n\n| family | source | revision | date | result |\n|---|---|---|---|---|\n\nNotes.\n")
    argv = ["--code-dir", str(code_dir), "--families", "broken", "absent", "--out", str(tmp_path / "out")]
    assert hub_check.main([*argv, "--record", str(revisions)]) == 1
    rows = json.loads(next((tmp_path / "out").glob("*/hub_check.json")).read_text())
    assert [r["family"] for r in rows] == ["broken", "absent"]
    assert rows[0]["loads"] is False and "not_a_real_package_xyz" in rows[0]["note"]
    assert rows[1]["loads"] is False and "no such family folder" in rows[1]["note"]
    out = capsys.readouterr().out
    assert "| broken |" in out and "| absent |" in out and "\n" not in rows[0]["note"]
    lines = revisions.read_text().splitlines()  # the rows go under the table, above what follows it
    assert lines[4].startswith("| broken | ") and "FAIL: build: " in lines[4] and lines[5].startswith("| absent | ")
    assert lines[-1] == "Notes."


def test_buffers_not_finite_or_not_a_fresh_init_are_named():
    cfg = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    fresh, loaded = LlamaForCausalLM(cfg), LlamaForCausalLM(cfg)
    assert buffer_report(loaded, fresh)[0]
    loaded.model.rotary_emb.inv_freq[0] = 7.0
    ok, what = buffer_report(loaded, fresh)
    assert not ok and "rotary_emb.inv_freq differs from a fresh init" in what
    loaded.model.rotary_emb.inv_freq[0] = float("nan")
    assert "not finite" in buffer_report(loaded, fresh)[1]


def test_cut_at_eos_keeps_the_eos_and_the_limit():
    assert hub_check.cut_at_eos([5, 6, 7, 8], {7}, 10) == [5, 6, 7]
    assert hub_check.cut_at_eos([5, 6, 7, 8], {9}, 3) == [5, 6, 7]
    assert torch.tensor(hub_check.cut_at_eos([], {1}, 3)).numel() == 0


def test_a_decode_that_fails_in_harness_run_is_named_in_one_line(code_dir, tmp_path):
    """Loaded fine, but harness.run refuses the sampler setting: decodes NO, with harness.run's own message."""
    fam = standin("confident")
    fam.cases = [Case(10, "low_confidence", {"steps_per_block": 0}, block_length=4)]
    row = hub_check.check_family(fam, code_dir, None, tmp_path)
    assert row.loads and row.buffers_ok and row.decodes is False and row.identical is None
    assert (
        row.note.startswith("decode (default): RuntimeError: harness.run exited 1: ") and "steps_per_block" in row.note
    )


def test_hub_mode_takes_code_and_config_from_the_snapshot_never_weights(code_dir, tmp_path, monkeypatch):
    """The download branch on huggingface_hub's own offline path: a snapshot already in the cache (holding weights
    too) at a pinned commit, and the routine fetched from its URL (here file://): code and config copied, weights
    not; the row's source and revision are the repo and the snapshot's commit."""
    from huggingface_hub import constants

    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "cache" / "models--local--standin"
    snap = repo / "snapshots" / sha
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    for f in ("config.json", "modeling_standin.py"):
        (snap / f).write_text((code_dir / "standin" / f).read_text())
    (snap / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    fam = standin("confident")
    fam.routine_url = (code_dir / "standin" / "generate.py").as_uri()
    folder, source, revision = hub_check.obtain_code(fam, None, None, tmp_path / "work")
    assert (source, revision) == ("local/standin", sha)
    assert sorted(f.name for f in folder.iterdir()) == ["config.json", "generate.py", "modeling_standin.py"]


def test_a_real_tokenizer_shorter_than_the_vocabulary_leaves_its_padding_ids_unpredicted(code_dir, tmp_path):
    """With the folder's own tokenizer (fewer tokens than rows, as SDAR's), the tiny copy never predicts an id the
    tokenizer cannot decode: those output rows are zero."""
    from models.tiny import char_tokenizer
    from models.tiny_remote import build_tiny_remote

    folder = tmp_path / "with_tokenizer"
    folder.mkdir()
    for f in ("config.json", "modeling_standin.py"):
        (folder / f).write_text((code_dir / "standin" / f).read_text())
    tok = char_tokenizer()
    tok.save_pretrained(folder)
    fam = standin("confident")
    tiny = build_tiny_remote(folder, tmp_path / "tiny", fam.shrink, fam.auto_class, MASK_ID, [EOS_ID])
    head = tiny.model.get_output_embeddings().weight
    assert len(tok) < head.shape[0] and not head[len(tok) :].any() and head[: len(tok)].abs().min(-1).values.gt(0).all()


def test_a_case_takes_the_first_sampler_harness_run_knows():
    assert Case(8, ("not_a_sampler_yet", "low_confidence")).sampler_name() == "low_confidence"
    assert Case(8, ("block_refinement", "low_confidence")).overrides()[0] == "sampler=block_refinement"
