"""The monitoring endpoints' TLS material and basic-auth hash."""

from __future__ import annotations

import stat
from pathlib import Path

import bcrypt
from cryptography import x509

from provisioner.facts.cluster_tls import ensure_host_certificates
from provisioner.facts.monitoring import tls_names, web_password_hash


def _names(path: Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(name.value) for name in san}


def test_certificates_are_made_once_kept_while_valid_and_remade_when_an_address_changes(tmp_path: Path):
    directory = tmp_path / "ca"
    hosts = {f"gpu{n:04d}": [f"10.1.{n // 250}.{n % 250 + 1}"] for n in range(300)}
    assert len(ensure_host_certificates(directory, "prod", hosts)) == 300
    assert ensure_host_certificates(directory, "prod", hosts) == []
    assert _names(directory / "hosts" / "gpu0007.crt") == {"gpu0007", "10.1.0.8", "127.0.0.1"}
    ca = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    x509.load_pem_x509_certificate((directory / "hosts" / "gpu0007.crt").read_bytes()).verify_directly_issued_by(ca)
    hosts["gpu0007"] = ["10.9.9.9"]
    assert ensure_host_certificates(directory, "prod", hosts) == ["gpu0007"]
    assert "10.9.9.9" in _names(directory / "hosts" / "gpu0007.crt")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in [directory / "ca.key", directory / "hosts" / "gpu0007.key"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_certificate_of_another_ca_is_replaced(tmp_path: Path):
    first, second = tmp_path / "first", tmp_path / "second"
    ensure_host_certificates(first, "a", {"gpu01": ["10.0.0.1"]})
    ensure_host_certificates(second, "b", {"gpu01": ["10.0.0.1"]})
    (second / "hosts" / "gpu01.crt").write_bytes((first / "hosts" / "gpu01.crt").read_bytes())
    assert ensure_host_certificates(second, "b", {"gpu01": ["10.0.0.1"]}) == ["gpu01"]


def test_names_are_where_the_host_is_scraped_and_where_it_listens():
    hostvars = {"ctl01": {"ansible_host": "10.0.0.10"},
                "gpu01": {"monitoring_scrape_address": "gpu01.mgmt", "ansible_host": "10.0.1.1"},
                "gpu02": {"monitoring_listen_address": "10.0.2.2"}}
    assert tls_names(["ctl01", "gpu01", "gpu02"], hostvars) == {
        "ctl01": ["10.0.0.10"], "gpu01": ["gpu01.mgmt", "10.0.1.1"], "gpu02": ["gpu02", "10.0.2.2"]}


def test_the_password_hash_is_bcrypt_stable_and_unique_to_the_cluster():
    first = web_password_hash("s3cret-pass", "prod")
    assert first.startswith("$2b$10$") and bcrypt.checkpw(b"s3cret-pass", first.encode())
    assert web_password_hash("s3cret-pass", "prod") == first
    assert web_password_hash("s3cret-pass", "lab") != first
    assert not bcrypt.checkpw(b"other", first.encode())
