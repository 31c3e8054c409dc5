#!/usr/bin/env python3
"""Tests of perf/nccl_table.py, the parser perf/compare and the smoke tests use."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "perf"))
import nccl_table  # noqa: E402

SAMPLE = """\
# nThread 1 nGpus 2 minBytes 8 maxBytes 128 step: 4(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  15030 on         vm device  0 [cpu] host memory
#  Rank  1 Group  0 Pid  15030 on         vm device  1 [cpu] host memory
#
#                                                          out-of-place                         in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    300.0    0.00    0.00       0    81.35    0.00    0.00       0
          32             8     float     sum      -1    12345    1.50    2.25       3     0.77    0.01    0.01     N/A
         128            32    uint8     none       0      N/A     N/A     N/A     N/A     1.25    0.10    0.10       0
# Out of bounds values : 3 FAILED
# Avg bus bandwidth    : 0.132115 
#
"""


class ParserTest(unittest.TestCase):
    def test_rows_and_columns(self):
        r = nccl_table.parse(SAMPLE)
        self.assertEqual(len(r.rows), 3)
        first = r.rows[0]
        self.assertEqual((first.size, first.count, first.type, first.redop, first.root), (8, 2, "float", "sum", -1))
        self.assertAlmostEqual(first.oop.time_us, 300.0)
        self.assertAlmostEqual(first.ip.time_us, 81.35)
        self.assertEqual(first.oop.wrong, 0)

    def test_na_fields(self):
        r = nccl_table.parse(SAMPLE)
        self.assertIsNone(r.rows[1].ip.wrong)
        self.assertIsNone(r.rows[2].oop)
        self.assertIs(r.rows[2].best(), r.rows[2].ip)
        self.assertEqual(r.rows[2].root, 0)

    def test_footer_settings_devices(self):
        r = nccl_table.parse(SAMPLE)
        self.assertEqual(r.out_of_bounds, (3, "FAILED"))
        self.assertAlmostEqual(r.avg_busbw, 0.132115)
        self.assertEqual(r.total_wrong(), 3)
        self.assertEqual(r.settings["nGpus"], "2")
        self.assertEqual(r.settings["warmup iters"], "1")
        self.assertEqual(r.settings["iters"], "20")
        self.assertEqual(len(r.devices), 2)

    def test_errors_and_tagged_lines(self):
        text = ("[1] # Rank 1 (pid 9 on vm): ncclAllGather failed: invalid usage (5): not supported yet\n"
                "[0]            8             2     float     sum      -1     1.00    0.01    0.01       0"
                "     1.00    0.01    0.01       0\n")
        r = nccl_table.parse(text)
        self.assertEqual(len(r.errors), 1)
        self.assertEqual(len(r.rows), 1)

    def test_header_lines_are_not_rows(self):
        self.assertIsNone(nccl_table.parse_row("#        (B)    (elements)     (us)"))
        self.assertIsNone(nccl_table.parse_row(""))


if __name__ == "__main__":
    unittest.main()
