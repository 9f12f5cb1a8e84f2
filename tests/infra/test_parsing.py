"""Unit tests: nodes files, `vagrant ssh-config` output, options, grudges, names."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess

import pytest

from core.errors import UserError
from infra import state as st
from infra.cluster import validate_options
from infra.local import PROVIDER as LOCAL
from infra.nodes import Cluster, Node, ProvisionOptions, parse_subnet
from infra.net import grudge_from_components, isolate
from infra.remote import Remote, RemoteError
from infra.ssh import HostSpec, parse_host, parse_nodes_text, parse_ssh_config, pick_address
from infra.zookeeper import parse_mode, ports_in_use

from .conftest import REPO

# --------------------------------------------------------------------------
# Nodes files


def test_nodes_file_forms():
    text = """
    # the test hosts
    n1 10.0.0.11
    n2 admin@10.0.0.12:2222   # another port and user
    10.0.0.13
    db-4 [fd00::4]:22
    web.5 web5.example.org
    """
    nodes = parse_nodes_text(text, "nodes.txt")
    assert nodes == [
        HostSpec("n1", "10.0.0.11"),
        HostSpec("n2", "10.0.0.12", "admin", 2222),
        HostSpec("10.0.0.13", "10.0.0.13"),
        HostSpec("db-4", "fd00::4", None, 22),
        HostSpec("web.5", "web5.example.org"),
    ]


@pytest.mark.parametrize("text, fragment", [
    ("n1 10.0.0.1 extra", "nodes.txt:1: expected `[NAME] [USER@]HOST[:PORT]`"),
    ("n1 10.0.0.1:99999", "nodes.txt:1: bad port '99999'"),
    ("n1 10.0.0.1:ssh", "bad port 'ssh'"),
    ("n1 10.0.0.1\nn1 10.0.0.2", "nodes.txt:2: node 'n1' appears twice"),
    ("a 10.0.0.1\nb 10.0.0.1", "nodes.txt:2: host 10.0.0.1 appears twice"),
    ("# only a comment\n\n", "nodes.txt: no nodes in it"),
    ("n1 bad!host", "bad host 'bad!host'"),
    ("n1 b@d@10.0.0.1", "bad user"),
    ("n1 [fd00::1", "unclosed ["),
    ("n1 [nothex]:22", "bad IPv6 address"),
    ("bad/name 10.0.0.1", "bad node name 'bad/name'"),
])
def test_nodes_file_errors_name_file_and_line(text, fragment):
    with pytest.raises(UserError) as e:
        parse_nodes_text(text, "nodes.txt")
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_parse_host_defaults():
    assert parse_host("h") == HostSpec("h", "h")
    assert parse_host("u@h:2") == HostSpec("h", "h", "u", 2)


# --------------------------------------------------------------------------
# vagrant ssh-config

VAGRANT_SSH_CONFIG = """\
Host n1
  HostName 127.0.0.1
  User vagrant
  Port 2222
  UserKnownHostsFile /dev/null
  StrictHostKeyChecking no
  PasswordAuthentication no
  IdentityFile /home/dev/harness/.vagrant/machines/n1/virtualbox/private_key
  IdentitiesOnly yes
  LogLevel FATAL
  PubkeyAcceptedKeyTypes +ssh-rsa
  HostKeyAlgorithms +ssh-rsa

Host n2
  HostName 127.0.0.1
  User vagrant
  Port 2200
  UserKnownHostsFile /dev/null
  StrictHostKeyChecking no
  PasswordAuthentication no
  IdentityFile "/home/dev/my projects/harness/.vagrant/machines/n2/virtualbox/private_key"
  IdentitiesOnly yes
  LogLevel FATAL

"""


def test_vagrant_ssh_config_parses():
    hosts = parse_ssh_config(VAGRANT_SSH_CONFIG)
    assert [h.alias for h in hosts] == ["n1", "n2"]
    n1, n2 = hosts
    assert (n1.hostname, n1.port, n1.user) == ("127.0.0.1", 2222, "vagrant")
    assert n1.identity_files == ["/home/dev/harness/.vagrant/machines/n1/virtualbox/private_key"]
    assert n2.port == 2200
    assert n2.identity_files == ["/home/dev/my projects/harness/.vagrant/machines/n2/virtualbox/private_key"]
    assert not n1.checks_host_keys and not n2.checks_host_keys


def test_ssh_config_equals_form_and_host_key_checking():
    hosts = parse_ssh_config("Host a\n  HostName=10.1.2.3\n  Port = 22\n  StrictHostKeyChecking yes\n")
    assert hosts[0].hostname == "10.1.2.3" and hosts[0].port == 22 and hosts[0].checks_host_keys
    assert hosts[0].user is None


@pytest.mark.parametrize("text, fragment", [
    ("", "no hosts in it"),
    ("  HostName 1.2.3.4\n", ":1: HostName before any Host line"),
    ("Host a\n  Port twenty\n", ":2: bad port 'twenty'"),
    ("Host a b\n", ":1: expected one host alias"),
    ('Host a\n  IdentityFile "/unclosed\n', ":2: unbalanced quotes"),
    ("Host a\n  JustAKeyword\n", ":2: expected `Keyword value`"),
])
def test_ssh_config_errors(text, fragment):
    with pytest.raises(UserError) as e:
        parse_ssh_config(text)
    assert fragment in str(e.value)


def test_pick_address_in_private_subnet():
    out = ("1: lo    inet 127.0.0.1/8 scope host lo\n"
           "2: eth0    inet 10.0.2.15/24 brd 10.0.2.255 scope global dynamic eth0\n"
           "3: eth1    inet 192.168.56.12/24 brd 192.168.56.255 scope global eth1\n")
    assert pick_address(out, ipaddress.IPv4Network("192.168.56.0/24")) == "192.168.56.12"
    assert pick_address(out, ipaddress.IPv4Network("172.16.0.0/12")) is None


# --------------------------------------------------------------------------
# Options


@pytest.mark.parametrize("options, fragment", [
    (ProvisionOptions(provider="docker-swarm"), "unknown provider 'docker-swarm'"),
    (ProvisionOptions(nodes=0), "--nodes must be between 1 and 200"),
    (ProvisionOptions(names=["n1", "n1"]), "node names must be unique"),
    (ProvisionOptions(names=["bad name"]), "bad node name"),
    (ProvisionOptions(subnet="8.8.8.0/24"), "must be a private range"),
    (ProvisionOptions(subnet="10.213.9.0/29"), "too small for 5 nodes"),
    (ProvisionOptions(subnet="not-a-net"), "is not an IPv4 subnet"),
    (ProvisionOptions(cluster_id="x1"), "bad cluster id 'x1'"),
    (ProvisionOptions(provider="ssh"), "needs --nodes-file FILE or --hosts"),
    (ProvisionOptions(provider="ssh", hosts=["h"], ssh_key="/no/such/key"), "--ssh-key /no/such/key: no such file"),
    (ProvisionOptions(provider="ssh", hosts=["h"], known_hosts="/no/such/kh"), "--known-hosts /no/such/kh"),
    (ProvisionOptions(provider="ssh", hosts=["h"], ssh_port=0), "--ssh-port must be a TCP port"),
])
def test_bad_options_are_user_errors(options, fragment):
    with pytest.raises(UserError) as e:
        validate_options(options)
    assert fragment in str(e.value)


def test_providers_are_records_in_one_table():
    from infra.cluster import PROVIDERS, provider_named

    assert list(PROVIDERS) == ["local", "ssh", "vagrant", "docker"]
    for name, p in PROVIDERS.items():
        assert p.name == name and callable(p.provision) and callable(p.teardown)
    assert PROVIDERS["local"].makes_nodes and PROVIDERS["local"].shares_filesystem and PROVIDERS["local"].remove
    assert not PROVIDERS["ssh"].shares_filesystem and PROVIDERS["ssh"].remove is None
    assert PROVIDERS["docker"].makes_nodes and not PROVIDERS["docker"].shares_filesystem and PROVIDERS["docker"].remove
    with pytest.raises(UserError) as e:
        provider_named("docker-swarm")
    assert "unknown provider 'docker-swarm' (one of local, ssh, vagrant, docker)" in str(e.value)


def test_a_saved_node_loads_back():
    from infra.nodes import node_from_dict, node_to_dict

    node = Node("n1", "10.9.9.11", "/d", "/l", "/r", Remote("n1", "10.9.9.11", port=2222, user="admin",
                                                             key_file="/k", run_dir="/r", tag_scope="c0/n1"))
    again = node_from_dict(node_to_dict(node))
    assert node_to_dict(again) == node_to_dict(node) and again.remote.port == 2222


def test_subnet_layout():
    net = parse_subnet("10.213.40.0/24", 5)
    assert net == ipaddress.IPv4Network("10.213.40.0/24")
    from infra.nodes import local_node_address

    assert local_node_address(net, 1) == "10.213.40.11"


# --------------------------------------------------------------------------
# Grudges


def _offline_cluster(names):
    # Real Remote objects; nothing here connects.
    nodes = [Node(n, f"10.9.9.{i}", "/d", "/l", "/r", Remote(n, f"10.9.9.{i}")) for i, n in enumerate(names, 11)]
    return Cluster(nodes, LOCAL, "10.9.9.1", "c0", st.cluster_dir("c0"))


def test_isolate_is_symmetric():
    c = _offline_cluster(["n1", "n2", "n3"])
    assert isolate(c, ["n2"]) == {"n2": ["n1", "n3"], "n1": ["n2"], "n3": ["n2"]}
    with pytest.raises(UserError):
        isolate(c, ["n9"])


def test_grudge_from_components():
    g = grudge_from_components([["a", "b"], ["c"], ["d"]])
    assert g == {"a": ["c", "d"], "b": ["c", "d"], "c": ["a", "b", "d"], "d": ["a", "b", "c"]}
    assert grudge_from_components([["a", "b"]]) == {}


# --------------------------------------------------------------------------
# ZooKeeper helpers


def test_ports_in_use_from_ss():
    ss = ("LISTEN 0 128   10.213.0.11:22      0.0.0.0:* users:((\"sshd\",pid=10,fd=3))\n"
          "LISTEN 0 5     10.213.0.11:2181    0.0.0.0:* users:((\"python3\",pid=99,fd=3))\n"
          "LISTEN 0 50    0.0.0.0:3888        0.0.0.0:*\n"
          "LISTEN 0 50    10.213.0.12:2888    0.0.0.0:*\n"
          "LISTEN 0 50    [::]:9999           [::]:*\n")
    busy = ports_in_use(ss, "10.213.0.11", [2181, 2888, 3888])
    assert [p for p, _ in busy] == [2181, 3888]
    assert "python3" in busy[0][1]
    assert ports_in_use(ss, "10.213.0.11", [22, 7]) == [(22, 'users:(("sshd",pid=10,fd=3))')]


def test_parse_mode():
    assert parse_mode("Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0/0\nMode: follower\nNode count: 5\n") == "follower"
    assert parse_mode("This ZooKeeper instance is not currently serving requests\n") is None
    assert parse_mode(None) is None


# --------------------------------------------------------------------------
# Names and errors


def test_names_fit_interface_limits_and_clean_patterns():
    cid = "c249"
    assert len(st.bridge_name(cid)) <= 15 and st.BRIDGE_RE.match(st.bridge_name(cid))
    assert len(st.veth_name(cid, 200)) <= 15 and st.VETH_RE.match(st.veth_name(cid, 200))
    assert st.NETNS_RE.match(st.netns_name(cid, "n1")).groups() == (cid, "n1")
    assert st.HOST_RULE_RE.search(f'-A INPUT -m comment --comment "{st.host_rule_tag(cid)}" -j ACCEPT').group(1) == cid
    assert not st.NETNS_RE.match("harness-test")  # someone else's namespace is never ours


def test_remote_error_is_one_line_and_names_node_and_command():
    e = RemoteError("n3", "`cat /nope`", "exit status 1: cat: /nope:\nNo such file")
    assert str(e) == "n3: `cat /nope`: exit status 1: cat: /nope: No such file"
    assert isinstance(e, UserError)


# --------------------------------------------------------------------------
# The Vagrantfile, evaluated by Ruby against a recording stub of Vagrant's API


def _vagrantfile(env_extra: dict | None = None) -> subprocess.CompletedProcess:
    if shutil.which("ruby") is None:
        pytest.fail("ruby is missing: scripts/setup-system.sh installs it (make setup)")
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_VM")}
    env.update(env_extra or {})
    stub = REPO / "tests" / "infra" / "vagrant_stub.rb"
    return subprocess.run(["ruby", str(stub), str(REPO / "Vagrantfile")], capture_output=True, text=True,
                          env=env, timeout=60)


def _calls(res):
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_vagrantfile_defines_five_debian_vms_on_the_provider_subnet():
    from infra.nodes import DEFAULT_VAGRANT_SUBNET

    calls = _calls(_vagrantfile())
    sets = {c["set"]: c["value"] for c in calls if "set" in c}
    assert sets["vm.box"].startswith("debian/bookworm")
    defined = [c["args"][0] for c in calls if c.get("call") == "vm.define"]
    assert defined == ["n1", "n2", "n3", "n4", "n5"]
    ips = [c["kw"]["ip"] for c in calls if c.get("call", "").endswith(".vm.network")]
    assert ips == [f"192.168.56.{10 + i}" for i in range(1, 6)]
    subnet = ipaddress.IPv4Network(DEFAULT_VAGRANT_SUBNET)
    assert all(ipaddress.IPv4Address(ip) in subnet for ip in ips)


def test_vagrantfile_count_from_environment_and_rejects_nonsense():
    calls = _calls(_vagrantfile({"HARNESS_VMS": "3"}))
    assert [c["args"][0] for c in calls if c.get("call") == "vm.define"] == ["n1", "n2", "n3"]
    bad = _vagrantfile({"HARNESS_VMS": "0"})
    assert bad.returncode != 0 and "HARNESS_VMS must be between 1 and 50" in bad.stderr


def test_vagrantfile_provisioning_script_installs_what_nodes_need(tmp_path):
    calls = _calls(_vagrantfile())
    (script,) = [c["kw"]["inline"] for c in calls if c.get("call") == "vm.provision"]
    for package in ("openjdk-17-jre-headless", "zookeeper", "iptables", "conntrack", "iproute2", "fuse3", "sudo"):
        assert package in script
    assert "/var/lib/harness/nodes" in script
    # mfusepy for the faulty-disk layer: the locked version, where faultfs looks for it.
    from infra.faultfs import NODE_VENV_PYTHON

    locked = [line for line in (REPO / "requirements.lock").read_text().splitlines() if line.startswith("mfusepy==")]
    assert locked and f"pip install -q {locked[0]}" in script
    venv = NODE_VENV_PYTHON.removesuffix("/bin/python")
    assert f"python3 -m venv {venv}" in script and f"{venv}/bin/pip" in script
    path = tmp_path / "provision.sh"
    path.write_text(script)
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    # The same packages as the control machine installs for a node's work.
    setup = (REPO / "scripts" / "setup-system.sh").read_text()
    for package in ("openjdk-17-jre-headless", "zookeeper", "iptables", "conntrack", "iproute2", "fuse3"):
        assert package in setup
