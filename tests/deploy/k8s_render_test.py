#!/usr/bin/python3
"""deploy/k8s renders and agrees with the server (docs/operations.md §Kubernetes).

usage: k8s_render_test.py KVATLAS_SERVER_BINARY

Renders the manifests with `kubectl kustomize deploy/k8s` (offline) and checks their
structure: the image (localhost/kvatlas:<the server's version>, as scripts/image tags it,
run where present), names, ports, probes, the PodDisruptionBudget, volumes, and that what the pods
run agrees with the server's flags — the image's entrypoint (deploy/container/entrypoint.sh)
is run with each pod's environment as the manifest sets it, and the argv it would exec,
with the ConfigMap's JSON as the config, is given to `kvatlas-server --print-config`,
which must accept it; the overlay of several groups (deploy/k8s-groups) likewise, its six
pods all initial voters with 12 groups of 3 replicas. Skips (exit 77) where kubectl is not
installed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "deploy", "k8s")
K8S_GROUPS = os.path.join(ROOT, "deploy", "k8s-groups")  # the overlay of several groups
ENTRYPOINT = os.path.join(ROOT, "deploy", "container", "entrypoint.sh")
NAMESPACE = "kv-test"


def render(path=K8S):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("SKIP: kubectl is not installed (the manifests are rendered with kubectl kustomize)")
        sys.exit(77)
    out = subprocess.run([kubectl, "kustomize", path], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(docs, kind, name=None, prefix=None):
    found = [d for d in docs if d["kind"] == kind and
             (name is None or d["metadata"]["name"] == name) and
             (prefix is None or d["metadata"]["name"].startswith(prefix))]
    assert len(found) == 1, f"expected one {kind} {name or prefix}, found {len(found)}"
    return found[0]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def entrypoint_argv(env, hostname, config_path):
    """The argv the image's entrypoint would exec in pod `hostname` with the manifest's env."""
    run_env = {"PATH": "/usr/bin:/bin", "HOSTNAME": hostname, "KVATLAS_DRY_RUN": "1"}
    for name, value in env.items():
        run_env[name] = value.replace("$(POD_NAMESPACE)", NAMESPACE)
    run_env["KVATLAS_CONFIG"] = config_path
    out = subprocess.run(["/bin/sh", ENTRYPOINT], env=run_env, check=True, capture_output=True,
                         text=True, timeout=10).stdout
    return out.splitlines()


def flag(argv, name):
    """The last value of --name in argv (the server's rule: the last one wins)."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]
    assert values, f"{name} not in {argv}"
    return values[-1]


def main():
    server = os.path.abspath(sys.argv[1])
    docs = render()
    sts = one(docs, "StatefulSet", "kvatlas")
    spec = sts["spec"]
    pod = spec["template"]
    labels = pod["metadata"]["labels"]
    assert spec["replicas"] == 3, spec["replicas"]
    assert spec["podManagementPolicy"] == "Parallel"  # OrderedReady never gets a leader
    assert matches(spec["selector"]["matchLabels"], labels)
    (container,) = pod["spec"]["containers"]
    # The image as scripts/image tags it by default, for this server's version; a local
    # image is run where present.
    version = subprocess.run([server, "--version"], check=True, capture_output=True, text=True,
                             timeout=30).stdout.split()[1]
    assert container["image"] == f"localhost/kvatlas:{version}", container["image"]
    assert container["imagePullPolicy"] in ("IfNotPresent", "Never"), container["imagePullPolicy"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 7070, "rpc": 7071, "raft": 7072}, ports
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    namespace_ref = [e for e in container["env"] if e["name"] == "POD_NAMESPACE"]
    assert namespace_ref[0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert int(env["KVATLAS_RAFT_PORT"]) == ports["raft"]
    assert env["KVATLAS_INITIAL_MEMBERS"] == "3"

    # Probes: readiness /readyz, liveness (and startup) /healthz, on the REST port.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), container["resources"]

    # Non-root, and the image's user.
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001

    # The headless Service names the pods; it must publish them before they are ready.
    peers_svc = one(docs, "Service", spec["serviceName"])
    assert peers_svc["spec"]["clusterIP"] == "None"
    assert peers_svc["spec"]["publishNotReadyAddresses"] is True
    svc_ports = {p["name"]: p for p in peers_svc["spec"]["ports"]}
    assert svc_ports["raft"]["port"] == ports["raft"]
    assert env["KVATLAS_PEER_DOMAIN"] == f"{spec['serviceName']}.$(POD_NAMESPACE).svc.cluster.local"

    # Client and metrics Services select the pods and reach the named ports.
    for name, port in (("kvatlas", "http"), ("kvatlas-rpc", "rpc"), ("kvatlas-metrics", "http")):
        svc = one(docs, "Service", name)
        assert matches(svc["spec"]["selector"], labels), name
        (svc_port,) = svc["spec"]["ports"]
        assert svc_port["targetPort"] == port and svc_port["port"] == ports[port], (name, svc_port)
    for annotated in (one(docs, "Service", "kvatlas-metrics")["metadata"], pod["metadata"]):
        a = annotated["annotations"]
        assert a["prometheus.io/scrape"] == "true"
        assert int(a["prometheus.io/port"]) == ports["http"] and a["prometheus.io/path"] == "/metrics"

    pdb = one(docs, "PodDisruptionBudget", "kvatlas")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert matches(pdb["spec"]["selector"]["matchLabels"], labels)

    # Volumes: the config file, the data dir on the claim, the secrets where the config
    # and the docs say.
    config_map = one(docs, "ConfigMap", prefix="kvatlas-config-")
    config = json.loads(config_map["data"]["kvatlas.json"])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert env["KVATLAS_CONFIG"] == mounts["config"] + "/kvatlas.json"
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data" and "data" not in volumes
    assert config["data_dir"].startswith(mounts["data"] + "/"), (config["data_dir"], mounts)
    assert volumes["cluster-secret"]["secret"]["secretName"] == "kvatlas-cluster"
    assert os.path.dirname(config["cluster_secret_file"]) == mounts["cluster-secret"]
    assert config["cluster_id"]
    # Access control on: the tokens come from the Secret kvatlas-api, which the pods need.
    assert volumes["api-secret"]["secret"] == {"secretName": "kvatlas-api", "defaultMode": 0o400}
    assert mounts["api-secret"] == "/etc/kvatlas/api"
    assert os.path.dirname(config["token_file"]) == mounts["api-secret"], config
    assert not config.get("insecure", False)
    # The server listens on every interface, on the container's ports.
    assert config["http_listen"] == f"0.0.0.0:{ports['http']}"
    assert config["rpc_listen"] == f"0.0.0.0:{ports['rpc']}"

    # What each pod runs: the entrypoint's argv, accepted by the server.
    with tempfile.TemporaryDirectory(prefix="kvatlas-k8s-") as tmp:
        config_path = os.path.join(tmp, "kvatlas.json")
        with open(config_path, "w") as f:
            f.write(config_map["data"]["kvatlas.json"])
        domain = f"{spec['serviceName']}.{NAMESPACE}.svc.cluster.local"
        voters = ",".join(f"{i + 1}@kvatlas-{i}.{domain}:{ports['raft']}" for i in range(3))
        for ordinal in range(5):  # 3 replicas, and the two a scale to 5 adds
            hostname = f"{sts['metadata']['name']}-{ordinal}"
            argv = entrypoint_argv(env, hostname, config_path)
            assert argv[0] == "kvatlas-server"
            assert flag(argv, "--id") == str(ordinal + 1)
            assert flag(argv, "--peers") == voters, argv
            assert flag(argv, "--raft-bind") == f"0.0.0.0:{ports['raft']}"
            own = f"kvatlas-{ordinal}.{domain}:{ports['raft']}"
            if ordinal >= 3:
                assert flag(argv, "--raft-listen") == own
            else:
                assert "--raft-listen" not in argv
            run = subprocess.run([server, *argv[1:], "--print-config"], capture_output=True,
                                 text=True, timeout=30, cwd=tmp)
            assert run.returncode == 0, (hostname, run.stderr)
            effective = json.loads(run.stdout)
            assert effective["id"] == ordinal + 1
            assert effective["peers"] == voters
            assert effective["raft_bind"] == f"0.0.0.0:{ports['raft']}"
            assert effective["data_dir"] == config["data_dir"]
            assert effective["cluster_secret_file"] == config["cluster_secret_file"]
            assert effective["http_listen"] == config["http_listen"]
            assert effective["token_file"] == config["token_file"]
            print(f"{hostname}: id {effective['id']}, raft address {own}: accepted")
    check_groups_overlay(server, config)
    print("PASS k8s_render_test")


def check_groups_overlay(server, base_config):
    """deploy/k8s-groups: the base at 6 servers, all initial voters, with 12 groups of 3
    replicas; every pod's argv accepted by the server with those settings."""
    docs = render(K8S_GROUPS)
    sts = one(docs, "StatefulSet", "kvatlas")
    spec = sts["spec"]
    assert spec["replicas"] == 6, spec["replicas"]
    (container,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["KVATLAS_INITIAL_MEMBERS"] == "6", env
    config_map = one(docs, "ConfigMap", prefix="kvatlas-config-")
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    config = json.loads(config_map["data"]["kvatlas.json"])
    assert config["groups"] == 12 and config["replicas"] == 3, config
    # Otherwise the base's config.
    assert {k: v for k, v in config.items() if k not in ("groups", "replicas")} == base_config
    with tempfile.TemporaryDirectory(prefix="kvatlas-k8s-groups-") as tmp:
        config_path = os.path.join(tmp, "kvatlas.json")
        with open(config_path, "w") as f:
            f.write(config_map["data"]["kvatlas.json"])
        domain = f"{spec['serviceName']}.{NAMESPACE}.svc.cluster.local"
        voters = ",".join(f"{i + 1}@kvatlas-{i}.{domain}:{env['KVATLAS_RAFT_PORT']}"
                          for i in range(6))
        for ordinal in range(6):
            argv = entrypoint_argv(env, f"kvatlas-{ordinal}", config_path)
            assert flag(argv, "--peers") == voters and "--raft-listen" not in argv, argv
            run = subprocess.run([server, *argv[1:], "--print-config"], capture_output=True,
                                 text=True, timeout=30, cwd=tmp)
            assert run.returncode == 0, (ordinal, run.stderr)
            effective = json.loads(run.stdout)
            assert effective["groups"] == 12 and effective["replicas"] == 3, effective
    print("deploy/k8s-groups: 6 initial voters, 12 groups of 3 replicas: accepted")


if __name__ == "__main__":
    main()
