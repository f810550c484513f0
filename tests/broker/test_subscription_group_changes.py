"""An admin's changes to the subscription-group table: ``update`` and ``delete``."""

from __future__ import annotations

import pytest

from triomq.broker.consume.core.subscription_groups import (
    AttributeRefused,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
)
from triomq.protocol.route import DataVersion


def test_an_update_replaces_the_config_and_keeps_its_attributes() -> None:
    table = SubscriptionGroupTable([SubscriptionGroupConfig("cg", attributes={"k": "v"})],
                                   DataVersion(0, 10, 4))
    stored = table.update(SubscriptionGroupConfig("cg", retry_max_times=3), now=20)
    assert stored == SubscriptionGroupConfig("cg", retry_max_times=3, attributes={"k": "v"})
    assert table.get("cg") == stored and table.data_version == DataVersion(0, 20, 5)
    table.update(SubscriptionGroupConfig("new"), now=30)
    assert table.get("new") == SubscriptionGroupConfig("new")
    assert table.data_version == DataVersion(0, 30, 6)


def test_attributes_are_refused_as_rocketmq_knows_none_for_groups() -> None:
    table = SubscriptionGroupTable()
    with pytest.raises(AttributeRefused, match="unsupported key: '\\+k'"):
        table.update(SubscriptionGroupConfig("cg", attributes={"+k": "v"}), now=1)
    assert "cg" not in table and table.data_version == DataVersion()


def test_a_delete_forgets_the_config_and_its_forbidden_topics() -> None:
    table = SubscriptionGroupTable([SubscriptionGroupConfig("cg")], DataVersion(0, 10, 1),
                                   forbidden={"cg": {"t": 1}, "gone": {"t": 1}})
    assert table.delete("cg", now=20)
    assert "cg" not in table and table.forbidden == {"gone": {"t": 1}}
    assert table.data_version == DataVersion(0, 20, 2)
    # Only a forbidden entry left: the table changes, its version does not.
    assert table.delete("gone", now=30) and table.data_version == DataVersion(0, 20, 2)
    assert not table.delete("cg", now=40)
