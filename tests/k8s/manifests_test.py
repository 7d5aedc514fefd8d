#!/usr/bin/env python3
"""The Kubernetes manifests of deploy/k8s, checked offline.

    tests/k8s/manifests_test.py SOURCE_DIR BIN_DIR

No cluster and no kubectl: every manifest is read with PyYAML and held to
what the API server and the job need, and the job file in the ConfigMap and
each container's command are run through the real binaries' --check, with
the environment and host name the pod would have:

  - every file parses; the kinds and apiVersions are the expected ones
    (a ConfigMap, a headless Service, an Indexed Job of servers and one of
    workers);
  - the cross references hold: the Service's name is the servers' pod
    subdomain and its selector picks the server pods (and not the workers);
    cluster.servers[i] is "<servers' Job>-<i>.<Service>:<port>"; the
    servers' completions and parallelism are len(cluster.servers), the
    workers' are cluster.workers; the port is the containerPort, the
    Service's target and the readiness probe's; every --config a container
    reads is where the ConfigMap's key is mounted;
  - ps_server --check and ps_worker --check accept the job file, and each
    container's command, for each index k of its Job (JOB_COMPLETION_INDEX=k,
    host name "<Job>-<k>"), resolves shard or rank k;
  - every sh -c script of a container parses (sh -n);
  - the Dockerfile builds FROM debian:12 with scripts/setup.sh and ./ps build
    and puts the build's bin folder on PATH.

Before the real manifests it checks broken copies of them: each must be
refused with the problem it plants, so a check that cannot fail is caught.
Exits 0 when every check holds; otherwise prints each problem and exits 1.
"""

import copy
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX")
PS_PROGRAMS = ("ps_server", "ps_worker")


class Manifests:
    """The objects of a deploy/k8s folder, found by kind and role."""

    def __init__(self, folder, problems):
        self.folder = folder
        self.objects = []  # (file name, object)
        for name in sorted(os.listdir(folder)):
            if not name.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(folder, name)
            try:
                with open(path) as f:
                    docs = [d for d in yaml.safe_load_all(f) if d is not None]
            except yaml.YAMLError as e:
                problems.append(f"{name}: does not parse as YAML: {e}")
                continue
            for doc in docs:
                if not isinstance(doc, dict):
                    problems.append(f"{name}: a document that is not a map")
                    continue
                self.objects.append((name, doc))

    def of_kind(self, kind):
        return [(f, o) for f, o in self.objects if o.get("kind") == kind]


def where(file_name, obj):
    return f"{file_name}: {obj.get('kind')} {obj.get('metadata', {}).get('name')!r}"


def containers_of(obj):
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("initContainers", []) + spec.get("containers", [])


def job_program(obj):
    """ps_server or ps_worker: what a Job's main container runs."""
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    for c in spec.get("containers", []):
        command = c.get("command", [])
        if command and posixpath.basename(command[0]) in PS_PROGRAMS:
            return posixpath.basename(command[0])
    return None


def named_port(container, port):
    """A port by number or by the container's name for it."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def config_paths(container):
    """Every path a container passes as --config, in its args or a script."""
    words = container.get("command", []) + container.get("args", [])
    paths = []
    for i, word in enumerate(words):
        if word == "--config" and i + 1 < len(words):
            paths.append(words[i + 1])
        elif word.startswith("--config="):
            paths.append(word.split("=", 1)[1])
        elif "\n" in word or " " in word:
            paths += re.findall(r"--config[= ]+([^\s;&|]+)", word)
    return paths


def mounted_config(obj, container, path, configmap_name, key):
    """None when `path` is the ConfigMap's `key` as the pod mounts it."""
    volumes = {v.get("name"): v for v in
               obj["spec"]["template"]["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount.get("name"), {})
        source = volume.get("configMap")
        if source is None:
            continue
        mount_path = mount.get("mountPath", "")
        if mount.get("subPath"):
            file_in_volume = mount["subPath"] if mount_path == path else None
        elif posixpath.dirname(path) == mount_path.rstrip("/"):
            file_in_volume = posixpath.basename(path)
        else:
            file_in_volume = None
        if file_in_volume is None:
            continue
        if source.get("name") != configmap_name:
            return (f"{path} is mounted from ConfigMap {source.get('name')!r}, not "
                    f"{configmap_name!r}")
        items = source.get("items")
        if items is None:
            found_key = file_in_volume
        else:
            found_key = next((i.get("key") for i in items if i.get("path") == file_in_volume),
                             None)
        if found_key != key:
            return (f"{path} is key {found_key!r} of ConfigMap {configmap_name!r}, not the job "
                    f"file's key {key!r}")
        return None
    return f"--config {path}, but no volumeMount puts ConfigMap {configmap_name!r} there"


class Checker:
    def __init__(self, folder, bin_dir, scratch):
        self.folder = folder
        self.bin_dir = bin_dir
        self.scratch = scratch
        self.problems = []

    def problem(self, text):
        self.problems.append(text)

    def expect(self, condition, text):
        if not condition:
            self.problem(text)
        return condition

    def run(self):
        m = Manifests(self.folder, self.problems)
        kinds = sorted((o.get("apiVersion"), o.get("kind")) for _, o in m.objects)
        expected = sorted([("v1", "ConfigMap"), ("v1", "Service"), ("batch/v1", "Job"),
                           ("batch/v1", "Job")])
        if not self.expect(kinds == expected,
                           f"expected the objects {expected} (apiVersion, kind), found {kinds}"):
            return self.problems
        for f, o in m.objects:
            self.expect(o.get("metadata", {}).get("name"), f"{where(f, o)}: no metadata.name")

        (cm_file, configmap), = m.of_kind("ConfigMap")
        (svc_file, service), = m.of_kind("Service")
        jobs = {job_program(o): (f, o) for f, o in m.of_kind("Job")}
        if not self.expect(set(jobs) == set(PS_PROGRAMS),
                           "expected one Job running ps_server and one running ps_worker "
                           f"(container command), found {sorted(map(str, jobs))}"):
            return self.problems
        job_file, job = self.job_file(cm_file, configmap)
        if job is None:
            return self.problems
        self.check_service(svc_file, service, jobs)
        self.check_servers(jobs["ps_server"], service, job)
        self.check_workers(jobs["ps_worker"], job)
        for program, (f, o) in jobs.items():
            self.check_pods(f, o, configmap, job_file)
        self.check_dockerfile(jobs)
        return self.problems

    def job_file(self, cm_file, configmap):
        data = configmap.get("data", {})
        keys = [k for k in data if k.endswith((".yaml", ".yml"))]
        if not self.expect(len(keys) == 1, f"{where(cm_file, configmap)}: expected one job "
                           f"file key (*.yaml) in data, found {keys}"):
            return None, None
        key = keys[0]
        try:
            job = yaml.safe_load(data[key])
        except yaml.YAMLError as e:
            self.problem(f"{where(cm_file, configmap)}: data.{key} does not parse: {e}")
            return None, None
        cluster = job.get("cluster", {}) if isinstance(job, dict) else {}
        if not self.expect(isinstance(cluster.get("servers"), list) and
                           isinstance(cluster.get("workers"), int),
                           f"{where(cm_file, configmap)}: data.{key} has no cluster.servers "
                           "list and cluster.workers count"):
            return None, None
        self.expect(cluster.get("bind") == "all" and cluster.get("allow_remote") is True,
                    f"{where(cm_file, configmap)}: data.{key}: a pod's servers need "
                    f"cluster.bind: all and cluster.allow_remote: true (found bind "
                    f"{cluster.get('bind')!r}, allow_remote {cluster.get('allow_remote')!r})")
        path = os.path.join(self.scratch, key)
        with open(path, "w") as f:
            f.write(data[key])
        # The file itself, whatever the manifests say.
        for program, flag in (("ps_server", "--shard"), ("ps_worker", "--rank")):
            rc, out, err = self.binary(program, ["--config", path, flag, "0", "--check"], {})
            self.expect(rc == 0, f"{where(cm_file, configmap)}: data.{key} is refused by "
                        f"{program} --check (exit {rc}): {err.strip()}")
        self.job_key = key
        self.configmap_name = configmap["metadata"]["name"]
        return path, job

    def check_service(self, f, service, jobs):
        spec = service.get("spec", {})
        w = where(f, service)
        self.expect(spec.get("clusterIP") == "None",
                    f"{w}: must be headless (clusterIP: None): the servers are reached by "
                    "their own pod names")
        self.expect(spec.get("publishNotReadyAddresses") is True,
                    f"{w}: needs publishNotReadyAddresses: true: a server resolves its own "
                    "name before it listens, i.e. before it is ready")
        selector = spec.get("selector") or {}
        for program, (jf, job) in jobs.items():
            labels = job["spec"]["template"].get("metadata", {}).get("labels", {})
            picks = bool(selector) and all(labels.get(k) == v for k, v in selector.items())
            if program == "ps_server":
                self.expect(picks, f"{w}: selector {selector} does not match the server pods' "
                            f"labels {labels} ({jf})")
            else:
                self.expect(not picks, f"{w}: selector {selector} also picks the worker pods "
                            f"({jf})")

    def check_servers(self, job_entry, service, job):
        f, obj = job_entry
        w = where(f, obj)
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec", {})
        servers = job["cluster"]["servers"]
        self.check_indexed(w, spec, len(servers), "len(cluster.servers)")
        service_name = service["metadata"]["name"]
        self.expect(pod.get("subdomain") == service_name,
                    f"{w}: pod subdomain {pod.get('subdomain')!r} is not the headless Service's "
                    f"name {service_name!r}: the pods' names would not resolve")
        self.expect("hostname" not in pod,
                    f"{w}: sets a pod hostname; an Indexed Job's pod must keep "
                    "\"<Job name>-<index>\", the name cluster.servers gives it")
        container = next(c for c in pod.get("containers", [])
                         if posixpath.basename(c.get("command", [""])[0]) == "ps_server")
        container_ports = [p.get("containerPort") for p in container.get("ports", [])]
        probe_port = named_port(container, container.get("readinessProbe", {})
                                .get("tcpSocket", {}).get("port"))
        self.expect(probe_port is not None, f"{w}: the server container has no tcpSocket "
                    "readinessProbe on its port")
        service_ports = [named_port(container, p.get("targetPort", p.get("port")))
                         for p in service.get("spec", {}).get("ports", [])]
        job_name = obj["metadata"]["name"]
        for i, entry in enumerate(servers):
            host, _, port_text = str(entry).rpartition(":")
            want = f"{job_name}-{i}.{service_name}"
            self.expect(host.lower() == want,
                        f"cluster.servers[{i}] is {entry!r}: its host must be {want!r} (pod "
                        f"{job_name}-{i} of {f} under Service {service_name!r})")
            port = int(port_text) if port_text.isdigit() else None
            self.expect(port in container_ports,
                        f"cluster.servers[{i}] port {port_text} is not a containerPort of the "
                        f"server container ({container_ports}, {f})")
            self.expect(port == probe_port,
                        f"cluster.servers[{i}] port {port_text} is not the readiness probe's "
                        f"({probe_port}, {f})")
            self.expect(port in service_ports,
                        f"cluster.servers[{i}] port {port_text} is not a target port of the "
                        f"Service ({service_ports})")
        for c in pod.get("initContainers", []):
            script = " ".join(c.get("command", []) + c.get("args", []))
            if "getent" in script:
                self.expect(f"$(hostname).{service_name}" in script,
                            f"{w}: init container {c.get('name')!r} waits for a name other "
                            f"than the pod's own \"$(hostname).{service_name}\"")

    def check_workers(self, job_entry, job):
        f, obj = job_entry
        self.check_indexed(where(f, obj), obj.get("spec", {}), job["cluster"]["workers"],
                           "cluster.workers")

    def check_indexed(self, w, spec, want, what):
        self.expect(spec.get("completionMode") == "Indexed",
                    f"{w}: completionMode {spec.get('completionMode')!r}: must be Indexed "
                    "(the index is the shard or rank)")
        for field in ("completions", "parallelism"):
            self.expect(spec.get(field) == want,
                        f"{w}: {field} {spec.get(field)} is not {what} {want} in the ConfigMap")

    def check_pods(self, f, obj, configmap, job_file):
        w = where(f, obj)
        pod = obj["spec"]["template"]["spec"]
        self.expect(pod.get("restartPolicy") in ("Never", "OnFailure"),
                    f"{w}: a Job's pods need restartPolicy Never or OnFailure, found "
                    f"{pod.get('restartPolicy')!r}")
        images = {c.get("image") for c in containers_of(obj)}
        self.expect(len(images) == 1 and None not in images,
                    f"{w}: every container should run the one image, found {images}")
        for c in containers_of(obj):
            cw = f"{w}: container {c.get('name')!r}"
            words = c.get("command", []) + c.get("args", [])
            if words[:2] in (["sh", "-c"], ["bash", "-c"]) and len(words) > 2:
                parsed = subprocess.run([words[0], "-n", "-c", words[2]], capture_output=True,
                                        text=True)
                self.expect(parsed.returncode == 0,
                            f"{cw}: its {words[0]} script does not parse: {parsed.stderr.strip()}")
            for path in config_paths(c):
                trouble = mounted_config(obj, c, path, self.configmap_name, self.job_key)
                self.expect(trouble is None, f"{cw}: {trouble}")
            resources = c.get("resources", {})
            for kind in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    self.expect(r in resources.get(kind, {}), f"{cw}: no resources.{kind}.{r}")
        for c in pod.get("containers", []):
            command = c.get("command", [])
            program = posixpath.basename(command[0]) if command else ""
            if program in PS_PROGRAMS:
                self.check_command(w, obj, c, program, job_file)

    def check_command(self, w, obj, container, program, job_file):
        """The container's own command line, for every index of its Job."""
        args = container.get("command", [])[1:] + container.get("args", [])
        args = [job_file if a in config_paths(container) else a for a in args]
        if "--cpu-threads" in args:
            threads = args[args.index("--cpu-threads") + 1]
            limit = str(container.get("resources", {}).get("limits", {}).get("cpu"))
            self.expect(threads == limit, f"{w}: --cpu-threads {threads} is not the CPU limit "
                        f"{limit}: the BLAS threads would not match the pod's share")
        env = {e["name"]: str(e.get("value", "")) for e in container.get("env", [])
               if "value" in e}
        job_name = obj["metadata"]["name"]
        what = "shard" if program == "ps_server" else "rank"
        for k in range(obj["spec"].get("completions") or 0):
            pod_env = dict(env, JOB_COMPLETION_INDEX=str(k))
            rc, out, err = self.binary(program, args + ["--check"], pod_env,
                                       hostname=f"{job_name}-{k}")
            shown = f"{program} {' '.join(args)} --check in pod {job_name}-{k}"
            if not self.expect(rc == 0, f"{w}: {shown} exited {rc}: {err.strip()}"):
                continue
            self.expect(re.search(rf"\b{what} {k} of \d+ \(from environment variable "
                                  rf"JOB_COMPLETION_INDEX=\"{k}\"\)", out),
                        f"{w}: {shown} does not run {what} {k} from JOB_COMPLETION_INDEX: "
                        f"{out.strip()}")

    def check_dockerfile(self, jobs):
        path = os.path.join(self.folder, "Dockerfile")
        if not self.expect(os.path.exists(path), f"{path}: missing"):
            return
        with open(path) as f:
            lines = [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
        froms = [l.split()[1] for l in lines if l.upper().startswith("FROM ")]
        self.expect(froms[:1] == ["debian:12"],
                    f"Dockerfile: must build FROM debian:12 (the project's platform), found "
                    f"{froms}")
        runs = [l for l in lines if l.upper().startswith("RUN ")]
        self.expect(any("scripts/setup.sh" in r for r in runs),
                    "Dockerfile: no RUN of scripts/setup.sh (the project's setup step)")
        self.expect(any(re.search(r"\./ps build\b", r) for r in runs),
                    "Dockerfile: no RUN of ./ps build (the project's build)")
        workdir = next((l.split()[1] for l in lines if l.upper().startswith("WORKDIR ")), "/")
        paths = [l for l in lines if l.upper().startswith("ENV ") and "PATH" in l]
        self.expect(any(posixpath.join(workdir, "build/bin") in p for p in paths),
                    f"Dockerfile: ENV PATH does not hold {posixpath.join(workdir, 'build/bin')},"
                    " where ./ps build puts ps_server and ps_worker")

    def binary(self, program, args, env, hostname=None):
        child_env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
        child_env.update(env)
        cmd = [os.path.join(self.bin_dir, program)] + args
        prefix = uts_prefix(hostname) if hostname else []
        done = subprocess.run(prefix + cmd, env=child_env, capture_output=True, text=True,
                              timeout=60)
        return done.returncode, done.stdout, done.stderr


_UTS = {}


def uts_prefix(hostname):
    """Runs a command under `hostname` (a UTS namespace), where one can be made."""
    if "prefix" not in _UTS:
        _UTS["prefix"] = []
        unshare = shutil.which("unshare")
        for prefix in ([unshare, "--uts"], [unshare, "--user", "--map-root-user", "--uts"]):
            if unshare is None:
                break
            probe = subprocess.run(prefix + ["sh", "-c", "hostname ps-probe-0 && hostname"],
                                   capture_output=True, text=True)
            if probe.returncode == 0 and probe.stdout.strip() == "ps-probe-0":
                _UTS["prefix"] = prefix
                break
        if not _UTS["prefix"]:
            print("note: no UTS namespace here; the commands run under this host's name")
    if not _UTS["prefix"]:
        return []
    return _UTS["prefix"] + ["sh", "-c", f'hostname {hostname} && exec "$0" "$@"']


# Broken copies of the manifests: (what is planted, file, old, new, a part
# of the problem it must cause).
PLANTED = [
    ("workers' completions off by one", "workers.yaml", "completions: 2", "completions: 3",
     "completions 3 is not cluster.workers 2"),
    ("servers' parallelism off by one", "servers.yaml", "parallelism: 2", "parallelism: 1",
     "parallelism 1 is not len(cluster.servers) 2"),
    ("Service renamed", "service.yaml", "name: ps-server\n", "name: ps-servers\n",
     "is not the headless Service's name 'ps-servers'"),
    ("container port moved", "servers.yaml", "containerPort: 7000", "containerPort: 7001",
     "port 7000 is not a containerPort"),
    ("ConfigMap mounted elsewhere", "workers.yaml", "mountPath: /etc/ps\n",
     "mountPath: /etc/ps-job\n", "no volumeMount puts ConfigMap 'ps-job' there"),
    ("selector misses the servers", "service.yaml", "    app.kubernetes.io/component: server\n"
     "  ports:", "    app.kubernetes.io/component: serve\n  ports:",
     "does not match the server pods' labels"),
    ("job file the servers refuse", "configmap.yaml", "allow_remote: true", "allow_remote: false",
     "refused by ps_server --check"),
    ("rank from a flag, not the index", "workers.yaml", '"--cpu-threads", "2"]',
     '"--cpu-threads", "2", "--rank", "0"]', "does not run rank 1 from JOB_COMPLETION_INDEX"),
    ("init script that does not parse", "servers.yaml", "                sleep 1\n              done",
     "                sleep 1\n              don", "its sh script does not parse"),
    ("Dockerfile on another base", "Dockerfile", "FROM debian:12", "FROM debian:11",
     "must build FROM debian:12"),
    ("manifest that does not parse", "service.yaml", "clusterIP: None", "clusterIP: [None",
     "service.yaml: does not parse"),
]


def check_planted(source_dir, bin_dir, scratch):
    """Each planted break must be reported; returns what was not."""
    missed = []
    for what, name, old, new, expected in PLANTED:
        copy_dir = os.path.join(scratch, "planted")
        shutil.rmtree(copy_dir, ignore_errors=True)
        shutil.copytree(os.path.join(source_dir, "deploy", "k8s"), copy_dir)
        path = os.path.join(copy_dir, name)
        with open(path) as f:
            text = f.read()
        if old not in text:
            missed.append(f"planted {what}: {name} no longer holds {old!r}; update PLANTED")
            continue
        with open(path, "w") as f:
            f.write(text.replace(old, new, 1))
        problems = Checker(copy_dir, bin_dir, scratch).run()
        if not any(expected in p for p in problems):
            missed.append(f"planted {what} ({name}: {old!r} -> {new!r}) was not reported as "
                          f"{expected!r}; reported: {problems}")
    return missed


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source_dir, bin_dir = sys.argv[1], sys.argv[2]
    for program in PS_PROGRAMS:
        if not os.access(os.path.join(bin_dir, program), os.X_OK):
            sys.exit(f"{bin_dir}/{program} is not built")
    with tempfile.TemporaryDirectory(prefix="ps_k8s_test_") as scratch:
        missed = check_planted(source_dir, bin_dir, scratch)
        for m in missed:
            print(f"self-check: {m}")
        problems = Checker(os.path.join(source_dir, "deploy", "k8s"), bin_dir, scratch).run()
    for p in problems:
        print(f"deploy/k8s: {p}")
    if missed or problems:
        return 1
    print(f"deploy/k8s: every check holds ({len(PLANTED)} planted breaks were each reported)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
