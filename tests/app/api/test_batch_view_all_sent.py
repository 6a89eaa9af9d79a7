"""The all-SENT batch (app.sidecar.AllSent) answered by its own comprehension (issue 32): the same JSON
as the general path gives the same outcomes in a plain list."""

from __future__ import annotations

import orjson

from rocksidecar.app.api.views import batch_view
from rocksidecar.app.sidecar import SENT, AllSent, Outcome
from rocksidecar.rmq import MessageQueue, SendResult, SendStatus


def _sent(n: int) -> list[Outcome | Exception]:
    out: list[Outcome | Exception] = []
    for i in range(n):
        queue = MessageQueue("T", f"broker-{'ab'[i % 2]}", i % 4)
        result = SendResult(SendStatus.SEND_OK, f"ID{i:030d}", f"OFF{i:029d}", queue, 1000 + i)
        out.append(Outcome(result.msg_id, SENT, result))
    return out


def test_all_sent_answer_is_the_general_paths_byte_for_byte() -> None:
    for n in (1, 2, 100):
        outcomes = _sent(n)
        fast, general = batch_view(AllSent(outcomes)), batch_view(list(outcomes))
        assert orjson.dumps(fast) == orjson.dumps(general)  # same keys, same order, same values
        assert fast["sent"] == n and fast["failed"] == 0
        assert orjson.loads(orjson.dumps(fast))["results"][n - 1] == {
            "index": n - 1,
            "id": f"ID{n - 1:030d}",
            "status": "SENT",
            "broker": f"broker-{'ab'[(n - 1) % 2]}",
            "queueId": (n - 1) % 4,
            "queueOffset": 1000 + n - 1,
            "msgId": f"OFF{n - 1:029d}",
        }


def test_all_sent_answer_escapes_broker_strings_as_the_general_path_does() -> None:
    # The broker's name and offset ids are broker input: quotes, backslashes, control characters and
    # non-ASCII text come out of the Struct encoding as orjson writes them in the general path's dicts.
    outcomes: list[Outcome | Exception] = []
    for i, text in enumerate(['a"b', "c\\d", "e\nf", "\x01", "\x7f", "é", "\u2028", "/"]):
        result = SendResult(SendStatus.SEND_OK, f"ID{i}", text, MessageQueue("T", text, i), i)
        outcomes.append(Outcome(result.msg_id, SENT, result))
    assert orjson.dumps(batch_view(AllSent(outcomes))) == orjson.dumps(batch_view(list(outcomes)))
