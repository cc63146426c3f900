# PID 1 of one test host (or of the cluster's switch): makes the host's own mounts and name, then reaps orphans.
#
# Started by cluster.py as `unshare --pid --fork --kill-child --mount-proc --uts --net --ipc -- python3 hostinit.py
# --marker canopy-test-NAME-HOST ...`; the marker in its command line is how `down --all` finds it. When this
# process dies the kernel kills every process of the host's PID namespace, and with them go its network namespace
# (veth included) and its mount namespace (its tmpfs mounts included): nothing of the host outlives it.
import argparse
import os
import signal
import socket
import subprocess
import sys


def mount(*args):
    subprocess.run(["mount", *args], check=True, timeout=30, stdin=subprocess.DEVNULL)


PRIVATE = ("/tmp", "/dev/shm", "/run")   # each host mounts its own


def make_host(args):
    socket.sethostname(args.hostname)
    # Private mounts: the host's own /tmp, /dev/shm and /run; the run's files over the machine's /etc entries.
    mount("--make-rprivate", "/")
    # What every host must see at the same path (the repository, the build, the run's state) may lie under one of
    # the private directories, as a clone in /tmp does: hold each by a descriptor and bind it back afterwards.
    kept = [(path, os.open(path, os.O_RDONLY | os.O_DIRECTORY)) for path in args.keep
            if any(path == private or path.startswith(private + "/") for private in PRIVATE)]
    mount("-t", "tmpfs", "-o", "mode=1777,size=512m", f"{args.marker}-tmp", "/tmp")
    mount("-t", "tmpfs", "-o", "mode=1777,size=512m", f"{args.marker}-shm", "/dev/shm")
    mount("-t", "tmpfs", "-o", "mode=0755,size=64m", f"{args.marker}-run", "/run")
    for path, fd in kept:
        os.makedirs(path, exist_ok=True)
        # Not canonicalized: mount(8) would resolve the descriptor's link to its path text, now in the new tmpfs.
        mount("--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{fd}", path)
        os.close(fd)
    for source_and_target in args.bind:
        source, target = source_and_target.split(":", 1)
        mount("--bind", source, target)
    os.mkdir("/run/sshd", 0o755)   # sshd's privilege separation directory
    os.mkdir("/run/munge", 0o755)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--marker", required=True)
    parser.add_argument("--hostname")
    parser.add_argument("--bind", action="append", default=[], help="SOURCE:TARGET")
    parser.add_argument("--keep", action="append", default=[], help="a directory every host sees at its own path")
    parser.add_argument("--ready", required=True, help="file written once the host is made")
    args = parser.parse_args()

    if args.hostname:
        make_host(args)
    with open(args.ready + ".part", "w") as f:
        f.write(f"{os.getpid()}\n")
    os.rename(args.ready + ".part", args.ready)

    # PID 1 gets only the signals it handles: SIGTERM (from inside the host or from `down`) ends the host.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    # Orphans become our children when their parent exits (a daemon's first fork, a job's leftovers): reap each as
    # soon as it ends, so no zombie stays on the host.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        signal.sigtimedwait({signal.SIGCHLD}, 5)


if __name__ == "__main__":
    main()
