"""A request the client cannot send (h11 refuses a header value it holds, e.g. a token ending in a
newline) is our own error, not an unavailable sidecar: SidecarError at once, no retries, and no error text
that carries the bearer token (it reaches the driver, Spark's logs and spark-publish's stderr)."""

from __future__ import annotations

import logging

import pytest

from rocksidecar.pipeline.client import GaveUpError, SidecarClient, SidecarError
from tests.pipeline.fake_sidecar import FakeSidecar

MESSAGE = b'{"topic":"T","body":"x"}'
SECRET = "s3cr3t"


def test_a_header_that_cannot_be_sent_fails_at_once_without_the_token(
    fake: FakeSidecar, fake_url: str, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    fake.token = SECRET
    caplog.set_level(logging.DEBUG, logger="rocksidecar.pipeline")  # ours; httpcore's debug trace quotes it
    with (
        SidecarClient(fake_url, token=f"{SECRET}\n", max_retries=3, sleep=sleeps.append) as c,
        pytest.raises(SidecarError, match="LocalProtocolError") as info,
    ):
        c.post_encoded([MESSAGE], "k")
    error = info.value
    assert not isinstance(error, GaveUpError) and error.status is None
    assert sleeps == [] and fake.requests == []  # never sent, never retried
    chained = [error.__cause__, error.__context__]
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("rocksidecar.")]
    texts = [str(error), *map(str, filter(None, chained)), *ours]
    assert not any(SECRET in text for text in texts), texts


def test_the_same_token_without_the_newline_is_sent(fake: FakeSidecar, fake_url: str) -> None:
    fake.token = SECRET
    with SidecarClient(fake_url, token=SECRET, max_retries=0) as c:
        assert [r.status for r in c.post_encoded([MESSAGE], "k")] == ["SENT"]
