"""Frame and header codec: golden bytes from Java 4.9.4 (protocol reference §1.4, §1.5) and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocksidecar.rmq.codes import LanguageCode, SerializeType
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.protocol.frame import FrameDecoder, RemotingCommand, decode, encode

JAVA_BINARY_REQUEST = bytes.fromhex(
    "0000002d010000290069000191000000070000000000000000000000140005746f70696300000009546f70696354657374"
)
JAVA_BINARY_RESPONSE = bytes.fromhex(
    "0000002801000024001100019100000007000000010000000f746f706963206e6f7420657869737400000000"
)
JAVA_JSON_REQUEST = (
    b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,'
    b'"serializeTypeCurrentRPC":"JSON","version":401}'
)


def test_decodes_java_binary_request() -> None:
    cmd = decode(JAVA_BINARY_REQUEST[4:])
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (105, LanguageCode.JAVA, 401, 7, 0)
    assert cmd.ext_fields == {"topic": "TopicTest"}
    assert cmd.remark is None and cmd.body == b"" and cmd.serialize_type is SerializeType.ROCKETMQ


def test_encodes_binary_request_byte_exactly() -> None:
    cmd = RemotingCommand(
        code=105,
        ext_fields={"topic": "TopicTest"},
        opaque=7,
        language=LanguageCode.JAVA,
        version=401,
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode(cmd) == JAVA_BINARY_REQUEST


def test_decodes_java_binary_response_with_remark() -> None:
    cmd = decode(JAVA_BINARY_RESPONSE[4:])
    assert cmd.code == 17 and cmd.remark == "topic not exist" and cmd.is_response and cmd.ext_fields == {}


def test_decodes_java_json_request_frame() -> None:
    frame = len(JAVA_JSON_REQUEST).to_bytes(4, "big")
    frame = (4 + len(JAVA_JSON_REQUEST)).to_bytes(4, "big") + frame + JAVA_JSON_REQUEST
    assert frame[:8] == bytes.fromhex("00000087 00000083")
    cmd = decode(frame[4:])
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque) == (105, LanguageCode.JAVA, 401, 7)
    assert cmd.ext_fields == {"topic": "TopicTest"} and cmd.serialize_type is SerializeType.JSON


def test_json_header_leniency() -> None:
    # Numbers and booleans in extFields become strings; missing language is JAVA; missing version 0.
    header = b'{"code":0,"extFields":{"queueId":3,"trace":true},"flag":1,"opaque":9}'
    frame = (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + b"body"
    cmd = decode(frame[4:])
    assert cmd.ext_fields == {"queueId": "3", "trace": "true"}
    assert cmd.language == LanguageCode.JAVA and cmd.version == 0 and cmd.body == b"body"


def test_we_announce_python_and_our_version() -> None:
    cmd = decode(encode(RemotingCommand(code=34))[4:])
    assert cmd.language == LanguageCode.PYTHON and cmd.version == 407


def test_binary_empty_value_reads_as_absent() -> None:
    wire = encode(
        RemotingCommand(code=1, ext_fields={"a": "", "b": "x"}, serialize_type=SerializeType.ROCKETMQ)
    )
    assert decode(wire[4:]).ext_fields == {"b": "x"}


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(0, 32767),
    ext_fields=st.dictionaries(texts.filter(bool), texts.filter(bool), max_size=8),
    body=st.binary(max_size=300),
    remark=st.one_of(st.none(), texts.filter(bool)),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3),
    language=st.sampled_from(list(LanguageCode)),
    version=st.integers(0, 32767),
    serialize_type=st.sampled_from(list(SerializeType)),
)


@given(commands)
def test_round_trip(cmd: RemotingCommand) -> None:
    assert decode(encode(cmd)[4:]) == cmd


@given(st.lists(commands, min_size=1, max_size=6), st.integers(1, 64))
def test_stream_decoder_reassembles_any_chunking(cmds: list[RemotingCommand], chunk: int) -> None:
    wire = b"".join(encode(c) for c in cmds)
    decoder, out = FrameDecoder(), []
    for i in range(0, len(wire), chunk):
        out.extend(decoder.feed(wire[i : i + chunk]))
    assert out == cmds


@pytest.mark.parametrize(
    "bad",
    [
        (2).to_bytes(4, "big") + b"\x00\x00",  # length below the header word
        (0x7FFFFFFF).to_bytes(4, "big"),  # beyond the 16 MiB frame limit
        (8).to_bytes(4, "big") + (0x00FFFFFF).to_bytes(4, "big") + b"abcd",  # header overruns the frame
        (8).to_bytes(4, "big") + (0x05000004).to_bytes(4, "big") + b"abcd",  # unknown serialize type
        (8).to_bytes(4, "big") + (4).to_bytes(4, "big") + b"{{{{",  # undecodable JSON
    ],
)
def test_corrupt_frames_raise_frame_error(bad: bytes) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(bad)


def test_a_frame_view_held_elsewhere_does_not_break_the_next_feed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampling profiler that keeps frame objects (sys._current_frames: ddtrace, Sentry's profiler)
    keeps decode()'s locals alive, the frame's view among them: the decoder must still be able to drop
    the bytes it consumed (before: BufferError "Existing exports of data" and the connection lost)."""
    import rocksidecar.rmq.protocol.frame as frame_mod

    held: list[memoryview] = []
    real_decode = frame_mod.decode

    def holding_decode(view: memoryview) -> RemotingCommand:
        held.append(view)
        return real_decode(view)

    monkeypatch.setattr(frame_mod, "decode", holding_decode)
    wire = encode(RemotingCommand(code=10, opaque=1, body=b"x" * 10))
    decoder = FrameDecoder()
    first = decoder.feed(wire + wire[:7])
    second = decoder.feed(wire[7:])
    assert [c.opaque for c in first + second] == [1, 1]
    assert [c.body for c in first + second] == [b"x" * 10] * 2
