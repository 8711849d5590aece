#!/usr/bin/env python3
"""Unit tests of records_merge.py on synthetic records: disjoint parts are added, equal overlaps pass whatever their
timings, a differing overlap stops the merge and leaves MAIN unchanged."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records_merge  # noqa: E402


def rec(prompt, seed, mode, iou, seconds):
    return {"prompt": prompt, "seed": seed, "mode": mode, "export": {"shape_iou": iou},
            "attribution": {"seconds": seconds}, "seconds": seconds}


def table(records, settings="same"):
    return {"complete": False, "settings": settings, "summary": {}, "records": records}


def write_files(folder, main, part):
    """main.json and part.json in `folder`, their paths."""
    paths = [os.path.join(folder, n) for n in ("main.json", "part.json")]
    for path, t in zip(paths, (main, part)):
        with open(path, "w") as f:
            json.dump(t, f)
    return paths


class Merge(unittest.TestCase):
    def test_adds_disjoint_records_and_keeps_mains_settings(self):
        main = table([rec("a red cube", 100, "prior", 0.9, 1.0)])
        part = table([rec("a blue cube", 100, "prior", 0.8, 2.0)], settings="other prompts")
        merged, both, added = records_merge.merge(main, [part])
        self.assertEqual(merged["settings"], "same")
        self.assertEqual([r["prompt"] for r in merged["records"]], ["a red cube", "a blue cube"])
        self.assertEqual((both, added), ([], [("a blue cube", 100, "prior")]))
        self.assertFalse(merged["complete"])

    def test_equal_overlap_passes_whatever_its_timings(self):
        main = table([rec("a red cube", 100, "prior", 0.9, 1.0)])
        part = table([rec("a red cube", 100, "prior", 0.9, 7.0)])
        merged, both, added = records_merge.merge(main, [part])
        self.assertEqual((len(merged["records"]), both, added), (1, [("a red cube", 100, "prior")], []))

    def test_differing_overlap_stops_and_leaves_main_unchanged(self):
        main = table([rec("a red cube", 100, "prior", 0.9, 1.0)])
        part = table([rec("a red cube", 100, "prior", 0.91, 1.0)])
        with self.assertRaises(ValueError):
            records_merge.merge(main, [part])
        with tempfile.TemporaryDirectory() as d:
            paths = write_files(d, main, part)
            before = open(paths[0]).read()
            run = subprocess.run([sys.executable, records_merge.__file__, *paths], capture_output=True, text=True)
            self.assertNotEqual(run.returncode, 0)
            self.assertIn("differs", run.stderr)
            self.assertEqual(open(paths[0]).read(), before)

    def test_writes_the_merged_file(self):
        main = table([rec("a red cube", 100, "prior", 0.9, 1.0)])
        part = table([rec("a blue cube", 101, "prior", 0.8, 2.0)])
        with tempfile.TemporaryDirectory() as d:
            paths = write_files(d, main, part)
            subprocess.run([sys.executable, records_merge.__file__, *paths], check=True, capture_output=True)
            with open(paths[0]) as f:
                self.assertEqual(len(json.load(f)["records"]), 2)
            self.assertEqual(sorted(os.listdir(d)), ["main.json", "part.json"])


if __name__ == "__main__":
    unittest.main()
