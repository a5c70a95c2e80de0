#!/usr/bin/python3
"""A 3-server cluster whose REST and binary listeners all serve TLS with client
certificates required (docs/security.md §TLS, §Between members).

usage: tls_cluster_test.py KVATLAS_SERVER_BINARY TEST_PKI_TOOL

Every server uses the same certificate (issued for 127.0.0.1 by a CA the test makes with
TEST_PKI_TOOL) as its server certificate, as the client certificate of its calls to the
other members, and trusts the CA for both (tls_client_ca, tls_peer_ca). Followers must
announce their addresses to the leader over HTTPS (every member's addresses become known),
and a write sent to a follower must be forwarded to the leader over HTTPS and acknowledged
(X-Kvatlas-Forwarded-From), then be readable on every server. A plaintext request to any
server's REST port is refused with 400. Loopback only, bounded in time, cleaned up.
"""

import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness


class TlsCluster(h.Cluster):
    """h.Cluster with every server on TLS (`cert`, `key`, clients and members from `ca`)."""

    def __init__(self, binary, root, cert, key, ca, n=3):  # noqa: PLR0913
        self.root = root
        ports = h.free_ports(n)
        peers = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
        self.nodes = []
        for i in range(n):
            d = os.path.join(root, f"n{i + 1}")
            os.makedirs(d)
            node = h.Node(binary, i + 1, peers, d)
            node.extra = ["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca,
                          "--tls-peer-ca", ca]
            self.nodes.append(node)
        for node in self.nodes:
            node.start()
            node.base = node.base.replace("http://", "https://")


def main():
    binary, pki_tool = sys.argv[1], sys.argv[2]
    root = tempfile.mkdtemp(prefix="kvatlas-tls-cluster-")
    cluster = None
    try:
        pki = os.path.join(root, "pki")
        subprocess.run([pki_tool, pki], check=True, timeout=60)
        ca = os.path.join(pki, "test-ca.ca.pem")
        cert, key = os.path.join(pki, "server.pem"), os.path.join(pki, "server.key")
        # Every urlopen of the harness goes through HTTPS with the client certificate.
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
        urllib.request.install_opener(
            urllib.request.build_opener(urllib.request.HTTPSHandler(context=context)))
        cluster = TlsCluster(binary, root, cert, key, ca)

        leader = cluster.leader()
        h.wait_addresses_known(cluster)  # the followers' announcements went over HTTPS
        follower = next(n for n in cluster.nodes if n.id != leader.id)
        body = {"events": [{"event_type": "stored", "model_name": "m", "block_size": h.BS,
                            "backend_id": "w", "token_ids": h.prompt(1)}]}
        status, answer, headers = h.request_with_headers(follower, "POST", "/v1/events", body,
                                                         {})
        assert status == 200, (status, answer, follower.log_tail())
        assert headers.get("X-Kvatlas-Forwarded-From") == str(follower.id), headers
        for node in cluster.nodes:
            h.wait_applied(node, answer["revision"])
            assert h.holds(node, 1), f"server {node.id} does not hold the forwarded write"

        # Plaintext on the TLS port: a 400 that says so.
        plain = follower.base.replace("https://", "http://") + "/healthz"
        try:
            with urllib.request.build_opener().open(plain, timeout=5) as resp:
                raise AssertionError(f"plaintext request answered {resp.status}")
        except urllib.error.HTTPError as e:
            assert e.code == 400, e.code
            assert b"HTTPS" in e.read()
        print("tls_cluster_test: ok")
    finally:
        if cluster is not None:
            cluster.cleanup()
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
