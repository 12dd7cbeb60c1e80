#!/usr/bin/env python3
"""Run fuzz-vq-post inputs on two drivers and compare their completions.

fuzz-vq-post (test/fuzz/fuzz_vq_post.cpp) picks its driver from byte 0 of
an input (mod 3: 0 shm, 1 ethdev over a net_ring pair, 2 mlx5 over its
model). This script runs each input once per driver with SHUNT_FUZZ_TRACE
(steps and completions on stderr) and SHUNT_FUZZ_SETTLE_MS, and reports
the requests whose completion status differs, for the inputs that ran the
same program on both (an input can read differently where a driver lacks a
QP type or a window). What it prints is material to read, not a verdict:
drivers differ where doc/guides/vq.md says they do (shm completes a ring
send once it is in the peer's ring, ethdev's UC has no send-with-invalidate,
mlx5 invalidates windows only), and requests to a peer in ERR end by
timing. Statuses are vq::wc_status numbers (lib/vq/types.h).

  devtools/fuzz_vq_diff.py BUILD-FUZZ CORPUS-DIR [--drivers shm,mlx5]
      [--settle-ms 400] [--jobs 2] [--limit N]

BUILD-FUZZ is a -Dfuzz=true build directory with test/fuzz/fuzz-vq-post
built; CORPUS-DIR holds inputs (test/fuzz/corpus/fuzz-vq-post, or a
fuzzing run's corpus). Exit status 0; 1 if a run crashed (its stderr is
kept under the system's temporary directory and named).
"""
import argparse
import collections
import concurrent.futures
import os
import queue
import subprocess
import sys
import tempfile

DRIVERS = {"shm": 0, "ethdev": 1, "mlx5": 2}


def run(binary, data, driver, settle, cpu, tmp):
    path = os.path.join(tmp, "in-%d-%d" % (cpu, driver))
    with open(path, "wb") as f:
        f.write(bytes([driver]) + data[1:])
    env = dict(os.environ, SHUNT_FUZZ_TRACE="1", SHUNT_FUZZ_SETTLE_MS=str(settle),
               ASAN_OPTIONS="detect_leaks=0")
    r = subprocess.run(["taskset", "-c", str(cpu), binary, path], env=env, capture_output=True,
                       text=True, timeout=300)
    steps, wcs = [], {}
    for line in r.stderr.splitlines():
        if line.startswith("step "):
            steps.append(line)
        elif line.startswith("wc "):
            _, wr_id, status = line.split()
            wcs[int(wr_id)] = int(status)
    crashed = r.returncode != 0 or "ERROR: " in r.stderr
    return steps, wcs, crashed, r.stderr


def compare(args, binary, name, cpus, tmp):
    cpu = cpus.get()  # one CPU per running input: the drivers poll
    try:
        return compare_on(args, binary, name, cpu, tmp)
    finally:
        cpus.put(cpu)


def compare_on(args, binary, name, cpu, tmp):
    with open(os.path.join(args.corpus, name), "rb") as f:
        data = f.read()
    if len(data) < 2:
        return name, None, [], []
    a, b = DRIVERS[args.pair[0]], DRIVERS[args.pair[1]]
    sa, wa, ca, ea = run(binary, data, a, args.settle_ms, cpu, tmp)
    sb, wb, cb, eb = run(binary, data, b, args.settle_ms, cpu, tmp)
    crashes = []
    for crashed, err, d in ((ca, ea, a), (cb, eb, b)):
        if crashed:
            fd, p = tempfile.mkstemp(prefix="fuzz_vq_diff-%s-%d-" % (name[:12], d), suffix=".log")
            with os.fdopen(fd, "w") as f:
                f.write(err)
            crashes.append(p)
    if sa != sb:
        return name, None, [], crashes
    diff = [(k, wa.get(k), wb.get(k)) for k in sorted(set(wa) | set(wb)) if wa.get(k) != wb.get(k)]
    return name, True, diff, crashes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("corpus")
    ap.add_argument("--drivers", default="shm,mlx5", help="two of shm, ethdev, mlx5 (default shm,mlx5)")
    ap.add_argument("--settle-ms", type=int, default=400)
    ap.add_argument("--jobs", type=int, default=2, help="inputs at a time, one CPU each (default 2)")
    ap.add_argument("--limit", type=int, default=0, help="the first N inputs only")
    args = ap.parse_args()
    args.pair = args.drivers.split(",")
    if len(args.pair) != 2 or any(d not in DRIVERS for d in args.pair):
        ap.error("--drivers takes two of shm, ethdev, mlx5")
    binary = os.path.join(args.build, "test", "fuzz", "fuzz-vq-post")
    if not os.access(binary, os.X_OK):
        ap.error("%s not found: build it with -Dfuzz=true" % binary)
    names = sorted(os.listdir(args.corpus))
    if args.limit:
        names = names[:args.limit]
    cpu_list = sorted(os.sched_getaffinity(0))[:max(1, args.jobs)]
    cpus = queue.Queue()
    for c in cpu_list:
        cpus.put(c)
    kinds = collections.Counter()
    same = other = 0
    crashes = []
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(len(cpu_list)) as pool:
        futures = [pool.submit(compare, args, binary, n, cpus, tmp) for n in names]
        for fut in futures:
            name, ran_same, diff, cr = fut.result()
            crashes += cr
            if not ran_same:
                other += 1
                continue
            same += 1
            if diff:
                print("%s %s" % (name, " ".join("%d:%s/%s" % d for d in diff)))
                for _, x, y in diff:
                    kinds[(x, y)] += 1
    print("# %d inputs ran the same program on %s and %s, %d did not" % (same, args.pair[0], args.pair[1], other))
    for (x, y), n in kinds.most_common():
        print("# status %s on %s, %s on %s: %d requests" % (x, args.pair[0], y, args.pair[1], n))
    for p in crashes:
        print("# CRASH: %s" % p)
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
