"""CPU of decoding a broker's response frame (rmq.protocol.frame.decode, header checks included) in
one or more checkouts, interleaved as bench.decode_cpu: a SEND_MESSAGE_V2 answer and a PULL_MESSAGE
answer as 4.9.4 writes them in JSON (it answers in the request's serialize type, JSON for this client),
and the pull answer with a ROCKETMQ binary header. Printed: microseconds per frame (the three averaged)
for each tree, and its ratio to the first's.

    .venv/bin/python -m bench.frame_decode_cpu /work/main .      # anchor first; about 20 s
"""

from __future__ import annotations

from bench.common import bench_parser, environment
from bench.consume_trees import parse_trees
from bench.decode_cpu import interleaved

_CHILD = """
import sys, timeit
from rocksidecar.rmq.codes import SerializeType
from rocksidecar.rmq.protocol.frame import RemotingCommand, decode, encode
send = {"msgId": "7F00000100002A9F00000000000A1B2C", "queueId": "3", "queueOffset": "123456",
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
pull = {"suggestWhichBrokerId": "0", "nextBeginOffset": "1032", "minOffset": "0", "maxOffset": "5000"}
frames = [
    encode(RemotingCommand(0, send, opaque=77, flag=1, language=0, version=401))[4:],
    encode(RemotingCommand(0, pull, b"x" * 8192, opaque=78, flag=1, language=0, version=401))[4:],
    encode(RemotingCommand(0, pull, b"x" * 8192, opaque=79, flag=1, language=0, version=401,
                           serialize_type=SerializeType.ROCKETMQ))[4:],
]
n = int(sys.argv[1])
print(min(timeit.repeat(lambda: [decode(f) for f in frames], number=n, repeat=3)) / n / 3 * 1e6)
"""


def main() -> None:
    parser = bench_parser(__doc__, messages=50_000, rounds=5)
    args, trees = parse_trees(parser)
    print(f"# frame_decode_cpu: {environment()}; {args.messages} decodes of 3 response frames a repeat")
    interleaved(trees, args.rounds, [_CHILD, str(args.messages)], "us/frame")


if __name__ == "__main__":
    main()
