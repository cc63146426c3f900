#!/usr/bin/env python3
"""The soak: many small jobs back to back, and what the machine holds before and after them. Usage:

    /usr/bin/python3 tests/faults/soak.py [--jobs 1000]

Jobs alternate between a shell job and an Open MPI job on 4 simulated nodes x 2 ranks. Exits 1 if any job failed
or anything grew. CANOPY_BUILD_DIR picks the build."""
import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import faultlib
from faultlib import JobSandbox, wait_until

# Once a job's processes are gone, what it can leave is processes (marked, or orphans re-parented to the soak:
# counted exactly) and files: its TMPDIR, where Open MPI's shared memory goes too, and what in /dev/shm carries one of
# its job ids. Those are the soak's own and judged exactly. The machine's process count, open files, shared memory
# and available memory move with other work, other users' and other tests' alike: they are shown, not judged (an
# open file outlives a job only in a process that outlives it).
SLACK = {}
INFORMATIONAL = {"processes", "open files", "shared memory MiB", "available MiB"}


def own_shm_entries(job_ids):
    """The entries in /dev/shm whose names carry one of the soak's job ids: its jobs' and no one else's."""
    return [name for name in faultlib.shm_files() if any(job_id in name for job_id in job_ids)]


def snapshot(sandbox: JobSandbox, job_ids):
    """What a leak would grow: the jobs' own traces, and the machine's processes, open files and memory."""
    with open("/proc/sys/fs/file-nr") as f:
        open_files = int(f.read().split()[0])
    with open("/proc/meminfo") as f:
        meminfo = dict(line.split(":", 1) for line in f)
    return {
        "processes": sum(1 for name in os.listdir("/proc") if name.isdigit()),
        "open files": open_files,
        "shared memory MiB": int(meminfo["Shmem"].split()[0]) // 1024,
        "available MiB": int(meminfo["MemAvailable"].split()[0]) // 1024,
        "job processes left": len(sandbox.leftovers()),
        "temp entries": len(list(sandbox.tmpdir.iterdir())),
        "/dev/shm entries of the jobs": len(own_shm_entries(job_ids)),
    }


def soak(jobs, root: Path):
    """Runs `jobs` jobs; returns (failures, before, after, seconds of the first and last tenth of the jobs)."""
    sandbox = JobSandbox(root)
    # Each job says its id (CANOPY_JOBID, which names what it makes in /dev/shm). Open MPI's shared memory goes in
    # each node's temp dir, under the sandbox's TMPDIR (daemon/rank_launches.cpp).
    mpi_hello = faultlib.BUILD_DIR / "tests" / "pmix" / "mpi_hello"
    programs = [["sh", "-c", "echo $RANK job $CANOPY_JOBID"], ["sh", "-c", f"echo job $CANOPY_JOBID; exec {mpi_hello}"]]
    env = {"OMPI_MCA_mpi_yield_when_idle": "1"}
    job_ids = set()

    def run(program):
        result = sandbox.run(["--sim-nodes", 4, "--ppn", 2] + program, timeout=60, env=env)
        job_ids.update(re.findall(r"\bjob (\S+)", result.stdout))
        return result

    # One job first, so that what the first job loads once (caches, libraries) is in the baseline.
    run(programs[1])
    wait_until(lambda: not sandbox.leftovers(), faultlib.GRACE_SECONDS)
    before = snapshot(sandbox, job_ids)
    failures, seconds = [], []
    for index in range(jobs):
        result = run(programs[index % 2])
        seconds.append(result.seconds)
        if result.returncode != 0:
            failures.append(f"job {index}: {result.describe()}")
    wait_until(lambda: not sandbox.leftovers() and not any(sandbox.tmpdir.iterdir()), faultlib.GRACE_SECONDS)
    after = snapshot(sandbox, job_ids)
    if len(job_ids) < jobs:
        failures.append(f"only {len(job_ids)} of {jobs + 1} jobs said their job id")
    sandbox.close()
    tenth = max(1, jobs // 10)
    return failures, before, after, (statistics.median(seconds[:tenth]), statistics.median(seconds[-tenth:]))


def grown(before, after):
    """What grew beyond noise: the job's own traces not at all, the machine's within SLACK."""
    found = []
    for key in before:
        if key not in INFORMATIONAL and after[key] - before[key] > SLACK.get(key, 0):
            found.append(f"{key}: {before[key]} -> {after[key]}")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="canopy-soak-") as root:
        failures, before, after, (first, last) = soak(args.jobs, Path(root))
    print(f"{args.jobs} jobs in {time.monotonic() - started:.0f} s, {len(failures)} failed; median job "
          f"{first:.3f} s over the first tenth, {last:.3f} s over the last")
    print("| measure | before | after |\n| --- | ---: | ---: |")
    for key in before:
        print(f"| {key} | {before[key]} | {after[key]} |")
    for failure in failures[:5]:
        print(failure)
    growth = grown(before, after)
    for line in growth:
        print("grew:", line)
    sys.exit(1 if failures or growth else 0)


if __name__ == "__main__":
    main()
