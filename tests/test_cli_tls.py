"""The command line talks TLS: `modelir serve` with a certificate configured, `--tls CA_FILE` on a client."""

from __future__ import annotations

import subprocess

from tests.test_cli import MODELIR, _start_server
from tests.test_robust_server import _self_signed


def test_models_over_tls_with_the_servers_ca(tmp_path):
    cert, key = _self_signed()
    (tmp_path / "server.pem").write_bytes(cert)
    (tmp_path / "server.key").write_bytes(key)
    config = tmp_path / "modelir.yaml"
    config.write_text(
        "server: {tls: {cert_file: server.pem, key_file: server.key}}\nmodels: {reference: {transport: reference}}\n"
    )
    process, target = _start_server("--config", str(config))
    try:
        secure = [*MODELIR, "models", "--target", target, "--tls", str(tmp_path / "server.pem")]
        listed = subprocess.run([*secure, "--tls-server-name", "localhost"], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and "reference" in listed.stdout, listed.stderr
        alone = subprocess.run([*MODELIR, "models", "--tls"], capture_output=True, text=True, timeout=60)
        assert alone.returncode == 2 and "--tls goes with --target" in alone.stderr
    finally:
        process.kill()
        process.wait()
