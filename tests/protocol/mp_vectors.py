"""MicroPython runner for vectors.json: prints one line per failing vector, then a count.

Run with MICROPYPATH=<repo>:<repo>/tests/protocol (tests/protocol/test_mp_vectors.py does this);
exits 1 if any vector fails. The last line is ``ran N vectors, F failed``.

The file is read one line at a time (one vector per line, see its "about") so the run fits
the small heap of ``-X heapsize=64wk``, like a board without PSRAM.
"""

import gc
import json
import sys

import vector_check


def _vectors(path):
    """Yield (kind, vector) for every vector line of the file."""
    kind = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.endswith(": ["):
                kind = json.loads(line[:-3])
            elif line.startswith('{"name"'):
                if line.endswith(","):
                    line = line[:-1]
                yield kind, json.loads(line)


def main(path):
    ran = 0
    failed = 0
    for kind, vector in _vectors(path):
        ran += 1
        problem = vector_check.CHECKS[kind](vector)
        if problem is not None:
            failed += 1
            print("FAIL " + kind + " " + vector["name"] + ": " + problem)
        gc.collect()
    print("ran " + str(ran) + " vectors, " + str(failed) + " failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "vectors.json"))
