"""The interactive front (pareto_*.html) as a browser draws it: Debian's chromium renders the page headless, its
DOM (plotly's SVG) is read back, and every run of the table must be a point with a horizontal (TPF or tokens/s,
bootstrap) and a vertical (quality, Wilson) interval of the right extent. Skipped, loudly, without chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from harness.analysis.aggregate import summarize
from harness.figures.pareto_html import pareto_html
from harness.figures.plot_points import plot_points
from tests.helpers.runs import make_sweep

# Loud on purpose (tests/conftest.py prints a red line for it): without chromium nothing shows the page draws.
CHROMIUM_MISSING = "CHROMIUM MISSING: interactive front not rendered; install it: apt-get install -y chromium"

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=15000",
]


class PlotlyTraces(HTMLParser):
    """Per scatter trace of the rendered SVG: its points and, per error-bar group, the x and y error paths."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[set[str]] = []
        self.traces: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = set((a.get("class") or "").split())
        if tag == "g" and {"trace", "scatter"} <= cls:
            self.traces.append({"points": 0, "bars": []})
        inside = self.traces and any({"trace", "scatter"} <= c for c in self.stack)
        if tag == "g" and "errorbar" in cls and inside:
            self.traces[-1]["bars"].append({})
        if tag == "path" and inside:
            if "point" in cls:
                self.traces[-1]["points"] += 1
            for kind in ("xerror", "yerror"):
                if kind in cls:
                    self.traces[-1]["bars"][-1][kind] = a.get("d", "")
        if tag not in ("path", "rect", "circle", "line", "image", "use"):  # void in this SVG: never closed
            self.stack.append(cls)

    def handle_endtag(self, tag):
        if tag not in ("path", "rect", "circle", "line", "image", "use") and self.stack:
            self.stack.pop()


def _numbers(d: str) -> list[float]:
    return [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d)]


def _render(chromium: str, page, profile) -> str:
    cmd = [chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.parametrize("x", ["tpf", "tokens_per_second"])
def test_every_run_is_drawn_with_both_intervals(tmp_path, x):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip(CHROMIUM_MISSING)
    table, _, _ = summarize([make_sweep(tmp_path)], tmp_path / "summary")
    pts = plot_points(table)
    page = pareto_html(pts, x, tmp_path / "plots" / f"pareto_{x}.html")
    parser = PlotlyTraces()
    parser.feed(_render(chromium, page, tmp_path / "profile"))
    series = [t for t in parser.traces if t["points"]]  # the front lines are traces without points
    assert sum(t["points"] for t in series) == len(table) == 5
    wide = pts[x + "_hi"] > pts[x + "_lo"]
    assert wide.sum() >= 3  # the diffusion runs' samples differ: their intervals have a width to see
    widths = []
    for t in series:
        assert len(t["bars"]) == t["points"]  # one error-bar group per point ...
        for bar in t["bars"]:
            assert bar.get("xerror") and bar.get("yerror")  # ... holding both intervals
            # pixels; x error "M xh,y v2w m0,-w H xs ...", y error "M x,yh h2w m-w,0 V ys ..."
            xd, yd = _numbers(bar["xerror"]), _numbers(bar["yerror"])
            widths.append(xd[0] - xd[5])
            assert yd[5] > yd[1]  # every quality interval has a height (Wilson over 2 samples)
    # every non-degenerate interval is drawn with its width: one pixels-per-unit scale for all (a linear axis)
    drawn = sorted(w for w in widths if w > 0.01)
    data = sorted((pts[x + "_hi"] - pts[x + "_lo"])[wide])
    assert len(drawn) == len(data)
    scale = [w / d for w, d in zip(drawn, data)]
    assert max(scale) == pytest.approx(min(scale), rel=0.02)
