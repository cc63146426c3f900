#!/usr/bin/python3
"""Which processes a rank starts outside its process tree outlive the job, under canopy, mpirun and Hydra.

One rank on this host runs tests/integration/escapees.py, which leaves the job eight ways (setsid, a new process
group, double forks with and without a cleared environment block, ignoring SIGTERM, a parent that outlives the
rank). Prints, per launcher, whether the job ended within 30 s and how many of the eight were alive 3 s after.
Run as root (mpirun needs --allow-run-as-root, given here). Usage:

    /usr/bin/python3 tests/bench/escape_compare.py [--canopy build/launcher/canopy]
"""
import argparse
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ESCAPEES = REPO / "tests" / "integration" / "escapees.py"


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def one(argv):
    out = tempfile.mkdtemp(prefix="canopy-escapes-")
    with open(os.path.join(out, "log"), "w") as log:
        proc = subprocess.Popen(argv + ["/usr/bin/python3", str(ESCAPEES), out], stdout=log, stderr=log,
                                start_new_session=True)
        try:
            ended = f"exit {proc.wait(timeout=30)}"
        except subprocess.TimeoutExpired:
            ended = "still running after 30 s (killed)"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    time.sleep(3)
    pids = {name[:-4]: int(Path(out, name).read_text()) for name in os.listdir(out) if name.endswith(".pid")}
    left = sorted(mode for mode, pid in pids.items() if alive(pid))
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return ended, len(pids), left


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--canopy", default=str(REPO / "build" / "launcher" / "canopy"))
    args = parser.parse_args()
    launchers = {
        "canopy": [args.canopy, "--sim-nodes", "1", "-n", "1"],
        "mpirun (Open MPI)": ["mpiexec.openmpi", "--allow-run-as-root", "--oversubscribe", "-n", "1"],
        "mpiexec.hydra (MPICH)": ["mpiexec.hydra", "-n", "1"],
    }
    print("| launcher | the job | escapes started | left 3 s after |\n| --- | --- | ---: | --- |")
    for name, argv in launchers.items():
        ended, started, left = one(argv)
        print(f"| {name} | {ended} | {started} | {len(left)}: {', '.join(left) or '-'} |", flush=True)


if __name__ == "__main__":
    main()
