# Launching on simulated nodes: each rank's identity, placement, environment, working dir, stdin and output.
import hashlib
import os
import re
import select
import socket
import time
from pathlib import Path

import pytest

from conftest import parse_labelled


def rank_envs(result):
    """{rank: {NAME: value}} from `-l env`-style output."""
    envs = {}
    for rank, lines in parse_labelled(result.stdout).items():
        envs[rank] = dict(line.split("=", 1) for line in lines if "=" in line)
    return envs


def nodes_of(result):
    """{rank: (node, local_rank, local_size)} from ranks that echo $CANOPY_NODE $LOCAL_RANK $LOCAL_WORLD_SIZE."""
    placed = {}
    for rank, lines in parse_labelled(result.stdout).items():
        assert len(lines) == 1, f"rank {rank} printed {lines}"
        node, local, size = lines[0].split()
        placed[rank] = (node, int(local), int(size))
    return placed


WHERE = ["sh", "-c", 'echo "$CANOPY_NODE $LOCAL_RANK $LOCAL_WORLD_SIZE"']


def test_every_rank_on_64_nodes_gets_its_identity(run_canopy, sandbox):
    result = run_canopy(["--sim-nodes", "64", "--ppn", "2", "-l", "sh", "-c",
                         'env; stat -c "NODE_TMPDIR_MODE=%a" "$CANOPY_NODE_TMPDIR"'], timeout=60)
    assert result.returncode == 0, result.describe()
    envs = rank_envs(result)
    assert sorted(envs) == list(range(128)), "every rank 0..127 must report exactly once"
    job_ids = {env["CANOPY_JOBID"] for env in envs.values()}
    ports = {env["MASTER_PORT"] for env in envs.values()}
    assert len(job_ids) == 1 and re.fullmatch(r"[0-9a-f]+", job_ids.pop())
    assert len(ports) == 1 and 0 < int(ports.pop()) < 65536
    for rank, env in envs.items():
        node = rank // 2
        local = rank % 2
        expected = {
            "RANK": rank, "WORLD_SIZE": 128, "LOCAL_RANK": local, "LOCAL_WORLD_SIZE": 2,
            "NODE_RANK": node, "GROUP_RANK": node, "GROUP_WORLD_SIZE": 64, "ROLE_RANK": rank, "ROLE_WORLD_SIZE": 128,
            "ROLE_NAME": "default", "TORCHELASTIC_RESTART_COUNT": 0, "CANOPY_RESTART_COUNT": 0, "MASTER_ADDR": "127.1.0.1",
            "PMI_RANK": rank, "PMI_SIZE": 128, "PMI_LOCAL_RANK": local, "PMI_LOCAL_SIZE": 2,
            "PALS_RANKID": rank, "PALS_LOCAL_RANKID": local, "PALS_NODEID": node,
            "CANOPY_RANK": rank, "CANOPY_SIZE": 128, "CANOPY_LOCAL_RANK": local, "CANOPY_LOCAL_SIZE": 2,
            "CANOPY_NODE_RANK": node, "CANOPY_NUM_NODES": 64, "CANOPY_NODE": f"sim{node:04d}",
            "NODE_TMPDIR_MODE": 700,
        }
        actual = {name: env.get(name) for name in expected}
        assert actual == {name: str(value) for name, value in expected.items()}, f"rank {rank}"
        # Named for the job and node, and six random characters another user cannot guess (issue 38).
        name = f"canopy-{env['CANOPY_JOBID']}-sim{node:04d}-[A-Za-z0-9]{{6}}"
        assert re.fullmatch(rf"{re.escape(str(sandbox.tmpdir))}/{name}", env["CANOPY_NODE_TMPDIR"]), \
            env["CANOPY_NODE_TMPDIR"]
        assert env["CANOPY_IT_MARKER"] == sandbox.marker, "ranks inherit the launcher's environment by default"


def shm_is_a_writable_tmpfs():
    mounts = Path("/proc/mounts").read_text().splitlines()
    return any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in mounts) and os.access("/dev/shm", os.W_OK)


def test_without_tmpdir_node_dirs_live_on_dev_shm_and_are_removed(run_canopy):
    base = "/dev/shm" if shm_is_a_writable_tmpfs() else "/tmp"
    result = run_canopy(["--sim-nodes", "2", "sh", "-c", 'test -d "$CANOPY_NODE_TMPDIR" && echo "$CANOPY_NODE_TMPDIR"'],
                        env={"TMPDIR": ""})
    assert result.returncode == 0, result.describe()
    dirs = sorted(result.stdout.split())
    assert len(dirs) == 2 and all(d.startswith(f"{base}/canopy-") for d in dirs), result.describe()
    assert not [d for d in dirs if Path(d).exists()], "the job's node dirs must be gone when canopy returns"


def test_a_tmpdir_that_does_not_exist_fails_the_job_naming_it_and_is_not_created(run_canopy, sandbox):
    """Issue 15, item 7: a [job] tmpdir that did not exist was created, and left after the job."""
    missing = sandbox.root / "no" / "such" / "dir"
    config = sandbox.root / "tmpdir.toml"
    config.write_text(f'[job]\ntmpdir = "{missing}"\n')
    result = run_canopy(["--config", config, "--sim-nodes", "2", "true"], timeout=20)
    assert result.returncode == 255, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and str(missing) in lines[0] and "sim000" in lines[0], result.describe()
    assert not (sandbox.root / "no").exists(), "canopy created the missing tmpdir"


def test_ppn_places_blocks_of_ranks_per_node(run_canopy):
    result = run_canopy(["--sim-nodes", "4", "--ppn", "3", "-n", "10", "-l"] + WHERE)
    assert result.returncode == 0, result.describe()
    placed = nodes_of(result)
    assert placed == {
        0: ("sim0000", 0, 3), 1: ("sim0000", 1, 3), 2: ("sim0000", 2, 3),
        3: ("sim0001", 0, 3), 4: ("sim0001", 1, 3), 5: ("sim0001", 2, 3),
        6: ("sim0002", 0, 3), 7: ("sim0002", 1, 3), 8: ("sim0002", 2, 3),
        9: ("sim0003", 0, 1),
    }


def test_without_ppn_ranks_spread_evenly_over_nodes(run_canopy):
    result = run_canopy(["--sim-nodes", "4", "-n", "6", "-l"] + WHERE)
    assert result.returncode == 0, result.describe()
    assert nodes_of(result) == {
        0: ("sim0000", 0, 2), 1: ("sim0000", 1, 2), 2: ("sim0001", 0, 2), 3: ("sim0001", 1, 2),
        4: ("sim0002", 0, 1), 5: ("sim0003", 0, 1),
    }


def test_without_n_or_ppn_one_rank_per_node(run_canopy):
    result = run_canopy(["--sim-nodes", "5", "-l"] + WHERE)
    assert result.returncode == 0, result.describe()
    assert nodes_of(result) == {i: (f"sim{i:04d}", 0, 1) for i in range(5)}


def test_fewer_ranks_than_nodes_use_only_the_first_nodes(run_canopy):
    result = run_canopy(["--sim-nodes", "8", "-n", "3", "-l", "sh", "-c", 'echo "$CANOPY_NODE $CANOPY_NUM_NODES"'])
    assert result.returncode == 0, result.describe()
    by_rank = parse_labelled(result.stdout)
    assert by_rank == {0: ["sim0000 3"], 1: ["sim0001 3"], 2: ["sim0002 3"]}


def test_n_without_hosts_runs_every_rank_on_this_machine(run_canopy):
    result = run_canopy(["-n", "3", "-l"] + WHERE)
    assert result.returncode == 0, result.describe()
    host = socket.gethostname()
    assert nodes_of(result) == {0: (host, 0, 3), 1: (host, 1, 3), 2: (host, 2, 3)}


def test_label_prefixes_every_line_with_its_rank(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-l", "sh", "-c",
                         'printf "one\\ntwo\\nthree"; printf "err-line\\n" >&2'])
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {r: ["one", "two", "three"] for r in range(4)}
    assert sorted(line for line in result.stderr.splitlines()) == [f"[{r}] err-line" for r in range(4)]


def test_without_label_output_is_passed_through_unchanged(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "sh", "-c", 'printf "plain %s\\n" "$RANK"'])
    assert result.returncode == 0, result.describe()
    assert sorted(result.stdout.splitlines()) == ["plain 0", "plain 1"]


def test_program_arguments_reach_ranks_unchanged(run_canopy):
    words = ["a b", "it's", "$HOME", "*", "-n", "5", ""]
    result = run_canopy(["--sim-nodes", "2", "--", "printf", "<%s>"] + words)
    assert result.returncode == 0, result.describe()
    once = "".join(f"<{w}>" for w in words)
    assert result.stdout == once * 2


def test_env_sets_variables_in_every_rank(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "--env", "CANOPY_T_A=1", "--env", "CANOPY_T_B=x y=z",
                         "-genv", "CANOPY_T_C", "hydra style", "-l", "env"])
    assert result.returncode == 0, result.describe()
    envs = rank_envs(result)
    assert sorted(envs) == [0, 1, 2, 3]
    for env in envs.values():
        assert env["CANOPY_T_A"] == "1"
        assert env["CANOPY_T_B"] == "x y=z"
        assert env["CANOPY_T_C"] == "hydra style"


def test_x_copies_a_variable_from_the_launcher_or_sets_one(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--envnone", "-x", "CANOPY_T_FROM_HERE", "-x", "CANOPY_T_SET=v",
                         "-l", "env"], env={"CANOPY_T_FROM_HERE": "copied value"})
    assert result.returncode == 0, result.describe()
    for env in rank_envs(result).values():
        assert env["CANOPY_T_FROM_HERE"] == "copied value"
        assert env["CANOPY_T_SET"] == "v"


def test_x_of_an_unset_variable_is_a_usage_error(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "-x", "CANOPY_T_NOT_SET_ANYWHERE", "env"])
    assert result.returncode == 2, result.describe()
    assert result.canopy_lines() and "CANOPY_T_NOT_SET_ANYWHERE" in result.canopy_lines()[0]


def test_envnone_passes_only_what_was_set(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--envnone", "--env", "CANOPY_T_KEEP=1", "-l", "env"],
                        env={"CANOPY_T_DROP": "1"})
    assert result.returncode == 0, result.describe()
    envs = rank_envs(result)
    assert sorted(envs) == [0, 1]
    for rank, env in envs.items():
        assert env["CANOPY_T_KEEP"] == "1"
        assert env["RANK"] == str(rank), "canopy's own variables are always set"
        for dropped in ("CANOPY_T_DROP", "HOME", "PATH", "CANOPY_IT_MARKER"):
            assert dropped not in env, f"{dropped} leaked into rank {rank} despite --envnone"


def test_envlist_passes_only_the_named_variables(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--envlist", "CANOPY_T_ONE,HOME", "-l", "env"],
                        env={"CANOPY_T_ONE": "1", "CANOPY_T_TWO": "2"})
    assert result.returncode == 0, result.describe()
    for env in rank_envs(result).values():
        assert env["CANOPY_T_ONE"] == "1"
        assert env["HOME"] == os.environ.get("HOME")
        assert "CANOPY_T_TWO" not in env
        assert "PATH" not in env


def test_a_batch_steps_task_identity_never_contradicts_a_ranks_own(run_canopy):
    # As canopy inherits them inside an srun step or under mpirun: every rank would read "0 of 1" and Lightning or
    # JAX would take it for rank 0. They become the rank's own; the step's own variables go; the allocation's stay.
    outer = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
             "SLURM_NTASKS": "1", "SLURM_STEP_ID": "7", "SLURM_STEP_NODELIST": "login1", "PMIX_RANK": "0",
             "PMIX_NAMESPACE": "outer-job", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}
    result = run_canopy(["--sim-nodes", "2", "-n", "4", "-l", "env"], env=outer)
    assert result.returncode == 0, result.describe()
    envs = rank_envs(result)
    assert sorted(envs) == [0, 1, 2, 3], result.describe()
    for rank, env in envs.items():
        assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NODEID"], env["SLURM_NTASKS"]) == \
            (str(rank), str(rank % 2), str(rank // 2), "4"), env
        assert (env["OMPI_COMM_WORLD_RANK"], env["OMPI_COMM_WORLD_SIZE"]) == (str(rank), "4"), env
        assert env["SLURM_JOB_ID"] == "4242"
        for dropped in ("SLURM_STEP_ID", "SLURM_STEP_NODELIST"):
            assert dropped not in env, f"{dropped} reached rank {rank}"
        assert env.get("PMIX_NAMESPACE") != "outer-job" and env.get("PMIX_RANK", str(rank)) == str(rank), env


def test_explicit_master_addr_and_port_win(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--env", "MASTER_ADDR=10.9.8.7", "--env", "MASTER_PORT=29511", "-l",
                         "sh", "-c", 'echo "$MASTER_ADDR:$MASTER_PORT"'])
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {0: ["10.9.8.7:29511"], 1: ["10.9.8.7:29511"]}


def test_wdir_sets_every_rank_working_directory(run_canopy, sandbox):
    work = sandbox.root / "work dir"
    work.mkdir()
    result = run_canopy(["--sim-nodes", "2", "--wdir", str(work), "-l", "pwd"])
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {0: [str(work)], 1: [str(work)]}


def test_a_relative_program_is_found_in_the_wdir_as_mpiexec_finds_it(run_canopy, sandbox):
    # bin/app and ./app name files in the ranks' working directory, as mpiexec -wdir (Hydra) reads them, not in
    # the launcher's; a missing one is named with the directory it was looked for in.
    work = sandbox.root / "work"
    (work / "bin").mkdir(parents=True)
    app = work / "bin" / "app"
    app.write_text("#!/bin/sh\necho \"app in $PWD\"\n")
    app.chmod(0o755)
    elsewhere = sandbox.root / "elsewhere"
    elsewhere.mkdir()
    for program in ("bin/app", "./bin/app"):
        result = run_canopy(["--sim-nodes", "2", "--wdir", str(work), "-l", program], cwd=elsewhere)
        assert result.returncode == 0, result.describe()
        assert parse_labelled(result.stdout) == {0: [f"app in {work}"], 1: [f"app in {work}"]}
    result = run_canopy(["--sim-nodes", "2", "--wdir", str(work), "bin/none"], cwd=elsewhere)
    assert result.returncode == 127, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and re.search(rf"program 'bin/none' not found in {re.escape(str(work))} on sim000[01]",
                                         lines[0]), result.describe()


def test_ranks_start_in_the_launcher_directory_by_default(run_canopy, sandbox):
    here = sandbox.root / "launch-here"
    here.mkdir()
    result = run_canopy(["--sim-nodes", "2", "-l", "pwd"], cwd=here)
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {0: [str(here)], 1: [str(here)]}


def test_missing_wdir_on_this_machine_fails_before_anything_starts(run_canopy, sandbox):
    missing = sandbox.root / "no-such-dir"
    result = run_canopy(["--sim-nodes", "2", "--wdir", str(missing), "true"])
    assert result.returncode == 2, result.describe()
    assert result.canopy_lines() == [f"canopy: --wdir {missing}: no such directory"], result.describe()


def test_missing_wdir_on_a_node_fails_the_job_with_126_naming_node_and_directory(run_canopy, sandbox,
                                                                                 loopback_config):
    # Through an agent the nodes may have file systems of their own: each node finds out for itself.
    missing = sandbox.root / "no-such-dir"
    result = run_canopy(["--config", loopback_config, "--agent", LOCAL_EXEC_AGENT, "--hosts", "nodeA,nodeB",
                         "--wdir", str(missing), "true"])
    assert result.returncode == 126, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and re.search(rf"rank [01] on node[AB] could not start: cannot change to directory "
                                         rf"{re.escape(str(missing))}: No such file or directory", lines[0]), \
        result.describe()


def test_stdin_reaches_rank_0_only_and_completely(run_canopy):
    data = b"".join(b"line %06d of the input\n" % i for i in range(20000))   # about 460 KB
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-l", "sh", "-c", 'echo "$(sha256sum)"'], input=data)
    assert result.returncode == 0, result.describe()
    digests = {rank: lines[0].split()[0] for rank, lines in parse_labelled(result.stdout).items()}
    assert digests[0] == hashlib.sha256(data).hexdigest()
    empty = hashlib.sha256(b"").hexdigest()
    assert digests == {0: digests[0], 1: empty, 2: empty, 3: empty}


def test_large_output_arrives_complete_and_in_order_per_rank(run_canopy):
    lines_per_rank = 80000   # 66 bytes each: about 5 MB per rank
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-l", "sh", "-c",
                         f'seq -f "r$RANK %09g ................................................" 1 {lines_per_rank}'],
                        timeout=60)
    assert result.returncode == 0, result.describe()
    by_rank = parse_labelled(result.stdout)
    assert sorted(by_rank) == [0, 1, 2, 3]
    pad = "." * 48
    for rank, lines in by_rank.items():
        assert len(lines) == lines_per_rank, f"rank {rank} lost lines"
        for i, line in enumerate(lines, start=1):
            if line != f"r{rank} {i:09d} {pad}":
                pytest.fail(f"rank {rank} line {i} is {line!r}")


def test_output_written_just_before_exit_is_not_lost(run_canopy):
    result = run_canopy(["--sim-nodes", "8", "--ppn", "2", "-l", "sh", "-c",
                         'printf "last words of %s" "$RANK"; printf "and on stderr" >&2; exit 0'])
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {r: [f"last words of {r}"] for r in range(16)}
    assert sorted(result.stderr.splitlines()) == sorted(f"[{r}] and on stderr" for r in range(16))


def test_background_process_of_a_rank_does_not_hold_the_job(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "sh", "-c", 'sleep 60 & echo started'], timeout=20)
    assert result.returncode == 0, result.describe()
    assert result.stdout.splitlines() == ["started", "started"]
    assert result.seconds < 10, "the job should end soon after its ranks exit"
    # The sandbox fixture then checks that the background sleeps were killed with the job.


def cpus_allowed(status_line):
    return status_line.split(":", 1)[1].strip()


def test_cpu_bind_core_pins_each_local_rank_to_one_cpu(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "--cpu-bind", "core", "-l", "grep", "Cpus_allowed_list",
                         "/proc/self/status"])
    assert result.returncode == 0, result.describe()
    allowed = sorted(os.sched_getaffinity(0))
    for rank, lines in parse_labelled(result.stdout).items():
        local = rank % 2
        assert cpus_allowed(lines[0]) == str(allowed[local % len(allowed)]), f"rank {rank}"


def test_a_binding_that_puts_two_ranks_on_one_cpu_is_refused_before_launch(run_canopy, sandbox):
    more = len(os.sched_getaffinity(0)) + 1   # one rank more than this machine's CPUs: core wraps
    marker = sandbox.root / "ran"
    result = run_canopy(["--sim-nodes", "2", "--ppn", str(more), "--cpu-bind", "core", "sh", "-c", f"touch {marker}"])
    assert result.returncode == 2, result.describe()
    lines = result.canopy_lines()
    assert len(lines) == 1 and f"puts ranks 0 and {more - 1} on CPU" in lines[0] and "sim0000" in lines[0] and \
        "--oversubscribe" in lines[0], result.describe()
    assert not marker.exists(), "a rank started although the binding was refused"


def test_a_node_refuses_a_binding_that_shares_its_cpus_naming_itself(run_canopy, loopback_config):
    # Fake hosts: the launcher cannot know their CPUs, so each node checks its own and the job ends with 126.
    result = run_canopy(["--config", loopback_config, "--agent", LOCAL_EXEC_AGENT, "--hosts", "nodeA,nodeB",
                         "--ppn", "2", "--cpu-bind", "list:0:0", "true"])
    assert result.returncode == 126, result.describe()
    lines = result.canopy_lines()
    assert lines and "--cpu-bind list:0:0 puts ranks" in lines[0] and "on CPU 0 of node" in lines[0], result.describe()


def test_oversubscribe_allows_shared_cpus_and_report_bindings_says_what_each_rank_got(run_canopy):
    more = len(os.sched_getaffinity(0)) + 1
    result = run_canopy(["--sim-nodes", "2", "--ppn", str(more), "--cpu-bind", "core", "--oversubscribe",
                         "--report-bindings", "-l", "grep", "Cpus_allowed_list", "/proc/self/status"])
    assert result.returncode == 0, result.describe()
    # A table per node: "canopy: bindings on sim0000 (...):", a header, then "  RANK  CPUS  NUMA  GPUS  NICS".
    reported = dict(re.findall(r"^  (\d+)\s+(\S+)\s+-\s+-\s+-$", result.stderr, re.M))
    assert result.stderr.count("canopy: bindings on sim000") == 2, result.describe()
    seen = {str(rank): cpus_allowed(lines[0]) for rank, lines in parse_labelled(result.stdout).items()}
    assert len(seen) == 2 * more and reported == seen, result.describe()


def test_without_cpu_bind_ranks_keep_every_cpu(run_canopy):
    result = run_canopy(["--sim-nodes", "2", "--ppn", "2", "-l", "grep", "Cpus_allowed_list", "/proc/self/status"])
    assert result.returncode == 0, result.describe()
    own = [line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("Cpus_allowed_list")]
    for rank, lines in parse_labelled(result.stdout).items():
        assert cpus_allowed(lines[0]) == cpus_allowed(own[0]), f"rank {rank}"


# Fake host names run on this machine: the exec agent runs the daemon command locally (env just passes it on),
# and bind_address keeps the tree on loopback.
LOCAL_EXEC_AGENT = "exec:env CANOPY_IT_HOST=%h"


def test_hostfile_slots_place_ranks(run_canopy, sandbox, loopback_config):
    hostfile = sandbox.root / "hosts.txt"
    hostfile.write_text("# two fake nodes\nnodeA slots=2\nnodeB slots=3\n")
    result = run_canopy(["--config", loopback_config, "--agent", LOCAL_EXEC_AGENT, "--hostfile", hostfile, "-l",
                         "sh", "-c", 'echo "$CANOPY_NODE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR"'])
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {
        0: ["nodeA 0 2 nodeA"], 1: ["nodeA 1 2 nodeA"],
        2: ["nodeB 0 3 nodeA"], 3: ["nodeB 1 3 nodeA"], 4: ["nodeB 2 3 nodeA"],
    }


def test_hosts_option_slots_place_ranks_as_a_hostfile_does(run_canopy, loopback_config):
    result = run_canopy(["--config", loopback_config, "--agent", LOCAL_EXEC_AGENT, "--hosts", "nodeA:2,nodeB:3", "-l",
                         "sh", "-c", 'echo "$CANOPY_NODE $LOCAL_RANK $LOCAL_WORLD_SIZE"'])
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {
        0: ["nodeA 0 2"], 1: ["nodeA 1 2"], 2: ["nodeB 0 3"], 3: ["nodeB 1 3"], 4: ["nodeB 2 3"],
    }


def test_hostlist_through_a_deep_tree_reaches_every_node(run_canopy, loopback_config):
    result = run_canopy(["--config", loopback_config, "--agent", LOCAL_EXEC_AGENT, "--hosts", "n[01-07]",
                         "--fanout", "2", "--ppn", "2", "-l"] + WHERE)
    assert result.returncode == 0, result.describe()
    placed = nodes_of(result)
    assert placed == {r: (f"n{r // 2 + 1:02d}", r % 2, 2) for r in range(14)}


def _output_within(stream, wanted, seconds):
    """What arrived on `stream` (a pipe) within `seconds`, stopping early once it holds `wanted`."""
    got, deadline = b"", time.monotonic() + seconds
    while wanted not in got and (left := deadline - time.monotonic()) > 0:
        if select.select([stream], [], [], left)[0]:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            got += chunk
    return got


# A progress bar or a prompt: a partial line, then silence. It reaches the user in well under a second (canopy
# waits 50 ms for the rest of a line), labelled or not; --line-buffer holds it to its newline.
@pytest.mark.parametrize("label", [[], ["-l"]], ids=["plain", "labelled"])
def test_a_partial_line_reaches_the_terminal_at_once(label, sandbox, ready):
    job = sandbox.start(["--sim-nodes", "2", *label, "sh", "-c",
                         f'[ $RANK = 0 ] && printf x; {ready.touch}; sleep 3; [ $RANK = 0 ] && echo y; true'])
    ready.wait(2, job)
    got = _output_within(job.stdout, b"x", 1.0)
    assert got == (b"[0] x" if label else b"x"), f"within 1 s of the rank printing it, got {got!r}"
    result = sandbox.finish(job)
    assert result.returncode == 0, result.describe()
    assert got.decode() + result.stdout == ("[0] xy\n" if label else "xy\n"), result.describe()


def test_line_buffer_holds_a_partial_line_until_its_newline(sandbox, ready):
    job = sandbox.start(["--sim-nodes", "1", "--line-buffer", "sh", "-c", f"printf x; {ready.touch}; sleep 2; echo y"])
    ready.wait(1, job)
    assert _output_within(job.stdout, b"x", 1.0) == b""
    result = sandbox.finish(job)
    assert result.returncode == 0 and result.stdout == "xy\n", result.describe()


def test_labelled_ranks_never_share_a_line(run_canopy):
    # Rank 0 leaves a prompt open for longer than other ranks' output waits behind it (1 s) while rank 1 prints
    # whole lines: rank 1's lines start lines of their own, and the rest of rank 0's line, which canopy ended, is
    # labelled as such ([0+]), so that the line can be joined again.
    result = run_canopy(["--sim-nodes", "2", "-l", "sh", "-c",
                         'if [ $RANK = 0 ]; then printf "Enter: "; sleep 2.5; echo 42; '
                         'else sleep 0.5; echo one; echo two; fi'])
    assert result.returncode == 0, result.describe()
    assert result.stdout == "[0] Enter: \n[1] one\n[1] two\n[0+] 42\n", result.describe()


# Python's print writes a line's text and its newline apart. A rank descheduled in between (here it sleeps 0.3 s,
# longer than canopy waits for the rest of a line) still gets its line whole, with or without labels, while the
# other ranks' lines wait.
@pytest.mark.parametrize("label", [[], ["-l"]], ids=["plain", "labelled"])
def test_a_line_written_in_two_pieces_stays_whole(label, run_canopy):
    result = run_canopy(["--sim-nodes", "3", *label, "sh", "-c",
                         'if [ $RANK = 0 ]; then printf "rank 0 line"; sleep 0.3; echo; '
                         'else sleep 0.1; echo "rank $RANK line"; fi'])
    assert result.returncode == 0, result.describe()
    lines = [line.removeprefix(f"[{line[1]}] ") if label else line for line in result.stdout.splitlines()]
    assert sorted(lines) == ["rank 0 line", "rank 1 line", "rank 2 line"], result.describe()


# torchrun's spellings: `torchrun --standalone --nproc-per-node 2 -m trainer` becomes `canopy --standalone ...`.
def test_torchrun_spellings_run_a_module_with_torchrun_variables(run_canopy, sandbox):
    package = sandbox.root / "pkg"
    package.mkdir()
    (package / "trainer.py").write_text(
        "import os, sys\n"
        "names = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'GROUP_WORLD_SIZE',\n"
        "         'ROLE_RANK', 'ROLE_WORLD_SIZE', 'ROLE_NAME')\n"
        "print(' '.join(os.environ[n] for n in names), sys.argv[1:])\n")
    # An allocation that --standalone must ignore: no host of it is reachable.
    env = {"PYTHONPATH": str(package), "SLURM_JOB_NODELIST": "unreachable[1-4]", "SLURM_TASKS_PER_NODE": "1(x4)"}
    result = run_canopy(["--standalone", "--nproc_per_node", "2", "-l", "-m", "trainer", "--lr", "0.1"], env=env)
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {
        rank: [f"{rank} 2 {rank} 2 0 1 {rank} 2 default ['--lr', '0.1']"] for rank in (0, 1)}, result.describe()


def test_nnodes_takes_the_first_hosts_of_the_allocation(run_canopy, loopback_config):
    result = run_canopy(["--config", loopback_config, "--agent", LOCAL_EXEC_AGENT, "--hosts", "nodeA,nodeB,nodeC",
                         "--nnodes", "2", "--nproc-per-node", "1", "-l", "sh", "-c", 'echo "$CANOPY_NODE"'])
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {0: ["nodeA"], 1: ["nodeB"]}, result.describe()


@pytest.mark.parametrize("args, message", [
    (["--nnodes", "3", "--hosts", "a,b"], "--nnodes 3: only 2 hosts (from --hosts)"),
    (["--nnodes", "1:4"], "does not resize a job"),
    (["--nproc-per-node", "gpu"], "needs the number of ranks per node"),
    (["--nproc_per_node=auto"], "--nproc_per_node auto: canopy needs the number of ranks per node"),
    (["--standalone", "--hosts", "a,b"], "--standalone and --hosts cannot be used together"),
    (["--rdzv-backend=c10d"], "canopy's tree is the rendezvous"),
    (["--master_port", "29500"], "canopy's equivalent is --env MASTER_PORT=PORT"),
], ids=["nnodes-too-many", "elastic", "gpu", "auto-inline", "standalone-hosts", "rdzv", "master-port"])
def test_torchrun_options_canopy_does_not_take_are_explained(args, message, run_canopy):
    result = run_canopy([*args, "true"])
    assert result.returncode == 2, result.describe()
    assert len(result.canopy_lines()) == 1 and message in result.canopy_lines()[0], result.describe()


# The single-node interactive job: the machine's own name, as `--hosts $(hostname)`, a PBS_NODEFILE or a Slurm node
# list give it, starts its daemon directly. No sshd is needed (none listens on port 22 here).
@pytest.mark.parametrize("how", ["hosts", "short-name", "address", "pbs", "slurm"])
def test_this_machine_named_as_a_host_starts_without_ssh(how, run_canopy, sandbox):
    name = socket.gethostname()
    env, args = {}, []
    if how == "hosts":
        args = ["--hosts", f"{name}:2"]
    elif how == "short-name":
        args = ["--hosts", f"{name.split('.')[0].upper()}:2"]   # names compare without regard to case
    elif how == "address":
        args = ["--hosts", "127.0.0.1:2"]
    elif how == "pbs":
        nodefile = sandbox.root / "nodefile"
        nodefile.write_text(f"{name}\n{name}\n")
        env = {"PBS_NODEFILE": str(nodefile)}
    else:
        env = {"SLURM_JOB_NODELIST": name, "SLURM_TASKS_PER_NODE": "2"}
    result = run_canopy([*args, "--agent", "ssh", "-l", "sh", "-c", 'echo "$RANK of $WORLD_SIZE"'], env=env)
    assert result.returncode == 0, result.describe()
    assert parse_labelled(result.stdout) == {0: ["0 of 2"], 1: ["1 of 2"]}, result.describe()


def test_among_other_hosts_only_this_machine_skips_the_agent(run_canopy):
    name = socket.gethostname()
    ssh = run_canopy(["--dry-run", "--hosts", f"{name},elsewhere", "--agent", "ssh", "true"])
    commands = [line for line in ssh.stdout.splitlines() if "canopyd --parent" in line]
    assert len(commands) == 2, ssh.describe()
    assert commands[0].split(": ", 1)[1].split()[0].endswith("canopyd") and f"--node {name}" in commands[0]
    assert commands[1].split(": ", 1)[1].startswith("ssh ") and "elsewhere" in commands[1]
    # An exec agent is the user's own command (srun works for this node too): it is kept.
    srun = run_canopy(["--dry-run", "--hosts", f"{name},elsewhere", "--agent", "exec:srun -w %h", "true"])
    assert [line.split(": ", 1)[1].split()[0] for line in srun.stdout.splitlines()
            if "canopyd --parent" in line] == ["srun", "srun"], srun.describe()
