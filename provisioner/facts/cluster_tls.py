"""The monitoring endpoints' TLS: a cluster CA the control node keeps, and a certificate per host.

`python -m provisioner.facts.cluster_tls DIRECTORY CLUSTER` reads {host: [addresses]} as JSON on
standard input and makes sure DIRECTORY holds the CA (ca.crt, ca.key) and, for every host, a key
and a certificate signed by that CA naming the host and its addresses; existing ones are kept while
valid for 30 more days with the same names. Prints {"changed": [...hosts]} as JSON. One run
for the whole fleet (1,000 hosts take a few seconds); every file is 0600 in a 0700 folder.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from provisioner.ansible.records import write_private

CA_DAYS = 3650
HOST_DAYS = 825
RENEW_BEFORE = timedelta(days=30)


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ensure_ca(directory: Path, cluster: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA kept in `directory`, made on first use."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    cert_path, key_path = directory / "ca.crt", directory / "ca.key"
    if cert_path.is_file() and key_path.is_file():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), key
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    name = _name(f"provision {cluster} monitoring CA")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    write_private(key_path, _key_bytes(key))
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _names(host: str, addresses: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(host)]
    for value in dict.fromkeys([*addresses, "127.0.0.1"]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(value)))
        except ValueError:
            if value != host:
                names.append(x509.DNSName(value))
    return names


def _current(path: Path, ca: x509.Certificate, names: list[x509.GeneralName]) -> bool:
    if not path.is_file() or not path.with_suffix(".key").is_file():
        return False
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        cert.verify_directly_issued_by(ca)
        present = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (InvalidSignature, ValueError, TypeError, x509.ExtensionNotFound):  # another CA's, or unreadable
        return False
    return set(present) == set(names) and cert.not_valid_after_utc - RENEW_BEFORE > datetime.now(UTC)


def ensure_host_certificates(directory: Path, cluster: str, hosts: dict[str, list[str]]) -> list[str]:
    """Every host's key and certificate under directory/hosts/; returns the hosts given new ones."""
    ca, ca_key = ensure_ca(directory, cluster)
    folder = directory / "hosts"
    folder.mkdir(mode=0o700, exist_ok=True)
    changed = []
    now = datetime.now(UTC)
    for host, addresses in sorted(hosts.items()):
        names = _names(host, addresses)
        cert_path = folder / f"{host}.crt"
        if _current(cert_path, ca, names):
            continue
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(host)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=HOST_DAYS))
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        write_private(folder / f"{host}.key", _key_bytes(key))
        write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        changed.append(host)
    return changed


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    hosts = json.load(sys.stdin)
    changed = ensure_host_certificates(Path(argv[0]), argv[1],
                                       {str(host): [str(a) for a in addresses] for host, addresses in hosts.items()})
    print(json.dumps({"changed": changed}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
