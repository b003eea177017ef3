"""A test certificate authority: a CA, a server certificate for 127.0.0.1 and localhost,
and client certificates, written as PEM files (made with ``cryptography``)."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclasses.dataclass
class Pem:
    cert: Path  # the certificate (chain)
    key: Path  # the private key
    both: Path  # key and chain in one file (Kafka's PEM key store)


def _name(common_name: str, org: str = "pykfk tests") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    def __init__(self, directory: Path):
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name("pykfk test CA")).issuer_name(_name("pykfk test CA"))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_path = directory / "ca.pem"
        self.cert_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    @property
    def cert_pem(self) -> str:
        return self.cert_path.read_text()

    def issue(self, name: str, common_name: str, *, server: bool = False, org: str = "pykfk tests",
              key_password: str | None = None) -> Pem:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, org)).issuer_name(self._cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        encryption = (serialization.BestAvailableEncryption(key_password.encode()) if key_password
                      else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        chain_pem = cert.public_bytes(serialization.Encoding.PEM) + self._cert.public_bytes(serialization.Encoding.PEM)
        pem = Pem(self.directory / f"{name}.crt", self.directory / f"{name}.key", self.directory / f"{name}.pem")
        pem.cert.write_bytes(chain_pem)
        pem.key.write_bytes(key_pem)
        pem.both.write_bytes(key_pem + chain_pem)
        return pem
