"""Benchmark of the Python package, printed as figures and ratios measured in one run.

    target/python-venv/bin/python python/benches/bench.py [--rounds N]

1. ``execute("true")`` through ``LocalSandbox()`` (the embedded default, confined), blocking and
   ``await aexecute``, next to ``subprocess.run(["sh", "-c", "true"])`` from the same interpreter.
   Target: median ≤ 1.3× subprocess.
2. ``read`` of a 2000-line file: agentd's native ``fs`` request next to deepagents' derived ``read``
   (its helper script run through the same sandbox's ``execute``). Target: native ≥ 20× faster.
3. ``execute("true")`` after 100 ms without commands (as between an agent's steps), confined and
   not: what a confined command's setup costs when the machine's cgroup code has gone cold.

The three kinds of call take turns in blocks of 50 (``--turn``), so a slow moment of this machine
falls on all of them alike.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time
from collections.abc import Callable

from deepagents.backends.sandbox import BaseSandbox

import agentd


#: Calls of one kind in a row before the next kind takes its turn.
BLOCK = 50


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def line(name: str, samples: list[float], baseline: list[float] | None = None) -> str:
    median, p99 = statistics.median(samples), percentile(samples, 0.99)
    text = f"  {name:<34} median {median * 1e3:8.3f} ms   p99 {p99 * 1e3:8.3f} ms"
    if baseline is not None:
        text += f"   median {median / statistics.median(baseline):5.2f}x, p99 {p99 / percentile(baseline, 0.99):5.2f}x"
    return text


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1000, help="calls of each kind (default 1000)")
    parser.add_argument("--reads", type=int, default=50, help="reads of each kind (default 50)")
    parser.add_argument("--turn", type=int, default=BLOCK, help=f"calls of one kind in a row (default {BLOCK})")
    parser.add_argument("--idle", type=int, default=50, help="calls after a pause, of each kind (default 50)")
    args = parser.parse_args()

    loop = asyncio.new_event_loop()
    with agentd.LocalSandbox() as sandbox:

        async def aexecute_true(calls: int) -> list[float]:
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                await sandbox.aexecute("true")
                times.append(time.perf_counter() - start)
            return times

        # Warm up: the link, the runtime's threads, the page cache for sh.
        for _ in range(50):
            subprocess.run(["sh", "-c", "true"], check=True)
            sandbox.execute("true")
        loop.run_until_complete(aexecute_true(50))

        # Blocks of BLOCK calls of each kind in turn; the coroutine's block runs in one event-loop
        # run, as an agent's awaits do.
        spawn, sync, asynchronous = [], [], []
        turn = max(1, args.turn)
        for _ in range(max(1, args.rounds // turn)):
            spawn.extend(timed(lambda: subprocess.run(["sh", "-c", "true"], check=True)) for _ in range(turn))
            sync.extend(timed(lambda: sandbox.execute("true")) for _ in range(turn))
            asynchronous.extend(loop.run_until_complete(aexecute_true(turn)))

        print(f"execute(\"true\"), {len(spawn)} calls each (LocalSandbox(), confined):")
        print(line('subprocess.run(["sh","-c","true"])', spawn))
        print(line("sandbox.execute (blocking)", sync, spawn))
        print(line("await sandbox.aexecute", asynchronous, spawn))
        gap = statistics.median(asynchronous) - statistics.median(sync)
        print(f"  aexecute - execute, medians: {gap * 1e6:.0f} µs")

        path = f"{sandbox.workspace}/bench-2000.txt"
        text = "\n".join(f"line {i:04d}: " + "lorem ipsum dolor sit amet " * 3 for i in range(2000))
        assert sandbox.write(path, text).error is None
        native_result = sandbox.read(path)
        derived_result = BaseSandbox.read(sandbox, path)
        assert native_result.file_data == derived_result.file_data, "native and derived reads differ"
        native, derived = [], []
        for _ in range(args.reads):
            native.append(timed(lambda: sandbox.read(path)))
            derived.append(timed(lambda: BaseSandbox.read(sandbox, path)))
        print(f"read of 2000 lines ({len(text.encode()) // 1024} KiB), {args.reads} reads each:")
        print(line("derived (deepagents' script)", derived))
        print(line("native (agentd fs request)", native))
        speedup = statistics.median(derived) / statistics.median(native)
        print(f"  native is {speedup:.1f}x faster than derived (median)")

        idle = [timed_after_idle(sandbox) for _ in range(args.idle)]
    with agentd.LocalSandbox(confined=False) as unconfined:
        for _ in range(20):
            unconfined.execute("true")
        idle_unconfined = [timed_after_idle(unconfined) for _ in range(args.idle)]
    print(f"execute(\"true\") after {IDLE * 1e3:.0f} ms without commands, {args.idle} calls each:")
    print(line("LocalSandbox(confined=False)", idle_unconfined))
    print(line("LocalSandbox() (confined)", idle, idle_unconfined))
    loop.close()


#: The pause before each call of the "after idle" figure, as between an agent's commands.
IDLE = 0.1


def timed_after_idle(sandbox: agentd.Sandbox) -> float:
    time.sleep(IDLE)
    return timed(lambda: sandbox.execute("true"))


if __name__ == "__main__":
    main()
