#!/usr/bin/env python3
"""The soak: many small jobs back to back, and what the machine holds before and after them. Usage:

    /usr/bin/python3 tests/faults/soak.py [--jobs 1000]

Jobs alternate between a shell job and an Open MPI job on 4 simulated nodes x 2 ranks. Exits 1 if any job failed
or anything grew. CANOPY_BUILD_DIR picks the build."""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import faultlib
from faultlib import JobSandbox, wait_until

# Once a job's processes are gone, what it can leave is processes (marked, or orphans re-parented to the soak:
# counted exactly), files (its TMPDIR, /dev/shm) and the shared memory those hold. The machine's process count,
# open files and available memory move with other work; they are shown, not judged: an open file outlives a job
# only in a process that outlives it.
SLACK = {"shared memory MiB": 16}
INFORMATIONAL = {"processes", "open files", "available MiB"}


def snapshot(sandbox: JobSandbox):
    """What a leak would grow: the machine's processes, open files and free memory, and the job's own traces."""
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
        "/dev/shm entries": len(faultlib.shm_files()),
    }


def soak(jobs, root: Path):
    """Runs `jobs` jobs; returns (failures, before, after, seconds of the first and last tenth of the jobs)."""
    sandbox = JobSandbox(root)
    programs = [["sh", "-c", "echo $RANK"], [faultlib.BUILD_DIR / "tests" / "pmix" / "mpi_hello"]]
    # One job first, so that what the first job loads once (caches, libraries) is in the baseline.
    sandbox.run(["--sim-nodes", 4, "--ppn", 2] + programs[1], timeout=60)
    wait_until(lambda: not sandbox.leftovers(), faultlib.GRACE_SECONDS)
    before = snapshot(sandbox)
    failures, seconds = [], []
    for index in range(jobs):
        result = sandbox.run(["--sim-nodes", 4, "--ppn", 2] + programs[index % 2], timeout=60,
                             env={"OMPI_MCA_mpi_yield_when_idle": "1"})
        seconds.append(result.seconds)
        if result.returncode != 0:
            failures.append(f"job {index}: {result.describe()}")
    wait_until(lambda: not sandbox.leftovers() and not any(sandbox.tmpdir.iterdir()), faultlib.GRACE_SECONDS)
    after = snapshot(sandbox)
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
