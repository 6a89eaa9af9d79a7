"""Client ids in the format of Java's ClientConfig.buildMQClientId, which strategies sort and hash."""

from __future__ import annotations

import ipaddress
import os
import time

from .msgid import local_ip


def default_ip() -> str:
    """This host's address as the Java client reports it (the one message ids carry)."""
    return str(ipaddress.ip_address(local_ip()))


def default_instance_name() -> str:
    """changeInstanceNameToPID of 4.9.4: ``pid#nanoTime`` when the instance name is left at DEFAULT."""
    return f"{os.getpid()}#{time.monotonic_ns()}"


def build_client_id(ip: str, instance_name: str, unit_name: str | None = None) -> str:
    """``ip@instanceName``, then ``@unitName`` when a unit name is set."""
    if not ip or not instance_name:
        raise ValueError("a client id needs an ip and an instance name")
    cid = f"{ip}@{instance_name}"
    return f"{cid}@{unit_name}" if unit_name and unit_name.strip() else cid
