"""The media-URI policy checks the host a fetcher would reach, however the URI spells it.

Every spelling below names a loopback, private, link-local or metadata address (or is a malformed authority a
fetcher reads as one), and each is refused under the default policy and forwarded when private hosts are allowed.
"""

from __future__ import annotations

import pytest
from modelir.pipeline.hosts import ipv4
from modelir.pipeline.media_policy import DEFAULT_POLICY, MediaPolicy

REFUSED = [
    # IPv4 as `inet_aton` reads it: one number, hex, octal, short forms, mixed
    "https://2130706433/x",
    "https://0x7f000001/x",
    "https://017700000001/x",
    "https://0x7f.0.0.1/x",
    "https://0x7F.1/x",
    "https://0177.0.0.1/x",
    "https://127.1/x",
    "https://127.0.1/x",
    "https://2852039166/latest/meta-data",  # 169.254.169.254
    "https://169.254.169.254/latest/meta-data",
    "https://0xa9.0xfe.0xa9.0xfe/",
    "https://10.1/x",
    "https://0/x",
    "https://0.0.0.0/x",
    "https://127.0.0.1./x",
    "https://127.0.0.1:443/x",
    "https://user:pw@127.0.0.1/x",
    "https://%31%32%37.0.0.1/x",  # percent-escapes in the host
    "https://\uff11\uff12\uff17.0.0.1/x",  # full-width digits (NFKC)
    "https://127\u30020\u30020\u30021/x",  # ideographic full stops
    # names
    "https://localhost/x",
    "https://localhost./x",
    "https://LOCALHOST/x",
    "https://a.localhost/x",
    "https://localhost.localdomain/x",
    # IPv6, with an embedded IPv4 address
    "https://[::1]/x",
    "https://[0:0:0:0:0:0:0:1]/x",
    "https://[::ffff:127.0.0.1]/x",
    "https://[::ffff:7f00:1]/x",
    "https://[::ffff:a9fe:a9fe]/x",
    "https://[::127.0.0.1]/x",
    "https://[2002:7f00:1::]/x",  # 6to4
    "https://[64:ff9b::a9fe:a9fe]/x",  # NAT64
    "https://[fe80::1%25eth0]/x",
    "https://[fd00::1]/x",
    "https://[::]/x",
    # malformed authorities a lenient parser reads as `https://127.0.0.1/x`
    "https:127.0.0.1/x",
    "https:/127.0.0.1/x",
    "https:/\\127.0.0.1/x",
    "https:\\\\127.0.0.1/x",
    "https:///127.0.0.1/x",
    "https://\\127.0.0.1/x",
    " https://127.0.0.1/x",
    "https://127.0.0.1\t/x",
    "https://127.0.\n0.1/x",
    "https:example.com/x",  # not a private host, but not spelled as a URL every fetcher agrees on
    # numbers that are no address
    "https://0x7g.0.0.1/x",
    "https://1.2.3.4.5/x",
    "https://256.256.256.256/x",
    "https:///x",
]

FORWARDED = [
    "https://example.com/x.png",
    "https://example.com./x.png",
    "https://8.8.8.8/x",
    "https://134744072/x",  # 8.8.8.8 as one number: public
    "https://[2001:4860:4860::8888]/x",
    "https://img.example.com:8443/a/b?c=d#e",
    "https://127.0.0.1.example.com/x",  # a name whose last label is not a number
    "gs://bucket/object",
    "data:image/png;base64,iVBORw0KGgo=",
]


@pytest.mark.parametrize("uri", REFUSED)
def test_every_spelling_of_a_private_address_is_refused(uri):
    assert DEFAULT_POLICY.problem(uri) is not None, uri


@pytest.mark.parametrize("uri", REFUSED)
def test_the_policy_can_allow_them(uri):
    assert MediaPolicy(allow_private_hosts=True).problem(uri) is None


@pytest.mark.parametrize("uri", FORWARDED)
def test_public_hosts_pass(uri):
    assert DEFAULT_POLICY.problem(uri) is None, DEFAULT_POLICY.problem(uri)


@pytest.mark.parametrize(
    "spelling", ["2130706433", "0x7f000001", "017700000001", "0x7f.0.0.1", "0177.0.0.1", "127.1", "127.0.1"]
)
def test_every_ipv4_spelling_is_read_as_its_address(spelling):
    assert str(ipv4(spelling)) == "127.0.0.1"


def test_an_unclosed_ipv6_literal_is_no_uri_whatever_the_policy():
    for policy in (DEFAULT_POLICY, MediaPolicy(allow_private_hosts=True)):
        assert policy.problem("https://[::1/x") is not None
