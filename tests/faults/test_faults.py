# The fault campaign's CI subset: one fault of each kind, each aimed at a phase where it is hardest to handle.
# The whole campaign is campaign.py (docs/reliability.md has its table).
import random

import pytest

import faultlib

SUBSET = [
    ("kill_rank", "mpi_init"),
    ("kill_rank", "fence"),
    ("kill_leaf", "staging"),
    ("stop_interior", "health_check"),
    ("kill_interior", "steady"),
    ("kill_interior", "pmi_init"),
    ("kill_launcher", "tree"),
    ("term_launcher", "teardown"),
    ("int_launcher", "fence"),
    ("stop_leaf", "fence"),
    ("stop_interior", "steady"),
    ("slow_leaf", "steady"),
    ("kill_interior", "restart"),
    ("kill_rank", "restart"),
]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    return faultlib.StagedTree(tmp_path_factory.mktemp("staged"))


@pytest.mark.parametrize("fault,phase", SUBSET, ids=[f"{f}-{p}" for f, p in SUBSET])
def test_a_fault_ends_the_job_cleanly_and_names_what_failed(fault, phase, staged, tmp_path):
    if fault == "slow_leaf" and faultlib.SlowCgroup.missing():
        pytest.fail(faultlib.SlowCgroup.missing())
    outcome = faultlib.run_one(fault, phase, tmp_path / "run", staged, random.Random(7))
    assert outcome.hit, f"the job ended before the fault could come: {outcome.describe()}"
    assert outcome.clean, outcome.describe()
