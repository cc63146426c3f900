# A real Slurm on the test hosts: a munge key made for the run, munged and slurmd on every host, slurmctld on node1.
#
# Debian's slurm-wlm 22.05 runs in these namespaces with no cgroup at all: processes are tracked by their parent
# links (proctrack/linuxproc), tasks are not confined (task/none), nothing is accounted. /etc/slurm on every host is
# the run's own directory (bound there by hostinit.py), so salloc, sbatch, srun and scontrol find slurm.conf with no
# SLURM_CONF, in ssh sessions and in canopy's daemons alike.
import os
import time

SLURM_CLUSTER = "canopytest"


def slurm_conf(cluster):
    first = cluster.hosts[0]
    state = cluster.state_dir
    nodes = "".join(f"NodeName={host.name} NodeAddr={host.address} CPUs=2 State=UNKNOWN\n" for host in cluster.hosts)
    return (
        f"# slurm.conf made by tests/cluster for the run {cluster.name}\n"
        f"ClusterName={SLURM_CLUSTER}\n"
        f"SlurmctldHost={first.name}({first.address})\n"
        "SlurmUser=root\n"
        "SlurmdUser=root\n"
        "AuthType=auth/munge\n"
        "CredType=cred/munge\n"
        "SlurmctldPort=6817\n"
        "SlurmdPort=6818\n"
        f"StateSaveLocation={state / 'slurmctld'}\n"
        "SlurmdSpoolDir=/run/slurmd\n"           # each host's own tmpfs
        "SlurmctldPidFile=/run/slurmctld.pid\n"
        "SlurmdPidFile=/run/slurmd.pid\n"
        f"SlurmctldLogFile={state / 'hosts' / first.name / 'slurmctld.log'}\n"
        f"SlurmdLogFile={state / 'hosts' / '%n' / 'slurmd.log'}\n"
        "SlurmctldDebug=info\n"
        "SlurmdDebug=info\n"
        # No cgroups: the hosts share the machine's cgroup tree, which is not theirs to divide.
        "ProctrackType=proctrack/linuxproc\n"
        "TaskPlugin=task/none\n"
        "JobAcctGatherType=jobacct_gather/none\n"
        "AccountingStorageType=accounting_storage/none\n"
        "JobCompType=jobcomp/none\n"
        "SwitchType=switch/none\n"
        "MpiDefault=none\n"
        "SchedulerType=sched/builtin\n"
        "SelectType=select/linear\n"              # whole nodes: salloc -N 4 gets all four
        "ReturnToService=2\n"
        "SlurmctldTimeout=30\n"
        "SlurmdTimeout=30\n"
        "InactiveLimit=0\n"
        "KillWait=5\n"
        "MinJobAge=600\n"                         # finished jobs stay visible to scontrol for the tests
        "Waittime=0\n"
        "PropagateResourceLimits=NONE\n"
        f"{nodes}"
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")


def start_slurm(cluster):
    from cluster import ClusterError

    state = cluster.state_dir
    munge = state / "munge"
    munge.mkdir(mode=0o700)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    (state / "slurmctld").mkdir()
    (state / "etc-slurm" / "slurm.conf").write_text(slurm_conf(cluster))
    for host in cluster.hosts:
        directory = cluster.host_dir(host.name)
        cluster.run(host.name, ["/usr/sbin/munged", f"--key-file={key}", f"--log-file={directory / 'munged.log'}",
                                f"--seed-file={directory / 'munged.seed'}"], timeout=30, check=True)
    cluster.run(cluster.hosts[0].name, ["/usr/sbin/slurmctld"], timeout=30, check=True)
    for host in cluster.hosts:
        cluster.run(host.name, ["/usr/sbin/slurmd"], timeout=30, check=True)

    def idle():
        result = cluster.run(cluster.hosts[0].name, ["sinfo", "-h", "-N", "-o", "%N %T"], timeout=20)
        states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
        return len(states) == len(cluster.hosts) and all(s == "idle" for s in states.values()), states

    deadline = time.monotonic() + 60
    ready, states = idle()
    while not ready and time.monotonic() < deadline:
        time.sleep(0.5)
        ready, states = idle()
    if not ready:
        raise ClusterError(f"Slurm's nodes are not all idle after 60 s: {states}; slurmctld: "
                           f"{cluster._log_tail(cluster.hosts[0], 'slurmctld.log')}")
