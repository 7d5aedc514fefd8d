#!/usr/bin/env python3
"""Checks of the convergence suite's file loader (benchmarks/psbench/suite.py):
the shipped suite loads, and bad keys and names are refused with the key's
path. Run by ctest as psbench_suite_test; needs PyYAML (exit 77 without)."""

import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import yaml  # noqa: F401
except ImportError:
    print("psbench_test: skipped: python3-yaml missing (scripts/setup.sh installs it)")
    sys.exit(77)
from psbench.checks import SuiteError  # noqa: E402
from psbench.suite import load_suite, parse_suite  # noqa: E402

SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suites", "convergence.yaml")


def doc():
    with open(SUITE) as f:
        return yaml.safe_load(f)


class SuiteFileTest(unittest.TestCase):
    def test_shipped_suite_loads_with_a_quick_target_for_the_mlp(self):
        s = load_suite(SUITE)
        mlp = next(w for w in s.workloads if w.name == "mlp")
        self.assertEqual(mlp.describe_target(), ">= 0.865")
        mlp.use_quick_target()
        self.assertEqual(mlp.describe_target(), ">= 0.84")
        softmax = next(w for w in s.workloads if w.name == "softmax")
        softmax.use_quick_target()  # none given: the target
        self.assertEqual(softmax.describe_target(), ">= 0.835")

    def test_bad_quick_target_names_its_key(self):
        d = doc()
        d["workloads"]["mf"]["quick_target"] = {"at_least": 0.3}
        with self.assertRaisesRegex(SuiteError, r"workloads\.mf\.quick_target\.at_least: the "
                                    r"metric .* is better when lower"):
            parse_suite(d)
        d["workloads"]["mf"]["quick_target"] = {"at_most": 0.3, "within_of_reference": 0.1}
        with self.assertRaisesRegex(SuiteError, r"workloads\.mf\.quick_target: expected exactly"):
            parse_suite(d)

    def test_restrict_keeps_the_named_modes_and_stragglers(self):
        s = parse_suite(doc())
        s.restrict(["bsp", "ssp3"], ["none", "slow"])
        self.assertEqual([m.name for m in s.modes], ["bsp", "ssp3"])
        self.assertEqual([st.name for st in s.stragglers], ["none", "slow"])

    def test_restrict_refuses_unknown_names_listing_the_known(self):
        s = parse_suite(doc())
        with self.assertRaisesRegex(SuiteError, r"--modes ssp4: not a mode of the suite "
                                    r"\(it has bsp, ssp1, ssp3, ssp10, asp, bsp_bal, ssp3_bal, "
                                    r"bsp_agg_lr4_bk1\)"):
            s.restrict(["ssp4"], None)
        s = parse_suite(doc())
        with self.assertRaisesRegex(SuiteError, r"--stragglers fast: .*\(it has none, slow, "
                                    r"pauses\)"):
            s.restrict(None, ["fast"])

    def test_balanced_modes_set_the_stragglers_section_not_the_consistency_one(self):
        s = parse_suite(doc())
        bal = next(m for m in s.modes if m.name == "ssp3_bal")
        self.assertTrue(bal.balance)
        self.assertEqual(bal.label, "ssp 3 balanced")
        self.assertEqual(bal.flow, "{ mode: \"ssp\", staleness: 3 }")  # no balance in it
        d = doc()
        d["modes"].append({"mode": "asp", "balance": True})
        with self.assertRaisesRegex(SuiteError, r"modes\[8\]\.balance: only bsp and ssp"):
            parse_suite(d)
        d = doc()
        d["modes"][5]["balance"] = "yes"
        with self.assertRaisesRegex(SuiteError, r"modes\[5\]\.balance: got .*expected true"):
            parse_suite(d)

    def test_backup_worker_modes_run_more_workers_and_need_bsp_aggregate(self):
        s = parse_suite(doc())
        bk = next(m for m in s.modes if m.name == "bsp_agg_lr4_bk1")
        self.assertEqual(bk.backups, 1)
        self.assertEqual(bk.label, "bsp aggregate lr x4 +1 backup")
        self.assertEqual(bk.lr_scale, 4)
        self.assertNotIn("lr_scale", bk.flow)  # the suite's, not the job's
        self.assertIn("backup_workers: 1", bk.flow)  # the job's consistency section
        from psbench.workloads import job_yaml
        text = job_yaml({"tables": "      optimizer: { type: sgd, lr: 0.02 }\n", "train": ""},
                        4, bk.flow, 400, 4, "m.csv", True, backup_workers=1, lr_scale=4)
        self.assertIn("workers: 5", text)
        self.assertIn("lr: 0.08", text)
        self.assertIn("iterations: 100", text)  # steps / 4: four gradients per clock
        for bad, says in (({"mode": "bsp", "backup_workers": 1}, r"only mode bsp with aggregate"),
                          ({"mode": "ssp", "staleness": 2, "backup_workers": 1},
                           r"only mode bsp with aggregate"),
                          ({"mode": "bsp", "aggregate": True, "backup_workers": 0},
                           r"got 0; expected an integer >= 1"),
                          ({"mode": "bsp", "aggregate": True, "balance": True,
                            "backup_workers": 1}, r"not with balance")):
            d = doc()
            d["modes"].append(bad)
            with self.assertRaisesRegex(SuiteError, r"modes\[8\]\.backup_workers: " + says):
                parse_suite(d)

    def test_restrict_refuses_to_drop_the_run_that_times_the_stragglers(self):
        s = parse_suite(doc())
        with self.assertRaisesRegex(SuiteError, r"straggler_step: bsp times"):
            s.restrict(["asp"], ["none", "slow"])
        s = parse_suite(copy.deepcopy(doc()))
        with self.assertRaisesRegex(SuiteError, r"straggler_step: bsp times"):
            s.restrict(None, ["slow"])
        s = parse_suite(doc())
        s.restrict(["asp"], ["none"])  # no stragglers: nothing to time
        self.assertEqual([m.name for m in s.modes], ["asp"])


if __name__ == "__main__":
    unittest.main()
