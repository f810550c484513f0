"""The broker identity file's content: round trip, and damage named as such."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.broker.core.identity import BrokerIdentity
from triomq.errors import ConfigError

identities = st.builds(BrokerIdentity, st.text(), st.text(), st.integers(-1, 2**63 - 1),
                       st.text())


@given(identities)
def test_an_identity_reads_back_as_written(identity):
    assert BrokerIdentity.decode(identity.encode(), "f") == identity


@given(st.binary())
def test_any_bytes_are_an_identity_or_a_damaged_file(data):
    try:
        BrokerIdentity.decode(data, "f")
    except ConfigError as exc:
        assert "broker identity file 'f' is damaged" in str(exc)


@given(identities, st.sampled_from(["clusterName", "brokerName", "brokerId",
                                    "registerCheckCode"]))
def test_a_missing_field_is_damage(identity, field):
    fields = json.loads(identity.encode())
    del fields[field]
    with pytest.raises(ConfigError, match="damaged"):
        BrokerIdentity.decode(json.dumps(fields).encode(), "f")


def test_names_that_are_not_strings_are_damage():
    data = json.dumps({"clusterName": 1, "brokerName": "g", "brokerId": 2,
                       "registerCheckCode": "x"}).encode()
    with pytest.raises(ConfigError, match="damaged"):
        BrokerIdentity.decode(data, "f")
    with pytest.raises(ConfigError, match="damaged"):
        BrokerIdentity.decode(b"[" * 100_000, "f")
