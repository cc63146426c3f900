# --timing: the JSON report (schema canopy.timing/1) and the table on stderr describe the job that ran.
import json
import re
import time
from datetime import datetime, timezone

import pytest

from conftest import parse_labelled

STEPS = ["start", "hosts_resolved", "tree_up", "job_delivered", "ranks_spawned", "ranks_exited", "teardown_done"]
DAEMON_PHASES = ["daemon.started", "daemon.connected", "daemon.job_received", "daemon.ranks_spawned"]
RANK_PHASES = ["rank.spawned", "rank.exited", "rank.runtime"]


def run_with_json(run_canopy, sandbox, args):
    path = sandbox.root / "timing.json"
    before = time.time()
    result = run_canopy([f"--timing={path}"] + args, timeout=30)
    report = json.loads(path.read_text())
    return result, report, before


def test_json_report_describes_the_job(run_canopy, sandbox):
    result, report, before = run_with_json(run_canopy, sandbox, [
        "--sim-nodes", "5", "--ppn", "2", "--fanout", "2", "-l", "sh", "-c", 'echo "$CANOPY_JOBID"; sleep 1'])
    assert result.returncode == 0, result.describe()
    job_ids = {lines[0] for lines in parse_labelled(result.stdout).values()}
    assert report["schema"] == "canopy.timing/1"
    assert {report["job_id"]} == job_ids
    assert report["nodes"] == 5 and report["ranks"] == 10
    assert report["fanout"] == 2 and report["tree_depth"] == 2
    assert report["agent"] == "local"
    assert report["exit_code"] == 0
    assert report["command"] == "sh -c 'echo \"$CANOPY_JOBID\"; sleep 1'"
    started = datetime.strptime(report["started_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert abs(started.timestamp() - before) < 2.0, "started_at should be when the launcher started (UTC)"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", report["started_at"])


def test_json_timeline_has_every_step_in_order(run_canopy, sandbox):
    result, report, _ = run_with_json(run_canopy, sandbox, ["--sim-nodes", "4", "sh", "-c", "sleep 1"])
    assert result.returncode == 0, result.describe()
    timeline = report["timeline"]
    names = [stamp["name"] for stamp in timeline]
    assert sorted(names) == sorted(STEPS), names
    seconds = [stamp["seconds"] for stamp in timeline]
    assert seconds == sorted(seconds), f"stamps out of order: {timeline}"
    at = {stamp["name"]: stamp["seconds"] for stamp in timeline}
    assert names[0] == "start" and at["start"] == 0
    assert names[-1] == "teardown_done"
    assert at["hosts_resolved"] <= at["tree_up"] <= at["ranks_spawned"] <= at["ranks_exited"]
    assert at["job_delivered"] <= at["ranks_spawned"]
    assert at["ranks_exited"] - at["ranks_spawned"] >= 0.9, "the ranks slept 1 s"


def test_wall_seconds_matches_the_measured_wall_clock(run_canopy, sandbox):
    result, report, _ = run_with_json(run_canopy, sandbox, ["--sim-nodes", "3", "sh", "-c", "sleep 1.5"])
    assert result.returncode == 0, result.describe()
    wall = report["wall_seconds"]
    assert report["timeline"][-1]["seconds"] == wall
    assert 1.5 <= wall <= result.seconds + 0.05, f"wall_seconds {wall} vs measured {result.seconds:.3f}"
    assert result.seconds - wall < 1.0, f"wall_seconds {wall} misses most of the measured {result.seconds:.3f} s"


def test_phase_counts_match_daemons_and_ranks(run_canopy, sandbox):
    result, report, _ = run_with_json(run_canopy, sandbox,
                                      ["--sim-nodes", "6", "--ppn", "3", "--fanout", "2", "true"])
    assert result.returncode == 0, result.describe()
    phases = {phase["name"]: phase for phase in report["phases"]}
    assert len(phases) == len(report["phases"]), "each phase name appears once"
    for name in DAEMON_PHASES:
        assert phases[name]["count"] == 6, name
        assert re.fullmatch(r"sim000[0-5]", phases[name]["max_who"]), phases[name]["max_who"]
    for name in RANK_PHASES:
        assert phases[name]["count"] == 18, name
        assert re.fullmatch(r"rank (\d+) on sim000[0-5]", phases[name]["max_who"]), phases[name]["max_who"]
    for name, phase in phases.items():
        assert phase["min"] <= phase["max"], name
        assert phase["min"] * 0.99 - 1e-6 <= phase["median"] <= phase["max"] * 1.01 + 1e-6, name
        assert abs(phase["sum"] / phase["count"] - phase["mean"]) < 1e-6, name
        assert phase["max"] <= report["wall_seconds"] + 0.01, f"{name} ends after the job"


def test_json_records_a_failed_job_exit_code(run_canopy, sandbox):
    result, report, _ = run_with_json(run_canopy, sandbox, ["--sim-nodes", "2", "sh", "-c", "exit 3"])
    assert result.returncode == 3, result.describe()
    assert report["exit_code"] == 3
    names = [stamp["name"] for stamp in report["timeline"]]
    assert names[0] == "start" and names[-1] == "teardown_done"


def test_timing_prints_a_table_on_stderr_only(run_canopy):
    result = run_canopy(["--sim-nodes", "4", "--ppn", "2", "--timing", "-l", "echo", "hi"])
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {r: ["hi"] for r in range(8)}, "the table must not mix into stdout"
    header = re.search(r"^canopy job ([0-9a-f]+): 4 nodes, 8 ranks, fanout \d+, depth 1, agent local, "
                       r"wall [\d.]+ m?s, exit 0$", result.stderr, re.M)
    assert header, result.stderr
    for step in STEPS:
        assert re.search(rf"^  {step}\s", result.stderr, re.M), f"step {step} missing from the table"
    for phase in DAEMON_PHASES + RANK_PHASES:
        count = 4 if phase.startswith("daemon.") else 8
        assert re.search(rf"^  {re.escape(phase)}\s+{count}\s", result.stderr, re.M), f"phase {phase}"
    assert result.stderr.count("<- longest step") == 1


def test_a_timing_file_that_cannot_be_written_fails_before_the_job_starts(run_canopy, sandbox):
    target = sandbox.root / "no-such-dir" / "t.json"
    ran = sandbox.root / "ran"
    result = run_canopy([f"--timing={target}", "--sim-nodes", "2", "touch", ran])
    assert result.returncode == 2, result.describe()
    assert result.canopy_lines() == [f"canopy: --timing: cannot write {target}: the directory {target.parent} does "
                                     "not exist"], result.describe()
    assert not ran.exists(), "no rank may start when the report cannot be written"


@pytest.mark.parametrize("rank_exit", [0, 5])
def test_a_report_that_cannot_be_written_at_the_end_is_named_with_the_reason(rank_exit, run_canopy, sandbox):
    # The directory is there at the start and gone at the end: the job's outcome says so, with the reason.
    reports = sandbox.root / "reports"
    reports.mkdir()
    result = run_canopy([f"--timing={reports / 't.json'}", "--trace", reports / "trace.json", "--sim-nodes", "2",
                         "sh", "-c", f'rm -rf "{reports}"; exit {rank_exit}'])
    assert result.returncode == (1 if rank_exit == 0 else rank_exit), result.describe()
    for option, name in (("--trace", "trace.json"), ("--timing", "t.json")):
        line = f"canopy: {option}: cannot write {reports / name}: cannot create a file in {reports}: No such file or " \
               "directory"
        assert line in result.canopy_lines(), result.describe()


def phase(report, name):
    matches = [p for p in report["phases"] if p["name"] == name]
    return matches[0] if matches else None


def test_mark_on_output_stamps_the_first_matching_line_of_each_rank(run_canopy, sandbox):
    script = 'sleep 0.3; echo "loading"; [ "$RANK" = 3 ] && sleep 0.5; echo "step=0 loss=2.3"; echo "step=1"'
    result, report, _ = run_with_json(run_canopy, sandbox, [
        "--sim-nodes", "2", "--ppn", "2", "--mark-on-output", r"step=\d+=first_step", "sh", "-c", script])
    assert result.returncode == 0, result.describe()
    first_step = phase(report, "app.first_step")
    assert first_step is not None, report["phases"]
    assert first_step["count"] == 4   # once per rank, though each printed two matching lines
    assert first_step["max_who"].startswith("rank 3 on "), first_step
    assert first_step["max"] - first_step["min"] >= 0.4, first_step
    spawned = phase(report, "rank.spawned")
    assert first_step["min"] >= spawned["min"] + 0.25, (first_step, spawned)


def test_mark_on_output_rejects_a_bad_pattern_with_one_line(run_canopy):
    result = run_canopy(["--mark-on-output", "step=(0=first_step", "true"], timeout=30)
    assert result.returncode == 2, result.describe()
    assert result.canopy_lines() and "not a valid regular expression" in result.canopy_lines()[0], result.describe()
    result = run_canopy(["--mark-on-output", "no-name-here", "true"], timeout=30)
    assert result.returncode == 2, result.describe()
    assert "REGEX=NAME" in result.stderr, result.describe()


def test_report_command_prints_a_saved_report_and_compares_two(run_canopy, sandbox):
    first = sandbox.root / "first.json"
    second = sandbox.root / "second.json"
    for path, nodes in ((first, 2), (second, 4)):
        result = run_canopy([f"--timing={path}", "--sim-nodes", str(nodes), "true"], timeout=30)
        assert result.returncode == 0, result.describe()
    one = run_canopy(["report", first], timeout=30)
    assert one.returncode == 0, one.describe()
    saved = json.loads(first.read_text())
    assert f"canopy job {saved['job_id']}: 2 nodes, 2 ranks" in one.stdout, one.describe()
    assert "daemon.started" in one.stdout and "tree_up" in one.stdout, one.describe()
    both = run_canopy(["report", first, second], timeout=30)
    assert both.returncode == 0, both.describe()
    assert both.stdout.splitlines()[0].startswith(f"A: {first}")
    assert both.stdout.splitlines()[1].startswith(f"B: {second}")
    row = [line for line in both.stdout.splitlines() if line.strip().startswith("tree_up")]
    assert row and re.search(r"\d\.\d\dx$", row[0]), both.describe()


def test_report_command_names_a_bad_file(run_canopy, sandbox):
    broken = sandbox.root / "broken.json"
    broken.write_text("{not json")
    result = run_canopy(["report", broken], timeout=30)
    assert result.returncode == 2, result.describe()
    assert str(broken) in result.stderr and "not JSON" in result.stderr, result.describe()
    missing = run_canopy(["report", sandbox.root / "missing.json"], timeout=30)
    assert missing.returncode == 2 and "missing.json" in missing.stderr, missing.describe()
    directory = run_canopy(["report", sandbox.root], timeout=30)   # once an uncaught exception and an abort
    assert directory.returncode == 2, directory.describe()
    assert directory.stderr_lines() == [f"canopy: timing report {sandbox.root}: is a directory, not a file"]


def test_trace_has_a_track_per_node_and_rank(run_canopy, sandbox):
    path = sandbox.root / "trace.json"
    # A mark is stamped when the daemon reads the line: the rank lives on a little, so that it lies inside the run.
    result = run_canopy(["--trace", path, "--sim-nodes", "3", "--ppn", "2", "--mark-on-output", "ready=ready",
                         "sh", "-c", "sleep 0.1; echo ready; sleep 0.05"], timeout=30)
    assert result.returncode == 0, result.describe()
    events = json.loads(path.read_text())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {0: "canopy (launcher)", 1: "sim0000", 2: "sim0001", 3: "sim0002"}
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for rank in range(6):
        assert (rank // 2 + 1, f"rank {rank}") in threads, threads
    runs = [e for e in events if e["ph"] == "X" and e["name"] == "run"]
    # Node n (pid n + 1) runs ranks 2n and 2n + 1, on threads rank + 1.
    assert sorted((e["pid"], e["tid"]) for e in runs) == [(r // 2 + 1, r + 1) for r in range(6)], runs
    assert all(e["dur"] >= 50_000 for e in runs), runs   # each rank slept 0.1 s (µs; spawn is stamped late)
    ready = [e for e in events if e["ph"] == "i" and e["name"] == "ready"]
    assert len(ready) == 6, ready
    for point in ready:   # each mark lies inside its rank's run
        run = next(r for r in runs if r["pid"] == point["pid"] and r["tid"] == point["tid"])
        assert run["ts"] <= point["ts"] <= run["ts"] + run["dur"], (point, run)
    steps = [e["name"] for e in events if e["pid"] == 0 and e["ph"] == "X"]
    assert steps[:3] == ["hosts_resolved", "job_delivered", "tree_up"] and steps[-1] == "teardown_done", steps


def test_a_command_line_that_is_not_utf8_is_written_not_a_crash(run_canopy, sandbox):
    # Once an uncaught exception from the JSON writer: the job ran, then canopy aborted with 134 and no report.
    for name in ("t.json", "t.html"):
        path = sandbox.root / name
        # "\udcff" is how Python passes on the byte 0xff.
        result = run_canopy(["--sim-nodes", "1", f"--timing={path}", "echo", "a\udcffb"], timeout=30)
        assert result.returncode == 0, result.describe()
        assert "terminate called" not in result.stderr, result.describe()
        assert path.stat().st_size > 0
    assert json.loads((sandbox.root / "t.json").read_text())["command"] == "echo 'a\ufffdb'"
