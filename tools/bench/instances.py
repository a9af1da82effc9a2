"""One instance or two (issue 16): the overlapping-turns load of overlap.py (N devices asking spoken questions
at random, overlapping moments, plus idle connected devices) against
  1. one `wren serve` on SQLite (the embedded default),
  2. one `wren serve` on a real redis-server (`[store] url`): what the shared store costs,
  3. two `wren serve` on that redis-server behind a real HAProxy in TCP mode (leastconn), as docs/deploy.md
     sets them up,
on the same machine, with the same seeded plan. Prints first-audio p50/p95, answered turns and the CPU seconds
each configuration's server processes used.

`--streaming N` runs concurrency.py's load instead (N devices streaming in auto mode, each speaking once in
a 30 s cycle) and prints its uplink lag: what a second process, with its own event loop and GIL, buys the
many-streams case on one box (issue 11).

    .venv/bin/python tools/bench/instances.py [--quick] [--active 10] [--idle 100] [--requests 3]
                                             [--json PATH] [--only sqlite,redis,two] [--streaming 200]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench import concurrency, overlap
from tools.bench.common import ServerProcess, fmt, write_json

HAPROXY_CONFIG = """global
    maxconn 8192
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend wren
    bind 127.0.0.1:{port}
    default_backend instances
backend instances
    balance leastconn
{servers}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def haproxy(backends: list[int]) -> Iterator[int]:
    """A real HAProxy on a free loopback port, balancing TCP over `backends`; yields its port."""
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="wren-haproxy-") as tmp:
        config = Path(tmp) / "haproxy.cfg"
        servers = "\n".join(f"    server i{n} 127.0.0.1:{p}" for n, p in enumerate(backends))
        config.write_text(HAPROXY_CONFIG.format(port=port, servers=servers))
        proc = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 10
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("haproxy did not start")
                time.sleep(0.05)
            yield port
        finally:
            proc.terminate()
            proc.wait(10)


@contextlib.contextmanager
def redis(tmp: Path) -> Iterator[str]:
    from tests.support.redis_server import redis_server

    with redis_server(tmp) as url:
        yield url


class Instances:
    """Several ServerProcesses seen through one address, with what overlap.py reads of a server."""

    def __init__(self, servers: list[ServerProcess], port: int) -> None:
        self.servers = servers
        self.port = port

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/xiaozhi/v1/"

    def log_size(self) -> list[int]:  # type: ignore[override]
        return [s.log_size() for s in self.servers]

    def timing_records(self, kind: str, since: list[int]) -> list[dict]:
        return [r for s, at in zip(self.servers, since, strict=True) for r in s.timing_records(kind, at)]

    def errors(self, since: list[int]) -> list[str]:
        return [e for s, at in zip(self.servers, since, strict=True) for e in s.errors(at)]

    def cpu_seconds(self) -> float:
        return sum(_tree_cpu(s) for s in self.servers)

    # What concurrency.py reads of a server besides the above (its own CPU figure is the first instance's).
    @property
    def pid(self) -> int:
        return self.servers[0].pid

    def rss_bytes(self, with_children: bool = False) -> int:
        return sum(s.rss_bytes(with_children) for s in self.servers)


def _tree_cpu(server: ServerProcess) -> float:
    """CPU seconds of a server and its ASR worker processes."""
    import psutil

    proc = psutil.Process(server.pid)
    total = server.cpu_seconds()
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = child.cpu_times()
            total += t.user + t.system
    return total


def _measure(target: Any, args: argparse.Namespace, cpu: Any) -> dict:
    before = cpu()
    if args.streaming:
        res = concurrency.run(target, args.quick, [args.streaming])["rows"][0]
        res["seconds"] = None
    else:
        res = overlap.run(target, args.quick, args.active, args.idle, args.requests)
    res["server_cpu_s"] = round(cpu() - before, 1)
    res.pop("detail", None)
    return res


def run(args: argparse.Namespace) -> dict[str, dict]:
    env = dict(concurrency.SERVER_ENV if args.streaming else overlap.SERVER_ENV)
    wanted = set(args.only.split(","))
    results: dict[str, dict] = {}
    if "sqlite" in wanted:
        with ServerProcess(env_overrides=env) as server:
            results["one instance, SQLite"] = _measure(server, args, lambda: _tree_cpu(server))
    with tempfile.TemporaryDirectory(prefix="wren-redis-") as tmp, redis(Path(tmp)) as url:
        shared = {**env, "WREN_STORE_URL": url}
        if "redis" in wanted:
            with ServerProcess(env_overrides=shared) as server:
                results["one instance, Redis"] = _measure(server, args, lambda: _tree_cpu(server))
        if "two" in wanted:
            with ServerProcess(env_overrides=shared) as a, ServerProcess(env_overrides=shared) as b, \
                    haproxy([a.port, b.port]) as port:
                both = Instances([a, b], port)
                results["two instances, Redis, HAProxy"] = _measure(both, args, both.cpu_seconds)
    return results


def print_table(results: dict[str, dict]) -> None:
    for name, res in results.items():
        if "uplink_lag_ms" in res:  # --streaming
            lag = res["uplink_lag_ms"]
            print(f"{name:32s} N = {res['n']}: answered {res['answered']}/{res['utterances']}; uplink lag "
                  f"p50 {fmt(lag['p50'])} / p99 {fmt(lag['p99'])} ms; server CPU {res['server_cpu_s']} s")
            continue
        a = res["first_audio_ms"]
        print(f"{name:32s} answered {res['answered']}/{res['turns']}; first audio p50 {fmt(a['p50'])} / "
              f"p95 {fmt(a['p95'])} / max {fmt(a['max'])} ms; server CPU {res['server_cpu_s']} s "
              f"over {res['seconds']} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 devices × 2 requests + 10 idle, a 6 s window")
    parser.add_argument("--active", type=int, help="devices asking (default 10)")
    parser.add_argument("--idle", type=int, help="idle connected devices (default 100)")
    parser.add_argument("--requests", type=int, help="requests per asking device (default 3)")
    parser.add_argument("--only", default="sqlite,redis,two", help="which configurations (comma-separated)")
    parser.add_argument("--streaming", type=int, metavar="N",
                        help="concurrency.py's N streaming devices instead of the overlapping turns")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = run(args)
    print_table(results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
