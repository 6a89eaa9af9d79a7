"""Transactions through a real `rocksidecar serve` process against devbroker (issue 29): the settings,
the column family, the routes, the check endpoint and the background round are wired.

Broker mode: committed and rolled-back halves, undecided ones decided by the app's check endpoint when
the broker asks, and a sidecar SIGKILLed between begin and commit asked again after its restart.
Local outbox (mode auto, brokers down): 1 000 begun, 500 committed, 500 rolled back with a SIGKILL in
the middle of the decisions; once the brokers are back exactly the 500 committed arrive."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rocksidecar.devbroker import DevCluster
from tests.app.push_app import push_app
from tests.app.transactions.serve import (
    Serve,
    begin,
    check_endpoint,
    decide,
    http_client,
    running,
    until,
)

pytestmark = pytest.mark.timeout(480)  # two or three serve start-ups each


def delivered(cluster: DevCluster, topic: str) -> list[str]:
    return [m.uniq_key or "" for b in cluster.brokers.values() for m in b.messages(topic)]


async def test_broker_mode_through_serve_and_a_restart(tmp_path: Path) -> None:
    topic = "TxServe"
    answers: dict[str, str] = {}
    options = {"transaction_check_interval_s": 0.5, "transaction_timeout_ms": 500}
    async with (
        DevCluster(brokers=2, queues=2, **options) as cluster,  # type: ignore[arg-type]
        http_client() as http,
    ):
        with push_app(lambda n: (200, {"content-type": "application/json"}, 0.0)) as app:
            app.respond = check_endpoint(answers)
            serve = Serve(cluster.namesrv_addr, tmp_path / "data", TRANSACTIONS_CHECK_ENDPOINT=app.url)
            async with running(serve, http):
                url = serve.url
                committed, rolled_back, by_app_commit, by_app_rollback = [
                    await begin(http, url, topic, name) for name in ("c", "r", "app-c", "app-r")
                ]
                assert delivered(cluster, topic) == []  # halves only
                assert (await decide(http, url, committed, "commit"))["state"] == "COMMITTED"
                assert (await decide(http, url, rolled_back, "rollback"))["state"] == "ROLLED_BACK"
                conflict = await http.post(f"{url}/v1/transactions/{committed}:rollback")
                assert conflict.status_code == 409
                assert (await http.post(f"{url}/v1/transactions/nope:commit")).status_code == 404
                bad = await http.post(f"{url}/v1/transactions", json={"topic": "TBW102", "body": "x"})
                assert bad.status_code == 400 and bad.json()["field"] == "topic"
                answers.update({by_app_commit: "COMMIT", by_app_rollback: "ROLLBACK"})
                await until(
                    lambda: sorted(delivered(cluster, topic)) == sorted([committed, by_app_commit]),
                    "the app's answers to the broker's checks",
                )

                # The app's ROLLBACK is recorded too; the broker asks about each half on its own, so the
                # commits arriving says nothing about when the rollback's check was answered.
                async def rollback_recorded() -> bool:
                    r = await http.get(f"{url}/v1/transactions/{by_app_rollback}")
                    return bool(r.json()["state"] != "PREPARED")

                await until(rollback_recorded, "the app's ROLLBACK recorded")
                state = (await http.get(f"{url}/v1/transactions/{by_app_rollback}")).json()["state"]
                assert state == "ROLLED_BACK"
                asked = {json.loads(g.body)["id"] for g in app.got}
                assert {by_app_commit, by_app_rollback} <= asked and committed not in asked
                # the admin listing, /metrics and the status page read the same coordinator
                listed = (await http.get(f"{url}/v1/admin/transactions", params={"state": "all"})).json()
                assert {t["id"] for t in listed["items"]} == {
                    committed,
                    rolled_back,
                    by_app_commit,
                    by_app_rollback,
                }
                metrics = (await http.get(f"{url}/metrics")).text
                assert 'rocksidecar_transactions_total{outcome="committed"} 1.0' in metrics
                assert 'rocksidecar_transactions_total{outcome="checked_commit"} 1.0' in metrics
                assert "Transactions" in (await http.get(f"{url}/ui")).text

                # SIGKILL between begin and commit: the restarted sidecar is asked and the app decides
                after_kill = await begin(http, url, topic, "after-kill")
                await serve.kill()
            answers[after_kill] = "COMMIT"
            async with running(serve, http):
                await until(lambda: after_kill in delivered(cluster, topic), "the check after the restart")
                state = (await http.get(f"{serve.url}/v1/transactions/{after_kill}")).json()["state"]
                assert state == "COMMITTED"
            assert sorted(delivered(cluster, topic)) == sorted([committed, by_app_commit, after_kill])


async def test_local_outbox_brokers_down_sigkill_exactly_the_committed_arrive(tmp_path: Path) -> None:
    topic = "TxOutbox"
    n = 1000
    async with (
        DevCluster(brokers=2, queues=2) as cluster,
        http_client() as http,
    ):
        serve = Serve(cluster.namesrv_addr, tmp_path / "data", TRANSACTIONS_MODE="auto")
        await serve.start(http)
        try:
            for broker in cluster.brokers.values():
                await broker.stop()
            sem = asyncio.Semaphore(40)

            async def bounded_begin(i: int) -> str:
                async with sem:
                    return await begin(http, serve.url, topic, f"m{i}")

            ids = await asyncio.gather(*(bounded_begin(i) for i in range(n)))
            assert len(set(ids)) == n
            record = (await http.get(f"{serve.url}/v1/transactions/{ids[0]}")).json()
            assert record["mode"] == "local" and record["state"] == "PREPARED"
            commit = set(ids[: n // 2])
            confirmed: set[str] = set()

            async def bounded_decide(tx_id: str) -> None:
                async with sem:
                    await decide(http, serve.url, tx_id, "commit" if tx_id in commit else "rollback")
                    confirmed.add(tx_id)

            # decisions of both kinds, interleaved; SIGKILL once 400 are answered, the rest in flight
            order = [x for pair in zip(ids[: n // 2], ids[n // 2 :], strict=True) for x in pair]
            deciding = [asyncio.ensure_future(bounded_decide(t)) for t in order]
            await until(lambda: len(confirmed) >= 400, "400 decisions")
            await serve.kill()
            for task in deciding:
                task.cancel()
            await asyncio.gather(*deciding, return_exceptions=True)
            killed_at = len(confirmed)

            await serve.start(http)  # brokers still down: the decisions go on from the records
            for tx_id in order:  # the unanswered ones, and a repeat of every answered one (idempotent)
                answer = await decide(http, serve.url, tx_id, "commit" if tx_id in commit else "rollback")
                assert answer["state"] == ("COMMITTED" if tx_id in commit else "ROLLED_BACK")
            assert delivered(cluster, topic) == []

            for broker in cluster.brokers.values():
                await broker.start()
            await until(lambda: set(delivered(cluster, topic)) >= commit, "the 500 committed")

            async def drained() -> bool:  # nothing left to deliver, and the gauge says so (a spool
                # repeated by the restart once counted twice: the gauge stayed above 0 for good)
                return "rocksidecar_retry_pending 0.0" in (await http.get(f"{serve.url}/metrics")).text

            await until(drained, "the retry store's pending gauge at 0")
            got = delivered(cluster, topic)
            print(
                f"decisions answered before the SIGKILL {killed_at}; {len(got)} delivered for {len(commit)}"
            )
            assert set(got) == commit  # every committed one at least once, no rolled-back one
        finally:
            await serve.stop()
