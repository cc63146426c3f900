#!/usr/bin/python3
# Fence benchmark: time of a whole-job PMIx fence collecting 1 KiB per rank under canopy, and tree messages per daemon.
"""Runs tests/bench/fence_client.c under `canopy --sim-nodes N` (1 rank per node): every rank puts BYTES
(default 1 KiB) with PMIx_Put + PMIx_Commit, does one warm-up fence and K timed whole-job fences with
PMIX_COLLECT_DATA, and checks it can PMIx_Get the next rank's value; rank 0 prints the mean and median.

Messages: canopy's --timing JSON has the phase daemon.tree_messages, the number of fence and routed-request
frames each daemon received plus sent over the whole job. The job runs K+1 fences (PMIx_Init and
PMIx_Finalize do none, and the Get is answered from the collected data); the script divides by K+1, and also
runs the client once with K=0 (one fence) per node count so the per-fence figure can be taken as
(messages(K) - messages(0)) / K, free of anything that is not a fence. A daemon with c children sends and
receives 2 (c + 1) frames per fence when each blob fits in one frame; blobs over 256 KiB travel in chunks.
"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import benchlib
from benchlib import markdown_table, run_once

SOURCE = os.path.join(benchlib.HERE, "fence_client.c")
RESULT_RE = re.compile(r"fence_client: (\d+) ranks, (\d+) fences, (\d+) bytes each: mean ([\d.]+) ms "
                       r"median ([\d.]+) ms min ([\d.]+) ms max ([\d.]+) ms; get OK")


def build_client(workdir, args):
    """Compiles fence_client.c against PMIx into workdir; returns its path."""
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "pmix"], capture_output=True, text=True, timeout=30)
    if flags.returncode != 0:
        sys.exit("fence_bench.py: pkg-config pmix failed (%s); install libpmix-dev" % flags.stderr.strip())
    return benchlib.compile_c(args.cc, SOURCE, os.path.join(workdir, "fence_client"), __file__, flags.stdout.split())


def one_job(nodes, fences, client, args, tmp):
    """One canopy job; returns (record, problem)."""
    timing_path = os.path.join(tmp, "timing-%d-%d.json" % (nodes, fences))
    argv = [args.canopy, "--sim-nodes", str(nodes), "--timeout", str(int(args.timeout)), "--timing=" + timing_path]
    if args.fanout:
        argv += ["--fanout", str(args.fanout)]
    argv += [client, str(fences), str(args.bytes)]
    r = run_once(argv, dict(os.environ), args.timeout + 10)
    timing = benchlib.read_timing(timing_path)
    if os.path.exists(timing_path):
        os.unlink(timing_path)
    record = {"argv": " ".join(argv), "seconds": r["seconds"], "rc": r["rc"], "loadavg": benchlib.loadavg()}
    if r["rc"] != 0:
        return record, "exit %s: %s" % (r["rc"], " | ".join(r["stderr_tail"]))
    m = RESULT_RE.search(r["stdout"])
    if not m or int(m.group(1)) != nodes or int(m.group(2)) != fences:
        return record, "no result line for %d ranks, %d fences in: %r" % (nodes, fences, r["stdout"][-300:])
    record.update({"mean_ms": float(m.group(4)), "median_ms": float(m.group(5)), "min_ms": float(m.group(6)),
                   "max_ms": float(m.group(7))})
    messages = timing and timing["phases"].get("daemon.tree_messages")
    if not messages:
        return record, "no daemon.tree_messages phase in canopy's --timing JSON"
    record["messages"] = messages
    record["fanout"], record["tree_depth"] = timing["fanout"], timing["tree_depth"]
    record["fences"] = fences + 1
    return record, None


def bench_nodes(nodes, client, args, tmp):
    entry = {"nodes": nodes, "runs": [], "errors": [], "baseline": None, "background_cpus_before_rounds": []}
    if args.baseline:
        record, problem = one_job(nodes, 0, client, args, tmp)
        if problem:
            entry["errors"].append("baseline (K=0): " + problem)
        else:
            entry["baseline"] = record
        print("  %4d nodes K=0: %s" % (nodes, problem or "%.3f s, messages per daemon median %d max %d" % (
            record["seconds"], record["messages"]["median"], record["messages"]["max"])), file=sys.stderr, flush=True)
    for i in range(args.runs):
        if len(entry["errors"]) >= args.max_failures:
            break
        entry["background_cpus_before_rounds"].append(benchlib.background_load(args))
        record, problem = one_job(nodes, args.fences, client, args, tmp)
        if problem:
            entry["errors"].append(problem)
            print("  %4d nodes run %d: FAILED %s" % (nodes, i + 1, problem), file=sys.stderr, flush=True)
            continue
        entry["runs"].append(record)
        print("  %4d nodes run %d: fence median %.3f ms mean %.3f ms, messages per daemon median %d max %d, "
              "job %.2f s, load %s" % (nodes, i + 1, record["median_ms"], record["mean_ms"],
                                       record["messages"]["median"], record["messages"]["max"], record["seconds"],
                                       " ".join(record["loadavg"])), file=sys.stderr, flush=True)
    if entry["runs"]:
        runs = entry["runs"]
        entry["summary"] = {
            "fence_median_ms": statistics.median(r["median_ms"] for r in runs),
            "fence_mean_ms": statistics.median(r["mean_ms"] for r in runs),
            "fence_min_ms": min(r["min_ms"] for r in runs), "fence_max_ms": max(r["max_ms"] for r in runs),
            "messages_median": statistics.median(r["messages"]["median"] for r in runs),
            "messages_max": statistics.median(r["messages"]["max"] for r in runs),
            "daemons": runs[0]["messages"]["count"], "fanout": runs[0]["fanout"], "tree_depth": runs[0]["tree_depth"],
            "fences_per_job": args.fences + 1, "runs": len(runs)}
        s = entry["summary"]
        s["per_fence_median"] = s["messages_median"] / s["fences_per_job"]
        s["per_fence_max"] = s["messages_max"] / s["fences_per_job"]
        base = entry["baseline"]
        if base and args.fences > 0:
            s["slope_median"] = (s["messages_median"] - base["messages"]["median"]) / args.fences
            s["slope_max"] = (s["messages_max"] - base["messages"]["max"]) / args.fences
    return entry


def size_text(n):
    return "%d B" % n if n < 1024 else "%g KiB" % (n / 1024)


def print_table(results, args, out=sys.stdout):
    header = ["nodes", "fanout, depth", "fence median [ms]", "fence mean [ms]", "collected per fence",
              "messages per daemon per job (median / max)", "per fence (median / max)",
              "per fence from K=0 run (median / max)"]
    rows = []
    for e in results:
        s = e.get("summary")
        if not s:
            rows.append([str(e["nodes"]), "failed"] + [""] * (len(header) - 2))
            continue
        slope = "%.2f / %.2f" % (s["slope_median"], s["slope_max"]) if "slope_median" in s else "-"
        rows.append([str(e["nodes"]), "%d, %d" % (s["fanout"], s["tree_depth"]),
                     "%.2f" % s["fence_median_ms"], "%.2f" % s["fence_mean_ms"],
                     size_text(e["nodes"] * args.bytes),
                     "%.0f / %.0f" % (s["messages_median"], s["messages_max"]),
                     "%.2f / %.2f" % (s["per_fence_median"], s["per_fence_max"]), slope])
    markdown_table(header, rows, out)
    print("%d timed fences with PMIX_COLLECT_DATA after 1 warm-up (%d fences per job), %d bytes per rank, 1 rank "
          "per node;\nmedian over %d run(s) of each run's median / mean fence time on rank 0. Messages: canopy's "
          "daemon.tree_messages\n(frames received + sent per daemon over the job; its median is a sketch quantile, "
          "within 1 %%), divided by the fences per job."
          % (args.fences, args.fences + 1, args.bytes, args.runs), file=out)


def main(argv):
    p = benchlib.arg_parser(__doc__)
    p.add_argument("--nodes", default="16,64,256", help="comma-separated node counts (default 16,64,256)")
    p.add_argument("--fences", type=int, default=50, help="timed fences per job, K (default 50)")
    p.add_argument("--bytes", type=int, default=1024, help="bytes each rank puts (default 1024)")
    p.add_argument("--runs", type=int, default=3, help="jobs per node count (default 3)")
    p.add_argument("--no-baseline", dest="baseline", action="store_false",
                   help="skip the K=0 job per node count that checks how many messages are not fences")
    p.add_argument("--fanout", type=int, default=0, help="canopy --fanout (default: canopy's own, 32)")
    benchlib.add_canopy_option(p)
    p.add_argument("--cc", default="gcc", help="C compiler for fence_client.c (default gcc)")
    benchlib.add_timeout_options(p, 180.0, "job", "stop a node count after this many failures")
    benchlib.add_idle_options(p, 60.0, "job")
    benchlib.add_json_option(p, "fence_bench.json")
    args = p.parse_args(argv)
    nodes_list = [int(x) for x in args.nodes.split(",") if x]
    if args.fences < 1:
        p.error("--fences must be at least 1")
    benchlib.check_canopy(p, args)

    tmp = tempfile.mkdtemp(prefix="canopy-fence-bench-")
    report = {**benchlib.report_header("canopy.fence_bench/1", __file__, argv),
              "fences": args.fences, "bytes": args.bytes, "results": []}
    m = report["machine"]
    benchlib.print_machine(m, [("pmix", "libpmix")])
    try:
        client = build_client(tmp, args)
        for nodes in nodes_list:
            report["results"].append(bench_nodes(nodes, client, args, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    m["loadavg_end"] = benchlib.loadavg()
    benchlib.write_report(report, args.json)

    print()
    print_table(report["results"], args)
    for e in report["results"]:
        for problem in e["errors"]:
            print("%d nodes: failed: %s" % (e["nodes"], problem))
    benchlib.print_load_average(m, report["results"], "job")
    print("results written to %s" % args.json)
    return 0 if all(e.get("summary") for e in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
