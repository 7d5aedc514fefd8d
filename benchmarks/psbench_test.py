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
                                    r"\(it has bsp, ssp1, ssp3, ssp10, asp, bsp_bal, ssp3_bal\)"):
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
        with self.assertRaisesRegex(SuiteError, r"modes\[7\]\.balance: only bsp and ssp"):
            parse_suite(d)
        d = doc()
        d["modes"][5]["balance"] = "yes"
        with self.assertRaisesRegex(SuiteError, r"modes\[5\]\.balance: got .*expected true"):
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
