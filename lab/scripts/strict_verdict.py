#!/usr/bin/env python3
"""Reads an `eval --records FILE` JSON and prints, per mode, the evaluator's verdict counts beside a stricter
reading: right only if the frozen verdict is right and the IoU with the expected shape is at least MIN_IOU.

    python3 scripts/strict_verdict.py RECORDS.json [MIN_IOU]   (default 0.5)

Standard library only. An object counts as right when most of its seeds are, as in `eval`'s table.
"""
import json
import sys
from collections import defaultdict


def right(record):
    e = record["export"]
    return e["shape"] == record["expected_shape"] and e["colour"] == record["expected_colour"]


def strict(record, min_iou):
    # When the verdict's shape is the expected one, `shape_iou` is the IoU with the expected shape.
    return right(record) and record["export"]["shape_iou"] >= min_iou


def counts(records, judge):
    """(held-out objects, held-out runs, seen objects, seen runs), each as (right, total)."""
    by_object = defaultdict(list)
    for r in records:
        by_object[(r["prompt"], r["held_out"])].append(judge(r))
    out = []
    for held_out in (True, False):
        runs = [v for (_, h), vs in by_object.items() if h == held_out for v in vs]
        objects = [sum(vs) * 2 > len(vs) for (_, h), vs in by_object.items() if h == held_out]
        out += [(sum(objects), len(objects)), (sum(runs), len(runs))]
    return out


def main():
    path = sys.argv[1]
    min_iou = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    with open(path) as f:
        records = json.load(f)["records"]
    modes = list(dict.fromkeys(r["mode"] for r in records))
    print(f"{path}: frozen verdict / strict verdict (IoU with the expected shape >= {min_iou})")
    print("| mode | verdict | held-out objects | held-out runs | seen objects | seen runs |")
    print("|---|---|---|---|---|---|")
    for mode in modes:
        rs = [r for r in records if r["mode"] == mode]
        for name, judge in (("frozen", right), ("strict", lambda r: strict(r, min_iou))):
            cells = " | ".join(f"{a}/{b}" for a, b in counts(rs, judge))
            print(f"| {mode} | {name} | {cells} |")


if __name__ == "__main__":
    main()
