#!/usr/bin/env python3
"""Tests of replication_report.py on tiny hand-made records (standard library only).

    python3 lab/scripts/test_replication_report.py        (or: python3 -m unittest discover -s lab/scripts)

Each object has 6 runs (3 templates x seeds 100, 101), written as a string of verdicts in that order:
S = strict right (IoU 0.9), F = frozen right only (IoU 0.4), W = wrong colour. An object is right with >= 4 S.

S1, held out: red sphere  prior SSWWWW (2, not right)  sampling SSSSWW (4, right)   difference +2
              green cube  prior SSSSWW (4, right)      sampling SSSSWW (4, right)   difference  0
    seen:     blue cone   prior SSSSSS                 sampling SSSSSW              right -> wrong 1
              white torus prior SSSSFF (strict 4)      sampling SSSSSS              wrong -> right 2
S2, held out: blue sphere prior WWWWWW                 sampling SSSWWW              difference +3
              yellow cube prior SSSWWW                 sampling SSSSSS              difference +3
              black cone  prior SSSSSS                 sampling SSSSSW              difference -1
    seen:     red torus   prior FFFFFW                 sampling SSSSSW              wrong -> right 5

Sign test (sampling): differences +2, 0, +3, +3, -1: n+ 3, n- 1, 1 tie; p = P(X >= 3), X ~ Bin(4, 1/2) = 5/16.
McNemar on seen runs: S1 k = 2 of n = 3, 2 min(7/8, 4/8) = 1 (capped); S2 k = 5 of 5, 2 min(1, 1/32) = 1/16.
"""
import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import replication_report as rr  # noqa: E402

SCRIPT = os.path.join(HERE, "replication_report.py")
TEMPLATES = ("{c} {s}", "a {s} in {c}", "the {s} is {c}")
SEEDS = (100, 101)
S1 = {
    ("sphere", "red", True): ("SSWWWW", "SSSSWW"),
    ("cube", "green", True): ("SSSSWW", "SSSSWW"),
    ("cone", "blue", False): ("SSSSSS", "SSSSSW"),
    ("torus", "white", False): ("SSSSFF", "SSSSSS"),
}
S2 = {
    ("sphere", "blue", True): ("WWWWWW", "SSSWWW"),
    ("cube", "yellow", True): ("SSSWWW", "SSSSSS"),
    ("cone", "black", True): ("SSSSSS", "SSSSSW"),
    ("torus", "red", False): ("FFFFFW", "SSSSSW"),
}


def record(shape, colour, held_out, template, seed, mode, verdict):
    r = {
        "prompt": template.format(s=shape, c=colour), "mode": mode, "seed": seed, "expected_shape": shape,
        "expected_colour": colour, "held_out": held_out,
        "export": {"shape": shape, "colour": "purple" if verdict == "W" else colour,
                   "shape_iou": 0.4 if verdict == "F" else 0.9, "components": 1, "euler": 2},
        "scorer": {"export": 0.7, "right_object": 0.8},
        "seconds": 1.0 if mode == "prior" else 3.0,
    }
    if mode != "prior":
        r["attribution"] = {"start": "unguided sample", "scores": [0.5, 0.75], "moved": verdict != "S"}
    return r


def world(objects, complete=True):
    records = []
    for (shape, colour, held_out), verdicts in objects.items():
        runs = [(t, s) for t in TEMPLATES for s in SEEDS]
        for mode, vs in zip(("prior", "sampling"), verdicts):
            records += [record(shape, colour, held_out, t, s, mode, v) for (t, s), v in zip(runs, vs)]
    prompts = [t.format(s=s, c=c) for (s, c, _) in objects for t in TEMPLATES]
    settings = {"modes": ["prior", "sampling"], "prompts": prompts, "seeds": list(SEEDS)}
    return {"complete": complete, "settings": settings, "summary": {}, "records": records}


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, name, data):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            json.dump(data, f)
        return path

    def report(self, *argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = rr.main(list(argv))
        return rc, out.getvalue()

    def test_object_and_run_counts(self):
        rc, out = self.report("S1=" + self.write("s1.json", world(S1)), "S2=" + self.write("s2.json", world(S2)))
        self.assertEqual(rc, 0)
        # held-out strict, seen strict, held-out frozen, seen frozen
        self.assertIn("| S1 | prior | 1/2 (6/12) | 2/2 (10/12) | 1/2 (6/12) | 2/2 (12/12) |", out)
        self.assertIn("| S1 | sampling | 2/2 (8/12) | 2/2 (11/12) | 2/2 (8/12) | 2/2 (11/12) |", out)
        self.assertIn("| S2 | prior | 1/3 (9/18) | 0/1 (0/6) | 1/3 (9/18) | 1/1 (5/6) |", out)
        # sampling on S1: moved = runs not S (held out 4 of 12, seen 1 of 12), gain 0.25, 4 and 1 wrong runs
        # checked, none preferred (margin -0.1); s/run over both splits.
        self.assertIn("| 4/12 / 1/12 | 0.250 / 0.250 | 0/4 / 0/1 | -0.100 / -0.100 | 3.00 |", out)

    def test_sign_test(self):
        diffs = []
        for objects in (S1, S2):
            per_combination = rr.combination_differences({"records": world(objects)["records"]}, "sampling")
            diffs += [g - p for g, p, _ in per_combination.values()]
        self.assertEqual(sorted(diffs), [-1, 0, 2, 3, 3])
        self.assertEqual(rr.sign_test(diffs), (3, 1, 1, 5 / 16))
        _, out = self.report("S1=" + self.write("s1.json", world(S1)), "S2=" + self.write("s2.json", world(S2)))
        self.assertIn("| S1 | red sphere | +2 (4 − 2 of 6) |", out)
        self.assertIn("- sampling: 5 combinations, n+ 3, n− 1, ties 1 (dropped); p = P(X ≥ 3), X ~ Bin(4, ½) = 0.3125",
                      out)

    def test_mcnemar(self):
        self.assertEqual(rr.seen_transitions(world(S1)["records"], "sampling"), (12, 1, 2))
        self.assertEqual(rr.seen_transitions(world(S2)["records"], "sampling"), (6, 0, 5))
        self.assertEqual(rr.mcnemar_two_sided(2, 3), 1.0)
        self.assertEqual(rr.mcnemar_two_sided(5, 5), 1 / 16)
        self.assertEqual(rr.mcnemar_two_sided(0, 4), 1 / 8)
        self.assertEqual(rr.mcnemar_two_sided(0, 0), 1.0)

    def test_templates_and_seeds(self):
        _, out = self.report("S1=" + self.write("s1.json", world(S1)), "S2=" + self.write("s2.json", world(S2)))
        # Columns S1 prior, S1 sampling, S2 prior, S2 sampling; runs are template-major, so e.g. S1's prior
        # held out (SS|WW|WW, SS|SS|WW) has 4, 2 and 0 of 4 runs right by template, 3 of 6 at seed 100.
        self.assertIn("| template | {c} {s} | 4/4 | 4/4 | 4/6 | 6/6 |", out)
        self.assertIn("| template | a {s} in {c} | 2/4 | 4/4 | 3/6 | 5/6 |", out)
        self.assertIn("| template | the {s} is {c} | 0/4 | 0/4 | 2/6 | 3/6 |", out)
        self.assertIn("| seed | 100 | 3/6 | 4/6 | 5/9 | 8/9 |", out)

    def test_prior_rows_match_and_a_mismatch_is_reported(self):
        primary = world(S1)
        unguarded = copy.deepcopy(primary)
        self.assertEqual(rr.prior_row_check(primary["records"], unguarded["records"]), (24, 24, []))
        row = next(r for r in unguarded["records"] if r["mode"] == "prior" and r["prompt"] == "blue cone")
        row["export"]["colour"] = "red"
        k, n, mismatches = rr.prior_row_check(primary["records"], unguarded["records"])
        self.assertEqual((k, n, len(mismatches)), (23, 24, 1))
        self.assertIn("'blue cone' seed 100", mismatches[0])
        self.assertIn("primary strict right, frozen right; unguarded strict wrong, frozen wrong", mismatches[0])
        _, out = self.report("S1=" + self.write("s1.json", primary),
                             "--unguarded", "S1=" + self.write("u1.json", unguarded))
        self.assertIn("- S1: prior rows identical: 23 of 24", out)
        self.assertIn("  - mismatch: 'blue cone' seed 100", out)
        self.assertIn("| S1 unguarded | sampling | 2/2 (8/12) |", out)

    def test_incomplete_file_is_refused_unless_partial(self):
        data = world(S1, complete=False)
        data["records"] = data["records"][:40]
        path = self.write("part.json", data)
        run = subprocess.run([sys.executable, SCRIPT, "S1=" + path], capture_output=True, text=True)
        self.assertEqual(run.returncode, 2)
        self.assertIn("not complete", run.stderr)
        self.assertEqual(run.stdout, "")
        rc, out = self.report("S1=" + path, "--partial")
        self.assertEqual(rc, 0)
        self.assertIn("| S1 (PARTIAL, 40 of 48 runs) | prior |", out)

    def test_templates_are_the_lab_captions(self):
        """The report's seven templates are lab/src/caption.rs's TEMPLATES after the canonical one, in order."""
        caption_rs = os.path.join(os.path.dirname(SCRIPT), "..", "src", "caption.rs")
        with open(caption_rs) as f:
            source = f.read()
        block = source[source.index("pub const TEMPLATES"):]
        block = block[block.index("[", block.index("=")) + 1:block.index("];")]
        templates = [line.strip().rstrip(",").strip('"') for line in block.splitlines() if line.strip()]
        self.assertEqual(tuple(templates[1:]), rr.TEMPLATES)


if __name__ == "__main__":
    unittest.main()
