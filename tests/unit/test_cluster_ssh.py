"""``--cluster user@host,...``: parsed in order, user root by default, refused when
malformed or naming a server twice; localhost runs here, not through ssh."""

from __future__ import annotations

from pathlib import Path

import pytest

from topologies.cluster.ssh import Server, ServerError, parse_servers


def test_servers_in_order_with_root_as_the_default_user():
    servers = parse_servers("alice@10.0.0.2, 10.0.0.3,localhost")
    assert [str(s) for s in servers] == ["alice@10.0.0.2", "root@10.0.0.3", "localhost"]
    assert [s.is_local for s in servers] == [False, False, True]


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "give user@host"),
        ("a@h1,,a@h2", "give user@host"),
        ("bad user@h", "is not user@host"),
        ("h1,root@h1", "more than once"),
    ],
)
def test_bad_cluster_arguments_are_refused_with_what_to_write(text, why):
    with pytest.raises(ServerError, match=why):
        parse_servers(text)


def test_a_remote_command_goes_through_ssh_with_the_given_config_a_local_one_does_not():
    remote = Server("10.0.0.2", "root", Path("/etc/kv/ssh_config"))
    argv = remote.command(["echo", "a b"])
    assert argv[:3] == ["ssh", "-F", "/etc/kv/ssh_config"]
    assert argv[-2:] == ["root@10.0.0.2", "echo 'a b'"]
    assert "BatchMode=yes" in argv  # never a password prompt
    assert Server("localhost").command(["echo", "a b"]) == ["echo", "a b"]
    assert Server("localhost").run("echo hi").stdout == "hi\n"
