"""HumanEval and MBPP as d3LLM's leaderboard runs them (evals/code_tasks): the program a reply stands for, both prompt
protocols, and grading in our sandbox: passing, failing and hostile programs (a fork bomb, an endless loop, writes
outside, the network) on our own toy problems (tests/fixtures/d3llm), never through lm-eval's unsandboxed code_eval."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time

import pytest

from evals.code_tasks import CodeTaskEval
from evals.code_tasks.extract import fenced_code, longest_parsing_stretch, sanitize
from evals.d3llm_protocol import lm_eval_fewshot
from evals.sandbox import SandboxUnavailable
from tests.helpers.app import REPO
from tests.test_sandbox_adversarial import sandbox_pids

FIX = REPO / "tests/fixtures/d3llm"
BOUND_S = 1.0 + 6  # the per-program limit + slack for a busy 2-core box


def test_sanitize_keeps_what_the_entry_point_reaches():
    code = (
        "import math\nfrom itertools import chain\n"
        "def helper(x):\n    return math.sqrt(x)\n"
        "def unused(x):\n    return x\n"
        "def solve(x):\n    return helper(x) + SCALE\n"
        "def no_return():\n    print(1)\n"
        "SCALE = 2\nprint(solve(4))\nassert solve(4) == 4\n"
    )
    out = sanitize(code, "solve")
    assert "def helper" in out and "def solve" in out and "SCALE = 2" in out and "import math" in out
    assert "def unused" not in out and "print(" not in out and "assert" not in out
    everything = sanitize(code)  # no entry point: every kept definition, still no top-level calls
    assert "def unused" in everything and "def no_return" not in everything and "print(solve" not in everything


def test_longest_parsing_stretch_drops_trailing_prose():
    text = "def f(x):\n    return x + 1\n\nThis function adds one.\nIt is (simple."
    assert longest_parsing_stretch(text) == "def f(x):\n    return x + 1\n"
    assert fenced_code("Sure!\n```python\ndef f():\n    return 1\n```\nbye ```x```") == "def f():\n    return 1\n"
    assert fenced_code("    return a\n") == "    return a\n"  # a continued prefix has no fence


def test_protocol_prompts_and_stops():
    he_llada = CodeTaskEval("humaneval", data_file=str(FIX / "humaneval.jsonl"), protocol="llada")
    turn = he_llada.items()[0].prompt
    assert len(turn) == 1 and turn[0]["content"].startswith("Write a solution to the following problem")
    assert turn[0]["content"].endswith("```\n ") and he_llada.stop_strings == []
    he_dream = CodeTaskEval("humaneval", data_file=str(FIX / "humaneval.jsonl"), protocol="dream")
    user, prefix = he_dream.items()[0].prompt
    assert prefix["role"] == "assistant" and prefix["content"].startswith(
        "Here is the completed function:\n```python\n"
    )
    assert "\ndef" in he_dream.stop_strings
    mbpp = CodeTaskEval("mbpp", data_file=str(FIX / "mbpp.jsonl"), protocol="llada").items()[0].prompt[0]["content"]
    assert mbpp.count("[DONE]") == 3 and mbpp.endswith("assert largest_of_three(-1, -2, -3) == -1```python\n")
    assert lm_eval_fewshot("mbpp")[0]["text"] in mbpp  # lm-eval's own shots, read from its package
    dream = CodeTaskEval("mbpp", data_file=str(FIX / "mbpp.jsonl"), protocol="dream")
    assert dream.items()[0].prompt[-1]["content"] == "Here is the completed function:\n```python\n"
    assert dream.stop_strings == ["```"]


def _item(ev, sample_id):
    return next(it for it in ev.items() if it.sample_id == sample_id)


@pytest.mark.sandbox
def test_passing_and_failing_programs_in_the_sandbox():
    ev = CodeTaskEval(
        "humaneval", data_file=str(FIX / "humaneval.jsonl"), protocol="llada", sandbox={"isolation": "bwrap"}
    )
    item = _item(ev, "Toy/0")
    good = ev.score(item, "Sure:\n```python\ndef add_pair(a, b):\n    return a + b\n\nprint(add_pair(2, 'x'))\n```")
    assert good["correct"] == 1.0 and good["status"] == "passed" and good["sandbox"] == "bwrap"
    bad = ev.score(item, "```python\ndef add_pair(a, b):\n    return a - b\n```")
    assert bad["correct"] == 0.0 and bad["status"] == "failed"
    assert ev.score(item, "I cannot do that.")["status"] == "no_code"
    dream = CodeTaskEval("humaneval", data_file=str(FIX / "humaneval.jsonl"), protocol="dream")
    assert dream.score(_item(dream, "Toy/1"), "    return sum(c in 'aeiou' for c in word)")["correct"] == 1.0
    mbpp = CodeTaskEval("mbpp", data_file=str(FIX / "mbpp.jsonl"), protocol="dream")
    right = mbpp.score(_item(mbpp, "mbpp/9002"), "def reverse_words(s):\n    return ' '.join(reversed(s.split()))\n")
    assert right["correct"] == 1.0
    summary = mbpp.summarize([{"meta": {}, **right}, {"meta": {}, **bad}])
    assert summary["pass@1"] == 0.5 and summary["sandbox"] == "bwrap" and "sandbox_warning" not in summary


@pytest.fixture
def canary():
    d = tempfile.mkdtemp(prefix="d3llm-canary-")
    os.chmod(d, 0o777)
    path = os.path.join(d, "canary.txt")
    with open(path, "w") as f:
        f.write("canary")
    os.chmod(path, 0o666)
    yield path
    shutil.rmtree(d, ignore_errors=True)


FORK_BOMB = "    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n"
DAEMON = (
    "    if os.fork() == 0:\n        os.setsid()\n        time.sleep(1.5)\n        open(CANARY, 'w').write('pwned')\n"
)
HOSTILE = {  # each body returns the right answer only if its attack worked (the daemon: it must not outlive grading)
    "fork_bomb": FORK_BOMB,
    "endless_loop": "    while True:\n        pass\n",
    "write_outside": "    open(CANARY, 'w').write('pwned')\n    os.remove(CANARY)\n",
    "daemon": DAEMON + "        os._exit(0)\n    time.sleep(0.1)\n",
}


@pytest.mark.sandbox
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_programs_are_contained(name, canary):
    ev = CodeTaskEval("mbpp", data_file=str(FIX / "mbpp.jsonl"), protocol="dream", timeout_s=1.0)
    head = f"import os, time\nCANARY = {canary!r}\ndef largest_of_three(a, b, c):\n"
    before, t0 = sandbox_pids(), time.monotonic()
    row = ev.score(_item(ev, "mbpp/9001"), head + HOSTILE[name] + "    return max(a, b, c)\n")
    assert time.monotonic() - t0 < BOUND_S and row["sandbox"] == "bwrap"
    if name == "daemon":  # its answer is right; what must fail is the daemon, which would write after 1.5 s
        assert row["correct"] == 1.0
        time.sleep(2)
    else:
        assert row["correct"] == 0.0 and row["status"] in ("failed", "timeout"), row
    deadline = time.monotonic() + 3
    while (left := sandbox_pids() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes outlived the grading: {left}"
    with open(canary) as f:
        assert f.read() == "canary"


@pytest.mark.sandbox
def test_the_network_is_unreachable():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    port, hits, stop = server.getsockname()[1], [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                hits.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    reply = (
        "import socket\ndef largest_of_three(a, b, c):\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=0.3)\n    return max(a, b, c)\n"
    )
    ev = CodeTaskEval("mbpp", data_file=str(FIX / "mbpp.jsonl"), protocol="dream")
    try:
        row = ev.score(_item(ev, "mbpp/9001"), reply)
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()
    assert row["correct"] == 0.0 and row["status"] == "failed" and hits == []


def test_the_run_preflight_refuses_a_sandbox_it_cannot_have(tmp_path):
    """`harness.run`'s checks before any weights load end with the sandbox's refusal (here a weaker level, refused
    with or without bubblewrap), after the cheaper config checks."""
    from harness.runner.preflight import preflight
    from tests.helpers.app import compose_app

    cfg = compose_app(
        "model=tiny_ar",
        "eval=d3llm_mbpp",
        f"eval.data_file={FIX / 'mbpp.jsonl'}",
        "eval.sandbox.isolation=process",
        f"paths.output_dir={tmp_path}",
    )
    with pytest.raises(SandboxUnavailable, match="refusing to run model-written code"):
        preflight(cfg)


def test_weaker_isolation_is_refused_before_any_model_loads():
    """Building the eval formats prompts without a sandbox; the run's preflight (`check_runtime`) refuses."""
    weak = CodeTaskEval("mbpp", data_file=str(FIX / "mbpp.jsonl"), sandbox={"isolation": "process"})
    assert weak.items()[0].sample_id == "mbpp/9001"
    with pytest.raises(SandboxUnavailable, match="weaker than bubblewrap"):
        weak.check_runtime()
    with pytest.raises(ValueError, match="eval.sandbox: unknown keys"):
        CodeTaskEval("mbpp", data_file=str(FIX / "mbpp.jsonl"), sandbox={"allow_weakr": True})
    with pytest.raises(ValueError, match=r"humaneval.jsonl:1: needs a string `text`"):
        CodeTaskEval("mbpp", data_file=str(FIX / "humaneval.jsonl"))
