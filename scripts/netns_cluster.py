#!/usr/bin/env python3
"""Hosts made of network namespaces on this machine, by hand (needs root).

  scripts/netns_cluster.py demo [--config config/fashion_mnist_mlp.yaml] [--rate 1gbit]
      A job across hosts: servers server0.. and workers worker0.., one
      namespace each, servers named by host name in cluster.servers; every
      ps_server and ps_worker started in its own host with --config and
      --shard/--rank only. Prints the servers' and workers' output until
      the servers exit (once every worker has left), removes the hosts.
  scripts/netns_cluster.py up [--servers 2] [--workers 4] [--rate 1gbit] [--hosts NAME ...]
      Makes the hosts, prints their names and addresses, and keeps them
      until Ctrl-C (or `down`), which kills every process in them and
      removes them.
  scripts/netns_cluster.py exec HOST -- COMMAND ...
      Runs COMMAND in HOST of the cluster `up` holds (its /etc/hosts names
      every host). The cluster kills what is left of it when it goes down.
  scripts/netns_cluster.py partition HOST | heal HOST
      Drops every packet HOST sends or receives, or stops doing so.
  scripts/netns_cluster.py down
      Tells a running `up` to tear its cluster down.
  scripts/netns_cluster.py sweep
      Removes what a killed run left (namespaces and /etc/netns folders of
      processes that no longer run).

The hosts live as long as the process that made them (`up`, `demo`); the
harness is tests/multihost/netns_cluster.py.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "multihost"))
import netns_cluster  # noqa: E402
import ps_job  # noqa: E402

# Where `up` says which cluster it holds, for exec, partition, heal, down.
STATE = "/run/psnet-cli.json"


def host_names(args):
    if args.hosts:
        return args.hosts
    return ([ps_job.server_host(i) for i in range(args.servers)] +
            [ps_job.worker_host(r) for r in range(args.workers)])


def up(args):
    with netns_cluster.Cluster(host_names(args), rate=args.rate) as c:
        with open(STATE, "w") as f:
            json.dump({"pid": os.getpid(), "tag": c.tag, "hosts": c.hosts}, f)
        try:
            print("cluster %s up%s:" % (c.tag, ", links limited to " + args.rate
                                        if args.rate else ""))
            for h in c.hosts:
                print("  %-10s %-14s namespace %s" % (h, c.address(h), c.ns(h)))
            print("run in a host:  %s exec %s -- hostname -i" % (sys.argv[0], c.hosts[0]))
            print("Ctrl-C or `%s down` removes it" % sys.argv[0], flush=True)
            while True:
                time.sleep(3600)
        except (KeyboardInterrupt, netns_cluster.Stopped):
            pass
        finally:
            os.remove(STATE)
            print("cluster %s: removing its hosts" % c.tag, flush=True)
    return 0


def held_cluster():
    """The state `up` wrote; exits when no `up` runs."""
    try:
        with open(STATE) as f:
            state = json.load(f)
    except OSError:
        sys.exit("netns_cluster: no cluster is up (start one with `%s up`)" % sys.argv[0])
    if not netns_cluster.pid_alive(state["pid"]):
        sys.exit("netns_cluster: the `up` of %s (pid %d) no longer runs" %
                 (state["tag"], state["pid"]))
    return state


def namespace_of(state, host):
    if host not in state["hosts"]:
        sys.exit("netns_cluster: no host %r (the cluster has %s)" %
                 (host, ", ".join(state["hosts"])))
    return "%s-%s" % (state["tag"], host)


def exec_in(args):
    ns = namespace_of(held_cluster(), args.host)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        sys.exit("netns_cluster: exec %s: no command" % args.host)
    return subprocess.call(["ip", "netns", "exec", ns] + command)


def partition(args, heal):
    ns = namespace_of(held_cluster(), args.host)
    for rule in netns_cluster.partition_rules():
        netns_cluster.change_rule(ns, rule, not heal,
                                  ("heal " if heal else "partition ") + args.host)
    return 0


def down(_args):
    state = held_cluster()
    os.kill(state["pid"], signal.SIGTERM)
    for _ in range(100):
        if not netns_cluster.pid_alive(state["pid"]):
            return 0
        time.sleep(0.1)
    sys.exit("netns_cluster: the `up` of %s (pid %d) did not stop within 10 s" %
             (state["tag"], state["pid"]))


def sweep(_args):
    for name in netns_cluster.sweep_leftovers():
        print("removed " + name)
    return 0


def demo(args):
    base = ps_job.load_yaml(args.config)
    shards = len(base["cluster"]["servers"])
    workers = args.workers or base["cluster"]["workers"]
    hosts = [ps_job.server_host(i) for i in range(shards)] + \
            [ps_job.worker_host(r) for r in range(workers)]
    out = tempfile.mkdtemp(prefix="ps_netns_demo_")
    train = {"iterations": args.iterations} if args.iterations else {}
    job_file = ps_job.write_yaml(ps_job.job_from(base, ps_job.host_servers(shards), workers,
                                                 train=train),
                                 os.path.join(out, "job.yaml"))
    print("demo: %d server hosts, %d worker hosts%s; job %s, logs in %s" %
          (shards, workers, ", links limited to " + args.rate if args.rate else "", job_file,
           out), flush=True)
    with netns_cluster.Cluster(hosts, rate=args.rate, log_dir=out) as c:
        for h in hosts:
            print("  %-10s %s" % (h, c.address(h)))
        job = ps_job.DistributedJob(c, args.bin, job_file, shards, workers)
        shown = {}

        def print_new_lines():
            for p in c.processes:
                lines = p.output().splitlines()
                for line in lines[shown.get(p, 0):]:
                    print("[%s] %s" % (p.host, line))
                shown[p] = len(lines)

        try:
            job.start()
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                finished = all(p.poll() is not None for p in job.workers.values())
                print_new_lines()
                if finished:
                    break
                time.sleep(0.2)
            codes = job.wait_workers(0)
            server_codes = job.wait_servers()
            print_new_lines()
            job.check(codes, server_codes)
        except (ps_job.JobFailed, RuntimeError) as e:
            print("demo: failed: %s" % e, file=sys.stderr)
            return 1
    print("demo: done; every process exited 0 and the hosts are removed")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("demo", help="a job across hosts, then remove them")
    d.add_argument("--config", default=os.path.join(ROOT, "config", "fashion_mnist_mlp.yaml"))
    d.add_argument("--workers", type=int, help="worker hosts (default: the job's workers)")
    d.add_argument("--iterations", type=int, help="steps per worker (default: the job's)")
    d.add_argument("--rate", help="limit every link (tc rate: 1gbit, 10gbit, ...)")
    d.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    d.add_argument("--timeout", type=float, default=600, help="seconds for the whole job")
    u = sub.add_parser("up", help="make hosts and keep them until Ctrl-C")
    u.add_argument("--servers", type=int, default=2)
    u.add_argument("--workers", type=int, default=4)
    u.add_argument("--hosts", nargs="+", help="these host names instead of server*/worker*")
    u.add_argument("--rate", help="limit every link (tc rate: 1gbit, 10gbit, ...)")
    e = sub.add_parser("exec", help="run a command in a host of the cluster `up` holds")
    e.add_argument("host")
    e.add_argument("command", nargs=argparse.REMAINDER)
    for name in ("partition", "heal"):
        sub.add_parser(name, help=name + " a host").add_argument("host")
    sub.add_parser("down", help="stop the running `up`")
    sub.add_parser("sweep", help="remove what killed runs left")
    args = p.parse_args()
    if args.what not in ("exec",):
        problem = netns_cluster.check_prerequisites()
        if problem:
            sys.exit("netns_cluster: " + problem)
    netns_cluster.handle_signals()
    return {"demo": demo, "up": up, "exec": exec_in, "down": down, "sweep": sweep,
            "partition": lambda a: partition(a, False),
            "heal": lambda a: partition(a, True)}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
