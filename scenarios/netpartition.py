"""A silent network partition between processes in a network namespace and host services.

One run (``tag`` = ``onejob-<pid>-<n>``) builds, as root, with iproute2 and iptables::

    root namespace                                       namespace <tag>
    127.0.0.1:5432 PostgreSQL ◀─ forward ◀─ 10.213.a.b+1 ══ veth ══ 10.213.a.b+2  gateway
    127.0.0.1:S    simulator  ◀─ forward ◀─┘                            (listens 0.0.0.0:P)
    clients (httpx, the harness) ─────────────────────────────────────▶ 10.213.a.b+2:P

The services stay on loopback, untouched: a ``Forwarder`` (TCP relay) listens on the host
end of the veth. DNAT to 127.0.0.1 was rejected: PostgreSQL would see the namespace's
address, which its ``pg_hba.conf`` (127.0.0.1/32 only) refuses, and it needs
``route_localnet``. The relay's sockets in the root namespace are a second TCP stack, so
the only peer the gateway's sockets ever talk to is on the far side of the veth.

``cut`` drops a target's packets where they arrive, before any socket sees them: the
namespace's packets at the host end's ingress (``raw PREROUTING`` of the root namespace)
and the relay's packets at the namespace end's ingress (``raw PREROUTING`` inside). No
RST, no FIN, no ICMP, and both TCP stacks see a lost segment and retransmit it with
backoff. A DROP on the sender's OUTPUT would fail its own transmit instead: the data never
counts as sent and the persist timer runs, not the retransmission timer (``ss -ti`` shows
``timer:(persist…)`` and ``notsent``), which no dead switch causes. Every rule lives in a
chain named ``tag``; ``close`` stops what runs inside, removes the chains, the veth, the
namespace and the forwards, and checks that nothing of the run is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import itertools
import os
import shutil
import signal
import time
import urllib.parse
from collections.abc import Sequence

from scenarios.forwarder import Forward, Forwarder
from scenarios.harness import STOP_GRACE, Harness, Process
from scenarios.netcommands import (
    XTABLES_WAIT,
    NetCommandError,
    iptables,
    run,
    run_inside,
    sweep_stale,
    used_networks,
)

DATABASE = "database"  #: the forward to PostgreSQL
PROVIDER = "provider"  #: the forward to the provider simulator
BOTH = "both"  #: every forward of the run
SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")  # carved into /30s, one per run
SUBNET_PREFIX = 30
LINK_ATTEMPTS = 64  # candidate /30s tried before giving up
KILL_TIMEOUT = 5.0  # seconds the namespace's processes may take to die after SIGKILL
KILL_POLL = 0.05  # seconds between looks at the namespace's processes

_RUNS = itertools.count()


class NetPartitionError(Exception):
    """The partition could not be built, changed or taken down."""


def missing_prerequisite() -> str | None:
    """Say why a partition cannot be built here (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables", "iptables-save"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y iproute2 iptables)"
    return None


@dataclasses.dataclass(slots=True)
class InsideProcess(Process):
    """A harness process run inside the namespace, reached at ``host``."""

    host: str = "127.0.0.1"

    @property
    def base_url(self) -> str:
        """Return the process's HTTP base URL as seen from the root namespace."""
        return f"http://{self.host}:{self.port}"


class NetPartition:
    """One namespace behind one veth, forwards to host services, and the cuts between them."""

    def __init__(self, run_number: int) -> None:
        self.tag = f"onejob-{os.getpid()}-{run_number}"
        self.namespace = self.tag  #: the name ``ip netns`` knows
        self.host_link = ""  #: the veth end in the root namespace
        self.inside_link = ""  #: the veth end in the namespace
        self.host_address = ""  #: where the namespace reaches the forwards
        self.inside_address = ""  #: where the root namespace reaches the namespace
        self.forwards: dict[str, Forward] = {}
        self.cut_targets: set[str] = set()
        self.latency: tuple[float, frozenset[str]] | None = None  # ms and the targets delayed
        self._forwarder = Forwarder(f"forwarder-{self.tag}")
        self._created: list[str] = []  # what close() must take down, in creation order

    @classmethod
    async def open(cls) -> NetPartition:
        """Build a namespace, its veth and its (empty) DROP chains; undo all if one step fails."""
        why = missing_prerequisite()
        if why:
            raise NetPartitionError(why)
        await sweep_stale()
        net = cls(next(_RUNS))
        try:
            await net._build()
        except BaseException:
            await net.close()
            raise
        return net

    async def _build(self) -> None:
        await run("ip", "netns", "add", self.namespace)
        self._created.append("namespace")
        network = await self._add_veth()
        host, inside = f"{network[1]}/{SUBNET_PREFIX}", f"{network[2]}/{SUBNET_PREFIX}"
        self.host_address, self.inside_address = str(network[1]), str(network[2])
        await run("ip", "link", "set", "dev", self.host_link, "alias", self.tag)
        await run("ip", "addr", "add", host, "dev", self.host_link)
        await run("ip", "link", "set", "dev", self.host_link, "up")
        ns = ("ip", "-n", self.namespace)
        await run(*ns, "addr", "add", inside, "dev", self.inside_link)
        await run(*ns, "link", "set", "dev", self.inside_link, "up")
        await run(*ns, "link", "set", "dev", "lo", "up")
        await iptables("-N", self.tag)
        self._created.append("chain")
        await iptables("-I", "PREROUTING", "1", *self._jump(self.host_link))
        await run_inside(self.namespace, "iptables", "-t", "raw", "-N", self.tag)
        await run_inside(
            self.namespace,
            "iptables",
            "-t",
            "raw",
            "-A",
            "PREROUTING",
            *self._jump(self.inside_link),
        )

    def _jump(self, link: str) -> list[str]:
        return ["-i", link, "-m", "comment", "--comment", self.tag, "-j", self.tag]

    async def _add_veth(self) -> ipaddress.IPv4Network:
        """Create the veth pair on a /30 nothing on the machine uses; return that /30."""
        used = await used_networks()
        subnets = list(SUPERNET.subnets(new_prefix=SUBNET_PREFIX))
        start = (os.getpid() * 97 + int(self.tag.rsplit("-", 1)[1])) % len(subnets)
        tried = 0
        for offset in range(len(subnets)):
            index = (start + offset) % len(subnets)
            network = subnets[index]
            if any(network.overlaps(u) for u in used):
                continue
            host_link, inside_link = f"ojp{index}h", f"ojp{index}n"
            peer = ("peer", "name", inside_link, "netns", self.namespace)
            try:
                # The link name is the claim: a concurrent run that picked the same /30
                # gets EEXIST here and moves on.
                await run("ip", "link", "add", host_link, "type", "veth", *peer)
            except NetCommandError as exc:
                tried += 1
                if "exists" not in str(exc) or tried >= LINK_ATTEMPTS:
                    raise
                continue
            self.host_link, self.inside_link = host_link, inside_link
            self._created.append("veth")
            return network
        raise NetPartitionError(f"no free /{SUBNET_PREFIX} left in {SUPERNET}")

    async def forward(
        self, target: str, port: int, host: str = "127.0.0.1", listen_port: int | None = None
    ) -> Forward:
        """Make ``host:port`` reachable from the namespace at ``host_address`` as ``target``.

        The forward listens on ``port`` too when it is free there (so URLs change only in
        their host), else on ``listen_port`` or any free port: read ``Forward.port``.
        """
        if target in self.forwards or target == BOTH:
            raise NetPartitionError(f"forward {target!r} already exists or is reserved")
        wanted = port if listen_port is None else listen_port
        try:
            fwd = await self._forwarder.add(target, self.host_address, wanted, (host, port))
        except OSError:
            fwd = await self._forwarder.add(target, self.host_address, 0, (host, port))
        self.forwards[target] = fwd
        return fwd

    def url_through(self, url: str, target: str = DATABASE) -> str:
        """Return ``url`` with its host and port replaced by ``target``'s forward."""
        parts = urllib.parse.urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@" if userinfo else ""
        return parts._replace(netloc=netloc + self.forwards[target].address).geturl()

    def command(self, argv: Sequence[str]) -> list[str]:
        """Return ``argv`` prefixed to run inside the namespace (same pid: ip execs in place)."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    async def spawn(
        self,
        harness: Harness,
        name: str,
        argv: Sequence[str],
        port: int,
        ready_path: str,
        env: dict[str, str] | None = None,
    ) -> Process:
        """Start ``argv`` inside the namespace as one of ``harness``'s processes, wait until ready.

        ``argv`` must listen on 0.0.0.0 or ``inside_address``; any port is free inside.
        """
        proc = InsideProcess(
            name=name,
            argv=self.command(argv),
            log_path=harness.log_dir / f"{name}.log",
            port=port,
            ready_url=f"http://{self.inside_address}:{port}{ready_path}",
            env=harness._env(env),
            ready_timeout=harness.ready_timeout,
            host=self.inside_address,
        )
        harness.processes.append(proc)
        await proc.start()
        return proc

    def _ports(self, target: str) -> list[int]:
        if target == BOTH:
            return sorted(f.port for f in self.forwards.values())
        if target not in self.forwards:
            raise NetPartitionError(f"no forward {target!r}; known: {sorted(self.forwards)}")
        return [self.forwards[target].port]

    def _targets(self, target: str) -> set[str]:
        self._ports(target)  # validates the name
        return set(self.forwards) if target == BOTH else {target}

    async def cut(self, target: str = BOTH) -> None:
        """Drop every packet of ``target``'s forward, both ways, silently, from now on."""
        await self._apply_cuts(self.cut_targets | self._targets(target))

    async def heal(self, target: str = BOTH) -> None:
        """Let ``target``'s packets through again."""
        await self._apply_cuts(self.cut_targets - self._targets(target))

    async def _apply_cuts(self, targets: set[str]) -> None:
        """Add the DROP rules of newly cut ports and delete those of healed ones.

        Rules already in place stay: a port cut before stays cut while another is added.
        """
        before = {p for t in self.cut_targets for p in self._ports(t)}
        after = {p for t in targets for p in self._ports(t)}
        for action, ports in (("-A", after - before), ("-D", before - after)):
            for port in sorted(ports):
                # From the namespace to a forward, and from a forward into the namespace.
                await iptables(action, self.tag, "-p", "tcp", "--dport", str(port), "-j", "DROP")
                back = ("-s", self.host_address, "-p", "tcp", "--sport", str(port), "-j", "DROP")
                await run_inside(self.namespace, "iptables", "-t", "raw", action, self.tag, *back)
        self.cut_targets = set(targets)

    async def add_latency(self, ms: float, target: str = DATABASE) -> None:
        """Hold back every chunk ``target``'s upstream sends by ``ms``; each round trip grows by it.

        The forward adds it (see ``scenarios.forwarder``), not ``tc netem``: TCP handshakes
        stay fast and no segment is retransmitted; replaces any earlier latency.
        """
        targets = self._targets(target)
        await self.clear_latency()
        for name in targets:
            self.forwards[name].delay = ms / 1000
        self.latency = (ms, frozenset(targets))

    async def clear_latency(self) -> None:
        """Remove any added latency."""
        for fwd in self.forwards.values():
            fwd.delay = 0.0
        self.latency = None

    async def pids(self) -> list[int]:
        """Return the processes running in the namespace."""
        out = await run("ip", "netns", "pids", self.namespace, check=False)
        return [int(p) for p in out.split()]

    async def _emptied(self, timeout: float, signum: int | None = None) -> bool:
        """Wait until no process is left inside, sending ``signum`` to each one seen meanwhile."""
        deadline = time.monotonic() + timeout
        while pids := await self.pids():
            if time.monotonic() >= deadline:
                return False
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    if signum is not None:
                        os.kill(pid, signum)
            await asyncio.sleep(KILL_POLL)
        return True

    async def kill_inside(self, grace: float = STOP_GRACE) -> list[int]:
        """Stop every process in the namespace (SIGTERM, SIGKILL after ``grace``); return pids."""
        pids = await self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if await self._emptied(grace) or await self._emptied(KILL_TIMEOUT, signal.SIGKILL):
            return pids
        raise NetPartitionError(f"processes still in {self.namespace} after SIGKILL")

    async def close(self) -> None:
        """Take down everything this run made; safe after a partial ``open``; raise on leftovers.

        Every step runs whatever failed before it; what is still there at the end is the error.
        """
        errors: list[str] = []
        if "namespace" in self._created:
            try:
                await self.kill_inside()
            except (NetPartitionError, NetCommandError) as exc:
                errors.append(str(exc))
        await self._forwarder.close()
        steps: list[tuple[str, ...]] = []
        if "chain" in self._created:
            steps += [
                ("iptables", "-w", XTABLES_WAIT, "-t", "raw", "-D", "PREROUTING",
                 *self._jump(self.host_link)),
                ("iptables", "-w", XTABLES_WAIT, "-t", "raw", "-F", self.tag),
                ("iptables", "-w", XTABLES_WAIT, "-t", "raw", "-X", self.tag),
                # iptables-nft made this hook on first use; it refuses while anyone has rules.
                ("iptables", "-w", XTABLES_WAIT, "-t", "raw", "-X", "PREROUTING"),
            ]  # fmt: skip
        if "veth" in self._created:
            steps.append(("ip", "link", "del", self.host_link))  # takes its peer along
        if "namespace" in self._created:
            steps.append(("ip", "netns", "del", self.namespace))  # its iptables go with it
        for argv in steps:
            with contextlib.suppress(NetCommandError):
                await run(*argv, check=False)
        self._created.clear()
        left = await self.leftovers()
        if left:
            errors.append(f"left behind: {left}")
        if errors:
            raise NetPartitionError("; ".join(errors))

    async def leftovers(self) -> list[str]:
        """Return what of this run is still on the machine (a namespace, a link, a rule)."""
        found: list[str] = []
        if self.namespace in (await run("ip", "netns", "list")).split():
            found.append(f"namespace {self.namespace}")
        for line in (await run("ip", "-o", "link", "show")).splitlines():
            fields = line.split()
            name = fields[1].rstrip(":").split("@")[0] if len(fields) > 1 else ""
            if self.tag in fields or (self.host_link and name == self.host_link):
                found.append(f"link {name}")
        rules = await run("iptables-save")
        found += [f"rule {line}" for line in rules.splitlines() if self.tag in line]
        return found

    async def __aenter__(self) -> NetPartition:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
