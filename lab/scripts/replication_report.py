#!/usr/bin/env python3
"""Issue 53's reporting tables (lab/docs/replication-u-protocol.md, section 8 and section 6's secondary analyses)
from `eval --records` files.

    python3 lab/scripts/replication_report.py NAME=PATH [NAME=PATH ...] [--unguarded NAME=PATH ...] [--partial]

e.g. `U2-S1=lab/runs/replication-u/s1.json U2-S2=lab/runs/replication-u/s2.json
"U2-S1'=lab/runs/replication-u/s1-seed1.json" --unguarded U2-S1=lab/runs/replication-u/s1-unguarded.json`.

Standard library only; the verdicts, object counts, mean IoU and binomial tails are replication_verdict.py's.
A file whose "complete" is not true is refused (exit 2) unless --partial is given; then every row of it is
labelled "PARTIAL, n of N runs" (N = prompts x seeds x modes of its settings).

Tables (strict: shape and colour right and IoU >= 0.5; frozen: the evaluator's own verdict):
1. Per world and mode: held-out and seen objects (runs) right, strict and frozen ("k/6 (r/126)": an object is
   right when more than half of its runs are); mean shape IoU held-out / seen; for guided modes the scorer
   columns, held-out / seen: runs whose export differs from the start (moved / guided), mean scorer gain of the
   export over the start, wrong runs scored at or above the right object (preferred / checked) and their mean
   margin (export minus right object); mean seconds per run over both splits.
2. Exact one-sided sign test over the held-out combinations of the first two worlds (S1 and S2; 12 in all), per
   guided mode: per combination, mode strict runs right minus prior strict runs right over its paired runs;
   ties dropped; p = P(X >= n+), X ~ Bin(n+ + n-, 1/2).
3. Held-out strict runs right by template and by seed, per world and mode.
4. Seen runs, strict, paired by prompt and seed: right -> wrong and wrong -> right from the prior to each guided
   mode, with a two-sided exact McNemar p = min(1, 2 min(P(X <= k), P(X >= k))), k = wrong -> right,
   X ~ Bin(both discordant counts, 1/2).
5. Per --unguarded NAME=PATH: its prior rows against the primary NAME's prior rows, verdict for verdict (strict
   and frozen, by prompt and seed; section 5 requires they match), and its sampling row as in table 1.
"""
import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replication_verdict as rv  # noqa: E402

TEMPLATES = (
    "a {s} that is {c}",
    "{c} {s}",
    "a {c} colored {s}",
    "a {s} in {c}",
    "the {s} is {c}",
    "a 3d render of a {c} {s}",
    "a photo of a {c} {s}",
)
JUDGES = (("strict", rv.strict), ("frozen", rv.frozen))


class RefusedFile(Exception):
    pass


# ---------------------------------------------------------------- loading

def parse_pair(text):
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError("expected NAME=PATH, got %r" % text)
    return name, path


def load_world(name, path, partial):
    """{name, label, partial, records, summary, modes}; raises RefusedFile for an incomplete file without
    --partial. label is the name, with " (PARTIAL, n of N runs)" (the partial field) for an incomplete file."""
    try:
        with open(path) as f:
            data = json.load(f)
        records = data["records"]
    except (OSError, ValueError, KeyError) as e:
        raise RefusedFile("%s: cannot read the records of %s: %s" % (name, path, e))
    settings = data.get("settings", {})
    modes = list(settings.get("modes") or dict.fromkeys(r["mode"] for r in records))
    partial_label = ""
    if data.get("complete") is not True:
        if not partial:
            raise RefusedFile('%s: %s is not complete ("complete": %s); pass --partial to tabulate it anyway'
                              % (name, path, json.dumps(data.get("complete"))))
        expected = len(settings.get("prompts", [])) * len(settings.get("seeds", [])) * len(modes)
        partial_label = " (PARTIAL, %d of %d runs)" % (len(records), expected)
    return {"name": name, "label": name + partial_label, "partial": partial_label, "records": records,
            "summary": data.get("summary") or {}, "modes": modes}


# ---------------------------------------------------------------- small helpers

def of_mode(records, mode, held_out=None):
    return [r for r in records if r["mode"] == mode and (held_out is None or r["held_out"] == held_out)]


def pairs(records, mode):
    """[(prior record, mode record)] paired by (prompt, seed), as replication_verdict.compare pairs them."""
    prior = {(r["prompt"], r["seed"]): r for r in of_mode(records, "prior")}
    out = []
    for g in of_mode(records, mode):
        key = (g["prompt"], g["seed"])
        if key in prior:
            out.append((prior[key], g))
    return out


def mean(values):
    values = list(values)
    return sum(values) / len(values) if values else None


def num(v, digits=3):
    return "–" if v is None else "%.*f" % (digits, v)


def p_fmt(p):
    return "%.4g" % p


def objects_runs(records, judge):
    """'k/K (r/R)': objects right of objects, runs right of runs."""
    objects = rv.objects_right(records, judge)
    return "%d/%d (%d/%d)" % (sum(objects.values()), len(objects), sum(judge(r) for r in records), len(records))


def mcnemar_two_sided(k, n):
    """min(1, 2 min(P(X <= k), P(X >= k))), X ~ Bin(n, 1/2); 1 when n = 0."""
    if n == 0:
        return 1.0
    return min(1.0, 2 * min(rv.tail(n - k, n), rv.tail(k, n)))  # P(X <= k) = P(X >= n - k) by symmetry


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- table 1: per world and mode

def scorer(records):
    """Scorer columns of one split, computed from the records exactly as eval's summary does (lab/src/report.rs,
    `summarise`): guided = runs with an attribution; moved = attribution.moved; gain = mean of
    scores[1] - scores[0] (export minus start) where both were scored; wrong runs = wrong under the frozen verdict
    (eval's own) with a scorer check; preferred = scorer.export >= scorer.right_object; margin = mean of
    scorer.export - scorer.right_object. Cross-checked against the file's summary by check_summary."""
    guided = [r for r in records if r.get("attribution")]
    wrong = [r["scorer"] for r in records if not rv.frozen(r) and r.get("scorer")]
    return {
        "guided": len(guided),
        "moved": sum(bool(r["attribution"].get("moved")) for r in guided),
        "mean_gain": mean(r["attribution"]["scores"][1] - r["attribution"]["scores"][0]
                          for r in guided if r["attribution"].get("scores")),
        "wrong_checked": len(wrong),
        "wrong_preferred": sum(s["export"] >= s["right_object"] for s in wrong),
        "wrong_margin": mean(s["export"] - s["right_object"] for s in wrong),
    }


def check_summary(world, mode, split, records, ours):
    """Warns on stderr where the file's own summary disagrees with what the records give."""
    theirs = world["summary"].get(mode, {}).get(split)
    if not theirs:
        return
    ours = dict(ours, runs=len(records), runs_right=sum(rv.frozen(r) for r in records),
                objects_right=sum(rv.objects_right(records, rv.frozen).values()))
    theirs = dict(theirs, objects_right=theirs.get("objects", {}).get("right"))
    for key, value in ours.items():
        other = theirs.get(key)
        same = (value is None and other is None) or (
            value is not None and other is not None and abs(value - other) <= 1e-6)
        if not same:
            print("warning: %s %s %s: %s is %s from the records, %s in the file's summary"
                  % (world["name"], mode, split, key, value, other), file=sys.stderr)


def splits(world, mode):
    """[(records, scorer columns)] of one mode, held-out then seen, each checked against the file's summary."""
    out = []
    for held, split in ((True, "held_out"), (False, "seen")):
        records = of_mode(world["records"], mode, held)
        s = scorer(records)
        check_summary(world, mode, split, records, s)
        out.append((records, s))
    return out


def row1(world, mode):
    (held, held_s), (seen, seen_s) = splits(world, mode)
    row = [world["label"], mode]
    for _, judge in JUDGES:
        row += [objects_runs(held, judge), objects_runs(seen, judge)]
    row.append("%s / %s" % (num(rv.mean_iou(held)), num(rv.mean_iou(seen))))
    if held_s["guided"] + seen_s["guided"]:
        row += [" / ".join(fmt(s) for s in (held_s, seen_s)) for fmt in (
            lambda s: "%d/%d" % (s["moved"], s["guided"]),
            lambda s: num(s["mean_gain"]),
            lambda s: "%d/%d" % (s["wrong_preferred"], s["wrong_checked"]),
            lambda s: num(s["wrong_margin"]))]
    else:
        row += ["–"] * 4
    row.append(num(mean(r["seconds"] for r in held + seen), 2))
    return row


HEADER1 = ["world", "mode", "held-out strict", "seen strict", "held-out frozen", "seen frozen",
           "mean IoU held-out / seen", "export ≠ start", "scorer gain over start",
           "wrong scored ≥ right object", "wrong margin", "s/run"]


def print_table1(worlds):
    print("## 1. Per world and mode\n")
    print("Objects right of objects (runs right of runs). The scorer columns are held-out / seen, computed from")
    print("the records as eval's summary computes them (wrong runs: the frozen verdict, as in eval); s/run over")
    print("both splits.\n")
    print(table(HEADER1, [row1(w, m) for w in worlds for m in w["modes"]]))
    print()


# ---------------------------------------------------------------- table 2: sign test over combinations

def combination_differences(world, mode):
    """{(shape, colour): (mode strict right, prior strict right, pairs)} over held-out paired runs."""
    out = defaultdict(lambda: [0, 0, 0])
    for prior, guided in pairs(world["records"], mode):
        if prior["held_out"]:
            c = out[(prior["expected_shape"], prior["expected_colour"])]
            c[0] += rv.strict(guided)
            c[1] += rv.strict(prior)
            c[2] += 1
    return {k: tuple(v) for k, v in sorted(out.items())}


def sign_test(diffs):
    """(n+, n-, ties, p) with p = P(X >= n+), X ~ Bin(n+ + n-, 1/2)."""
    plus = sum(d > 0 for d in diffs)
    minus = sum(d < 0 for d in diffs)
    return plus, minus, len(diffs) - plus - minus, rv.tail(plus, plus + minus)


def print_table2(worlds):
    print("## 2. Sign test over the held-out combinations of %s\n" % " and ".join(w["name"] for w in worlds[:2]))
    if len(worlds) < 2:
        print("Needs two primary worlds (S1 and S2, the first two NAME=PATH arguments).\n")
        return
    guided = [m for m in worlds[0]["modes"] if m != "prior"]
    diffs = {(w["name"], m): combination_differences(w, m) for w in worlds[:2] for m in guided}
    rows = []
    for w in worlds[:2]:
        combos = sorted({k for m in guided for k in diffs[(w["name"], m)]})
        for shape, colour in combos:
            row = [w["label"], "%s %s" % (colour, shape)]
            for m in guided:
                g, p, n = diffs[(w["name"], m)].get((shape, colour), (0, 0, 0))
                row.append("%+d (%d − %d of %d)" % (g - p, g, p, n))
            rows.append(row)
    print("Per combination: mode strict runs right − prior strict runs right (of its paired runs).\n")
    print(table(["world", "combination"] + ["%s − prior" % m for m in guided], rows))
    print()
    for m in guided:
        d = [g - p for w in worlds[:2] for g, p, _ in diffs[(w["name"], m)].values()]
        plus, minus, ties, p = sign_test(d)
        print("- %s: %d combinations, n+ %d, n− %d, ties %d (dropped); p = P(X ≥ %d), X ~ Bin(%d, ½) = %s"
              % (m, len(d), plus, minus, ties, plus, plus + minus, p_fmt(p)))
    print()


# ---------------------------------------------------------------- table 3: by template and by seed

def template_of(record):
    for t in TEMPLATES:
        if t.format(s=record["expected_shape"], c=record["expected_colour"]) == record["prompt"]:
            return t
    return "other: " + record["prompt"]


def runs_right_by(records, key):
    """{key value: (strict runs right, runs)}."""
    out = defaultdict(lambda: [0, 0])
    for r in records:
        c = out[key(r)]
        c[0] += rv.strict(r)
        c[1] += 1
    return out


def print_table3(worlds):
    print("## 3. Held-out strict runs right by template and by seed\n")
    columns = [(w, m) for w in worlds for m in w["modes"]]
    by_template = [runs_right_by(of_mode(w["records"], m, True), template_of) for w, m in columns]
    by_seed = [runs_right_by(of_mode(w["records"], m, True), lambda r: r["seed"]) for w, m in columns]
    templates = [t for t in TEMPLATES if any(t in c for c in by_template)]
    templates += sorted({t for c in by_template for t in c} - set(TEMPLATES))
    seeds = sorted({s for c in by_seed for s in c})

    def cell(counts, key):
        return "%d/%d" % tuple(counts.get(key, (0, 0)))

    rows = [["template", t] + [cell(c, t) for c in by_template] for t in templates]
    rows += [["seed", s] + [cell(c, s) for c in by_seed] for s in seeds]
    print(table(["by", "value"] + ["%s %s" % (w["label"], m) for w, m in columns], rows))
    print()


# ---------------------------------------------------------------- table 4: seen runs, McNemar

def seen_transitions(records, mode):
    """(pairs, right -> wrong, wrong -> right) over seen paired runs, strict."""
    seen = [(p, g) for p, g in pairs(records, mode) if not p["held_out"]]
    right_to_wrong = sum(rv.strict(p) and not rv.strict(g) for p, g in seen)
    wrong_to_right = sum(not rv.strict(p) and rv.strict(g) for p, g in seen)
    return len(seen), right_to_wrong, wrong_to_right


def print_table4(worlds):
    print("## 4. Seen runs from the prior to each guided mode (strict, paired by prompt and seed)\n")
    rows = []
    for w in worlds:
        for m in w["modes"]:
            if m == "prior":
                continue
            n, rw, wr = seen_transitions(w["records"], m)
            rows.append([w["label"], m, n, rw, wr, p_fmt(mcnemar_two_sided(wr, rw + wr))])
    print(table(["world", "mode", "seen pairs", "right → wrong", "wrong → right", "McNemar p (two-sided)"], rows))
    print()


# ---------------------------------------------------------------- table 5: unguarded runs

def verdicts(record):
    return tuple(judge(record) for _, judge in JUDGES)


def verdict_text(v):
    return ", ".join("%s %s" % (name, "right" if ok else "wrong") for (name, _), ok in zip(JUDGES, v))


def prior_row_check(primary_records, unguarded_records):
    """(identical, total, [mismatch lines]): the unguarded file's prior rows against the primary's, by (prompt,
    seed), strict and frozen verdicts both."""
    primary = {(r["prompt"], r["seed"]): r for r in of_mode(primary_records, "prior")}
    identical, mismatches = 0, []
    rows = of_mode(unguarded_records, "prior")
    for r in rows:
        key = (r["prompt"], r["seed"])
        if key not in primary:
            mismatches.append("%r seed %s: absent from the primary file" % key)
        elif verdicts(primary[key]) != verdicts(r):
            mismatches.append("%r seed %s: primary %s; unguarded %s" % (
                key[0], key[1], verdict_text(verdicts(primary[key])), verdict_text(verdicts(r))))
        else:
            identical += 1
    return identical, len(rows), mismatches


def print_table5(worlds, unguarded):
    print("## 5. Unguarded runs (--sampler-export guided)\n")
    by_name = {w["name"]: w for w in worlds}
    for u in unguarded:
        primary = by_name.get(u["name"])
        if primary is None:
            print("- %s: no primary file named %s to compare its prior rows with" % (u["label"], u["name"]))
            continue
        k, n, mismatches = prior_row_check(primary["records"], u["records"])
        print("- %s: prior rows identical: %d of %d (strict and frozen, by prompt and seed, against %s)"
              % (u["label"], k, n, primary["label"]))
        for line in mismatches:
            print("  - mismatch: %s" % line)
    print()
    rows = [row1(dict(u, label=u["name"] + " unguarded" + u["partial"]), "sampling") for u in unguarded]
    print(table(HEADER1, rows))
    print()


# ---------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description="Issue 53's reporting tables from eval records (see the docstring).")
    ap.add_argument("worlds", nargs="+", type=parse_pair, metavar="NAME=PATH",
                    help="primary records files (runs 1-3); the first two are S1 and S2 for the sign test")
    ap.add_argument("--unguarded", nargs="+", type=parse_pair, action="extend", default=[], metavar="NAME=PATH",
                    help="unguarded records files (runs 4-6), NAME as its primary file's")
    ap.add_argument("--partial", action="store_true", help="tabulate incomplete files, labelled PARTIAL")
    args = ap.parse_args(argv)
    try:
        worlds = [load_world(n, p, args.partial) for n, p in args.worlds]
        unguarded = [load_world(n, p, args.partial) for n, p in args.unguarded]
    except RefusedFile as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    print_table1(worlds)
    print_table2(worlds)
    print_table3(worlds)
    print_table4(worlds)
    if unguarded:
        print_table5(worlds, unguarded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
