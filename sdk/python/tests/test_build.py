"""The in-tree build backend: a wheel and an sdist, from the standard
library alone, whose RECORD matches what they hold."""
import base64
import hashlib
import importlib.util
import os
import tarfile
import tempfile
import unittest
import zipfile

import _path

spec = importlib.util.spec_from_file_location(
    "cairn_build", os.path.join(_path.SDK_DIR, "backend", "cairn_build.py"))
backend = importlib.util.module_from_spec(spec)
spec.loader.exec_module(backend)


class Build(unittest.TestCase):
    def test_the_wheel_holds_the_package_and_a_record_of_every_file(self):
        self.assertEqual(backend.get_requires_for_build_wheel(), [])
        with tempfile.TemporaryDirectory() as d:
            name = backend.build_wheel(d)
            self.assertRegex(name, r"^cairn_sdk-[0-9.]+-py3-none-any\.whl$")
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                names = z.namelist()
                self.assertIn("cairn/__init__.py", names)
                self.assertIn("cairn/py.typed", names)
                info = name.split("-py3")[0] + ".dist-info"
                record = z.read(f"{info}/RECORD").decode().splitlines()
                self.assertEqual(len(record), len(names))
                for line in record:
                    path, digest, size = line.rsplit(",", 2)
                    if path.endswith("RECORD"):
                        continue
                    data = z.read(path)
                    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                    self.assertEqual(digest, "sha256=" + want.decode(), path)
                    self.assertEqual(int(size), len(data))
                meta = z.read(f"{info}/METADATA").decode()
                self.assertIn("Name: cairn-sdk", meta)
                self.assertIn("Requires-Python: >=3.11", meta)

    def test_the_sdist_holds_what_builds_the_wheel_again(self):
        with tempfile.TemporaryDirectory() as d:
            name = backend.build_sdist(d)
            with tarfile.open(os.path.join(d, name)) as t:
                names = t.getnames()
            top = name[:-len(".tar.gz")]
            for f in ("pyproject.toml", "README.md", "PKG-INFO", "backend/cairn_build.py",
                      "cairn/context.py"):
                self.assertIn(f"{top}/{f}", names)
            self.assertFalse([n for n in names if "__pycache__" in n])


class Readme(unittest.TestCase):
    def test_the_readmes_workflow_is_the_examples_text(self):
        with open(os.path.join(_path.SDK_DIR, "README.md")) as f:
            readme = f.read()
        with open(os.path.join(_path.SDK_DIR, "examples", "order.py")) as f:
            example = f.read()
        start = readme.index('@worker.workflow("py.order")')
        function = readme[start:readme.index("\n\n", start)]
        self.assertIn(function, example)


if __name__ == "__main__":
    unittest.main()
