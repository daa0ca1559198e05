"""cairn.Client against a small HTTP server that answers as the API does."""
import http.server
import json
import threading
import unittest

import _path  # noqa: F401
import cairn


class Fake(http.server.BaseHTTPRequestHandler):
    runs: dict = {}
    seen: list = []

    def log_message(self, *args):
        pass

    def answer(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        Fake.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        if self.headers.get("Authorization") != "Bearer tok":
            return self.answer(401, {"error": "no or a wrong token"})
        parts = self.path.split("?")[0].strip("/").split("/")
        if self.command == "POST" and parts == ["v1", "runs"]:
            if body["workflow"] == "bad name":
                return self.answer(400, {"error": 'invalid workflow "bad name"'})
            return self.answer(201, {"id": 5, "existed": False, "held": False,
                                     "status": "pending"})
        if len(parts) >= 3 and parts[2] not in Fake.runs:
            return self.answer(404, {"error": f"run {parts[2]} not found"})
        if self.command == "GET":
            return self.answer(200, Fake.runs[parts[2]])
        return self.answer(202, {"run": int(parts[2])})

    do_GET = do_POST = handle_any


class Client(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.url = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def setUp(self):
        Fake.seen.clear()
        Fake.runs.clear()
        self.c = cairn.Client(self.url, "tok")

    def test_enqueue_sends_the_fields_set_and_reads_the_reply(self):
        r = self.c.enqueue("py.order", {"item": "book"}, key="o-1", group="python", delay=1.5,
                           priority=3, max_attempts=2)
        self.assertEqual((r.id, r.existed, r.status), (5, False, "pending"))
        method, path, auth, body = Fake.seen[0]
        self.assertEqual((method, path, auth), ("POST", "/v1/runs", "Bearer tok"))
        self.assertEqual(body, {"workflow": "py.order", "input": {"item": "book"}, "key": "o-1",
                                "group": "python", "delay": 1500, "priority": 3,
                                "max_attempts": 2})

    def test_signal_cancel_and_retry_post_to_the_run(self):
        Fake.runs["9"] = {"id": 9, "workflow": "w", "status": "running"}
        self.c.signal(9, "approval", {"by": "ann"})
        self.c.signal(9, "a/b")
        self.c.cancel(9)
        self.c.retry(9)
        self.assertEqual([(m, p, b) for m, p, _, b in Fake.seen],
                         [("POST", "/v1/runs/9/signals/approval", {"by": "ann"}),
                          ("POST", "/v1/runs/9/signals/a%2Fb", None),
                          ("POST", "/v1/runs/9/cancel", None),
                          ("POST", "/v1/runs/9/retry", None)])

    def test_result_returns_the_output_or_raises_the_runs_error(self):
        Fake.runs["1"] = {"id": 1, "workflow": "w", "status": "completed", "output": {"y": 4}}
        Fake.runs["2"] = {"id": 2, "workflow": "w", "status": "failed",
                          "error": "ValueError: boom"}
        Fake.runs["3"] = {"id": 3, "workflow": "w", "status": "cancelled"}
        Fake.runs["4"] = {"id": 4, "workflow": "w", "status": "running"}
        self.assertEqual(self.c.result(1), {"y": 4})
        with self.assertRaisesRegex(cairn.RunFailed, "ValueError: boom"):
            self.c.result(2)
        with self.assertRaises(cairn.RunCancelled):
            self.c.result(3)
        with self.assertRaises(cairn.WaitTimeout):
            self.c.result(4, timeout=0.05)
        self.assertIn("?wait=", Fake.seen[0][1])
        run = self.c.get(4)
        self.assertEqual((run.id, run.status, run.finished), (4, "running", False))

    def test_errors_carry_the_servers_message_and_status(self):
        with self.assertRaises(cairn.ClientError) as e:
            self.c.get(77)
        self.assertEqual((e.exception.status, e.exception.message), (404, "run 77 not found"))
        with self.assertRaises(cairn.ClientError) as e:
            self.c.enqueue("bad name")
        self.assertEqual(e.exception.status, 400)
        with self.assertRaises(cairn.ClientError) as e:
            cairn.Client(self.url, "nope").get(1)
        self.assertEqual(e.exception.status, 401)
        with self.assertRaises(cairn.ClientError) as e:
            cairn.Client("http://127.0.0.1:1", "tok").get(1)
        self.assertEqual(e.exception.status, 0)


if __name__ == "__main__":
    unittest.main()
