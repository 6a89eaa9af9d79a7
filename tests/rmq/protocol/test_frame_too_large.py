"""A command larger than a frame carries is refused by the encoder as RequestTooLarge: final (the same
command is as large at every try and on every broker) and a ClientError (ours: nothing was written), not
the retriable transport FrameError it was (review of session 29)."""

from __future__ import annotations

import pytest

from rocksidecar.rmq.errors import ClientError, FrameError, RequestTooLarge, is_final
from rocksidecar.rmq.protocol.frame import MAX_FRAME_BYTES, RemotingCommand, encode


def test_a_command_past_the_frame_limit_is_a_final_local_error() -> None:
    with pytest.raises(RequestTooLarge) as err:
        encode(RemotingCommand(code=310, body=b"x" * MAX_FRAME_BYTES))
    assert is_final(err.value) and not err.value.retriable
    assert isinstance(err.value, ClientError) and not isinstance(err.value, FrameError)


def test_a_command_of_the_largest_frame_is_encoded() -> None:
    header_size = len(encode(RemotingCommand(code=310))) - 4  # its length word, header word and header
    frame = encode(RemotingCommand(code=310, body=b"x" * (MAX_FRAME_BYTES - 4 - header_size)))
    assert len(frame) == MAX_FRAME_BYTES
