"""Inventory validation: every kind of bad input gets an error naming file, key and problem."""

from __future__ import annotations

import json
from pathlib import Path

from provisioner.cli import main
from provisioner.inventory.loader import load_inventory
from tests.helpers import edit_yaml, inventory_problems, one_problem


def test_example_inventory_is_valid():
    inventory = load_inventory("example")
    assert inventory.group("controller") == ["ctl01"]
    assert inventory.group("gpu_nodes") == ["gpu01", "gpu02"]
    assert inventory.gpu_nodes["gpu01"].gpu_count == 8
    assert inventory.gpu_nodes["gpu02"].ib_hca_count == 8
    assert inventory.cluster.fabric == "infiniband"
    assert [p.name for p in inventory.cluster.slurm_partitions] == ["gpu", "debug", "h100"]


def test_inventory_resolves_by_name_and_by_path(example_inventory: Path):
    assert load_inventory("example").directory.name == "example"
    assert load_inventory(str(example_inventory)).directory == example_inventory
    assert load_inventory(str(example_inventory / "hosts.yml")).directory == example_inventory


def test_unknown_inventory_is_named():
    problem = one_problem(Path("no-such-inventory-xyz"), "no such inventory")
    assert "no-such-inventory-xyz" in problem


def test_yaml_syntax_error_names_file_and_line(example_inventory: Path):
    hosts = example_inventory / "hosts.yml"
    hosts.write_text(hosts.read_text() + "    broken: [unclosed\n")
    one_problem(example_inventory, "hosts.yml", "YAML syntax error at line")


def test_yaml_syntax_error_in_group_vars(example_inventory: Path):
    (example_inventory / "group_vars" / "all.yml").write_text("fabric: infiniband\n  bad indent: 1\n")
    one_problem(example_inventory, "group_vars/all.yml", "YAML syntax error")


def test_unknown_group_is_named_with_a_suggestion(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml",
          lambda d: d["all"]["children"].__setitem__("gpu_node", {"hosts": {"gpu09": None}}))
    problem = one_problem(example_inventory, "hosts.yml", "all.children.gpu_node", "unknown group")
    assert "did you mean 'gpu_nodes'" in problem


def test_missing_group(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml", lambda d: d["all"]["children"].pop("monitoring"))
    one_problem(example_inventory, "hosts.yml", "all.children.monitoring", "missing group 'monitoring'")


def test_group_without_hosts(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml", lambda d: d["all"]["children"].__setitem__("controller", {"hosts": {}}))
    one_problem(example_inventory, "all.children.controller", "has no hosts")


def test_a_backup_controller_is_accepted_a_third_is_refused(example_inventory: Path):
    def add(name: str, address: str):
        return lambda d: d["all"]["children"]["controller"]["hosts"].__setitem__(name, {"ansible_host": address})

    edit_yaml(example_inventory / "hosts.yml", add("ctl02", "10.10.0.20"))
    assert load_inventory(str(example_inventory)).group("controller") == ["ctl01", "ctl02"]
    edit_yaml(example_inventory / "hosts.yml", add("ctl03", "10.10.0.21"))
    one_problem(example_inventory, "all.children.controller", "at most two Slurm controllers", "ctl03")


def test_accounting_needs_its_password_unless_turned_off(example_inventory: Path):
    all_vars = example_inventory / "group_vars" / "all.yml"
    edit_yaml(all_vars, lambda d: d.pop("slurm_accounting_db_password"))
    problem = one_problem(example_inventory, "slurm_accounting_db_password", "job accounting is on")
    assert "all.yml" in problem and "ctl01" in problem
    edit_yaml(all_vars, lambda d: d.__setitem__("slurm_accounting", "yes"))
    one_problem(example_inventory, "slurm_accounting", "must be true or false")
    edit_yaml(all_vars, lambda d: d.__setitem__("slurm_accounting", False))
    load_inventory(str(example_inventory))


def test_host_in_no_group(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml", lambda d: d["all"].__setitem__("hosts", {"stray01": None}))
    one_problem(example_inventory, "hosts.yml", "all.hosts.stray01", "in no group")


def test_duplicate_host_key_in_yaml(example_inventory: Path):
    hosts = example_inventory / "hosts.yml"
    text = hosts.read_text().replace(
        "            gpu02:\n", "            gpu01:\n              ansible_host: 10.10.1.99\n            gpu02:\n")
    hosts.write_text(text)
    problem = one_problem(example_inventory, "hosts.yml", "gpu01", "defined twice")
    assert "line" in problem


def test_duplicate_host_address(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml",
          lambda d: d["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"]["gpu02"]
          .__setitem__("ansible_host", "10.10.1.11"))
    one_problem(example_inventory, "gpu02.ansible_host", "duplicate host", "10.10.1.11", "gpu01")


def test_duplicate_host_differing_in_case(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml",
          lambda d: d["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"]
          .__setitem__("GPU01", {"ansible_host": "10.10.1.50"}))
    one_problem(example_inventory, "GPU01", "duplicate host", "differ only in case")


def test_gpu_node_without_gpu_count(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "gpu_nodes.yml", lambda d: d.pop("gpu_count"))
    problems = [p for p in inventory_problems(example_inventory) if "gpu_count" in p]
    assert len(problems) == 2  # gpu01 and gpu02
    assert "hosts.yml: all.children.gpu_nodes.children.h100.hosts.gpu01.gpu_count: missing" in problems[0]


def test_gpu_node_without_gpu_model_set_on_one_host(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "gpu_nodes.yml", lambda d: d.pop("gpu_model"))
    edit_yaml(example_inventory / "hosts.yml",
          lambda d: d["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"]["gpu01"]
          .__setitem__("gpu_model", "H100-SXM5-80GB"))
    problems = [p for p in inventory_problems(example_inventory) if "gpu_model" in p]
    assert len(problems) == 1 and "gpu02.gpu_model: missing" in problems[0]


def test_gpu_count_of_wrong_type_names_the_defining_file(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "gpu_nodes.yml", lambda d: d.__setitem__("gpu_count", "eight"))
    one_problem(example_inventory, "group_vars/gpu_nodes.yml: gpu_count", "integer", "eight")


def test_partition_naming_unknown_node(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml",
          lambda d: d["slurm_partitions"][1].__setitem__("nodes", ["gpu01", "gpu09"]))
    problem = one_problem(example_inventory, "group_vars/all.yml: slurm_partitions[1].nodes[1]", "unknown node 'gpu09'")
    assert "debug" in problem


def test_partition_may_name_a_gpu_subgroup(example_inventory: Path):
    inventory = load_inventory(str(example_inventory))
    assert inventory.cluster.slurm_partitions[2].nodes == ["h100"]


def test_two_default_partitions(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml",
          lambda d: d["slurm_partitions"][1].__setitem__("default", True))
    one_problem(example_inventory, "slurm_partitions", "more than one default partition")


def test_version_pin_that_is_not_a_version(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d.__setitem__("gpu_driver_version", "latest"))
    one_problem(example_inventory, "group_vars/all.yml: gpu_driver_version", "'latest' is not an exact version")


def test_version_pin_read_as_a_number(example_inventory: Path):
    path = example_inventory / "group_vars" / "all.yml"
    path.write_text(path.read_text().replace('cuda_version: "12.2"', "cuda_version: 12.2"))
    one_problem(example_inventory, "group_vars/all.yml: cuda_version", "quoted string", "float")


def test_version_pin_on_a_host(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml",
          lambda d: d["all"]["children"]["gpu_nodes"]["children"]["h100"]["hosts"]["gpu02"]
          .__setitem__("hca_firmware_version", "28.x"))
    one_problem(example_inventory, "hosts.yml: all.children.gpu_nodes.children.h100.hosts.gpu02.hca_firmware_version",
         "'28.x' is not an exact version")


def test_unknown_nccl_variable_is_a_typo_error(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml",
          lambda d: d["nccl_env"].__setitem__("NCCL_IB_TIMOUT", 22))
    problem = one_problem(example_inventory, "group_vars/all.yml: nccl_env.NCCL_IB_TIMOUT", "unknown NCCL variable")
    assert "did you mean NCCL_IB_TIMEOUT" in problem


def test_non_nccl_name_in_nccl_env(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d["nccl_env"].__setitem__("IB_TIMEOUT", 22))
    one_problem(example_inventory, "nccl_env.IB_TIMEOUT", "not an NCCL variable")


def test_unknown_fabric(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d.__setitem__("fabric", "omnipath"))
    one_problem(example_inventory, "group_vars/all.yml: fabric", "'omnipath' is not allowed")


def test_group_vars_file_for_unknown_group(example_inventory: Path):
    (example_inventory / "group_vars" / "gpu_node.yml").write_text("gpu_count: 8\n")
    one_problem(example_inventory, "group_vars/gpu_node.yml", "no group named 'gpu_node'", "gpu_nodes")


def test_every_problem_is_reported_at_once(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: (
        d.__setitem__("gpu_driver_version", "latest"), d["nccl_env"].__setitem__("NCCL_SOCKET_IFNAM", "eth0")))
    problems = inventory_problems(example_inventory)
    assert any("gpu_driver_version" in p for p in problems)
    assert any("NCCL_SOCKET_IFNAM" in p for p in problems)


def test_cli_validate_exits_2_and_names_the_problem(example_inventory: Path, capsys):
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d.__setitem__("gpu_driver_version", "latest"))
    assert main(["inventory", "validate", "--inventory", str(example_inventory)]) == 2
    err = capsys.readouterr().err
    assert "group_vars/all.yml: gpu_driver_version" in err
    assert "nothing was run on any host" in err


def test_cli_validate_ok(capsys):
    assert main(["inventory", "validate", "--inventory", "example"]) == 0
    assert "is valid" in capsys.readouterr().out


def test_apply_on_a_bad_inventory_exits_2_and_writes_no_record(example_inventory: Path, tmp_path: Path, capsys):
    edit_yaml(example_inventory / "hosts.yml", lambda d: d["all"]["children"].pop("controller"))
    assert main(["apply", "--inventory", str(example_inventory)]) == 2
    assert "missing group 'controller'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_nccl_value_nccl_cannot_parse(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d["nccl_env"].__setitem__("NCCL_IB_RETRY_CNT", 9))
    one_problem(example_inventory, "group_vars/all.yml: nccl_env.NCCL_IB_RETRY_CNT",
                "must be an integer in 0..7 (got 9)")


def test_nccl_opt_in_must_exist_for_the_fabric(example_inventory: Path):
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d.__setitem__("nccl_opt_in", ["ring_onyl"]))
    problem = one_problem(example_inventory, "group_vars/all.yml: nccl_opt_in[0]",
                   "'ring_onyl' is not an opt-in setting of the infiniband profile")
    assert "did you mean 'ring_only'?" in problem


def test_subnet_manager_hosts_are_refused_with_the_reason(example_inventory: Path):
    edit_yaml(example_inventory / "hosts.yml",
          lambda d: d["all"]["children"].__setitem__("subnet_managers", {"hosts": {"ctl01": None}}))
    one_problem(example_inventory, "all.children.subnet_managers", "run the subnet manager on the switches")


def test_alert_receiver_errors_name_the_key_and_never_echo_the_url(example_inventory: Path):
    secret = "https://hooks.slack.example/services/T0/B0/very-secret-token"
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d.__setitem__("monitoring_alert_receivers", [
        {"name": "chat", "type": "slack", "url": secret},
        {"name": "chat", "type": "pager"},
        {"name": "mail", "type": "email", "to": "ops@example.com", "from": "am@example.com",
         "smarthost": "smtp:587", "severity": ["critical"]}]))
    problems = inventory_problems(example_inventory)
    assert any("monitoring_alert_receivers[0].channel" in p and "a slack receiver needs channel" in p
               for p in problems)
    assert any("monitoring_alert_receivers[1].name" in p and "declared twice" in p for p in problems)
    assert any("monitoring_alert_receivers[1].type" in p and "'pager' is not a receiver type" in p for p in problems)
    assert any("monitoring_alert_receivers[2].severity" in p and "did you mean 'severities'" in p for p in problems)
    assert all(p.startswith("group_vars/all.yml") or "all.yml" in p.split(":")[0] for p in problems)
    assert not any("very-secret-token" in p for p in problems)


def test_receiver_urls_are_scrubbed_from_run_records():
    from provisioner.ansible.redact import Redactor, secret_values

    hostvars = {"ctl01": {"monitoring_alert_receivers": [
        {"name": "chat", "type": "slack", "url": "https://hooks.slack.example/T0/B0/tok3n", "channel": "#gpu"}]}}
    secrets = secret_values(hostvars)
    assert secrets == {"https://hooks.slack.example/T0/B0/tok3n"}
    assert Redactor(secrets).text("posting to https://hooks.slack.example/T0/B0/tok3n") == "posting to ********"


def test_bad_certification_settings_name_file_and_key(example_inventory: Path):
    def change(document):
        document["certification_preset"] = "70b"
        document["certification_variance_percent"] = 0
        document["certification_busbw_thresholds_gbps"] = {"intra_node": 400, "inter": 300}

    edit_yaml(example_inventory / "group_vars" / "all.yml", change)
    one_problem(example_inventory, "group_vars/all.yml: certification_preset", "70b")
    one_problem(example_inventory, "group_vars/all.yml: certification_variance_percent", "greater than 0")
    one_problem(example_inventory, "certification_busbw_thresholds_gbps.inter")


def test_certify_rejects_unknown_nodes_and_profiles_before_any_host(example_inventory: Path, capsys):
    assert main(["certify", "--inventory", str(example_inventory), "--nodes", "gpu01,nope"]) == 2
    assert "--nodes" in capsys.readouterr().err
    edit_yaml(example_inventory / "group_vars" / "all.yml", lambda d: d.__setitem__("certification_profile", "fast"))
    assert main(["certify", "--inventory", str(example_inventory)]) == 2
    err = capsys.readouterr().err
    assert "certification_profile" in err and "unknown profile 'fast'" in err


def test_event_log_scrubs_secrets_with_quotes_and_non_ascii_characters(tmp_path: Path):
    from provisioner.ansible.records import EventLog
    from provisioner.ansible.redact import Redactor

    secrets = ['pa"ss\\wörd-1', "plain-secret"]
    log = EventLog(tmp_path / "events.jsonl", Redactor(secrets))
    log.write({"event": "runner_on_ok", "event_data": {"res": {"msg": f"a {secrets[0]} b", "plain-secret": [1]}}})
    log.close()
    written = (tmp_path / "events.jsonl").read_text()
    assert json.loads(written) == {"event": "runner_on_ok", "event_data": {"res": {"msg": "a ******** b",
                                                                                   "********": [1]}}}
