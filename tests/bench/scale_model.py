#!/usr/bin/python3
# A calibrated model of a launch and a fence: fitted on small simulated jobs, checked at 256-4,096, predicted to 10,624.
"""Fits a launch's and a fence's costs on small simulated jobs, checks them at 256-4,096 nodes, predicts a cluster.

The per-step and per-node costs come from small `canopy --sim-nodes` jobs; the model predicts this machine's wall
time at larger sizes, and launches and fences on a cluster (docs/scale.md, "A calibrated model of a launch").

  measure   small jobs only: a chain (--fanout 1) for each step's latency one level at a time, one level of 32
            for the parent's own CPU per child, `true` at --fit-sizes (in rounds) for CPU per node and its growth
            with N, synthetic fences for the latency per level and the cost per node, entry and byte; writes --fit
  validate  predicts this machine's wall time at --sizes from --fit alone, then runs them (--validate-runs each,
            in rounds, median) and prints predicted against measured with the error; the fence too at --fence-sizes
  predict   launch and fence times for --nodes at each --fanouts x --windows with ssh at the low and the high end
            of the published handshake range and with the local agent, and the fanout and window to use
  all       measure, validate, predict

Usage: /usr/bin/python3 tests/bench/scale_model.py all --json /tmp/scale_model.json
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

import benchlib

# Published cost of one ssh connection that runs a command (`ssh host true`), whole: TCP, key exchange,
# authentication, session, the remote command. Low: OpenSSH 6.6-6.8 between KVM guests on one host, 100 logins in
# 8.9-9.9 s, so 0.09-0.10 s each, and 0.07 s on Ubuntu 12.04 once its per-login motd scripts were removed
# (uninformativ.de/0/phlog/2015/2015-04/2015-04-11-ssh-times.txt). High: Ubuntu 23.04's OpenSSH with the
# post-quantum sntrup761 key exchange, `ssh localhost true` 0.40 s mean over 500 runs with 0.16 s of client CPU;
# 0.25 s and 0.027 s on 22.04 (cpaelzer.github.io/blogs/010-ssh-got-slower/). Both on one host or one hypervisor,
# so with no network round trip worth counting: on a cluster network (microseconds) the handshake is CPU and
# process start on both ends, which is what these measure.
SSH_LOW = {"name": "ssh-low", "handshake": 0.07, "client_cpu": 0.027}
SSH_HIGH = {"name": "ssh-high", "handshake": 0.40, "client_cpu": 0.164}

CHAIN_NODES = 8           # a chain of 8 daemons: 8 levels, one start at a time
WIDE_NODES = 32           # one level of 32 children: what a parent spends on one more
FENCE_FIT_NODES = 64          # the fence's fit: 64 nodes, fanout 32,
FENCE_FIT_FANOUT = 32
FENCE_RANKS = (8, 32)         # 8 and 32 ranks a node: the cost per entry
FENCE_BYTES = (100, 1000)     # 100 and 1000 bytes a rank: the cost per byte
ENTRY_OVERHEAD = 16                      # a key and its framing beside each value, as synthetic_exchange_bench counts


def depth_of(position, fanout):
    """Levels below the launcher of a tree position (lib/tree/topology: position p's parent is (p-1)/k)."""
    depth = 0
    while position > 0:
        position = (position - 1) // fanout
        depth += 1
    return depth


def tree_depth(nodes, fanout):
    return depth_of(nodes, fanout)


def read_trace(path):
    """--trace FILE as {node index: {started, connected, job_received, rank_start, rank_end}} and the launcher's
    steps {name: end}, all in seconds since the launcher started."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    nodes, steps = {}, {}
    for e in events:
        if e["pid"] == 0:
            if e["ph"] == "X":
                steps[e["name"]] = (e["ts"] + e["dur"]) / 1e6
            continue
        node = nodes.setdefault(int(names[e["pid"]][3:]), {})
        if e["ph"] == "i":
            node[e["name"]] = e["ts"] / 1e6
        elif e["ph"] == "X" and e["name"] == "run":
            node["rank_start"], node["rank_end"] = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
    return nodes, steps


def run_canopy(args, nodes, extra, tmp, trace=False):
    """One `canopy --sim-nodes N` run: wall, CPU of all its processes (cgroup), its timing report and trace."""
    timing, trace_path = os.path.join(tmp, "timing.json"), os.path.join(tmp, "trace.json")
    for path in (timing, trace_path):
        if os.path.exists(path):
            os.unlink(path)
    argv = [args.canopy, "--sim-nodes", str(nodes), "--timing=" + timing] + (["--trace", trace_path] if trace else [])
    argv += extra
    r = benchlib.run_once(argv, dict(os.environ), args.timeout, cgroup_cpu=True)
    if r["rc"] != 0:
        raise SystemExit("scale_model.py: %s failed: exit %s: %s" % (
            " ".join(argv), r["rc"], " | ".join(r["stderr_tail"])))
    cpu = r["cgroup_cpu_seconds"] if r["cgroup_cpu_seconds"] is not None else r["cpu_seconds"]
    out = {"nodes": nodes, "argv": " ".join(argv[1:]), "wall": r["seconds"], "cpu": cpu,
           "timing": benchlib.read_timing(timing)}
    if trace:
        out["trace"] = read_trace(trace_path)
    return out


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


# --- measure: the parameters, from small jobs only ---

def measure_chain(args, tmp):
    """Each step's latency, one level at a time: a chain of CHAIN_NODES daemons (fanout 1), one start in flight."""
    samples = {k: [] for k in ("spawn", "auth", "deliver", "rank", "report", "teardown", "exit")}
    for _ in range(args.runs):
        run = run_canopy(args, CHAIN_NODES, ["--fanout", "1", "true"], tmp, trace=True)
        nodes, steps = run["trace"]
        for i in range(1, CHAIN_NODES):
            node, parent = nodes[i], nodes[i - 1]
            samples["spawn"].append(node["started"] - parent["job_received"])
            samples["auth"].append(node["connected"] - node["started"])
            samples["deliver"].append(node["job_received"] - node["connected"])
            samples["rank"].append(node["rank_start"] - node["job_received"])
        last_end = max(n["rank_end"] for n in nodes.values())
        samples["report"].append((steps["ranks_exited"] - last_end) / CHAIN_NODES)
        samples["teardown"].append((steps["teardown_done"] - steps["ranks_exited"]) / CHAIN_NODES)
        samples["exit"].append(run["wall"] - steps["teardown_done"])
    return {k: statistics.median(v) for k, v in samples.items()}


def launcher_cpu(args, nodes):
    """The launcher's own CPU (its main thread, from /proc/PID/schedstat read while it is a zombie, before it is
    reaped) in a job of one level of `nodes` children."""
    argv = [args.canopy, "--sim-nodes", str(nodes), "--fanout", str(nodes), "--window", str(nodes), "true"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    with open("/proc/%d/schedstat" % proc.pid) as f:
        seconds = int(f.read().split()[0]) / 1e9
    if proc.wait() != 0:
        raise SystemExit("scale_model.py: %s failed: exit %d" % (" ".join(argv), proc.returncode))
    return seconds


def measure_issue(args):
    """What a parent spends on one more child (spawning it, letting it in, sending its plan): the launcher's own
    CPU with WIDE_NODES children less with one, per child. Not the spread of the children's starts here, which
    on a few cores is the children's own start-up sharing them."""
    return statistics.median((launcher_cpu(args, WIDE_NODES) - launcher_cpu(args, 1)) / (WIDE_NODES - 1)
                             for _ in range(args.runs))


def solve3(a, b):
    """x with a x = b for a 3 x 3 matrix (Cramer's rule: the stdlib has no linear algebra)."""
    def det(m):
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
    d = det(a)
    out = []
    for k in range(3):
        m = [row[:] for row in a]
        for i in range(3):
            m[i][k] = b[i]
        out.append(det(m) / d)
    return out


def fit_cpu(points):
    """CPU(N) = fixed + per_node N + growth N^2 (each node's CPU grows with the nodes alive on the one kernel),
    fitted as CPU per node (fixed/N + per_node + growth N) by least squares over (N, CPU) points, so that each size
    weighs alike."""
    rows = [(1.0 / n, 1.0, float(n)) for n, _ in points]
    ys = [c / n for n, c in points]
    a = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    b = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(3)]
    fixed, per_node, growth = solve3(a, b)
    return {"fixed": fixed, "per_node": per_node, "growth": growth}


def measure_launches(args, tmp):
    """`true` at each --fit-sizes, --runs times: CPU per node and its growth with N, and the ramp."""
    # in rounds of every size, so that the load of other work on the machine falls on every size alike
    runs = {n: [] for n in args.fit_sizes}
    for _ in range(args.runs):
        for n in args.fit_sizes:
            runs[n].append(run_canopy(args, n, ["true"], tmp))
    sizes = {}
    for n in args.fit_sizes:
        sizes[n] = {"wall": median_of(runs[n], "wall"), "cpu": median_of(runs[n], "cpu"),
                    "walls": [round(r["wall"], 4) for r in runs[n]], "cpus": [round(r["cpu"], 4) for r in runs[n]]}
        print("  fit: %5d nodes: wall %.3f s, CPU %.3f s (%.2f ms a node)" % (
            n, sizes[n]["wall"], sizes[n]["cpu"], 1000 * sizes[n]["cpu"] / n), file=sys.stderr, flush=True)
    cpu = fit_cpu([(n, s["cpu"]) for n, s in sizes.items()])
    # The ramp: what a launch takes beyond its CPU over all the cores (its first level starting one child at a
    # time, its last ranks ending, the teardown), the median over the sizes of more than one level.
    cores = os.cpu_count() or 1
    ramps = [s["wall"] - s["cpu"] / cores for n, s in sizes.items() if n > 32] or [0.0]
    return {"sizes": {str(n): s for n, s in sizes.items()}, "cpu": cpu, "ramp": max(0.0, statistics.median(ramps))}


def fence_run(args, tmp, nodes, fanout, ranks, value_bytes, count=None):
    """The median over `count` (else --runs) runs of a synthetic fence: the last node out less the last node in."""
    spec = "%d:%d:pmix" % (ranks, value_bytes)
    runs = []
    for _ in range(count or args.runs):
        run = run_canopy(args, nodes, ["--fanout", str(fanout), "--synthetic-ranks", spec], tmp)
        phases = run["timing"]["phases"]
        runs.append(phases["synthetic.fence_done"]["max"] - phases["synthetic.fence_entered"]["max"])
    return statistics.median(runs)


def measure_fence(args, tmp, growth):
    """A fence on this machine: its latency per level (a chain), the CPU per entry each node takes in (more ranks
    at one size), per byte (larger values), and per node (what is left, growing with N as a launch's does)."""
    nodes, fanout, (few, many), (small_b, large_b) = FENCE_FIT_NODES, FENCE_FIT_FANOUT, FENCE_RANKS, FENCE_BYTES
    chain = fence_run(args, tmp, CHAIN_NODES, 1, 1, small_b)
    t_few = fence_run(args, tmp, nodes, fanout, few, small_b)
    t_many = fence_run(args, tmp, nodes, fanout, many, small_b)
    t_large = fence_run(args, tmp, nodes, fanout, few, large_b)
    cores = os.cpu_count() or 1

    def entries(ranks):
        return nodes * nodes * ranks      # every node takes in every rank's entry

    # a chain's levels are crossed twice, up and down; this bounds the latency of one level from above, since it
    # also holds each daemon's own work on the fence
    alpha = chain / (2 * CHAIN_NODES)
    per_entry_all = cores * (t_many - t_few) / (entries(many) - entries(few))
    per_byte = max(0.0, cores * (t_large - t_few) / (entries(few) * (large_b - small_b)))
    per_entry = max(0.0, per_entry_all - per_byte * (small_b + ENTRY_OVERHEAD))
    depth = tree_depth(nodes, fanout)
    per_node = (cores * (t_few - 2 * depth * alpha) - entries(few) * per_entry_all) / nodes - growth * nodes
    return {"alpha": alpha, "per_entry": per_entry, "per_byte": per_byte, "per_node": max(0.0, per_node),
            "runs": {"chain of %d, 1 x %d B" % (CHAIN_NODES, small_b): chain,
                     "%d x %d x %d B" % (nodes, few, small_b): t_few, "%d x %d x %d B" % (nodes, many, small_b): t_many,
                     "%d x %d x %d B" % (nodes, few, large_b): t_large}}


def measure(args):
    with tempfile.TemporaryDirectory(prefix="canopy-model-") as tmp:
        print("measuring: a chain of %d, one level of %d, `true` at %s, fences (%d runs each)" % (
            CHAIN_NODES, WIDE_NODES, ",".join(map(str, args.fit_sizes)), args.runs), file=sys.stderr, flush=True)
        fit = {"steps": measure_chain(args, tmp), "issue": measure_issue(args),
               "launch": measure_launches(args, tmp), "cores": os.cpu_count() or 1}
        fit["fence"] = measure_fence(args, tmp, fit["launch"]["cpu"]["growth"])
    return fit


# --- the model ---

def critical_path(nodes, fanout, window, issue, connect, after):
    """When the last node's rank has started: each parent starts its children one after another (`issue` apart),
    at most `window` in flight, a start taking `connect` until the child is in; a child starts its own children
    once in, and its rank `after` later. Follows every position of the k-ary tree (O(nodes))."""
    # A parent's j-th child starts `issue` after the one before, and no sooner than the child j - window is in (its
    # slot of the window is free again): the same offsets for every parent with as many children.
    offsets = {}

    def child_offsets(count):
        if count not in offsets:
            starts = []
            for j in range(count):
                start = (starts[j - 1] if j else 0.0) + issue
                if j >= window:
                    start = max(start, starts[j - window] + connect + issue)
                starts.append(start)
            offsets[count] = [s + connect for s in starts]
        return offsets[count]

    ready = [0.0] * (nodes + 1)          # position 0, the launcher, is ready at 0
    latest = 0.0
    for parent in range(nodes + 1):
        first = parent * fanout + 1
        if first > nodes:
            break
        last = min(first + fanout, nodes + 1)
        for child, offset in zip(range(first, last), child_offsets(last - first)):
            ready[child] = ready[parent] + offset
            latest = max(latest, ready[child] + after)
    return latest


def agent_costs(fit, agent):
    """(cost of starting one more child, time from a child's start until it is in) for an agent."""
    s = fit["steps"]
    local_connect = s["spawn"] + s["auth"]
    if agent is None:
        return fit["issue"], local_connect
    # ssh: the parent forks one ssh client per child as it would canopyd, and the client's handshake runs on the
    # parent's cores; the daemon then starts on its node as here, behind the handshake
    return fit["issue"], agent["handshake"] + local_connect


def exit_path(fit, depth):
    s = fit["steps"]
    return depth * (s["report"] + s["teardown"]) + s["exit"]


def predict_cluster(fit, nodes, fanout, window, agent, node_cores):
    """A cluster: every node has its own CPUs, so a launch is its critical path, level by level."""
    issue, connect = agent_costs(fit, agent)
    if agent is not None:
        # a parent's cores run its window's ssh clients: no faster than client CPU x children / cores
        issue = max(issue, agent["client_cpu"] / node_cores)
    s = fit["steps"]
    depth = tree_depth(nodes, fanout)
    path = critical_path(nodes, fanout, window, issue, connect, s["deliver"] + s["rank"])
    return path + exit_path(fit, depth)


def cpu_seconds(fit, nodes):
    c = fit["launch"]["cpu"]
    return c["fixed"] + c["per_node"] * nodes + c["growth"] * nodes * nodes


def predict_machine(fit, nodes, fanout=32, window=32):
    """This machine: every simulated node shares its cores and kernel, so a launch takes its CPU work over the
    cores plus the ramp at its start and end, and at least its critical path."""
    path = predict_cluster(fit, nodes, fanout, window, None, fit["cores"])
    return max(path, cpu_seconds(fit, nodes) / fit["cores"] + fit["launch"]["ramp"])


def fence_machine(fit, nodes, fanout, ranks, value_bytes):
    """This machine: twice the depth in latency, then every node's work on the fence over the shared cores."""
    f = fit["fence"]
    cpu = nodes * (f["per_node"] + fit["launch"]["cpu"]["growth"] * nodes) + nodes * nodes * ranks * (
        f["per_entry"] + f["per_byte"] * (value_bytes + ENTRY_OVERHEAD))
    return 2 * tree_depth(nodes, fanout) * f["alpha"] + cpu / fit["cores"]


def fence_cluster(fit, nodes, fanout, ranks, value_bytes, link_bytes_per_s, net_latency):
    """A cluster's allgather: twice the depth in per-level latency, each node taking in the whole result on its own
    CPU, and each parent sending it to its children over its one link (chunks pipelined through the levels)."""
    f = fit["fence"]
    result = nodes * ranks * (value_bytes + ENTRY_OVERHEAD)
    depth = tree_depth(nodes, fanout)
    return (2 * depth * (f["alpha"] + net_latency) + f["per_node"] + nodes * ranks * f["per_entry"]
            + result * f["per_byte"] + (min(fanout, nodes) + 1) * result / link_bytes_per_s)


# --- validate and predict ---

def validate(args, fit):
    rows = []
    with tempfile.TemporaryDirectory(prefix="canopy-model-") as tmp:
        runs_of = {n: [] for n in args.sizes}
        for _ in range(args.validate_runs):      # in rounds, as the fit
            for n in args.sizes:
                runs_of[n].append(run_canopy(args, n, ["true"], tmp))
        for n in args.sizes:
            predicted = predict_machine(fit, n)
            runs = runs_of[n]
            measured = median_of(runs, "wall")
            rows.append({"what": "launch `true`", "nodes": n, "predicted": predicted, "measured": measured,
                         "walls": [round(r["wall"], 3) for r in runs], "cpu": median_of(runs, "cpu"),
                         "cpu_predicted": cpu_seconds(fit, n), "error": predicted / measured - 1})
            print("  validate: %5d nodes: predicted %.3f s, measured %.3f s (%+.0f%%)" % (
                n, predicted, measured, 100 * rows[-1]["error"]), file=sys.stderr, flush=True)
        ranks, value_bytes = args.fence_ranks, args.fence_bytes
        for n in args.fence_sizes:
            predicted = fence_machine(fit, n, 32, ranks, value_bytes)
            measured = fence_run(args, tmp, n, 32, ranks, value_bytes, args.validate_runs)
            rows.append({"what": "fence %d x %d B" % (ranks, value_bytes), "nodes": n, "predicted": predicted,
                         "measured": measured, "error": predicted / measured - 1})
            print("  validate: fence at %d nodes: predicted %.4f s, measured %.4f s (%+.0f%%)" % (
                n, predicted, measured, 100 * rows[-1]["error"]), file=sys.stderr, flush=True)
    return rows


def prediction_table(args, fit):
    agents = [SSH_LOW, SSH_HIGH, None]
    rows = []
    for n in args.nodes:
        for fanout in args.fanouts:
            for window in args.windows:
                if window > fanout:
                    continue
                row = {"nodes": n, "fanout": fanout, "window": window, "depth": tree_depth(n, fanout)}
                for agent in agents:
                    row["launch_" + (agent["name"] if agent else "local")] = predict_cluster(
                        fit, n, fanout, window, agent, args.node_cores)
                row["fence"] = fence_cluster(fit, n, fanout, args.fence_ranks, args.fence_bytes,
                                             args.link_gbps * 1e9 / 8, args.net_latency)
                rows.append(row)
    return rows


def recommend(rows, nodes):
    """At `nodes`, the fanout and window whose launch plus one fence (MPI_Init's exchange) is nearest the best one
    at both ends of the ssh range: the least worst ratio to the best, then the least time at the high end."""
    mine = [r for r in rows if r["nodes"] == nodes]
    if not mine:
        return None
    ends = ("launch_ssh-low", "launch_ssh-high")
    least = {key: min(r[key] + r["fence"] for r in mine) for key in ends}
    best = min(mine, key=lambda r: (round(max((r[key] + r["fence"]) / least[key] for key in ends), 2),
                                    r["launch_ssh-high"]))
    default = next((r for r in mine if r["fanout"] == 32 and r["window"] == 32), None)
    return {"best": best, "default": default, "least_with_fence": least}


def print_fit(fit):
    s, c, f = fit["steps"], fit["launch"]["cpu"], fit["fence"]
    rows = [
        ["agent: parent's job to child's `started` (local: fork, exec, ld.so)", "%.2f ms" % (1000 * s["spawn"])],
        ["daemon start to connected and authenticated", "%.2f ms" % (1000 * s["auth"])],
        ["job delivery (connected to job received)", "%.3f ms" % (1000 * s["deliver"])],
        ["rank spawn (job received to the rank's start)", "%.2f ms" % (1000 * s["rank"])],
        ["rank exit reported, per level", "%.3f ms" % (1000 * s["report"])],
        ["teardown, per level", "%.3f ms" % (1000 * s["teardown"])],
        ["launcher exit after teardown", "%.2f ms" % (1000 * s["exit"])],
        ["a parent's own CPU per child (one level of %d)" % WIDE_NODES, "%.3f ms" % (1000 * fit["issue"])],
        ["CPU, fixed per job", "%.1f ms" % (1000 * c["fixed"])],
        ["CPU per node", "%.2f ms" % (1000 * c["per_node"])],
        ["CPU per node, growth per simulated node on the one kernel", "%.3f us" % (1e6 * c["growth"])],
        ["ramp: wall beyond CPU / %d cores (median over the fitted sizes above 32)" % fit["cores"],
         "%.1f ms" % (1000 * fit["launch"]["ramp"])],
        ["fence latency per level, one way (at most)", "%.3f ms" % (1000 * f["alpha"])],
        ["fence CPU per node", "%.3f ms" % (1000 * f["per_node"])],
        ["fence CPU per entry a node takes in", "%.3f us" % (1e6 * f["per_entry"])],
        ["fence CPU per byte a node takes in", "%.2f ns" % (1e9 * f["per_byte"])],
    ]
    benchlib.markdown_table(["parameter", "value"], rows)


def print_validation(rows):
    benchlib.markdown_table(
        ["what", "nodes", "predicted [s]", "measured [s] (median)", "runs [s]", "error"],
        [[r["what"], "%d" % r["nodes"], "%.3f" % r["predicted"], "%.3f" % r["measured"],
          " ".join("%.3f" % w for w in r.get("walls", [])) or "-", "%+.0f%%" % (100 * r["error"])] for r in rows])
    worst = max(abs(r["error"]) for r in rows if r["what"].startswith("launch"))
    print("\nLargest launch error: %.0f%% (the bar: 20%%)." % (100 * worst))


def print_predictions(rows, args):
    benchlib.markdown_table(
        ["nodes", "fanout", "window", "depth", "ssh %.2f s [s]" % SSH_LOW["handshake"],
         "ssh %.2f s [s]" % SSH_HIGH["handshake"], "local agent [s]",
         "fence %d x %d B [s]" % (args.fence_ranks, args.fence_bytes)],
        [["%d" % r["nodes"], "%d" % r["fanout"], "%d" % r["window"], "%d" % r["depth"], "%.2f" % r["launch_ssh-low"],
          "%.2f" % r["launch_ssh-high"], "%.3f" % r["launch_local"], "%.3f" % r["fence"]] for r in rows])


def parse_list(text):
    return [int(x) for x in text.split(",") if x]


def main(argv):
    p = benchlib.arg_parser(__doc__)
    p.add_argument("mode", choices=("measure", "validate", "predict", "all"))
    p.add_argument("--fit", default="scale_model_fit.json", help="the fitted parameters: written by measure, read "
                   "by validate and predict (default ./scale_model_fit.json)")
    p.add_argument("--fit-sizes", type=parse_list, default=[16, 64, 128, 256, 512],
                   help="node counts of the `true` jobs the CPU is fitted on (default 16,64,128,256,512)")
    p.add_argument("--runs", type=int, default=7, help="runs per fitted cell (default 7)")
    p.add_argument("--validate-runs", type=int, default=3, help="runs per validated size (default 3)")
    p.add_argument("--sizes", type=parse_list, default=[256, 1024, 4096], help="sizes to validate (default "
                   "256,1024,4096)")
    p.add_argument("--fence-sizes", type=parse_list, default=[256], help="fence sizes to validate (default 256)")
    p.add_argument("--fence-ranks", type=int, default=8, help="ranks per node in a fence (default 8)")
    p.add_argument("--fence-bytes", type=int, default=100, help="bytes each rank puts (default 100)")
    p.add_argument("--nodes", type=parse_list, default=[64, 256, 1024, 4096, 10624], help="sizes to predict")
    p.add_argument("--fanouts", type=parse_list, default=[8, 16, 32, 64, 128], help="fanouts to predict")
    p.add_argument("--windows", type=parse_list, default=[8, 16, 32, 64, 128], help="windows to predict")
    p.add_argument("--node-cores", type=int, default=64, help="cores of a cluster node, for the ssh clients' CPU")
    p.add_argument("--link-gbps", type=float, default=100.0, help="a cluster node's link, Gb/s (default 100)")
    p.add_argument("--net-latency", type=float, default=20e-6, help="one message's network latency on a cluster, "
                   "s (default 20e-6: TCP across a switch)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a run counts as hung")
    benchlib.add_canopy_option(p)
    benchlib.add_json_option(p, "scale_model.json")
    args = p.parse_args(argv)
    benchlib.check_canopy(p, args, needed=args.mode != "predict")
    report = benchlib.report_header("canopy.scale_model/1", __file__, argv)
    if args.mode in ("measure", "all"):
        fit = measure(args)
        with open(args.fit, "w") as f:
            json.dump(fit, f, indent=2)
    else:
        with open(args.fit) as f:
            fit = json.load(f)
    report["fit"] = fit
    print("## Fitted parameters (this machine, %d cores)\n" % fit["cores"])
    print_fit(fit)
    if args.mode in ("validate", "all"):
        report["validation"] = validate(args, fit)
        print("\n## This machine: predicted from the fit against measured\n")
        print_validation(report["validation"])
    if args.mode in ("predict", "all"):
        rows = prediction_table(args, fit)
        report["prediction"] = rows
        print("\n## This machine: predicted launch of `true`, fanout 32, window 32\n")
        benchlib.markdown_table(["nodes", "CPU [s]", "wall [s]"], [
            ["%d" % n, "%.1f" % cpu_seconds(fit, n), "%.2f" % predict_machine(fit, n)] for n in args.nodes])
        print("\n## A cluster: predicted launch (`true`, start to exit) and fence\n")
        print_predictions(rows, args)
        advice = recommend(rows, max(args.nodes))
        report["recommendation"] = advice
        if advice:
            b, d = advice["best"], advice["default"]
            high, low = b["launch_ssh-high"] + b["fence"], b["launch_ssh-low"] + b["fence"]
            print("\nAt %d nodes, the launch plus one fence nearest the least at both ends of the ssh range: fanout "
                  "%d, window %d: %.2f s with ssh at %.2f s (the least: %.2f s), %.2f s at %.2f s (the least: %.2f s)"
                  % (b["nodes"], b["fanout"], b["window"], high, SSH_HIGH["handshake"],
                     advice["least_with_fence"]["launch_ssh-high"], low, SSH_LOW["handshake"],
                     advice["least_with_fence"]["launch_ssh-low"]) +
                  ("; the default (32, 32): %.2f s and %.2f s." % (
                      d["launch_ssh-high"] + d["fence"], d["launch_ssh-low"] + d["fence"]) if d else "."))
    benchlib.write_report(report, args.json)
    print("\nresults written to %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
