"""CPU per message of decoding a pull's body (what the push consumer calls: rmq.message_codec.pull_messages,
decode_stored_all in trees before h-inflate) in one or more
checkouts, interleaved (issue 32: decoding is the consume path's largest piece of Python after the
POST's write). The body is 32 stored records of 256 B with a Java producer's system properties, as one
pull from 4.9.4 returns; each tree decodes it in a process of its own, importing that tree's code,
rounds rotating; printed: the best and the median of each tree's rounds, and its ratio to the first's.
With --compressed each body is 8 KiB zlib-compressed (COMPRESSED sysflag): inflation's cost too.

    .venv/bin/python -m bench.decode_cpu /work/main .      # anchor first; about 30 s
    .venv/bin/python -m bench.decode_cpu --compressed /work/main .
"""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.common import bench_parser, environment, rotated
from bench.consume_trees import parse_trees, tree_output

_CHILD = """
import sys, timeit, zlib
from rocksidecar.rmq import message_codec as mc
from rocksidecar.rmq.message_codec import StoredFields, encode_stored, pack_host
# what the push consumer decodes a pull with in that tree (pull_messages since h-inflate)
decode = getattr(mc, "pull_messages", mc.decode_stored_all)
compressed = sys.argv[2] == "1"
body, sys_flag = (zlib.compress(bytes(range(256)) * 32, 5), 0x301) if compressed else (b"b" * 256, 0)
props = ("UNIQ_KEY\\x017F0000010B2E2A9F0A5B7C3E0000{:04X}\\x02WAIT\\x01true\\x02TAGS\\x01created"
         "\\x02CLUSTER\\x01DefaultCluster")
host, store = pack_host("127.0.0.1", 50000), pack_host("127.0.0.1", 10911)
data = b"".join(
    encode_stored(StoredFields("BenchDecode", body, 3, 0, 1000 + i, 5000 + i * 400, sys_flag,
                               1700000000000 + i, host, 1700000000001 + i, store, 0, props.format(i)))
    for i in range(32)
)
n = int(sys.argv[1])
print(min(timeit.repeat(lambda: decode(data), number=n, repeat=3)) / n / 32 * 1e6)
"""


def main() -> None:
    parser = bench_parser(__doc__, messages=1_000, rounds=5)
    parser.add_argument("--compressed", action="store_true", help="8 KiB zlib-compressed bodies")
    args, trees = parse_trees(parser)
    print(f"# decode_cpu: {environment()}; {args.messages} decodes of a 32-message pull a repeat")
    interleaved(trees, args.rounds, [_CHILD, str(args.messages), "1" if args.compressed else "0"], "us/msg")


def interleaved(trees: list[Path], rounds: int, child: list[str], unit: str) -> None:
    """Run ``python -c *child`` in each tree (its own code imported), rounds rotating; each run prints
    one figure. Print each tree's best, median and median ratio to the first tree's."""
    runs: dict[Path, list[float]] = {t: [] for t in trees}
    for r in range(rounds):
        for tree in rotated(trees, r):
            runs[tree].append(float(tree_output(tree, "-c", *child)))
    anchor = runs[trees[0]]
    for tree in trees:
        mine = runs[tree]
        ratio = statistics.median(m / a for m, a in zip(mine, anchor, strict=True))
        print(
            f"{tree}: best {min(mine):.2f} {unit}, median {statistics.median(mine):.2f} "
            f"(rounds {' / '.join(f'{x:.2f}' for x in mine)}); {ratio:.2f}x the anchor"
        )


if __name__ == "__main__":
    main()
