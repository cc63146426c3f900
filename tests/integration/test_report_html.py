# The start-up report as a page (--timing=FILE.html, canopy report --html) in a real browser; the slowest daemons and
# ranks against the raw stamps; the time no phase covers; and reports of bad, old or very different files.
import json
import re
import sys
import textwrap

import pytest

from conftest import BUILD_DIR, REPO
from headless_browser import Browser, find_chromium

PYTHON_ENV = {"PYTHONPATH": str(REPO / "lib" / "python"), "CANOPY_LIBRARY": str(BUILD_DIR / "lib" / "api" / "libcanopy.so"),
              "PYTHONDONTWRITEBYTECODE": "1"}
# Screenshots the browser tests take, kept after the run for a person to look at.
ARTIFACTS = BUILD_DIR / "meson-logs" / "report-html"

# What the page's charts are, as a browser laid them out: their shapes, and the size of what they drew.
CHARTS = """(() => {
  const drawn = svg => { const box = svg.getBBox(); return {width: box.width, height: box.height,
      shapes: svg.querySelectorAll('rect, line, polyline').length}; };
  const byId = id => document.getElementById(id) ? drawn(document.getElementById(id)) : null;
  return {
    waterfall: byId('waterfall'), comparison: byId('comparison'),
    rows: document.querySelectorAll('#waterfall g.row').length,
    spreads: [...document.querySelectorAll('svg.spread-chart')].map(svg => Object.assign(drawn(svg), {
        id: svg.id, bars: svg.querySelectorAll('rect.bar').length,
        cdf: svg.querySelector('polyline.cdf').getTotalLength()})),
    slowest: Object.fromEntries([...document.querySelectorAll('table.slowest')].map(table =>
        [table.caption.textContent, [...table.tBodies[0].rows].map(row => row.cells[1].textContent)])),
    command: (document.querySelector('.command code') || {}).textContent,
    markup: [...document.querySelectorAll('b')].some(b => b.textContent === 'bold'),
  };
})()"""


@pytest.fixture
def browser():
    if not find_chromium():
        pytest.fail("chromium is not installed; tests/setup-deps.sh installs it")
    session = Browser()
    yield session
    session.close()


def load_checked(browser, page):
    """Loads the page; it must load nothing but itself and report no error."""
    browser.load(page)
    assert browser.errors() == [], browser.errors()
    assert all(url.startswith("file://") for url in browser.requested_urls()), browser.requested_urls()
    return browser.evaluate(CHARTS)


def embedded(html):
    """The timing JSON a page carries."""
    return json.loads(re.search(r'<script type="application/json" id="canopy-timing">(.*?)</script>', html, re.S)[1])


def phases_of(report):
    return {phase["name"]: phase for phase in report["phases"]}


def assert_self_contained(html):
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?://", html), "the page must not name anything to load from the network"
    assert html.count("<script") == 1 and 'type="application/json"' in html, "only the embedded JSON, no code"


def test_a_64_node_report_renders_in_chromium_with_no_error(run_canopy, sandbox, browser):
    page = sandbox.root / "job.html"
    result = run_canopy(["--sim-nodes", "64", "--ppn", "1", f"--timing={page}", "true"], timeout=90)
    assert result.returncode == 0, result.describe()
    html = page.read_text()
    assert_self_contained(html)

    charts = load_checked(browser, page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-64-nodes.png"
    browser.screenshot(shot)
    print(f"screenshot of the 64-node report: {shot}")
    assert shot.stat().st_size > 20_000, "a screenshot of a drawn page is more than a blank image"

    # The page reads back as the report it shows.
    report = run_canopy(["report", page], timeout=30)
    assert report.returncode == 0, report.describe()
    assert re.search(r"^canopy job \w+: 64 nodes, 64 ranks", report.stdout, re.M), report.describe()
    phases = [phase["name"] for phase in embedded(html)["phases"]]

    waterfall = charts["waterfall"]
    assert waterfall and waterfall["width"] > 500 and waterfall["height"] > 100 and waterfall["shapes"] > 20, charts
    assert charts["rows"] >= 8, "the launcher's steps and the daemons' and ranks' phases"
    assert len(charts["spreads"]) == len(phases), (charts["spreads"], phases)
    for spread in charts["spreads"]:
        assert spread["bars"] >= 1 and spread["cdf"] > 0 and spread["width"] > 100, spread
    connected = charts["slowest"]["daemon.connected"]
    assert len(connected) == 10 and all(re.fullmatch(r"sim00[0-6]\d", who) for who in connected), connected


def test_timing_file_is_json_unless_it_ends_in_html(run_canopy, sandbox):
    for name, is_page in (("t.json", False), ("t.timing", False), ("T.HTML", True)):
        path = sandbox.root / name
        result = run_canopy(["--sim-nodes", "2", f"--timing={path}", "true"], timeout=30)
        assert result.returncode == 0, result.describe()
        text = path.read_text()
        if is_page:
            assert_self_contained(text)
        else:
            assert json.loads(text)["schema"] == "canopy.timing/1"


def test_top_k_names_exactly_the_slowest_of_the_raw_stamps(run_canopy, sandbox):
    # 18 ranks on 6 nodes under a tree of fanout 2 (three levels of merging); four ranks made slow on purpose, 0.8 s
    # apart: app.ready is a time since launch, so nodes that start their ranks a little later must not reorder
    # them (0.4 s apart, a loaded 2-core run of the whole suite once did).
    slow = {13: 3.2, 9: 2.4, 4: 1.6, 16: 0.8}
    cases = " ".join(f"{rank}) sleep {seconds};;" for rank, seconds in slow.items())
    timing, trace = sandbox.root / "t.json", sandbox.root / "trace.json"
    result = run_canopy(["--sim-nodes", "6", "--ppn", "3", "--fanout", "2", "--timing-top", "3", f"--timing={timing}",
                         "--trace", trace, "--mark-on-output", "ready=ready",
                         "sh", "-c", f"case $RANK in {cases} *) sleep 0.1;; esac; echo ready"], timeout=60)
    assert result.returncode == 0, result.describe()
    report, events = json.loads(timing.read_text()), json.loads(trace.read_text())["traceEvents"]
    assert report["top_k"] == 3

    # Every value the trace carries, by phase, with who it came from: (value in seconds, who).
    hosts = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    raw = {}
    for e in events:
        if e["ph"] == "M" or e["pid"] == 0:
            continue
        who = hosts[e["pid"]] if e["tid"] == 0 else f"rank {e['tid'] - 1} on {hosts[e['pid']]}"
        if e["tid"] == 0:
            raw.setdefault(f"daemon.{e['name']}", []).append(((e["ts"]) / 1e6, who))
        elif e["name"] == "run":
            raw.setdefault("rank.exited", []).append(((e["ts"] + e["dur"]) / 1e6, who))
            raw.setdefault("rank.runtime", []).append((e["dur"] / 1e6, who))
        else:
            raw.setdefault(f"app.{e['name']}", []).append((e["ts"] / 1e6, who))
    phases = phases_of(report)
    assert {"app.ready", "rank.exited", "rank.runtime", "daemon.connected", "daemon.job_received"} <= set(raw)
    for name, values in raw.items():
        expected = sorted(values, key=lambda v: (-v[0], v[1]))[:3]
        kept = phases[name]["slowest"]
        assert [entry["who"] for entry in kept] == [who for _, who in expected], (name, kept, expected)
        for entry, (value, _) in zip(kept, expected):
            assert abs(entry["value"] - value) < 1e-6, (name, kept, expected)
        assert phases[name]["count"] == len(values), name

    assert [e["who"] for e in phases["app.ready"]["slowest"]] == ["rank 13 on sim0004", "rank 9 on sim0003",
                                                                   "rank 4 on sim0001"]
    text = run_canopy(["report", timing], timeout=30)
    assert text.returncode == 0, text.describe()
    section = text.stdout.split("slowest daemons/ranks, the top 3 of each phase")[1]
    # One entry after another, on as many lines as they take.
    assert re.search(r"^  app\.ready\s+\d+ ms rank 13 on sim0004,\s+\d+ ms rank 9 on sim0003,\s+\d+ ms rank 4 on "
                     r"sim0001$", section, re.M), section


GAP_SCRIPT = textwrap.dedent("""\
    import time
    import canopy
    with canopy.phase("setup"):
        time.sleep(0.2)
    time.sleep(3.0)   # the gap: no phase covers it; longer than python's start on a busy machine (1.3 s seen)
    with canopy.phase("first_step"):
        time.sleep(0.1)
    """)


def test_a_gap_made_on_purpose_shows_up_as_unattributed_time(run_canopy, sandbox, browser):
    script = sandbox.root / "gap.py"
    script.write_text(GAP_SCRIPT)
    timing, page = sandbox.root / "gap.json", sandbox.root / "gap.html"
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", f"--timing={timing}", sys.executable, script],
                        env=PYTHON_ENV, timeout=60)
    assert result.returncode == 0, result.describe()
    startup = json.loads(timing.read_text())["startup"]
    assert startup["end"] == "app.first_step", startup
    largest = max(startup["gaps"], key=lambda gap: gap["end"] - gap["begin"])
    assert (largest["after"], largest["before"]) == ("app.setup", "app.first_step"), startup
    assert 2.95 <= largest["end"] - largest["begin"] <= 3.4, startup
    assert 2.95 <= startup["unattributed_seconds"] <= startup["end_seconds"], startup

    text = run_canopy(["report", timing], timeout=30)
    line = next(line for line in text.stdout.splitlines() if line.startswith("  unattributed: "))
    assert re.fullmatch(r"  unattributed: \d+ ms \([\d.]+%\); largest gap 3\d\d\d ms after app\.setup, before "
                        r"app\.first_step", line), line

    converted = run_canopy(["report", "--html", page, timing], timeout=30)
    assert converted.returncode == 0 and converted.stderr == "", converted.describe()
    load_checked(browser, page)
    assert browser.evaluate("document.querySelectorAll('#waterfall rect.gap').length") >= 1
    assert browser.evaluate("document.querySelector('#waterfall rect.gap title').textContent").startswith(
        "unattributed: ")


def test_the_ddp_example_leaves_less_than_one_percent_unattributed(run_canopy, sandbox):
    timing = sandbox.root / "ddp.json"
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", f"--timing={timing}", sys.executable,
                         REPO / "docs" / "examples" / "ddp_train.py", "--steps", "3"], env=PYTHON_ENV, timeout=100)
    assert result.returncode == 0, result.describe()
    startup = json.loads(timing.read_text())["startup"]
    print(f"DDP example: start-up {startup['end_seconds']:.3f} s to {startup['end']}, unattributed "
          f"{startup['unattributed_seconds'] * 1000:.1f} ms ({startup['unattributed_share']:.2%})")
    assert startup["end"] == "app.first_step", startup
    assert startup["unattributed_share"] < 0.01, startup


def test_a_command_that_looks_like_markup_is_shown_as_text(run_canopy, sandbox, browser):
    page = sandbox.root / "markup.html"
    result = run_canopy(["--sim-nodes", "1", f"--timing={page}", "sh", "-c", "echo '</script><b>bold</b>' >/dev/null"],
                        timeout=30)
    assert result.returncode == 0, result.describe()
    charts = load_checked(browser, page)
    command = embedded(page.read_text())["command"]
    assert "</script><b>bold</b>" in command, command
    assert charts["command"] == command, "the page shows the command line as text, whole"
    assert not charts["markup"], "no element made from the command line"
    assert charts["waterfall"]["shapes"] > 0


def test_very_different_jobs_compare_cleanly_as_text_and_as_a_page(run_canopy, sandbox, browser):
    small, large = sandbox.root / "small.json", sandbox.root / "large.json"
    result = run_canopy(["--sim-nodes", "1", f"--timing={small}", "true"], timeout=30)
    assert result.returncode == 0, result.describe()
    result = run_canopy(["--sim-nodes", "5", "--ppn", "2", f"--timing={large}", "--mark-on-output", "up=up",
                         "sh", "-c", 'echo up; [ "$RANK" != 7 ] || exit 3'], timeout=30)
    assert result.returncode == 3, result.describe()

    text = run_canopy(["report", small, large], timeout=30)
    assert text.returncode == 0 and text.stderr == "", text.describe()
    lines = text.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines[2:]), text.stdout
    assert re.match(r"changed most: [\w.]+, median", lines[2]), text.stdout
    assert sum("<- changed most" in line for line in lines) == 1, text.stdout
    up = next(line for line in lines if line.startswith("  app.up (median)"))
    assert up.split()[2] == "-", up   # only the large job marked it

    page = sandbox.root / "compare.html"
    converted = run_canopy(["report", "--html", page, small, large], timeout=30)
    assert converted.returncode == 0 and converted.stderr == "", converted.describe()
    assert_self_contained(page.read_text())
    charts = load_checked(browser, page)
    assert charts["comparison"] and charts["comparison"]["shapes"] > 10, charts
    assert browser.evaluate("document.querySelectorAll('tr.flagged').length") == 1
    assert browser.evaluate("document.getElementById('changed-most').textContent").startswith("Changed most: ")


def one_line(result):
    lines = result.stderr_lines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("canopy: "), result.describe()
    assert "Traceback" not in result.stderr and result.stdout == "", result.describe()
    return lines[0]


def test_bad_input_gets_one_line_naming_the_file_and_the_key(run_canopy, sandbox):
    good = sandbox.root / "good.json"
    result = run_canopy(["--sim-nodes", "2", f"--timing={good}", "true"], timeout=30)
    assert result.returncode == 0, result.describe()
    document = json.loads(good.read_text())

    other_schema = sandbox.root / "other.json"
    other_schema.write_text(json.dumps(dict(document, schema="canopy.timing/0")))
    for args in (["report", other_schema], ["report", "--html", sandbox.root / "o.html", other_schema],
                 ["report", good, other_schema]):
        line = one_line(run_canopy(args, timeout=30))
        assert line == (f"canopy: {other_schema}: timing JSON: key 'schema' is 'canopy.timing/0' but this canopy "
                        "reads 'canopy.timing/1'; use the canopy version that wrote the file"), line
    assert not (sandbox.root / "o.html").exists()

    broken = sandbox.root / "broken.json"
    broken.write_text('{"schema": "canopy.timing/1", ')
    assert str(broken) in one_line(run_canopy(["report", broken], timeout=30))
    wrong = sandbox.root / "wrong.json"
    document["phases"][0]["slowest"] = "nobody"
    wrong.write_text(json.dumps(document))
    assert "'phases[0].slowest' must be an array" in one_line(run_canopy(["report", wrong], timeout=30))
    page = sandbox.root / "page.html"
    page.write_text("<!DOCTYPE html><html><body>not a report</body></html>")
    assert one_line(run_canopy(["report", page], timeout=30)) == (
        f"canopy: {page} is a page with no canopy timing report in it; expected a file written by canopy "
        "--timing=FILE.json or FILE.html")
    assert one_line(run_canopy(["report", "--html"], timeout=30)).startswith("canopy: report: --html needs")


def test_a_file_from_before_the_top_k_lists_is_read_with_one_line_saying_so(run_canopy, sandbox):
    saved = sandbox.root / "new.json"
    result = run_canopy(["--sim-nodes", "3", f"--timing={saved}", "true"], timeout=30)
    assert result.returncode == 0, result.describe()
    document = json.loads(saved.read_text())
    for key in ("top_k", "startup"):
        del document[key]
    for phase in document["phases"]:
        del phase["slowest"]
    old = sandbox.root / "old.json"
    old.write_text(json.dumps(document))
    text = run_canopy(["report", old], timeout=30)
    assert text.returncode == 0 and text.stderr == "", text.describe()
    notes = [line for line in text.stdout.splitlines() if line.startswith("slowest")]
    assert notes == ["slowest: not in this file (it was written by a canopy from before the top-k lists)"], notes
    compared = run_canopy(["report", old, saved], timeout=30)
    assert compared.returncode == 0 and compared.stderr == "", compared.describe()
