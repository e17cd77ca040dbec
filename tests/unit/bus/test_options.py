"""nats.connect() arguments from the settings: credentials and TLS files checked before any
connection, each error naming the setting and never a secret."""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path
from typing import Any

import pytest

from placewatch.worker.bus.options import connect_options
from placewatch.worker.config import ConfigError, Settings

from tests.support.certs import make_certs

SECRET = "s3cr3t-value"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One CA and its certificates for the module: three RSA keys take openssl a second or
    more, and no test here changes them."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


def options(**given: Any) -> dict[str, Any]:
    return connect_options(Settings(**given))


def refused(**given: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        options(**given)
    message = str(caught.value)
    assert SECRET not in message
    return message


def test_no_credentials_give_no_options() -> None:
    assert options() == {}


def test_user_and_password() -> None:
    assert options(user="n1", password=SECRET) == {"user": "n1", "password": SECRET}
    assert options(user="n1") == {"user": "n1", "password": ""}


def test_token() -> None:
    assert options(token=SECRET) == {"token": SECRET}


def test_readable_credential_files_are_passed_by_path(tmp_path: Path) -> None:
    creds, seed = tmp_path / "node.creds", tmp_path / "node.nk"
    creds.write_text("-----BEGIN NATS USER JWT-----\n")
    seed.write_text("SUAEXAMPLE\n")
    assert options(creds=str(creds), nkey_seed=str(seed)) == {
        "nkeys_seed": str(seed),
        "user_credentials": str(creds),
    }


@pytest.mark.parametrize("field", ["creds", "nkey_seed"])
def test_an_unreadable_credentials_file_names_the_setting(field: str, tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    message = refused(**{field: str(missing)}, user="n1", password=SECRET)
    assert (
        message
        == f"{field}: {missing} cannot be read (No such file or directory); check the path and its permissions"
    )


@pytest.mark.parametrize("field", ["creds", "nkey_seed"])
def test_a_credentials_path_that_names_no_file_is_refused_before_the_client_reads_it(
    field: str, tmp_path: Path
) -> None:
    """The client would block on a named pipe at every connect, and read /dev/zero until
    memory ran out."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert refused(**{field: str(fifo)}) == (
        f"{field}: {fifo} is a named pipe; give the path of a file; "
        "check the path and its permissions"
    )
    assert refused(**{field: "/dev/zero"}) == (
        f"{field}: /dev/zero is a character device; give the path of a file; "
        "check the path and its permissions"
    )


def test_a_missing_ca_names_tls_ca(tmp_path: Path) -> None:
    message = refused(tls_ca=str(tmp_path / "absent.pem"), token=SECRET)
    assert message == (
        "tls_ca: cannot load the TLS files (No such file or directory); "
        "check the paths and that they are PEM"
    )


def test_a_ca_that_is_not_pem_names_tls_ca(tmp_path: Path) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    message = refused(tls_ca=str(garbage), password=SECRET, user="n1")
    assert message.startswith("tls_ca: cannot load the TLS files (")
    assert message.endswith("); check the paths and that they are PEM")


def test_a_ca_turns_tls_on_verifying_the_server(certs: dict[str, Path]) -> None:
    context = options(tls_ca=str(certs["ca.pem"]))["tls"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    (ca,) = context.get_ca_certs()
    assert ca["subject"] == ((("commonName", "test-ca"),),)


def test_a_client_certificate_and_its_key_are_loaded(certs: dict[str, Path]) -> None:
    given = {"tls_ca": str(certs["ca.pem"]), "tls_cert": str(certs["client.pem"])}
    context = options(**given, tls_key=str(certs["client.key"]))["tls"]
    assert isinstance(context, ssl.SSLContext)


def test_a_key_that_does_not_match_the_certificate_names_tls_cert_and_key(
    certs: dict[str, Path],
) -> None:
    message = refused(
        tls_ca=str(certs["ca.pem"]),
        tls_cert=str(certs["client.pem"]),
        tls_key=str(certs["server.key"]),
        token=SECRET,
    )
    assert message.startswith("tls_cert/tls_key: cannot load the TLS files (")
    assert message.endswith("); check the paths and that they are PEM")


def test_a_missing_client_certificate_names_tls_cert_and_key(
    certs: dict[str, Path], tmp_path: Path
) -> None:
    message = refused(tls_ca=str(certs["ca.pem"]), tls_cert=str(tmp_path / "absent.pem"))
    assert message == (
        "tls_cert/tls_key: cannot load the TLS files (No such file or directory); "
        "check the paths and that they are PEM"
    )
