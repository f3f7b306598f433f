"""Signing and sealing the reasoning the reference model issues, and checking the artifacts replayed to it.

Visible reasoning carries an HMAC signature over the model id and the text, as Anthropic's thinking blocks carry
a `signature`; hidden reasoning travels sealed (the text, base64, plus its HMAC), as a provider's redacted
thinking does. Both are keyed by the model's secret, so an artifact from another key or another model, or an
altered one, fails its check and is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from modelir import errors
from modelir.v1 import content_pb2, request_pb2


class Sealer:
    """Issues and checks reasoning artifacts under one secret, for one model id."""

    def __init__(self, secret: bytes, model_id: str) -> None:
        self._secret = secret
        self._model_id = model_id

    def _sign(self, text: str) -> bytes:
        mac = hmac.new(self._secret, f"{self._model_id}\x00{text}".encode(), hashlib.sha256)
        return mac.hexdigest().encode()

    def attach(self, part: content_pb2.Part, thought: str, *, visible: bool, issuer: content_pb2.Issuer) -> None:
        """Give a reasoning part its artifact: the text and its signature, or (hidden) the sealed text only."""
        if visible:
            part.reasoning.text = thought
            part.artifacts.add(kind=content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE, data=self._sign(thought), issuer=issuer)
            return
        sealed = base64.urlsafe_b64encode(thought.encode())
        part.artifacts.add(
            kind=content_pb2.OPAQUE_ARTIFACT_KIND_REDACTED_DATA,
            data=sealed + b"." + self._sign(sealed.decode()),
            issuer=issuer,
        )

    def unseal(self, artifact: content_pb2.OpaqueArtifact, part: content_pb2.Part) -> str | None:
        """The reasoning text an artifact vouches for, or None when it fails its check."""
        if artifact.kind == content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE:
            text = part.reasoning.text
            return text if hmac.compare_digest(artifact.data, self._sign(text)) else None
        if artifact.kind == content_pb2.OPAQUE_ARTIFACT_KIND_REDACTED_DATA:
            sealed, _, mac = artifact.data.partition(b".")
            if not hmac.compare_digest(mac, self._sign(sealed.decode("ascii", "replace"))):
                return None
            return base64.urlsafe_b64decode(sealed).decode()
        return None

    def verify(self, request: request_pb2.Request) -> None:
        """Reject replayed reasoning whose artifact this model did not issue or that was altered."""
        if request.WhichOneof("input") != "conversation":
            return
        for i, message in enumerate(request.conversation.messages):
            for j, part in enumerate(message.parts):
                if part.WhichOneof("content") == "reasoning" and not part.artifacts:
                    raise errors.ForeignArtifactError(
                        f"messages[{i}].parts[{j}]: the reference model only accepts reasoning with the "
                        "artifact it issued"
                    )
                for artifact in part.artifacts:
                    if self.unseal(artifact, part) is None:
                        raise errors.ForeignArtifactError(
                            f"messages[{i}].parts[{j}]: the reasoning artifact fails its signature check "
                            "(tampered, or issued under another key)"
                        )
