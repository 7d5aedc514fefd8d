#!/usr/bin/env python3
"""The dependency rule of the source tree, checked on every include.

    proto <- common <- {store, client} <- {server, worker} <- tools
                               client <- python
    (python/checkpoint.cc alone also reads checkpoints: server/checkpoint_arrays.h)

A library includes only its own headers and those of the layers it stands
on (store and client do not include each other, nor do server and worker);
ps_ctl includes only the client library and common. Each third-party
library with an adapter is included by that adapter alone (zmq.h,
rocksdb/*, yaml-cpp/*, the generated ps.pb.h, CUDA's headers, httplib.h, xxhash.h,
nlohmann/*). A folder does not name what a layer above it owns: common
knows that the job file has a train section but nothing of its schema
(worker/train_options.h). The programs' ELF files are checked too:
ps_worker and ps_ctl do not load RocksDB, ps_ctl and ps_server no BLAS and
no CUDA library, ps_launch no RocksDB.

    tests/dependency_rule_test.py SOURCE_DIR [BIN_DIR]

Exits 0 when the tree keeps the rule; otherwise prints each violation as
"file:line: what (the rule)" and exits 1. Before checking the tree it checks
itself: a forbidden include planted in a scratch tree must be reported.
"""

import os
import re
import subprocess
import sys
import tempfile

# Each library folder and the folders its files may include from.
LAYERS = {
    "proto": set(),
    "common": {"proto"},
    "store": {"common"},
    "client": {"common"},
    "server": {"common", "store"},
    "worker": {"common", "store", "client"},
    "tools": {"common", "store", "client", "server", "worker"},
    # The Python module: a worker over the client, beside ps_worker.
    "python": {"common", "client"},
}
# Files held to a narrower rule than their folder's.
# An entry is a layer or one header (ps_ctl's own status code, which stays
# within common and client so that ps_ctl links nothing else).
FILE_RULES = {
    # read_checkpoint: the server's checkpoint reader, as `ps_ctl export`'s.
    "python/checkpoint.cc": {"common", "client", "python", "server/checkpoint_arrays.h"},
    "tools/ps_ctl.cc": {"common", "client", "tools/ctl_status.h", "tools/ctl_reshard.h"},
    "tools/ctl_reshard.h": {"common", "client"},
    "tools/ctl_reshard.cc": {"common", "client", "tools/ctl_reshard.h", "tools/reshard_plan.h"},
    "tools/reshard_plan.h": {"common"},
    "tools/reshard_plan.cc": {"common", "tools/reshard_plan.h"},
    "tools/ctl_status.h": {"common", "client"},
    "tools/ctl_status.cc": {"common", "client", "tools/ctl_status.h", "tools/tcp_probe.h"},
    "tools/tcp_probe.h": {"common", "client"},
    "tools/tcp_probe.cc": {"common", "client", "tools/tcp_probe.h"},
}
# Third-party headers (by pattern) and the only files that may include them.
ADAPTERS = [
    (re.compile(r"^zmq\.h(pp)?$"), {"common/transport.cc"}),
    # RocksDB: checkpoint generations, written and read (checkpoint_db.cc) and
    # read with a delta's chain (checkpoint_chain.cc), and the header the two
    # share, which no other file includes.
    (re.compile(r"^rocksdb/"), {"server/checkpoint_db.cc", "server/checkpoint_chain.cc",
                                 "server/checkpoint_rocksdb.h"}),
    (re.compile(r"^server/checkpoint_rocksdb\.h$"), {"server/checkpoint_db.cc",
                                                     "server/checkpoint_chain.cc"}),
    (re.compile(r"^yaml-cpp/"), {"common/yaml_tree.cc"}),
    (re.compile(r"(^|/)ps\.pb\.h$"), {"common/wire.cc"}),
    (re.compile(r"^(cublas.*|cuda_runtime.*|cuda\.h)$"), {"worker/cuda/cuda_backend.cu"}),
    # cpp-httplib: etcd's HTTP client, and the metrics' HTTP server.
    (re.compile(r"^httplib\.h$"), {"server/etcd_client.cc", "common/metrics_endpoint.cc"}),
    # nlohmann/json: etcd's gateway replies, and a shard's STATS report.
    (re.compile(r"^nlohmann/"), {"server/etcd_client.cc", "common/shard_stats_json.cc"}),
    # xxHash: the slot hash of hash-keyed tables.
    (re.compile(r"^xxhash\.h$"), {"common/hash_slots.cc"}),
    # pybind11 and Python's C API: the Python module alone.
    (re.compile(r"^(pybind11/|Python\.h$)"), {"python/module.cc", "python/worker.h",
                                               "python/worker.cc", "python/arrays.h",
                                               "python/arrays.cc", "python/checkpoint.h",
                                               "python/checkpoint.cc"}),
]
# Names a folder's files must not use, in code or comments: what a layer
# above it owns. (pattern, what it names)
FORBIDDEN_NAMES = {
    "common": [(re.compile(r"\bTrain[A-Z]\w*|\bValidateTrain\b|\btrain\.[a-z_]+|"
                           r"\b(batch_size|samples_per_worker|metrics_csv)\b"),
                "the train section's schema, which the worker owns (worker/train_options.h)")],
}
# Shared libraries a program must not load (a prefix of the DT_NEEDED name).
FORBIDDEN_LIBS = {
    "ps_worker": ["librocksdb"],
    "ps_ctl": ["librocksdb", "libopenblas", "libblas", "libcublas", "libcudart"],
    "ps_server": ["libopenblas", "libblas", "libcublas", "libcudart"],
    # The launcher reads checkpoint folder names only (ps_checkpoint_layout).
    "ps_launch": ["librocksdb"],
}
SOURCE_EXTENSIONS = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def rule_text(rel, allowed):
    who = rel if rel in FILE_RULES else rel.split("/", 1)[0] + "/"
    return "%s may include only %s" % (
        who, ", ".join(f if "." in f else f + "/" for f in sorted(allowed)))


def check_includes(root):
    """Every violation of the include and name rules under root, as text lines."""
    problems = []
    for layer in sorted(LAYERS):
        top = os.path.join(root, layer)
        for folder, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXTENSIONS):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                allowed = FILE_RULES.get(rel, LAYERS[layer] | {layer})
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        for pattern, what in FORBIDDEN_NAMES.get(layer, []):
                            name = pattern.search(line)
                            if name:
                                problems.append("%s:%d: names %s: %s" %
                                                (rel, number, name.group(0), what))
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(2)
                        for pattern, owners in ADAPTERS:
                            if pattern.search(target) and rel not in owners:
                                problems.append(
                                    "%s:%d: includes %s, which only %s may include (one adapter "
                                    "per dependency)" % (rel, number, target,
                                                         ", ".join(sorted(owners))))
                        if m.group(1) != '"' or "/" not in target:
                            continue
                        first = target.split("/", 1)[0]
                        if first in LAYERS and first not in allowed and target not in allowed:
                            problems.append("%s:%d: includes %s (%s)" %
                                            (rel, number, target, rule_text(rel, allowed)))
    return problems


def needed_libraries(program):
    out = subprocess.run(["readelf", "-d", program], check=True, capture_output=True,
                         text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def check_programs(bin_dir):
    problems = []
    for program, forbidden in sorted(FORBIDDEN_LIBS.items()):
        path = os.path.join(bin_dir, program)
        if not os.path.exists(path):
            problems.append("%s: not built (build the tree before this test)" % path)
            continue
        for lib in needed_libraries(path):
            if any(lib.startswith(f) for f in forbidden):
                problems.append("%s: loads %s, which %s must not link" % (path, lib, program))
    return problems


def self_test():
    """The checker must see a planted forbidden include and a planted adapter include."""
    with tempfile.TemporaryDirectory() as scratch:
        for layer in LAYERS:
            os.makedirs(os.path.join(scratch, layer))
        with open(os.path.join(scratch, "store", "x.cc"), "w") as f:
            f.write('#include "store/x.h"\n#include "client/client.h"\n#include <zmq.h>\n')
        with open(os.path.join(scratch, "worker", "y.cc"), "w") as f:
            f.write('#include "client/client.h"\n#include "server/shard_server.h"\n')
        with open(os.path.join(scratch, "tools", "ps_ctl.cc"), "w") as f:
            f.write('#include "client/client.h"\n#include "worker/backend.h"\n')
        with open(os.path.join(scratch, "common", "z.h"), "w") as f:
            f.write('// A job has a "train" section.\nstruct TrainOptions;\n')
        found = check_includes(scratch)
        wanted = ["store/x.cc:2: includes client/client.h", "store/x.cc:3: includes zmq.h",
                  "worker/y.cc:2: includes server/shard_server.h",
                  "tools/ps_ctl.cc:2: includes worker/backend.h",
                  "common/z.h:2: names TrainOptions"]
        missing = [w for w in wanted if not any(p.startswith(w) for p in found)]
        if missing or len(found) != len(wanted):
            print("dependency_rule_test: the checker itself is wrong: planted %s, reported %s" %
                  (wanted, found))
            return False
    return True


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 2
    if not self_test():
        return 1
    root = sys.argv[1]
    problems = check_includes(root)
    if len(sys.argv) == 3:
        problems += check_programs(sys.argv[2])
    for p in problems:
        print(p)
    if problems:
        print("dependency_rule_test: %d violation(s) of the dependency rule "
              "(docs/ARCHITECTURE.md, 'Modules')" % len(problems))
        return 1
    print("dependency_rule_test: every include, name and program keeps the dependency rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
