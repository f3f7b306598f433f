"""The server's and the SDK's security settings (#14): TLS both ways, gRPC limits, the media-URI policy."""

from __future__ import annotations

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from modelir import Model, build_request, errors
from modelir.config import ConfigError, ServerSettings, build_config
from modelir.pipeline.media_policy import MediaPolicy, check
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.server.app import server_options
from modelir.transports.reference import ReferenceModel
from modelir.v1 import content_pb2


def _self_signed() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelir-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


async def test_the_server_serves_tls_and_remote_model_connects_with_its_ca(tmp_path):
    cert, key = _self_signed()
    (tmp_path / "server.pem").write_bytes(cert)
    (tmp_path / "server.key").write_bytes(key)
    config = build_config(
        {
            "server": {"tls": {"cert_file": "server.pem", "key_file": "server.key"}},
            "models": {"reference": {"transport": "reference"}},
        },
        source=str(tmp_path / "modelir.yaml"),
        environ={},
    )
    assert config.server.tls_cert == cert
    server, port = await build_server(config.models, "127.0.0.1:0", settings=config.server)
    await server.start()
    try:
        (tmp_path / "ca.pem").write_bytes(cert)
        secure = RemoteModel(
            f"127.0.0.1:{port}", "reference", tls=str(tmp_path / "ca.pem"), tls_server_name="localhost"
        )
        response = await secure.arun(build_request("reference", prompt="hi", max_output_tokens=2))
        assert response.choices
        await secure.aclose()
        plain = RemoteModel(f"127.0.0.1:{port}", "reference")
        with pytest.raises(errors.ModelError):  # a plain-text client cannot talk to the TLS port
            await plain.arun(build_request("reference", prompt="hi", max_output_tokens=2), deadline=None)
        await plain.aclose()
    finally:
        await server.stop(None)


def test_grpc_limits_come_from_the_configuration():
    config = build_config(
        {
            "server": {"max_message_bytes": 1024, "max_concurrent_streams": 7},
            "models": {"reference": {"transport": "reference"}},
        },
        source="test",
        environ={},
    )
    options = dict(server_options(config.server))
    assert options["grpc.max_receive_message_length"] == 1024 == options["grpc.max_send_message_length"]
    assert options["grpc.max_concurrent_streams"] == 7
    assert "grpc.max_concurrent_streams" not in dict(server_options(ServerSettings()))
    with pytest.raises(ConfigError, match=r"server\.max_message_bytes"):
        build_config(
            {"server": {"max_message_bytes": 0}, "models": {"r": {"transport": "reference"}}}, source="t", environ={}
        )


async def test_a_message_over_the_configured_size_is_refused():
    models = {"reference": Model(ReferenceModel(), name="reference")}
    server, port = await build_server(models, "127.0.0.1:0", settings=ServerSettings(max_message_bytes=4096))
    await server.start()
    try:
        remote = RemoteModel(f"127.0.0.1:{port}", "reference")
        with pytest.raises(errors.ModelError):
            await remote.arun(build_request("reference", prompt="x" * 10_000, max_output_tokens=1))
        await remote.aclose()
    finally:
        await server.stop(None)


def _with_image(uri: str):
    request = build_request("reference", messages=[("user", "look")])
    request.conversation.messages[0].parts.add(blob=content_pb2.Blob(mime_type="image/png", uri=uri))
    return request


@pytest.mark.parametrize(
    "uri",
    [
        "file:///etc/passwd",
        "http://169.254.169.254/latest/meta-data/",
        "https://127.0.0.1:8080/admin",
        "https://[::1]/x.png",
        "https://10.0.0.7/x.png",
        "https://localhost/x.png",
        "https://[::ffff:192.168.1.1]/x.png",
        "ftp://example.com/x.png",
    ],
)
def test_media_uris_outside_the_policy_are_refused_naming_the_field(uri):
    with pytest.raises(errors.InvalidRequestError) as caught:
        check(_with_image(uri))
    assert "conversation.messages[0].parts[1].blob.uri" in str(caught.value.violations[0].field)


@pytest.mark.parametrize("uri", ["https://example.com/cat.png", "gs://bucket/cat.png", "data:image/png;base64,AA=="])
def test_public_https_bucket_and_inline_uris_pass(uri):
    check(_with_image(uri))


def test_the_policy_is_configurable_and_applied_by_the_model():
    config = build_config(
        {
            "server": {"media_uri_policy": {"allow_schemes": ["https", "http"], "allow_private_hosts": True}},
            "models": {"reference": {"transport": "reference"}},
        },
        source="test",
        environ={},
    )
    model = config.models["reference"]
    assert model.media_policy == MediaPolicy(frozenset({"https", "http"}), True)
    check(_with_image("http://10.0.0.7/x.png"), model.media_policy)
    strict = Model(ReferenceModel(), name="reference")
    with pytest.raises(errors.InvalidRequestError, match="file"):
        strict.run(_with_image("file:///etc/passwd"))


async def test_validate_reports_a_refused_media_uri_as_the_call_would():
    model = Model(ReferenceModel(), name="reference")
    verdict = await model.avalidate(_with_image("http://169.254.169.254/latest/meta-data/"))
    assert not verdict.accepted
    assert [v.field for v in verdict.field_violations] == ["conversation.messages[0].parts[1].blob.uri"]
    verdict = await model.avalidate(_with_image("https://example.com/cat.png"))
    assert not verdict.field_violations  # a public URI is checked against the manifest as usual
