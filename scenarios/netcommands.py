"""The iproute2 and iptables calls a network partition is made of, and the sweep of old runs."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import shlex
import signal
import time

COMMAND_TIMEOUT = 10.0  # seconds one ip/iptables/tc call may take
SWEEP_KILL_TIMEOUT = 5.0  # seconds an abandoned run's processes may take to die
XTABLES_WAIT = "5"  # seconds iptables waits for the xtables lock held by another caller
TAG = re.compile(r"onejob-(\d+)-(\d+)")
ROUTE_TYPES = {"local", "broadcast", "unicast", "multicast", "anycast", "blackhole"}
ROUTE_TYPES |= {"unreachable", "prohibit", "throw", "nat"}

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class NetCommandError(Exception):
    """A network command failed or took too long."""


async def run(*argv: str, check: bool = True, timeout: float = COMMAND_TIMEOUT) -> str:
    """Run ``argv``; return its stdout; raise ``NetCommandError`` on failure when ``check``."""
    child = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        await child.wait()
        raise NetCommandError(f"{shlex.join(argv)} took longer than {timeout} s") from None
    if check and child.returncode != 0:
        detail = err.decode(errors="replace").strip()
        raise NetCommandError(f"{shlex.join(argv)} exited {child.returncode}: {detail}")
    return out.decode(errors="replace")


async def run_inside(namespace: str, *argv: str, check: bool = True) -> str:
    """Run ``argv`` inside ``namespace``; iptables waits for its lock there too."""
    if argv and argv[0] == "iptables":
        argv = ("iptables", "-w", XTABLES_WAIT, *argv[1:])
    return await run("ip", "netns", "exec", namespace, *argv, check=check)


async def iptables(*args: str, check: bool = True) -> str:
    """Run ``iptables -t raw args`` in the root namespace."""
    return await run("iptables", "-w", XTABLES_WAIT, "-t", "raw", *args, check=check)


async def used_networks() -> list[IPNetwork]:
    """Return every IPv4 network the root namespace has an address or a route in."""
    found: list[IPNetwork] = []
    addrs = await run("ip", "-4", "-o", "addr", "show")
    routes = await run("ip", "-4", "route", "show", "table", "all")
    words = [line.split()[3] for line in addrs.splitlines() if len(line.split()) > 3]
    for line in routes.splitlines():
        tokens = line.split()
        if tokens and tokens[0] in ROUTE_TYPES:
            tokens = tokens[1:]
        if tokens and tokens[0] != "default":
            words.append(tokens[0])
    for word in words:
        with contextlib.suppress(ValueError):
            found.append(ipaddress.ip_network(word, strict=False))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(text: str) -> str | None:
    """Return the run tag in ``text`` when the process that made it is gone."""
    match = TAG.search(text)
    if match is None or _alive(int(match.group(1))):
        return None
    return match.group(0)


async def sweep_stale() -> list[str]:
    """Remove namespaces, links and rules of runs whose process died without closing them."""
    swept: list[str] = []
    for line in (await run("ip", "netns", "list", check=False)).splitlines():
        name = line.split()[0] if line.split() else ""
        if _stale(name) == name:
            deadline = time.monotonic() + SWEEP_KILL_TIMEOUT
            while (pids := (await run("ip", "netns", "pids", name, check=False)).split()) and (
                time.monotonic() < deadline
            ):
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                await asyncio.sleep(0.05)
            await run("ip", "netns", "del", name, check=False)
            swept.append(f"namespace {name}")
    for line in (await run("ip", "-o", "link", "show", check=False)).splitlines():
        fields = line.split()
        if "alias" in fields and _stale(fields[-1]) == fields[-1] and len(fields) > 1:
            link = fields[1].rstrip(":").split("@")[0]
            await run("ip", "link", "del", link, check=False)
            swept.append(f"link {link}")
    chains: set[str] = set()
    for line in (await run("iptables-save", "-t", "raw", check=False)).splitlines():
        tag = _stale(line)
        if tag is None:
            continue
        chains.add(tag)
        if line.startswith("-A PREROUTING"):
            await iptables("-D", *shlex.split(line)[1:], check=False)
            swept.append(f"rule {line}")
    for chain in sorted(chains):
        await iptables("-F", chain, check=False)
        await iptables("-X", chain, check=False)
        swept.append(f"chain {chain}")
    if chains:  # the hook iptables-nft made; refused while any rule is left in it
        await iptables("-X", "PREROUTING", check=False)
    return swept
