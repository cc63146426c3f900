# --health-check (issue 42): every node is checked before any rank starts; one bad node and no rank runs anywhere,
# the job ends with one line giving the count, then one line per bad node with its reason; nothing is left behind.
import re

from conftest import wait_until

# Each rank leaves a file, so a test can tell whether any rank ran at all.
def rank_files_command(directory):
    return ["sh", "-c", f'touch "{directory}/rank-$RANK"']


def write_config(sandbox, text):
    path = sandbox.root / "health.toml"
    path.write_text(text)
    return path


def test_a_node_whose_check_fails_starts_no_rank_anywhere_and_is_named_with_its_reason(sandbox, run_canopy):
    ran = sandbox.root / "ran"
    ran.mkdir()
    bad_nodes = sandbox.root / "bad-nodes"
    check = 'test "$CANOPY_NODE" != sim0003 || { echo "disk controller degraded"; echo more; exit 3; }'
    result = run_canopy(["--sim-nodes", "6", "--health-check=" + check, "--bad-nodes", bad_nodes, "-n", "6",
                         *rank_files_command(ran)], timeout=60)
    assert result.returncode == 255, result.describe()
    assert result.canopy_lines() == [
        "canopy: health check: 1 of 6 nodes failed; no rank was started",
        "canopy: health check: sim0003: the health-check command exited with code 3: disk controller degraded",
    ], result.describe()
    assert list(ran.iterdir()) == [], "a rank ran although a node failed its health check"
    assert bad_nodes.read_text() == "sim0003  # the health-check command exited with code 3: disk controller degraded\n"


def test_healthy_nodes_run_the_job_and_the_check_is_a_timing_phase(sandbox, run_canopy):
    ran = sandbox.root / "ran"
    ran.mkdir()
    bad_nodes = sandbox.root / "bad-nodes"
    bad_nodes.write_text("stale  # from an earlier job\n")
    timing = sandbox.root / "timing.json"
    result = run_canopy(["--sim-nodes", "4", '--health-check=test -n "$CANOPY_NODE"', "--bad-nodes", bad_nodes,
                         f"--timing={timing}", "-n", "8", *rank_files_command(ran)], timeout=60)
    assert result.returncode == 0, result.describe()
    assert sorted(p.name for p in ran.iterdir()) == sorted(f"rank-{r}" for r in range(8))
    assert bad_nodes.read_text() == "", "a healthy job must leave an empty list, not an earlier job's"
    import json
    report = json.loads(timing.read_text())
    names = {phase["name"] for phase in report["phases"]}
    assert "daemon.health_check" in names, sorted(names)


def test_a_check_that_hangs_is_cut_off_at_its_timeout_with_what_it_left_running(sandbox, run_canopy):
    config = write_config(sandbox, "[health]\ntimeout = 1\n")
    check = 'test "$CANOPY_NODE" != sim0001 || { sleep 300 & echo "waiting for the fabric"; sleep 300; }'
    result = run_canopy(["--config", config, "--sim-nodes", "3", "--health-check=" + check, "true"], timeout=60)
    assert result.returncode == 255, result.describe()
    assert result.canopy_lines() == [
        "canopy: health check: 1 of 3 nodes failed; no rank was started",
        "canopy: health check: sim0001: the health-check command did not end within 1 s: waiting for the fabric",
    ], result.describe()
    assert result.seconds < 15, result.describe()
    # The sandbox fails the test if either sleep outlives the job.


def test_the_built_in_checks_name_every_node_short_of_memory(sandbox, run_canopy):
    config = write_config(sandbox, '[health]\nmin_free_memory = "1000T"\n')
    result = run_canopy(["--config", config, "--sim-nodes", "3", "--health-check", "true"], timeout=60)
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert lines[0] == "canopy: health check: 3 of 3 nodes failed; no rank was started", result.describe()
    pattern = re.compile(r"canopy: health check: (sim000\d): only [\d.]+ \w+ of memory available "
                         r"\(at least 1000 TiB needed\)$")
    named = sorted(pattern.match(line).group(1) for line in lines[1:] if pattern.match(line))
    assert named == ["sim0000", "sim0001", "sim0002"], result.describe()
    assert len(lines) == 4, result.describe()


def test_a_node_without_the_gpus_the_site_expects_is_bad(sandbox, run_canopy):
    # This machine shows no GPU to hwloc; a site that expects 4 a node learns so before any rank starts.
    config = write_config(sandbox, "[health]\ngpus = 4\n")
    result = run_canopy(["--config", config, "--sim-nodes", "1", "--health-check", "true"], timeout=60)
    assert result.returncode == 255, result.describe()
    assert result.canopy_lines()[1:] == ["canopy: health check: sim0000: 0 GPUs visible (4 expected)"], \
        result.describe()


def test_a_site_turns_the_check_on_for_every_job_and_its_command_runs(sandbox, run_canopy):
    seen = sandbox.root / "checked"
    seen.mkdir()
    config = write_config(sandbox, f'[health]\nenabled = true\ncommand = "touch {seen}/$CANOPY_NODE"\n')
    result = run_canopy(["--config", config, "--sim-nodes", "3", "true"], timeout=60)
    assert result.returncode == 0, result.describe()
    assert sorted(p.name for p in seen.iterdir()) == ["sim0000", "sim0001", "sim0002"]


def test_bad_nodes_without_a_health_check_is_refused_before_anything_starts(sandbox, run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--bad-nodes", sandbox.root / "bad", "true"])
    assert result.returncode == 2, result.describe()
    assert result.canopy_lines() == [
        f"canopy: --bad-nodes {sandbox.root / 'bad'} lists the nodes the health check finds bad: give "
        "--health-check too (or set [health] enabled = true)"], result.describe()


def test_a_malformed_health_setting_names_the_file_and_key(sandbox, run_canopy):
    config = write_config(sandbox, "[health]\ntimeout = 0\n")
    result = run_canopy(["--config", config, "--sim-nodes", "1", "--health-check", "true"])
    assert result.returncode == 2, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and "health.toml:2" in lines[0] and "timeout must be a number of seconds above 0" in \
        lines[0], result.describe()


def test_the_next_job_leaves_out_the_bad_nodes_with_exclude(sandbox, run_canopy):
    ran = sandbox.root / "ran"
    ran.mkdir()
    bad_nodes = sandbox.root / "bad-nodes"
    check = 'case "$CANOPY_NODE" in sim0001|sim0004) echo "ECC errors"; exit 1;; esac'
    first = run_canopy(["--sim-nodes", "6", "--health-check=" + check, "--bad-nodes", bad_nodes, "true"], timeout=60)
    assert first.returncode == 255, first.describe()
    assert [line.split()[0] for line in bad_nodes.read_text().splitlines()] == ["sim0001", "sim0004"]
    second = run_canopy(["--sim-nodes", "6", "--exclude", bad_nodes, "--health-check=" + check, "-l", "sh", "-c",
                         'echo "$CANOPY_NODE"'], timeout=60)
    assert second.returncode == 0, second.describe()
    assert sorted(line.split()[1] for line in second.stdout.splitlines()) == \
        ["sim0000", "sim0002", "sim0003", "sim0005"], second.describe()


def test_exclude_takes_a_hostlist_and_says_what_it_left_out(sandbox, run_canopy):
    result = run_canopy(["--sim-nodes", "4", "--exclude", "sim000[1,3]", "--dry-run", "true"])
    assert result.returncode == 0, result.describe()
    assert "Job: 2 ranks on 2 nodes (hosts from --sim-nodes, 2 excluded): true" in result.stdout, result.describe()
    assert "node 0 sim0000: rank 0" in result.stdout and "node 1 sim0002: rank 1" in result.stdout, result.describe()
    empty = sandbox.root / "none-bad"
    empty.write_text("")
    kept = run_canopy(["--sim-nodes", "3", "--exclude", empty, "--dry-run", "true"])
    assert kept.returncode == 0 and "3 ranks on 3 nodes (hosts from --sim-nodes, 0 excluded)" in kept.stdout, \
        kept.describe()


def test_excluding_every_host_is_refused_before_anything_starts(sandbox, run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--exclude", "sim000[0-1]", "true"])
    assert result.returncode == 2, result.describe()
    assert result.canopy_lines() == [
        "canopy: --exclude sim000[0-1] leaves none of the 2 hosts (from --sim-nodes)"], result.describe()
