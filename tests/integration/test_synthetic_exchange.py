# --synthetic-ranks: each simulated node drives in-process ranks through the real exchange paths (PMI-1 over PMI_FD
# to the node's PMI server, and the PMIx paths' tree fence and direct modex), and a wrong value ends the job.
import json

import pytest

NODES, RANKS = 8, 16
PATHS = ["pmi", "pmix", "dmodex"]


def synthetic_job(run_canopy, tmp_path, spec, nodes=NODES, timeout=60):
    timing = tmp_path / "timing.json"
    result = run_canopy(["--sim-nodes", nodes, "--fanout", "2", "--timing=" + str(timing), "--synthetic-ranks", spec],
                        timeout=timeout)
    phases = {}
    if timing.exists():
        phases = {phase["name"]: phase for phase in json.loads(timing.read_text())["phases"]}
    return result, phases


@pytest.mark.parametrize("path", PATHS)
def test_every_synthetic_rank_reads_its_peers_values(run_canopy, tmp_path, path):
    result, phases = synthetic_job(run_canopy, tmp_path, f"{RANKS}:100:{path}")
    assert result.returncode == 0, result.describe()
    # Every node's ranks got through the fence and checked every value they read.
    for name in ("synthetic.fence_done", "synthetic.exchange_done", "synthetic.peak_ratio_percent"):
        assert phases[name]["count"] == NODES, (name, phases.get(name))
    assert phases["synthetic.fence_done"]["min"] >= phases["synthetic.fence_entered"]["max"] - 1e-6, \
        "a fence returned before the last node entered it"
    # The node holds the values the path brings: every rank's on an allgather, only those fetched on direct modex.
    world = NODES * RANKS
    result_kib = phases["synthetic.result_kib"]
    if path == "dmodex":
        assert phases["synthetic.fetch_messages"]["max"] <= 3 * RANKS
        assert result_kib["max"] < world * 100 / 1024
    else:
        assert result_kib["min"] >= world * 100 / 1024
    # The fence's messages: 2 per chunk at a leaf, 2 (c + 1) at a daemon with c children, whatever the node count.
    messages = phases["daemon.tree_messages"]
    if path != "dmodex":
        assert messages["max"] <= 2 * 3, messages


@pytest.mark.parametrize("path", ["pmi", "pmix"])
def test_a_large_exchange_costs_every_daemon_at_most_one_and_a_half_times_what_it_holds(run_canopy, tmp_path, path):
    # 15 MiB on every node (128 nodes x 120 ranks x 1,000 B), through relays of 4 children at two levels: a result
    # grown by doubling, or queued whole for slow children beside the relay's own copy, would cost twice as much.
    nodes = 128
    timing = tmp_path / "timing.json"
    result = run_canopy(["--sim-nodes", nodes, "--fanout", "4", "--timing=" + str(timing),
                         "--synthetic-ranks", f"120:1000:{path}"], timeout=120)
    assert result.returncode == 0, result.describe()
    phases = {phase["name"]: phase for phase in json.loads(timing.read_text())["phases"]}
    assert phases["synthetic.result_kib"]["min"] >= nodes * 120 * 1000 / 1024
    ratio = phases["synthetic.peak_ratio_percent"]
    assert ratio["count"] == nodes
    assert ratio["max"] <= 150, f"{ratio['max_who']}'s peak was {ratio['max']:.0f}% of the result it holds"


@pytest.mark.parametrize("path", PATHS)
def test_a_wrong_value_ends_the_job_naming_the_reader(run_canopy, tmp_path, path):
    corrupt = 5 * RANKS + 3   # a rank on node 5, read by its neighbours on nodes 4 and 5
    result, _ = synthetic_job(run_canopy, tmp_path, f"{RANKS}:100:{path}:corrupt={corrupt}")
    assert result.returncode == 1, result.describe()
    lines = result.canopy_lines()
    assert any(f"read a wrong value for rank {corrupt}'s key ep{corrupt}: byte 0 of 100" in line for line in lines), \
        result.describe()


def test_a_value_over_pmis_limit_is_refused_by_the_pmi_server(run_canopy, tmp_path):
    result, _ = synthetic_job(run_canopy, tmp_path, f"{RANKS}:1025:pmi", nodes=2)
    assert result.returncode == 1, result.describe()
    # PMI-1 carries no spaces: the server's reason comes with underscores.
    assert any("'put' failed" in line and "over_the_limits_of_64_and_1024" in line for line in result.canopy_lines()), \
        result.describe()


def test_bad_specs_are_refused_before_anything_starts(run_canopy):
    result = run_canopy(["--sim-nodes", 2, "--synthetic-ranks", "4:100:gossip"])
    assert result.returncode != 0
    assert "--synthetic-ranks '4:100:gossip': 'gossip' is not understood" in result.stderr, result.describe()
    result = run_canopy(["--sim-nodes", 2, "--ppn", 3, "--synthetic-ranks", "4"])
    assert "--synthetic-ranks 4 and --ppn 3 disagree" in result.stderr, result.describe()
    result = run_canopy(["--sim-nodes", 2, "--pmi", "pmix", "--synthetic-ranks", "4:pmi"])
    assert "needs simple PMI served" in result.stderr, result.describe()
