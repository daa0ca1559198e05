"""Puts the SDK beside these tests first on sys.path (imported by each test
module), so the tests check this tree and not an installed copy."""
import os
import sys

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != SDK_DIR:
    sys.path.insert(0, SDK_DIR)
