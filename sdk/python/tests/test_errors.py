"""The exception hierarchy and how exceptions become protocol messages."""
import unittest

import _path  # noqa: F401
import cairn
from cairn import errors


class Hierarchy(unittest.TestCase):
    def test_stops_are_not_exceptions_so_except_exception_does_not_swallow_them(self):
        for cls in (cairn.Stopped, cairn.Suspended, cairn.Cancelled, cairn.Handover,
                    cairn.Nondeterminism, cairn.EngineFailed, cairn.EngineGone):
            self.assertTrue(issubclass(cls, BaseException))
            self.assertFalse(issubclass(cls, Exception), cls)
        try:
            try:
                raise cairn.Suspended("due later")
            except Exception:  # noqa: BLE001 - what user code does
                self.fail("except Exception caught a stop")
        except cairn.Stopped as e:
            self.assertEqual(e.reason, "suspended")

    def test_errors_a_workflow_may_handle_are_exceptions_carrying_the_message(self):
        e = cairn.StepFailed("step charge: HTTPError: 503 (gave up after 3 attempts)")
        self.assertIsInstance(e, cairn.Failed)
        self.assertIsInstance(e, cairn.CairnError)
        self.assertIsInstance(e, Exception)
        self.assertEqual(e.message, str(e))
        self.assertTrue(issubclass(cairn.ChildFailed, cairn.Failed))
        self.assertTrue(issubclass(cairn.InvalidArgument, ValueError))
        self.assertTrue(issubclass(cairn.WaitTimeout, TimeoutError))
        self.assertEqual(cairn.ClientError("no", 404).status, 404)

    def test_each_stop_reason_has_its_exception(self):
        for reason, cls in (("suspended", cairn.Suspended), ("cancelled", cairn.Cancelled),
                            ("stop", cairn.Handover), ("nondeterminism", cairn.Nondeterminism),
                            ("failed", cairn.EngineFailed)):
            e = errors.stop_for(reason, "why")
            self.assertIs(type(e), cls)
            self.assertEqual((e.reason, e.message), (reason, "why"))
        later = errors.stop_for("something-new", "m")
        self.assertIsInstance(later, cairn.Stopped)
        self.assertEqual(later.reason, "something-new")

    def test_a_failure_is_described_as_type_colon_message(self):
        self.assertEqual(errors.describe(ValueError("amount must be positive")),
                         "ValueError: amount must be positive")
        self.assertEqual(errors.describe(KeyError()), "KeyError")
        self.assertEqual(errors.describe(cairn.Fail("card declined")), "card declined")
        self.assertEqual(errors.describe(cairn.Retry("later")), "Retry: later")


if __name__ == "__main__":
    unittest.main()
