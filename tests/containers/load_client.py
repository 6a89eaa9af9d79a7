"""Runs inside a container of the sidecar's pod (image's python, standard library only): THREADS threads
POST messages to the sidecar on 127.0.0.1 back to back and print ``acked <id> <unix time>`` for each 2xx
answer and ``answered <status>`` for any other; a thread stops at its first connection error (the sidecar
is gone).

Usage: python load_client.py TOPIC THREADS
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
import urllib.error
import urllib.request

URL = "http://127.0.0.1:9880/v1/messages"
_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:
        print(line, flush=True)


def worker(topic: str, n: int) -> None:
    i = 0
    while True:
        body = json.dumps({"topic": topic, "body": f"client {n} message {i}"}).encode()
        request = urllib.request.Request(URL, data=body, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                say(f"acked {json.load(response)['id']} {time.time():.3f}")
        except urllib.error.HTTPError as exc:
            say(f"answered {exc.code}")
        except (OSError, http.client.HTTPException) as exc:
            say(f"gone {type(exc).__name__}")
            return
        i += 1


def main() -> int:
    topic, threads = sys.argv[1], int(sys.argv[2])
    workers = [threading.Thread(target=worker, args=(topic, n)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
