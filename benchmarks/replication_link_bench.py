#!/usr/bin/env python3
"""Replicated pushes over rate-limited links: replication.factor 2 against 1.

  sudo python3 benchmarks/replication_link_bench.py [--quick] [--rounds 5]
      [--rates 1gbit 10gbit none] [--sizes 64K 1M 16M] [--seconds 2]

transport_bench --replication runs the shards, their backups and the client
on threads of one process on loopback, where every byte moved is work for
the same two cores. This puts them on hosts of their own, joined by links
of a given rate, as on a cluster: hosts server0, server1 and worker0
(network namespaces, tests/multihost/netns_cluster.py), every link limited
to the rate both ways by tbf ("none": no limit, the veths only).

Job: 2 shards at server0:7000 and server1:7000; with factor 2 each shard's
backup is on the other server (replication.port_offset 100: shard 0's
backup on server1, shard 1's on server0); asp; one dense table per size
(optimizer add). One worker, `push_latency` in worker0, pushes each table
whole with one push in flight (each half to a shard), for --seconds per
table, and reports the p50, p90 and p99 of the time from push to
acknowledgement (with factor 2: once the shard's backup has it) and MB/s.

Variants, run side by side in each round in an order turned round by
round: factor 1 and factor 2, each with client.push_part_bytes 1 MiB (the
default: a shard's half of a 1 MiB push is one part) and 256 KiB (a shard
forwards a part to its backup while the next is on the way). Reported: per
rate, size and part size, the median over rounds of p50 and MB/s, and the
median of each round's ratio factor 2 / factor 1 (p50: lower is better).

--quick: one round of 0.3 s at 1 Gbit/s and 1 MiB, to check that every
variant runs (ctest replication_link_bench_quick). Needs root (network
namespaces): exit 77 (skipped) without them, 2 on missing binaries, 1 when
a run fails. Every run's job file and logs go under --out.
"""

import argparse
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "multihost"))

import netns_cluster  # noqa: E402
import ps_job  # noqa: E402
from psbench import workloads  # noqa: E402

EXIT_SKIPPED = 77
HOSTS = ["server0", "server1", "worker0"]
PORT = ps_job.SERVER_PORT
PORT_OFFSET = 100
SIZES = {"64K": 64 << 10, "1M": 1 << 20, "16M": 16 << 20}
PARTS = {"1M": 1 << 20, "256K": 256 << 10}
FACTORS = (1, 2)
RUN_TIMEOUT_S = 300
LINE = re.compile(r"^table (\d+) pushes (\d+) bytes (\d+) p50_us ([\d.]+) p90_us ([\d.]+) "
                  r"p99_us ([\d.]+) mb_s ([\d.]+)$", re.M)


def write_job(path, sizes, factor, part_bytes):
    with open(path, "w") as f:
        f.write("cluster: { servers: [\"server0:%d\", \"server1:%d\"], workers: 1, "
                "allow_remote: true }\n" % (PORT, PORT))
        f.write("tables:\n")
        for s in sizes:
            f.write("  - { name: t%s, rows: %d, dim: 1, optimizer: { type: add } }\n" %
                    (s, SIZES[s] // 4))
        f.write("consistency: { mode: asp }\n")
        f.write("client: { push_part_bytes: %d }\n" % part_bytes)
        if factor > 1:
            f.write("replication: { factor: %d, port_offset: %d }\n" % (factor, PORT_OFFSET))
    return path


def run_variant(c, args, sizes, factor, part, tag):
    """{size: (p50_us, p90_us, p99_us, mb_s)} of one run of push_latency
    against servers started for it; RuntimeError when a process fails."""
    job = write_job(os.path.join(args.out, tag + ".yaml"), sizes, factor, PARTS[part])
    server = os.path.join(args.bin, "ps_server")
    started = []

    def spawn(host, extra, name):
        p = c.spawn(host, [server, "--config", job] + extra,
                    log=os.path.join(args.out, "%s-%s.log" % (tag, name)))
        started.append(p)
        return p

    if factor > 1:
        # Shard i's backup on the other server (the ring of cluster.servers).
        for shard in (0, 1):
            spawn("server%d" % (1 - shard), ["--shard", str(shard), "--replica", "1"],
                  "shard%d-backup" % shard)
    primaries = [spawn("server%d" % shard, ["--shard", str(shard)], "shard%d" % shard)
                 for shard in (0, 1)]
    for p in primaries:
        c.wait_for_output(p, ps_job.SERVING, ps_job.SERVE_TIMEOUT_S)
    code, out = c.run("worker0", [os.path.join(args.bin, "push_latency"), "--config", job,
                                  "--seconds", str(args.seconds),
                                  "--warmup", "3" if args.quick else "10",
                                  "--tables"] + [str(t) for t in range(len(sizes))],
                      RUN_TIMEOUT_S)
    with open(os.path.join(args.out, tag + "-push_latency.log"), "w") as f:
        f.write(out)
    if code != 0:
        raise RuntimeError("push_latency exited %d:\n%s" % (code, out[-3000:]))
    # The worker left: every server exits on its own (a backup once its
    # primary ended the log).
    codes = c.wait_all(started, ps_job.STOP_TIMEOUT_S)
    bad = [p.describe() for p in started if codes[p] != 0]
    if bad:
        raise RuntimeError("servers did not exit 0: %s\n%s" %
                           (", ".join(bad), "\n".join(p.output()[-1500:] for p in started)))
    result = {}
    for m in LINE.finditer(out):
        result[sizes[int(m.group(1))]] = tuple(float(m.group(k)) for k in (4, 5, 6, 7))
    if len(result) != len(sizes):
        raise RuntimeError("push_latency printed %d of %d tables:\n%s" %
                           (len(result), len(sizes), out[-3000:]))
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="one round of 0.3 s at 1gbit and 1M: checks that every variant runs")
    p.add_argument("--rounds", type=int, default=5, help="rounds of every variant")
    p.add_argument("--rates", nargs="+", default=["1gbit", "10gbit", "none"],
                   help="link rates (tc syntax), none for no limit")
    p.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["64K", "1M", "16M"])
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per table and run")
    for flag, default in (("--bin", "bin"), ("--out", "replication_link_bench")):
        p.add_argument(flag, default=os.path.join(workloads.ROOT, "build", default))
    args = p.parse_args()
    if args.quick:
        args.rounds, args.rates, args.sizes, args.seconds = 1, ["1gbit"], ["1M"], 0.3
    if not 1 <= args.rounds <= 50:
        p.error("--rounds: expected 1..50")
    for rate in args.rates:
        if rate != "none":
            try:
                netns_cluster.parse_rate(rate)
            except ValueError as e:
                p.error("--rates %s: %s" % (rate, e))
    args.bin = os.path.abspath(args.bin)
    args.out = os.path.abspath(args.out)
    for b in ("ps_server", "push_latency"):
        if not os.access(os.path.join(args.bin, b), os.X_OK):
            print("replication_link_bench: %s not found in %s; build first (./ps build) or "
                  "pass --bin" % (b, args.bin), file=sys.stderr)
            return 2
    problem = netns_cluster.check_prerequisites()
    if problem is not None:
        print("replication_link_bench: skipped: " + problem, file=sys.stderr)
        return EXIT_SKIPPED
    os.makedirs(args.out, exist_ok=True)
    netns_cluster.handle_signals()

    variants = [(f, part) for part in PARTS for f in FACTORS]
    runs = {}  # (rate, factor, part) -> [result per round]
    failed = 0
    with netns_cluster.Cluster(HOSTS, log_dir=args.out) as c:
        for rate in args.rates:
            for h in HOSTS:
                c.set_rate(h, None if rate == "none" else rate)
            for rnd in range(args.rounds):
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                for factor, part in order:
                    tag = "%s-f%d-p%s-r%d" % (rate, factor, part, rnd)
                    try:
                        r = run_variant(c, args, args.sizes, factor, part, tag)
                    except RuntimeError as e:
                        failed += 1
                        print("%s: failed: %s" % (tag, e), file=sys.stderr, flush=True)
                        continue
                    runs.setdefault((rate, factor, part), []).append(r)
                    print("%s: %s" % (tag, ", ".join("%s p50 %.0f us %.0f MB/s" %
                                                     (s, v[0], v[3]) for s, v in r.items())),
                          file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"%s f%d p%s" % k: v for k, v in runs.items()}, f, indent=1)

    print("| link | size | part | factor 2 p50 us | factor 1 p50 us | p50 ratio | "
          "factor 2 p99 us | factor 1 p99 us | factor 2 MB/s | factor 1 MB/s | MB/s ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rate in args.rates:
        for size in args.sizes:
            for part in PARTS:
                one, two = runs.get((rate, 1, part), []), runs.get((rate, 2, part), [])
                n = min(len(one), len(two))
                if n == 0:
                    continue

                def med(rs, k):
                    return statistics.median(r[size][k] for r in rs)

                p50_ratio = statistics.median(two[i][size][0] / one[i][size][0]
                                              for i in range(n))
                mb_ratio = statistics.median(two[i][size][3] / one[i][size][3]
                                             for i in range(n))
                print("| %s | %s | %s | %.0f | %.0f | %.2fx | %.0f | %.0f | %.0f | %.0f | %.2fx |" %
                      (rate, size, part, med(two, 0), med(one, 0), p50_ratio, med(two, 2),
                       med(one, 2), med(two, 3), med(one, 3), mb_ratio))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
