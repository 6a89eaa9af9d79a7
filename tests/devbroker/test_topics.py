"""TopicTable: the TBW102 template, auto-creation, retry topics, name validation, and persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocksidecar.devbroker.topics import TopicConfig, TopicTable, is_system_topic, topic_name_error


def test_template_exists_only_with_auto_create() -> None:
    on = TopicTable(queues=8, auto_create=True)
    template = on.get("TBW102")
    assert template is not None and (template.perm, template.write_queue_nums) == (7, 8)
    assert TopicTable(queues=8, auto_create=False).get("TBW102") is None


def test_auto_create_inherits_with_clamped_queues_and_no_inherit_bit() -> None:
    table = TopicTable(queues=4, auto_create=True)
    few = table.auto_create("Few", "TBW102", 2, 0)
    many = table.auto_create("Many", "TBW102", 16, 0)
    assert few == TopicConfig("Few", 2, 2, 6) and many == TopicConfig("Many", 4, 4, 6)
    assert table.auto_create("X", "Few", 4, 0) is None  # only an inheritable template creates topics
    assert table.auto_create("Y", "Missing", 4, 0) is None and "Y" not in table


def test_ensure_creates_once() -> None:
    table = TopicTable(queues=4, auto_create=False)
    first = table.ensure("%RETRY%g")
    table.put(TopicConfig("%RETRY%g", 3, 3))
    assert first.queue_count == 1 and table.ensure("%RETRY%g").queue_count == 3


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "blank"),
        ("  ", "blank"),
        ("a/b", "illegal"),
        ("ü", "illegal"),
        ("x" * 128, "longer"),
        ("%RETRY%g-1|x", None),
    ],
)
def test_topic_names(name: str, problem: str | None) -> None:
    error = topic_name_error(name)
    assert (error is None) if problem is None else (problem in (error or ""))


def test_system_topics() -> None:
    assert is_system_topic("TBW102") and is_system_topic("rmq_sys_anything") and not is_system_topic("Orders")


def test_topics_survive_a_reload_but_the_template_follows_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    table = TopicTable(queues=4, auto_create=True, path=path)
    table.put(TopicConfig("Kept", 2, 3, 6, order=True))
    again = TopicTable(queues=4, auto_create=False, path=path)
    assert again.get("Kept") == TopicConfig("Kept", 2, 3, 6, order=True)
    assert again.names() == ["Kept"]


def test_a_topic_needs_a_queue() -> None:
    with pytest.raises(ValueError, match="at least one queue"):
        TopicTable(queues=4, auto_create=False).put(TopicConfig("None", 0, 0))
    with pytest.raises(ValueError, match="at least one queue"):
        TopicTable(queues=0, auto_create=True)
