"""Where the soak's brokers come from, how it breaks them, and how it reads back what they stored:
devbroker in its own process (admin endpoint), or a real Apache RocketMQ 4.9.4 driven by
real-broker.sh (kill -9 / revive) and read back by pulling every queue through the project's client."""

from __future__ import annotations

import asyncio
import random
import subprocess
from collections import Counter
from pathlib import Path
from typing import Protocol

from bench.common import DevbrokerProcess
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient, TopicRouteData
from tests.realbroker.conftest import create_topic_everywhere, pull_queue

BROKERS = ("broker-a", "broker-b")
SETTLE_READS, SETTLE_S = 3, 2.0


class Backend(Protocol):
    namesrv: str

    def prepare(self, topic: str) -> None: ...

    def outage(self, rng: random.Random) -> str:
        """Break something (or nothing); returns what, for the report."""
        ...

    def heal(self) -> None: ...

    def stored(self, topic: str) -> Counter[str]:
        """UNIQ_KEY -> how many times the brokers store it."""
        ...

    def stored_in_order(self, topic: str) -> list[tuple[str, str]]:
        """(queue, UNIQ_KEY) of every stored copy, queue by queue, each queue in offset order; a queue is
        named ``broker/queue id``."""
        ...


class DevBackend:
    OUTAGES = ("none", "stop broker-a", "stop broker-b", "stop both", "fail broker-a", "slow broker-b")

    def __init__(self, dev: DevbrokerProcess) -> None:
        self.dev = dev
        self.namesrv = dev.namesrv

    def prepare(self, topic: str) -> None:
        pass  # devbroker creates topics on first send

    def outage(self, rng: random.Random) -> str:
        what = rng.choice(self.OUTAGES)
        if what == "stop both":
            for b in BROKERS:
                self.dev.act(b, "stop")
        elif what.startswith("stop "):
            self.dev.act(what.split()[1], "stop")
        elif what.startswith("fail "):
            self.dev.faults(what.split()[1], fail_all=True)
        elif what.startswith("slow "):
            self.dev.faults(what.split()[1], latency_ms=400)
        return what

    def heal(self) -> None:
        for b in BROKERS:
            self.dev.act(b, "start")
            self.dev.clear(b)

    def stored(self, topic: str) -> Counter[str]:
        return self.dev.stored_keys(topic)

    def stored_in_order(self, topic: str) -> list[tuple[str, str]]:
        listed = self.dev.stored_listing(topic)
        listed.sort(key=lambda m: (m["broker"], m["queueId"], m["queueOffset"]))
        return [(f"{m['broker']}/{m['queueId']}", m["uniqKey"]) for m in listed]


class RealBackend:
    """Real brokers: outages are kill -9 of one broker (a revive takes a JVM start, ~5-10 s)."""

    def __init__(self, namesrv: str, ctl: Path) -> None:
        self.namesrv = namesrv
        self.ctl = ctl
        self.down: set[str] = set()

    def _ctl(self, *args: str) -> None:
        subprocess.run(["bash", str(self.ctl), *args], check=True, capture_output=True, timeout=120)

    def prepare(self, topic: str) -> None:
        asyncio.run(self._create(topic))

    async def _create(self, topic: str) -> None:
        client = RemotingClient()
        try:
            ns = NameServerClient(client, self.namesrv)
            await create_topic_everywhere(ns, BrokerApi(client, producer_group="rs_soak"), topic)
        finally:
            await client.close()

    def order(self, topic: str, queues: int = 4) -> None:
        """Give ``topic`` an order configuration on the name server (mqadmin updateOrderConf): its route
        then lists every queue of every broker, up or not, so a sharding key keeps its queue while a broker
        is down (its messages fail and wait) instead of moving with a shorter list."""
        conf = ";".join(f"{b}:{queues}" for b in BROKERS)
        admin = "org.apache.rocketmq.tools.command.MQAdminStartup"
        # The name server puts a topic's order configuration in its route only with orderMessageEnable.
        self._ctl(
            "java", admin, "updateNamesrvConfig", "-n", self.namesrv, "-k", "orderMessageEnable", "-v", "true"
        )
        self._ctl(
            "java", admin, "updateOrderConf",
            "-n", self.namesrv, "-t", topic, "-v", conf, "-m", "put",
        )  # fmt: skip

    def outage(self, rng: random.Random) -> str:
        up = [b for b in BROKERS if b not in self.down]
        if not up or rng.random() < 0.4:
            return "none"
        victim = rng.choice(up)
        self._ctl("kill", victim)
        self.down.add(victim)
        return f"kill -9 {victim}"

    def heal(self) -> None:
        for b in sorted(self.down):
            self._ctl("revive", b)
        self.down.clear()

    def stored(self, topic: str) -> Counter[str]:
        return Counter(uniq for _, uniq in self.stored_in_order(topic))

    def stored_in_order(self, topic: str) -> list[tuple[str, str]]:
        return asyncio.run(self._pull(topic))

    @staticmethod
    async def _full_route(ns: NameServerClient, topic: str) -> TopicRouteData:
        """The topic's route once it lists every broker: right after a revive it may list only one, and
        a first soak run read back exactly broker-a's 19 743 messages of 33 241 stored."""
        for _ in range(120):
            route = await ns.get_route(topic)
            if {q.broker_name for q in route.queue_datas} == set(BROKERS):
                return route
            await asyncio.sleep(1.0)  # another system's registration: nothing to await
        raise AssertionError(f"the route of {topic} never listed {BROKERS}")

    @staticmethod
    async def _settled(api: BrokerApi, route: TopicRouteData, topic: str) -> None:
        """Wait until the queues' max offsets stop moving (SETTLE_READS equal reads SETTLE_S apart): a
        broker's consume queues, what a pull reads, are written after its SEND_OK."""
        queues = route.subscribe_queues(topic)
        last, same = -1, 0
        while same < SETTLE_READS:
            total = 0
            for mq in queues:
                addr = route.master_addr(mq.broker_name)
                assert addr is not None
                total += await api.get_max_offset(addr, mq)
            same = same + 1 if total == last else 0
            last = total
            await asyncio.sleep(SETTLE_S)  # another system's background work: nothing to await

    async def _pull(self, topic: str) -> list[tuple[str, str]]:
        client = RemotingClient()
        out: list[tuple[str, str]] = []
        try:
            api = BrokerApi(client, producer_group="rs_soak")
            route = await self._full_route(NameServerClient(client, self.namesrv), topic)
            await self._settled(api, route, topic)
            for mq in route.subscribe_queues(topic):
                addr = route.master_addr(mq.broker_name)
                assert addr is not None
                queue = f"{mq.broker_name}/{mq.queue_id}"
                for m in await pull_queue(api, addr, mq, "rs_soak"):  # in offset order
                    if m.uniq_key is not None:
                        out.append((queue, m.uniq_key))
        finally:
            await client.close()
        return out
