"""The worker's pure parts: registration, the engine's environment and
where the engine is found."""
import os
import stat
import tempfile
import unittest

import _path  # noqa: F401
import cairn
from cairn import worker as w


class Registration(unittest.TestCase):
    def test_the_decorator_registers_and_returns_the_function(self):
        wk = cairn.Worker()

        @wk.workflow("py.a", retry=cairn.RetryPolicy(max_attempts=2, initial_backoff=2))
        def a(ctx, i):
            return i
        self.assertEqual(a(None, 3), 3)
        h = wk.hello()
        self.assertEqual(h["workflows"], [{"name": "py.a",
                                           "retry": {"max_attempts": 2, "initial_ms": 2000}}])
        self.assertEqual(h["sdk"], f"cairn-python/{cairn.__version__}")
        self.assertTrue(h["runtime"].startswith("python 3."))
        with self.assertRaisesRegex(ValueError, "registered twice"):
            wk.register("py.a", a)
        with self.assertRaisesRegex(ValueError, "no timeout"):
            wk.workflow("py.b", retry=cairn.RetryPolicy(timeout=1))

    def test_serving_nothing_is_refused_before_the_engine_starts(self):
        with self.assertRaisesRegex(ValueError, "no workflow registered"):
            cairn.Worker().serve()


class Environment(unittest.TestCase):
    def test_the_sdks_defaults_fill_only_what_is_unset(self):
        env = w.engine_env({"DATABASE_URL": "x", "CAIRN_SHARD_GROUPS": "billing"})
        self.assertEqual(env["CAIRN_SHARD_GROUPS"], "billing")
        self.assertEqual(env["CAIRN_HTTP_ADDR"], "127.0.0.1:0")
        self.assertEqual(env["CAIRN_CONCURRENCY"], "16")
        self.assertEqual(env["DATABASE_URL"], "x")
        self.assertEqual(w.engine_env({}, concurrency=3)["CAIRN_CONCURRENCY"], "3")
        self.assertEqual(w.lanes(w.engine_env({"CAIRN_CONCURRENCY": "5"})), 5)
        for bad in ("0", "many", "-2"):
            with self.assertRaisesRegex(ValueError, "CAIRN_CONCURRENCY"):
                w.engine_env({"CAIRN_CONCURRENCY": bad})

    def test_exit_statuses_read_as_a_shell_reports_them(self):
        self.assertEqual(w.exit_status(0), 0)
        self.assertEqual(w.exit_status(2), 2)
        self.assertEqual(w.exit_status(-9), 137)


class FindingTheEngine(unittest.TestCase):
    def test_cairn_worker_bin_comes_first_then_the_repository_then_path(self):
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "cairn-worker")
            with open(exe, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(exe, stat.S_IRWXU)
            self.assertEqual(w.find_engine({"CAIRN_WORKER_BIN": exe}), exe)
            with self.assertRaisesRegex(cairn.EngineNotFound, "CAIRN_WORKER_BIN"):
                w.find_engine({"CAIRN_WORKER_BIN": d})
            repo = os.path.abspath(os.path.join(os.path.dirname(w.__file__), "..", "..", ".."))
            in_repo = os.path.join(repo, "bin", "cairn-worker")
            found = w.find_engine({"PATH": d})
            self.assertEqual(found, in_repo if os.access(in_repo, os.X_OK) else exe)

    def test_no_engine_anywhere_says_how_to_get_one(self):
        repo = os.path.abspath(os.path.join(os.path.dirname(w.__file__), "..", "..", ".."))
        if os.access(os.path.join(repo, "bin", "cairn-worker"), os.X_OK):
            self.skipTest("the repository is built: bin/cairn-worker is found")
        with self.assertRaisesRegex(cairn.EngineNotFound, "make"):
            w.find_engine({"PATH": "/nonexistent"})


if __name__ == "__main__":
    unittest.main()
