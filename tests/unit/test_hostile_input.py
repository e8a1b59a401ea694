"""Hostile and broken inventories: exit 2 naming file, key and reason; never a traceback,
never accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner.ansible.vault import forget_secrets
from provisioner.cli import main
from provisioner.inventory.loader import load_inventory
from tests.helpers import edit_yaml, one_problem, vault_encrypt


def _gpu01(document: dict) -> dict:
    return document["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"]["gpu01"]


def _all_vars(inventory: Path, text: str) -> None:
    path = inventory / "group_vars" / "all.yml"
    path.write_text(path.read_text() + text)


def test_brackets_in_a_host_name_are_printed_as_written(example_inventory: Path, capsys):
    edit_yaml(example_inventory / "hosts.yml", lambda d: d["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"]
          .__setitem__("gpu[01-02]", {"ansible_host": "10.10.1.99"}))
    assert main(["inventory", "validate", "-i", str(example_inventory)]) == 2
    err = capsys.readouterr().err
    assert "'gpu[01-02]' is not a valid host name" in err


def test_bracket_markup_in_a_path_does_not_crash(tmp_path: Path, capsys):
    assert main(["inventory", "validate", "-i", str(tmp_path / "[/red]x[bold")]) == 2
    assert "[/red]x[bold" in capsys.readouterr().err


@pytest.mark.parametrize("content, reason", [
    ("all:\n  children: {}\n".encode("utf-16"), "UTF-16"),
    (b"all:\n  vars:\n    x: \xff\xfe\xfa\n", "not UTF-8"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary"),
])
def test_files_that_are_not_utf8_text(example_inventory: Path, content: bytes, reason: str):
    (example_inventory / "hosts.yml").write_bytes(content)
    one_problem(example_inventory, "hosts.yml", reason)


def test_a_key_that_is_a_list_or_mapping(example_inventory: Path):
    _all_vars(example_inventory, "? [a, b]\n: 1\n")
    one_problem(example_inventory, "group_vars/all.yml", "is a list or mapping")
    (example_inventory / "group_vars" / "all.yml").write_text("{x: 1}: 2\n")
    one_problem(example_inventory, "group_vars/all.yml", "is a list or mapping")


def test_nesting_thousands_deep(example_inventory: Path):
    _all_vars(example_inventory, "deep: " + "[" * 5000 + "]" * 5000 + "\n")
    one_problem(example_inventory, "group_vars/all.yml", "nested")
    (example_inventory / "group_vars" / "all.yml").write_text("deep: " + "[" * 80 + "]" * 80 + "\n")
    one_problem(example_inventory, "group_vars/all.yml", "nested more than 64 levels")


def test_an_alias_bomb_is_refused(example_inventory: Path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    _all_vars(example_inventory, "\n".join(lines) + "\n")
    one_problem(example_inventory, "group_vars/all.yml", "aliases expand to more than")


def test_a_self_referring_alias_is_refused(example_inventory: Path):
    _all_vars(example_inventory, "loop: &l [1, *l]\n")
    one_problem(example_inventory, "group_vars/all.yml", "refers to the collection that holds it")


def test_a_huge_file_is_refused_by_size(example_inventory: Path):
    with (example_inventory / "group_vars" / "gpu_nodes.yml").open("a") as handle:
        handle.write("# " + "x" * (17 * 1024 * 1024) + "\n")
    one_problem(example_inventory, "group_vars/gpu_nodes.yml", "larger than 16 MiB")


def test_a_symlink_loop_in_group_vars(example_inventory: Path):
    (example_inventory / "group_vars" / "login.yml").symlink_to("login.yml")
    one_problem(example_inventory, "group_vars/login.yml", "cannot read")


def test_group_vars_linking_outside_the_inventory(example_inventory: Path, tmp_path: Path):
    outside = tmp_path / "elsewhere.yml"
    outside.write_text("fabric: infiniband\n")
    (example_inventory / "group_vars" / "login.yml").symlink_to(outside)
    one_problem(example_inventory, "group_vars/login.yml", "outside the inventory")


def test_a_trailing_newline_does_not_pass_a_pattern(example_inventory: Path):
    (example_inventory / "group_vars" / "login.yml").write_text('login_tool_version: "1.2.3\\n"\n')
    one_problem(example_inventory, "login_tool_version", "not an exact version")


@pytest.mark.parametrize("host, reason", [("g" * 64, "longer than 63"), ("gpu..01", "none empty"),
                                          ("gpu01.", "none empty"), ("-gpu01", "not a valid host name")])
def test_host_names_dns_would_refuse(example_inventory: Path, host: str, reason: str):
    edit_yaml(example_inventory / "hosts.yml", lambda d: d["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"]
          .__setitem__(host, {"ansible_host": "10.10.1.99"}))
    one_problem(example_inventory, "hosts.yml", reason)


@pytest.mark.parametrize("address, reason", [
    ("-oProxyCommand=touch /tmp/x", "neither an IP address nor a host name"),
    ("0.0.0.0", "not an address a host can be reached at"),
    ("", "must be an IP address or a host name"),
    ("10.10.1.300", "above 255"),
])
def test_ansible_host_must_be_an_address(example_inventory: Path, address: str, reason: str):
    edit_yaml(example_inventory / "hosts.yml", lambda d: _gpu01(d).__setitem__("ansible_host", address))
    one_problem(example_inventory, "hosts.yml", "gpu01.ansible_host", reason)


def test_one_address_written_two_ways_is_a_duplicate(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml", lambda d: _gpu01(d).__setitem__("ansible_host", "10.10.1.012"))
    one_problem(example_inventory, "hosts.yml", "ansible_host", "duplicate host", "'gpu02' has the same address")
    one_problem(example_inventory, "hosts.yml", "gpu01.ansible_host", "leading zeros")


def test_a_partition_with_no_nodes(example_inventory: Path):
    _all_vars(example_inventory, "")
    edit_yaml(example_inventory / "group_vars" / "all.yml",
          lambda d: d["slurm_partitions"].append({"name": "empty", "nodes": []}))
    one_problem(example_inventory, "slurm_partitions[3].nodes", "has no nodes")


def test_more_than_one_monitoring_host(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml",
          lambda d: d["all"]["children"]["monitoring"]["hosts"].__setitem__("login01", None))
    one_problem(example_inventory, "all.children.monitoring", "exactly one monitoring host")


def test_preflight_accepts_what_validation_accepts():
    tasks = yaml.safe_load((Path(__file__).parents[2] / "roles/preflight/tasks/inventory.yml").read_text())
    controller = next(t for t in tasks if "controller" in t["name"].lower())
    assert "[1, 2]" in controller["ansible.builtin.assert"]["that"]
    assert any("monitoring" in t["name"].lower() for t in tasks)


@pytest.mark.parametrize("line, key", [("monitoring_prometheus_port: 70000\n", "monitoring_prometheus_port"),
                                       ("monitoring_node_exporter_port: 0\n", "monitoring_node_exporter_port"),
                                       ("monitoring_alertmanager_port: '9093; rm'\n", "monitoring_alertmanager_port")])
def test_ports_outside_the_range(example_inventory: Path, line: str, key: str):
    _all_vars(example_inventory, line)
    one_problem(example_inventory, key, "port number from 1 to 65535")


def test_port_rate_that_is_not_a_number(example_inventory: Path, capsys):
    _all_vars(example_inventory, "infiniband_port_rate: fast\n")
    one_problem(example_inventory, "infiniband_port_rate", "port rate in Gb/s")
    assert main(["plan", "--inventory", str(example_inventory), "--model", "llama-8b"]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.fixture
def vault_password(tmp_path: Path, monkeypatch) -> Path:
    password = tmp_path / "vault-pass"
    password.write_text("correct horse battery staple\n")
    monkeypatch.delenv("ANSIBLE_VAULT_IDENTITY_LIST", raising=False)
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    forget_secrets()
    yield password
    forget_secrets()


def test_an_encrypted_vault_file_is_accepted(example_inventory: Path, vault_password: Path, monkeypatch):
    vault_dir = example_inventory / "group_vars" / "all"
    vault_dir.mkdir()
    password = vault_password.read_text().strip()
    (vault_dir / "vault.yml").write_text(vault_encrypt("vault_tool_version: latest\n", password))
    load_inventory(str(example_inventory))  # no password at hand: accepted, names unknown
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(vault_password))
    forget_secrets()
    # With the password its variables are read, and checked like any others.
    one_problem(example_inventory, "group_vars/all/vault.yml", "vault_tool_version", "not an exact version")
    # Its secrets are kept in Vault: no plain-text warning for them.
    (vault_dir / "vault.yml").write_text(vault_encrypt("vault_db_password: s3cr3t-value\n", password))
    assert not [w for w in load_inventory(str(example_inventory)).warnings if "vault_db_password" in w.key]
    (example_inventory / "group_vars" / "login.yml").write_text("vault_db_password: s3cr3t-value\n")
    assert [w for w in load_inventory(str(example_inventory)).warnings if "vault_db_password" in w.key]


def test_plain_text_secrets_are_warned_about(example_inventory: Path, capsys):
    _all_vars(example_inventory, "grafana_api_token: s3cr3t-value\n")
    assert main(["inventory", "validate", "-i", str(example_inventory)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "grafana_api_token" in err and "Ansible Vault" in err
    assert "s3cr3t-value" not in err


def test_inspect_on_a_truncated_output(tmp_path: Path, real_outputs: Path, capsys):
    full = (real_outputs / "nvidia-smi" / "nvidia-smi-q_h100x8_535.161.08.txt").read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(full[: len(full) // 2])
    assert main(["inspect", "nvidia-smi", str(cut)]) == 2
    assert "truncated" in capsys.readouterr().err
    nccl = (real_outputs / "nccl" / "all_reduce_h100_1node_8gpu_nccltests2.17.8.txt").read_text()
    cut.write_text(nccl[: len(nccl) * 2 // 3])
    assert main(["inspect", "nccl-tests", str(cut)]) == 2
    assert "truncated" in capsys.readouterr().err


def test_the_accounting_database_name_is_an_identifier(example_inventory: Path):
    _all_vars(example_inventory, "slurm_accounting_db_name: \"acct`; DROP DATABASE mysql; --\"\n")
    one_problem(example_inventory, "slurm_accounting_db_name", "not a database name")


def test_grafana_needs_an_admin_password_where_it_is_installed(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d.pop("monitoring_grafana_admin_password"))
    one_problem(example_inventory, "monitoring_grafana_admin_password", "admin/admin")
    _all_vars(example_inventory, "monitoring_grafana_install: false\n")
    load_inventory(str(example_inventory))


def test_every_monitoring_endpoint_listens_on_the_management_address():
    role = Path(__file__).parents[2] / "roles" / "monitoring"
    for template, flag in [("prometheus.default.j2", "--web.listen-address="),
                           ("alertmanager.default.j2", "--web.listen-address="),
                           ("node-exporter.default.j2", "--web.listen-address="),
                           ("dcgm-exporter.conf.j2", " -a ")]:
        text = (role / "templates" / template).read_text()
        assert f"{flag}{{{{ _monitoring_listen }}}}:" in text, template
    assert "http_addr" in (role / "tasks" / "configure.yml").read_text()
