"""The run-record redactor: every way a secret reaches a run is known, and records are private."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from provisioner.ansible.records import EventLog, make_private, new_record_dir, write_summary
from provisioner.ansible.redact import MASK, Redactor, secret_values
from provisioner.ansible.vault import forget_secrets
from provisioner.inventory.yaml_source import VaultValue
from tests.helpers import vault_encrypt

PASSWORD = "correct horse battery staple"


@pytest.fixture
def vault(tmp_path: Path, monkeypatch):
    password_file = tmp_path / "vault-pass"
    password_file.write_text(PASSWORD + "\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password_file))
    monkeypatch.delenv("ANSIBLE_VAULT_IDENTITY_LIST", raising=False)
    forget_secrets()
    yield lambda text: VaultValue(vault_encrypt(text, PASSWORD))
    forget_secrets()


def test_vaulted_values_and_what_templates_refer_to_are_secrets(vault):
    hostvars = {"ctl01": {
        "monitoring_alert_receivers": [
            {"name": "oncall", "type": "webhook", "url": vault("https://hooks.example/oncall/AbC123")},
            {"name": "slack", "type": "slack", "url": "{{ vault_slack_url }}", "channel": "#gpu"},
            {"name": "mail", "type": "email", "to": "a@example", "from": "b@example", "smarthost": "smtp:587",
             "auth_password": "{{ smtp_relay_login }}"},
        ],
        "vault_slack_url": "https://hooks.slack.example/T0/B0/tok3n",
        "smtp_relay_login": vault("mail-pa55"),
        "slurm_accounting_db_password": vault("db-pa55word"),
    }}
    secrets = secret_values(hostvars)
    assert {"https://hooks.example/oncall/AbC123", "https://hooks.slack.example/T0/B0/tok3n", "mail-pa55",
            "db-pa55word"} <= secrets
    text = Redactor(secrets).text("posted https://hooks.example/oncall/AbC123 and mail-pa55, db-pa55word")
    assert text == f"posted {MASK} and {MASK}, {MASK}"


@pytest.mark.parametrize("name", ["ansible_ssh_pass", "ansible_become_pass", "ipmi_pw", "vault_anything",
                                  "grafana_api_token", "ldap_bind_password"])
def test_secret_names(name: str):
    assert "s3cr3t-value" in secret_values({"h": {name: "s3cr3t-value"}})


def test_credentials_inside_urls_anywhere():
    secrets = secret_values({"h": {"certification_pip_extra_index_url": "https://deploy:hunter2x@pypi.example/simple"}})
    assert "hunter2x" in secrets
    assert "hunter2x" not in Redactor(secrets).text("pip: https://deploy:hunter2x@pypi.example/simple")


def test_values_of_any_length_and_type():
    secrets = secret_values({"h": {"bmc_password": 4242, "short_token": "ab1"}})
    redactor = Redactor(secrets)
    assert redactor.text("pin 4242, token ab1") == f"pin {MASK}, token {MASK}"
    # A short secret is masked where it stands alone, not inside longer words or numbers.
    assert redactor.text("port 42424 cab12") == "port 42424 cab12"


def test_records_are_private(tmp_path: Path):
    record = new_record_dir(tmp_path / "runs", "apply")
    log = EventLog(record / "events.jsonl", Redactor([]))
    log.write({"event": "x"})
    log.close()
    write_summary(record, {"x": 1}, Redactor([]))
    raw = record / "artifacts"
    raw.mkdir(mode=0o755)
    (raw / "stdout").write_text("hunter2x\n")
    Redactor(["hunter2x"]).files(raw)
    make_private(raw)  # as the runner does with its raw files
    assert stat.S_IMODE(record.stat().st_mode) == 0o700
    assert stat.S_IMODE(raw.stat().st_mode) == 0o700
    for path in (record / "events.jsonl", record / "summary.json", raw / "stdout"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert (raw / "stdout").read_text() == f"{MASK}\n"
