"""Memory one pull body costs when it holds a compression bomb (h-inflate), in one or more checkouts:
a 32-record pull whose second record is zlib (or lz4, zstd) of 256 MiB of zeros, decoded the way that
tree's push consumer decodes a pull (pull_messages, else decode_stored_all), in a process of its own
importing that tree's code. Printed per tree and codec: the peak of Python's traced allocations
(tracemalloc) during the decode, what came out (records delivered, set aside, or the exception that
failed the whole pull), and the CPU time.

    .venv/bin/python -m bench.inflate_bomb /work/main .      # anchor first; about 10 s
"""

from __future__ import annotations

from bench.common import bench_parser, environment
from bench.consume_trees import parse_trees, tree_output

_CHILD = """
import sys, time, tracemalloc, zlib
import lz4.frame, zstandard
from rocksidecar.rmq import message_codec as mc
from rocksidecar.rmq.message_codec import StoredFields, encode_stored, pack_host
decode = getattr(mc, "pull_messages", mc.decode_stored_all)
zeros = b"\\0" * (256 << 20)
codec = sys.argv[1]
if codec == "zlib":
    packed, flag = zlib.compress(zeros, 9), 0x301
elif codec == "lz4":
    packed, flag = lz4.frame.compress(zeros), 0x101
else:  # no content size in the frame: nothing to refuse before inflating
    c = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    packed, flag = c.compress(zeros) + c.flush(), 0x201
del zeros
host, store = pack_host("127.0.0.1", 50000), pack_host("127.0.0.1", 10911)
def rec(i, body, sys_flag):
    return encode_stored(StoredFields("B", body, 0, 0, i, 5000 + i, sys_flag, 1, host, 2, store, 0,
                                      f"UNIQ_KEY\\x01K{i}"))
data = b"".join(rec(i, packed, flag) if i == 1 else rec(i, b"b" * 256, 0) for i in range(32))
tracemalloc.start()
t0 = time.process_time()
try:
    out = decode(data)
    got = (f"{len(out.items)} delivered, {len(out.undecodable)} set aside" if hasattr(out, "items")
           else f"{len(out)} delivered")
except Exception as exc:
    got = f"the pull failed: {type(exc).__name__}"
cpu = time.process_time() - t0
peak = tracemalloc.get_traced_memory()[1]
print(f"{len(packed)}\\t{peak / 2**20:.1f}\\t{cpu * 1000:.0f}\\t{got}")
"""


def main() -> None:
    parser = bench_parser(__doc__)
    _, trees = parse_trees(parser)
    print(f"# inflate_bomb: {environment()}; a 32-record pull, record 1 a bomb of 256 MiB")
    for codec in ("zlib", "lz4", "zstd"):
        for tree in trees:
            out = tree_output(tree, "-c", _CHILD, codec).strip()
            sent, peak, cpu_ms, got = out.split("\t")
            print(f"{codec} ({int(sent) // 1024} KiB sent) {tree}: peak {peak} MiB, {cpu_ms} ms CPU; {got}")


if __name__ == "__main__":
    main()
