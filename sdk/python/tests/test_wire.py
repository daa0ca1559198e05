"""Framing, message building and the conversions of cairn._wire."""
import datetime as dt
import socket
import unittest

import _path  # noqa: F401
from cairn import InvalidArgument, ProtocolError, RetryPolicy
from cairn import _wire


class Framing(unittest.TestCase):
    def test_a_message_is_one_compact_line_of_utf8(self):
        line = _wire.encode({"op": "step", "name": "caf\u00e9", "v": "a\nb"})
        self.assertEqual(line, '{"op":"step","name":"café","v":"a\\nb"}\n'.encode())
        self.assertEqual(line.count(b"\n"), 1)

    def test_values_json_cannot_hold_are_refused(self):
        for bad in ({"v": float("nan")}, {"v": {1, 2}}, {"v": float("inf")}):
            with self.assertRaises((TypeError, ValueError)):
                _wire.encode(bad)

    def test_decode_wants_an_object(self):
        self.assertEqual(_wire.decode(b'{"t":"ok","value":1}\n'), {"t": "ok", "value": 1})
        for bad in (b"[1]\n", b"nope\n", b'"s"\n', b"\xff\n"):
            with self.assertRaises(ProtocolError):
                _wire.decode(bad)

    def test_a_lane_carries_messages_both_ways_and_reports_eof(self):
        a, b = socket.socketpair()
        la, lb = _wire.Lane(a), _wire.Lane(b)
        la.send({"x": 1, "op": "now"})
        la.send({"x": 1, "op": "random"})
        self.assertEqual(lb.receive(), {"x": 1, "op": "now"})
        self.assertEqual(lb.receive(), {"x": 1, "op": "random"})
        la.close()
        self.assertIsNone(lb.receive())
        lb.close()

    def test_a_lane_refuses_a_message_longer_than_the_engine_takes(self):
        a, b = socket.socketpair()
        la, lb = _wire.Lane(a), _wire.Lane(b)
        la.max_payload = 10
        with self.assertRaises(InvalidArgument):
            la.send({"value": "x" * (_wire.LINE_SLACK + 20)})
        lb.max_payload = 10
        a.sendall(b'{"v":"' + b"y" * (_wire.LINE_SLACK + 20) + b'"}\n')
        with self.assertRaises(ProtocolError):
            lb.receive()
        la.close()
        lb.close()

    def test_a_line_cut_off_by_the_end_of_the_connection_is_eof(self):
        a, b = socket.socketpair()
        lb = _wire.Lane(b)
        a.sendall(b'{"t":"ok"')
        a.close()
        self.assertIsNone(lb.receive())
        lb.close()


class Conversions(unittest.TestCase):
    def test_durations_are_whole_milliseconds_rounded_up(self):
        self.assertEqual(_wire.to_ms(1, "d"), 1000)
        self.assertEqual(_wire.to_ms(0.3, "d"), 300)
        self.assertEqual(_wire.to_ms(0.0001, "d"), 1)
        self.assertEqual(_wire.to_ms(0, "d"), 0)
        self.assertEqual(_wire.to_ms(dt.timedelta(hours=1), "d"), 3_600_000)
        for bad in (-1, float("nan"), float("inf")):
            with self.assertRaises(ValueError):
                _wire.to_ms(bad, "d")
        for bad in ("1s", None, True):
            with self.assertRaises(TypeError):
                _wire.to_ms(bad, "d")

    def test_times_are_unix_milliseconds(self):
        t = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
        self.assertEqual(_wire.to_unix_ms(t), 1767323045678)
        self.assertEqual(_wire.to_unix_ms(t.replace(tzinfo=None)), 1767323045678)
        self.assertEqual(_wire.to_unix_ms(1767323045.678), 1767323045678)
        self.assertEqual(_wire.from_unix_ms(1767323045678), t)
        with self.assertRaises(TypeError):
            _wire.to_unix_ms("tomorrow")


class RetryPolicies(unittest.TestCase):
    def test_only_the_fields_set_are_sent_in_the_protocols_units(self):
        self.assertEqual(RetryPolicy().to_wire(), {})
        p = RetryPolicy(max_attempts=5, initial_backoff=0.5, multiplier=3,
                        max_backoff=dt.timedelta(minutes=1), jitter=0.1, timeout=10)
        self.assertEqual(p.to_wire(), {"max_attempts": 5, "initial_ms": 500, "multiplier": 3.0,
                                       "max_ms": 60000, "jitter": 0.1, "timeout_ms": 10000})

    def test_bad_fields_are_refused_naming_them(self):
        with self.assertRaisesRegex(ValueError, "max_attempts"):
            RetryPolicy(max_attempts=0).to_wire()
        with self.assertRaisesRegex(TypeError, "max_attempts"):
            RetryPolicy(max_attempts=2.5).to_wire()
        with self.assertRaisesRegex(TypeError, "multiplier"):
            RetryPolicy(multiplier="2").to_wire()
        with self.assertRaisesRegex(ValueError, "timeout"):
            RetryPolicy(timeout=-1).to_wire()

    def test_hello_lists_the_workflows_with_their_run_policies(self):
        h = _wire.hello({"a": None, "b": RetryPolicy(max_attempts=2)}, "cairn-python/0", "python 3")
        self.assertEqual(h, {"op": "hello", "protocols": [1, 2, 3], "sdk": "cairn-python/0",
                             "runtime": "python 3",
                             "workflows": [{"name": "a"},
                                           {"name": "b", "retry": {"max_attempts": 2}}]})
        with self.assertRaisesRegex(ValueError, "no timeout"):
            _wire.hello({"a": RetryPolicy(timeout=1)}, "s", "r")


if __name__ == "__main__":
    unittest.main()
