"""An MIT Kerberos KDC (Debian's krb5-kdc) for tests: a realm in a temporary directory,
served on 127.0.0.1, with principals and keytabs made on demand."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from pykfk.testing import free_port

REALM = "PYKFK.TEST"


class Kdc:
    def __init__(self, directory: Path, realm: str = REALM):
        self.dir = directory
        self.realm = realm
        self.port = free_port()
        self.krb5_conf = directory / "krb5.conf"
        self.kdc_conf = directory / "kdc.conf"
        self.krb5_conf.write_text(
            f"[libdefaults]\n default_realm = {realm}\n dns_lookup_realm = false\n dns_lookup_kdc = false\n"
            f" rdns = false\n dns_canonicalize_hostname = false\n udp_preference_limit = 1\n"
            f"[realms]\n {realm} = {{\n  kdc = 127.0.0.1:{self.port}\n }}\n")
        self.kdc_conf.write_text(
            f"[kdcdefaults]\n kdc_listen = 127.0.0.1:{self.port}\n kdc_tcp_listen = 127.0.0.1:{self.port}\n"
            f"[realms]\n {realm} = {{\n  database_name = {directory}/principal\n"
            f"  key_stash_file = {directory}/stash\n  acl_file = {directory}/kadm5.acl\n"
            f"  supported_enctypes = aes256-cts-hmac-sha1-96:normal\n }}\n"
            f"[logging]\n kdc = FILE:{directory}/kdc.log\n")
        self.env = {**os.environ, "KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)}
        self._run("/usr/sbin/kdb5_util", "create", "-s", "-r", realm, "-P", "master-secret")
        self.proc: subprocess.Popen[bytes] | None = None

    def _run(self, *command: str) -> str:
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=30, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: {result.stderr or result.stdout}")
        return result.stdout

    def start(self) -> Kdc:
        self.proc = subprocess.Popen(["/usr/sbin/krb5kdc", "-n", "-r", self.realm], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if "commencing operation" in self._log():
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"krb5kdc did not start: {self._log()[-2000:]}")

    def _log(self) -> str:
        try:
            return (self.dir / "kdc.log").read_text(errors="replace")
        except OSError:
            return ""

    def add_principal(self, name: str) -> Path:
        """Make ``name`` (random key) and return a keytab holding it."""
        keytab = self.dir / (name.replace("/", "_") + ".keytab")
        self._run("/usr/sbin/kadmin.local", "-r", self.realm, "-q", f"addprinc -randkey {name}@{self.realm}")
        self._run("/usr/sbin/kadmin.local", "-r", self.realm, "-q", f"ktadd -k {keytab} {name}@{self.realm}")
        return keytab

    def kinit(self, name: str, keytab: Path) -> Path:
        """A credential cache for ``name`` from its keytab."""
        cache = self.dir / (name.replace("/", "_") + ".ccache")
        self._run("/usr/bin/kinit", "-kt", str(keytab), "-c", f"FILE:{cache}", f"{name}@{self.realm}")
        return cache

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
