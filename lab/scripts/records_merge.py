#!/usr/bin/env python3
"""Merges the records of one `clipsculpt-lab eval` run that two processes computed on disjoint prompts.

Usage: records_merge.py MAIN PART [PART...] [--check-only]

MAIN is the records file of the run's own command; each PART is the records file of a helper that ran the same
command (same binary, world, seeds, modes and settings) on another prompt file. Every record of a PART whose
prompt, seed and mode MAIN lacks is added to MAIN, which keeps its own settings and is marked incomplete, so that
rerunning MAIN's command with `--resume` takes the merged records as done, computes whatever is missing and writes
the summary. A record present in both must be equal in everything but its timings (the `seconds` fields): each item
depends only on its prompt and seed, so a difference means the helper did not run the same evaluation, and the
merge stops without writing. MAIN is replaced atomically (a temporary file, then a rename).
"""

import json
import os
import sys


def key(r):
    return (r["prompt"], r["seed"], r["mode"])


def untimed(v):
    """`v` without its `seconds` fields, at any depth."""
    if isinstance(v, dict):
        return {k: untimed(x) for k, x in v.items() if k != "seconds"}
    if isinstance(v, list):
        return [untimed(x) for x in v]
    return v


def merge(main, parts):
    """MAIN's table with every PART record it lacks; the keys found in both (checked equal) and those added."""
    have = {key(r): r for r in main["records"]}
    both, added = [], []
    for part in parts:
        for r in part["records"]:
            k = key(r)
            if k in have:
                if untimed(have[k]) != untimed(r):
                    raise ValueError(f"record {k} differs between the files (beyond its timings)")
                both.append(k)
            else:
                have[k] = r
                added.append(k)
    merged = dict(main)
    merged["records"] = list(main["records"]) + [have[k] for k in added]
    merged["complete"] = False
    return merged, both, added


def write_atomically(path, table):
    tmp = f"{path}.merge-tmp"
    with open(tmp, "w") as f:
        json.dump(table, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv):
    args = [a for a in argv if a != "--check-only"]
    if len(args) < 2:
        sys.exit(__doc__)
    tables = []
    for path in args:
        with open(path) as f:
            tables.append(json.load(f))
    try:
        merged, both, added = merge(tables[0], tables[1:])
    except ValueError as e:
        sys.exit(f"error: {e}; {args[0]} left unchanged")
    print(f"{len(both)} records in both files, equal but for timings; {len(added)} added to {args[0]}")
    if "--check-only" not in argv:
        write_atomically(args[0], merged)


if __name__ == "__main__":
    main(sys.argv[1:])
