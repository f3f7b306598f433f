"""Opaque members of native JSON move into artifacts and back, exactly."""

from __future__ import annotations

import orjson
from modelir.transports import _common, opaque_json
from modelir.v1 import content_pb2

ISSUER = content_pb2.Issuer(transport="anthropic_messages", model="claude")
SEARCH = content_pb2.OPAQUE_ARTIFACT_KIND_ENCRYPTED_SEARCH_RESULT


def _encrypted(path, key):
    return SEARCH if key == "encrypted_content" else None


def test_extract_then_restore_is_the_identity_and_keeps_order():
    native = {
        "type": "web_search_tool_result",
        "content": [
            {"type": "web_search_result", "url": "https://a", "encrypted_content": "Eq1/x~y"},
            {"type": "web_search_result", "url": "https://b", "encrypted_content": "Eq2", "page_age": None},
        ],
        "a/b~c": {"encrypted_content": "Eq3"},
    }
    text, artifacts = opaque_json.extract(native, _encrypted, ISSUER)
    assert "encrypted_content" not in text and orjson.loads(text)["content"][1]["page_age"] is None
    assert [a.json_pointer for a in artifacts] == [
        "/content/0/encrypted_content",
        "/content/1/encrypted_content",
        "/a~1b~0c/encrypted_content",
    ]
    assert [a.data for a in artifacts] == [b"Eq1/x~y", b"Eq2", b"Eq3"] and artifacts[0].issuer == ISSUER
    assert opaque_json.restore(text, artifacts) == native


def test_char_offsets_become_utf8_byte_offsets():
    text = "caf\u00e9 \u2014 ok"
    assert _common.char_to_byte_offset(text, 4) == 5
    assert _common.char_to_byte_offset(text, 6) == 9
    assert _common.char_to_byte_offset(text, 99) == len(text.encode())
