#!/usr/bin/env python3
"""The fault campaign on a cluster in a box (tests/cluster): faults to whole hosts, which simulated nodes sharing
one kernel cannot have. Every run makes 4 fresh hosts, starts an Open MPI job over ssh on all of them (2 ranks
each, fanout 2, so node3's canopyd is a child of node1's), hits node3 with one fault in one phase, and counts what
the job left on every host that is still alive. Usage (as root):

    /usr/bin/python3 tests/faults/host_campaign.py --runs 100 [--faults kill_host,...] [--phases steady,...]
        [--json FILE]

Runs go round the fault x phase matrix in order. CANOPY_BUILD_DIR picks the build."""
import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import faultlib
from campaign import report, run_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from cluster import Cluster  # noqa: E402

HOSTS, PPN, FANOUT = 4, 2, 2
RANKS = HOSTS * PPN
VICTIM = "node3"
VICTIM_RANKS = range(2 * PPN, 3 * PPN)   # the third host's block
HEARTBEAT_BOUND = 3.0
HANG_SECONDS = 60.0
GRACE_SECONDS = 10.0   # for a cut-off host's daemon to notice its parent's silence and clean up

PHASES = ["tree", "mpi_init", "steady", "teardown"]
FAULTS = ["kill_sshd", "kill_host", "link_down", "drop_packets", "stop_host", "slow_host", "shm_full"]
# /dev/shm is filled before the job starts, and MPICH's MPI_Init is what needs it.
ONLY_PHASE = {"shm_full": "mpi_init"}


def matrix():
    return [(fault, phase) for fault in FAULTS for phase in PHASES if ONLY_PHASE.get(fault, phase) == phase]


class Run:
    """One job on fresh hosts, and the fault's undoing once the job has ended."""

    def __init__(self, fault, phase, index):
        self.fault, self.phase = fault, phase
        self.cluster = Cluster(f"campaign-{os.getpid()}-{index}").up(HOSTS, die_with_parent=True)
        self.victim = self.cluster.host(VICTIM)
        self.marks = faultlib.Marks(self.cluster.shared / "marks")
        self.slow = faultlib.SlowCgroup(f"canopy-host-fault-{os.getpid()}-{index}")
        self.stopped = []
        self.filler = None

    def start(self):
        shared = self.cluster.shared
        (shared / "hosts").write_text("".join(f"{host.name}\n" for host in self.cluster.hosts))
        (shared / "canopy.toml").write_text(f"[tree]\nheartbeat_timeout = {HEARTBEAT_BOUND}\n")
        mpich = self.fault == "shm_full"
        if mpich:
            self.filler = self.cluster.fill_shm(VICTIM)
        steady = 0.3 if self.phase == "teardown" else 3 if self.fault == "slow_host" else 30
        program = faultlib.PROGRAMS / ("mpich_phase_rank" if mpich else "phase_rank")
        args = [faultlib.CANOPY, "--config", shared / "canopy.toml", "-f", shared / "hosts", "--fanout", FANOUT,
                "--ppn", PPN, program, self.marks.directory, steady]
        env = {"XDG_CONFIG_HOME": str(shared), "OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_mpi_yield_when_idle": "1"}
        self.job = self.cluster.popen("node1", args, env=env, cwd=shared, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)

    def wait_for_phase(self):
        """Waits until the job is in its phase; False if it ended first."""
        def alive():
            return self.job.poll() is None

        if self.phase == "tree":
            def victim_daemon():
                return any("canopyd" in args for args in self.cluster.processes(self.victim).values())
            return bool(faultlib.wait_until(lambda: not alive() or victim_daemon(), 30, 0.002)) and alive()
        mark, count = {"mpi_init": ("init", RANKS), "steady": ("run", RANKS), "teardown": ("done", 1)}[self.phase]
        reached = faultlib.wait_until(lambda: not alive() or self.marks.count(mark) >= count, 45, 0.005)
        if self.phase == "steady":
            time.sleep(0.3)
        return bool(reached) and alive()

    def inject(self):
        """Delivers the fault; returns what canopy's error line must name (None: nothing, the job should end
        well)."""
        cluster, fault = self.cluster, self.fault
        if fault == "kill_sshd":
            for pid, args in cluster.processes(self.victim).items():
                if args.startswith("sshd:"):
                    os.kill(pid, signal.SIGKILL)
        elif fault == "kill_host":
            cluster.kill_host(VICTIM)
        elif fault == "link_down":
            cluster.set_link(VICTIM, up=False)
        elif fault == "drop_packets":
            cluster.drop_packets(VICTIM, 100)
        elif fault == "stop_host":
            self.stopped = list(cluster.processes(self.victim))
            for pid in self.stopped:
                os.kill(pid, signal.SIGSTOP)
        elif fault == "slow_host":
            self.slow.cap(self.victim.init)
            return None
        return VICTIM   # shm_full: it was full from the start

    def undo(self):
        """Puts the host right, so what the job left there can show and be counted."""
        if self.fault == "link_down":
            self.cluster.set_link(VICTIM, up=True)
        elif self.fault == "drop_packets":
            self.cluster.drop_packets(VICTIM, 0)
        for pid in self.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.slow.remove()
        if self.filler:
            self.cluster.run(VICTIM, ["rm", "-f", self.filler], check=True)

    def leftovers(self):
        """{host: {what: detail}} on every host still alive."""
        alive = [host for host in self.cluster.hosts if not (self.fault == "kill_host" and host.name == VICTIM)]
        return {host.name: left for host in alive if (left := self.cluster.leftovers(host))}

    def down(self):
        self.cluster.down()


def expected_exit(fault, code, hit):
    if fault == "slow_host":
        return code == 0
    return code not in (0, None) or (hit == "done" and code == 0)


def run_one(fault, phase, index):
    outcome = faultlib.Outcome(fault, phase)
    run = Run(fault, phase, index)
    try:
        run.start()
        named = None
        if run.wait_for_phase():
            # Where the fault landed: the furthest phase of the victim's ranks, or its daemon still starting.
            outcome.hit = next((phase for phase in ("done", "run", "init") if any(
                (run.marks.directory / f"{phase}.{rank}").exists() for rank in VICTIM_RANKS)), "tree")
            named = run.inject()
        faulted = time.monotonic()
        try:
            _, err = run.job.communicate(timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            outcome.hang = True
            run.job.kill()
            _, err = run.job.communicate()
        outcome.seconds = time.monotonic() - faulted
        outcome.exit_code = run.job.returncode
        outcome.stderr = err.decode(errors="replace")
        outcome.canopy_lines = [line for line in outcome.stderr.splitlines() if line.startswith("canopy: ")]
        if named is not None and outcome.exit_code != 0 and not outcome.hang:
            outcome.named = bool(outcome.canopy_lines) and named in outcome.canopy_lines[0]
        outcome.expected_exit = outcome.hang or expected_exit(fault, outcome.exit_code, outcome.hit)
        run.undo()
        faultlib.wait_until(lambda: not run.leftovers(), GRACE_SECONDS, 0.2)
        for host, items in run.leftovers().items():
            for what, detail in items.items():
                (outcome.orphans if what.startswith("process") else outcome.leftovers).append(
                    f"{host}: {what} {detail}")
    finally:
        run.down()
    return outcome


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=len(matrix()))
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--json", type=Path, help="write every run's outcome here")
    args = parser.parse_args()
    for name, chosen, known in (("fault", args.faults, FAULTS), ("phase", args.phases, PHASES)):
        if unknown := set(chosen.split(",")) - set(known):
            parser.error(f"unknown {name} {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    plan = [(f, p) for f, p in matrix() if f in args.faults.split(",") and p in args.phases.split(",")]
    if not plan:
        sys.exit("host_campaign: no fault applies to the phases chosen")
    if "slow_host" in args.faults and faultlib.SlowCgroup.missing():
        sys.exit(f"host_campaign: slow_host needs a CPU cap: {faultlib.SlowCgroup.missing()}")
    started = time.monotonic()
    outcomes = run_plan(plan, args.runs, run_one)
    sys.exit(report(outcomes, time.monotonic() - started, args.json))


if __name__ == "__main__":
    main()
