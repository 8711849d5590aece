#!/usr/bin/env python3
"""Issue 53's primary verdict (lab/docs/replication-u-protocol.md, section 6) from `eval --records` files.

    python3 lab/scripts/replication_verdict.py --s1 S1.json --s2 S2.json [--s1-seed1 S1SEED1.json] [--a A.json] [--json]

Standard library only. The unit is the paired run: one (prompt, seed) under a guided mode and under `prior` in the
same file. Strict verdict (the primary one): shape and colour right and IoU with the expected shape >= 0.5; the frozen
verdict (the evaluator's own) is reported beside it. An object (shape x colour) is right when more than half of its
runs are. b: held-out pairs prior wrong -> mode right; c: prior right -> mode wrong; p = P(X >= b), X ~ Bin(b + c, 1/2)
(1 when b + c = 0). A mode passes a split when p < threshold, it has more held-out objects right than the prior, and it
loses no seen object. Holm over the tested modes (sampling, end-to-end): the mode with the smaller p_m (the larger of
its S1 and S2 p) needs p_m < 0.025; the other, tested only when that p_m < 0.025, needs p_m < 0.05. Robust to the
prior seed: the mode also passes S1' at p < 0.05. Harm: on S1 or S2, c > b with P(X >= c) < 0.05, or a seen object
lost. The default switch's conditions that records cannot show (guidance.json and clip/ shipped and read) are listed
as to be checked by hand.
"""
import argparse
import json
import math
import sys
from collections import defaultdict

MIN_IOU = 0.5
MODES = ("sampling", "end-to-end")


def frozen(r):
    e = r["export"]
    return e.get("shape") == r["expected_shape"] and e.get("colour") == r["expected_colour"]


def strict(r):
    iou = r["export"].get("shape_iou")
    return frozen(r) and iou is not None and iou >= MIN_IOU


def tail(k, n):
    """P(X >= k) for X ~ Bin(n, 1/2); 1 when n = 0."""
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n


def objects_right(records, judge):
    """{(shape, colour): right} over `records`, an object right when more than half of its runs are."""
    runs = defaultdict(list)
    for r in records:
        runs[(r["expected_shape"], r["expected_colour"])].append(judge(r))
    return {k: 2 * sum(v) > len(v) for k, v in runs.items()}


def mean_iou(records):
    ious = [r["export"]["shape_iou"] for r in records if r["export"].get("shape_iou") is not None]
    return sum(ious) / len(ious) if ious else None


def compare(records, mode, judge):
    """b, c, p, objects and seen objects lost of `mode` against `prior` in one records file."""
    by = defaultdict(dict)
    for r in records:
        by[r["mode"]][(r["prompt"], r["seed"])] = r
    prior, guided = by.get("prior", {}), by.get(mode, {})
    pairs = [(prior[k], guided[k]) for k in guided if k in prior]
    held = [(a, g) for a, g in pairs if a["held_out"]]
    b = sum(1 for a, g in held if not judge(a) and judge(g))
    c = sum(1 for a, g in held if judge(a) and not judge(g))
    out = {"pairs": len(held), "b": b, "c": c, "p": tail(b, b + c), "p_harm": tail(c, b + c)}
    for name, side in (("prior", [a for a, _ in pairs]), (mode, [g for _, g in pairs])):
        held_obj = objects_right([r for r in side if r["held_out"]], judge)
        seen_obj = objects_right([r for r in side if not r["held_out"]], judge)
        out[name] = {
            "held_out_objects": sum(held_obj.values()),
            "held_out_runs": sum(judge(r) for r in side if r["held_out"]),
            "seen_objects": sum(seen_obj.values()),
            "seen_mean_iou": mean_iou([r for r in side if not r["held_out"]]),
            "seen": seen_obj,
        }
    lost = [k for k, right in out["prior"]["seen"].items() if right and not out[mode]["seen"].get(k, False)]
    out["seen_lost"] = ["%s %s" % (col, sh) for sh, col in sorted(lost)]
    for side in ("prior", mode):
        del out[side]["seen"]
    out["more_held_out_objects"] = out[mode]["held_out_objects"] > out["prior"]["held_out_objects"]
    out["harm"] = (out["c"] > out["b"] and out["p_harm"] < 0.05) or bool(out["seen_lost"])
    return out


def passes(cmp, threshold):
    return cmp["p"] < threshold and cmp["more_held_out_objects"] and not cmp["seen_lost"]


def decide(splits, judge):
    """Per tested mode: per split comparisons, p_m, the outcome and harm."""
    result = {}
    for mode in MODES:
        cmps = {name: compare(recs, mode, judge) for name, recs in splits.items()}
        if cmps["s1"]["pairs"] == 0 and cmps["s2"]["pairs"] == 0:
            continue
        result[mode] = {
            "splits": cmps,
            "p_m": max(cmps["s1"]["p"], cmps["s2"]["p"]),
            "conditions": all(c["more_held_out_objects"] and not c["seen_lost"] for n, c in cmps.items() if n != "s1_seed1"),
            "harm": cmps["s1"]["harm"] or cmps["s2"]["harm"],
        }
    ordered = sorted(result, key=lambda m: (result[m]["p_m"], MODES.index(m)))
    first_rejected = False
    for rank, mode in enumerate(ordered):
        r = result[mode]
        threshold = 0.025 if rank == 0 else 0.05
        tested = rank == 0 or first_rejected
        rejected = tested and r["p_m"] < threshold
        if rank == 0:
            first_rejected = rejected
        r["holm_threshold"] = threshold
        r["tested"] = tested
        replicates = rejected and r["conditions"]
        seed1 = r["splits"].get("s1_seed1")
        robust = replicates and seed1 is not None and passes(seed1, 0.05)
        r["outcome"] = ("replicates, robust to the prior seed" if robust else "replicates") if replicates else "no gain"
        r["robust"] = robust
    return result


def switch(splits, verdicts, world_a):
    """The default switch's candidate and its conditions (section 6)."""
    def key(name):
        s = compare(splits[name], "sampling", strict)["sampling"]
        return (s["held_out_objects"], s["held_out_runs"], s["seen_mean_iou"] or 0.0)
    candidate = max(("s1", "s2"), key=key)
    cmp = compare(splits[candidate], "sampling", strict)
    s = cmp["sampling"]
    sampling = verdicts.get("sampling", {})
    conditions = {
        "sampling replicates and is robust to the prior seed": bool(sampling.get("robust")),
        "mean seen IoU >= 0.95": s["seen_mean_iou"] is not None and s["seen_mean_iou"] >= 0.95,
        "no seen object lost": not cmp["seen_lost"],
    }
    if world_a is not None:
        a = compare(world_a, "sampling", strict)["sampling"]["seen_objects"]
        conditions["seen objects right >= world A's (%d)" % a] = s["seen_objects"] >= a
    else:
        conditions["seen objects right >= world A's"] = None
    conditions["guidance.json and clip/ ship and generate/eval read them"] = None
    values = list(conditions.values())
    decided = False if False in values else (None if None in values else True)
    return {"candidate": candidate, "conditions": conditions, "switch": decided}


def load(path):
    with open(path) as f:
        return json.load(f)["records"]


def fmt(p):
    return "%.4g" % p


def print_tables(name, verdicts):
    print("## %s verdict" % name)
    print("| mode | split | pairs | b | c | p | held-out objects prior -> mode | seen objects lost |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, r in verdicts.items():
        for split, c in r["splits"].items():
            print("| %s | %s | %d | %d | %d | %s | %d -> %d | %s |" % (
                mode, split, c["pairs"], c["b"], c["c"], fmt(c["p"]), c["prior"]["held_out_objects"],
                c[mode]["held_out_objects"], ", ".join(c["seen_lost"]) or "none"))
    for mode, r in verdicts.items():
        harm = "; harm" if r["harm"] else ""
        print("%s: p_m %s (Holm threshold %s%s): %s%s" % (
            mode, fmt(r["p_m"]), r["holm_threshold"], "" if r["tested"] else ", not tested", r["outcome"], harm))
    print()


def main():
    ap = argparse.ArgumentParser(description="Issue 53's section 6 verdict from eval records.")
    ap.add_argument("--s1", required=True)
    ap.add_argument("--s2", required=True)
    ap.add_argument("--s1-seed1")
    ap.add_argument("--a", help="run 8's records (world A), for the default switch")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = ap.parse_args()
    try:
        splits = {"s1": load(args.s1), "s2": load(args.s2)}
        if args.s1_seed1:
            splits["s1_seed1"] = load(args.s1_seed1)
        world_a = load(args.a) if args.a else None
    except (OSError, ValueError, KeyError) as e:
        print("error: reading the records: %s" % e, file=sys.stderr)
        return 2
    out = {"strict": decide(splits, strict), "frozen": decide(splits, frozen)}
    out["switch"] = switch(splits, out["strict"], world_a)
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    print_tables("Strict (deciding)", out["strict"])
    print_tables("Frozen (reported beside)", out["frozen"])
    sw = out["switch"]
    print("Default switch: candidate %s" % sw["candidate"])
    for cond, ok in sw["conditions"].items():
        print("- %s: %s" % (cond, {True: "yes", False: "no", None: "to be checked"}[ok]))
    print("Decision: %s" % {True: "switch the default", False: "world A stays the default",
                            None: "open (conditions to be checked)"}[sw["switch"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
