/**
 * The errors of the cairn SDK.
 *
 * Three families, by who throws them and who should catch them:
 *
 * - {@link CairnError}: a durable call or a client call failed in a way the
 *   caller may handle. Its message is the engine's (or the server's) text:
 *   {@link StepFailedError}, {@link ChildFailedError}, {@link CallFailedError},
 *   {@link InvalidArgumentError}, {@link WaitTimeoutError}, {@link HttpError},
 *   {@link RunFailedError}.
 * - {@link NonRetryableError} and {@link RetryRunError}: thrown by your code.
 *   A step that throws `NonRetryableError` fails at once, without a retry; a
 *   workflow that throws `RetryRunError` is retried from its journal.
 * - {@link StoppedError}: the engine ended the execution (a sleep or a wait
 *   suspended the run, it was cancelled or handed over, or its code no longer
 *   matches its journal). Let it travel out of the workflow function. The SDK
 *   knows the execution is over even if your code catches it: every later
 *   durable call throws it again, and what the function returns or throws is
 *   dropped.
 *
 * @module
 */

/** The base of every error the SDK throws; `name` is the class's name. */
export class CairnError extends Error {
	constructor(message: string) {
		super(message);
		this.name = new.target.name;
	}
}

/** A durable call failed (the engine's `error` reply with code `failed`): a
 * send to a run that does not exist or has finished, for example. */
export class CallFailedError extends CairnError {}

/** A step used up its attempts or failed for good; the message is the
 * step's last error, as journaled. */
export class StepFailedError extends CallFailedError {}

/** A child run failed or was cancelled; the message says which and why. */
export class ChildFailedError extends CallFailedError {}

/** The engine refused an argument (a name, a payload), or a payload is
 * larger than the engine takes (`CAIRN_MAX_PAYLOAD`). */
export class InvalidArgumentError extends CairnError {}

/** A signal wait, a child wait or a client's wait for a result timed out. */
export class WaitTimeoutError extends CairnError {}

/** The engine sent something the protocol does not allow. */
export class ProtocolError extends CairnError {}

/** No `cairn-worker` executable was found to start. */
export class EngineNotFoundError extends CairnError {}

/** The HTTP API refused a request: `status` is the HTTP status (0 when the
 * server could not be reached), the message the server's `error`. */
export class HttpError extends CairnError {
	constructor(message: string, readonly status: number) {
		super(message);
	}
}

/** The run a client waited for did not complete: `status` is `failed` or
 * `cancelled`, the message the run's error. */
export class RunFailedError extends CairnError {
	constructor(message: string, readonly run: number, readonly status: string) {
		super(message);
	}
}

/** Throw it from a step to fail the step for good, without a retry. */
export class NonRetryableError extends Error {
	constructor(message: string) {
		super(message);
		this.name = new.target.name;
	}
}

/** Throw it from a workflow to retry the whole run from its journal after
 * the workflow's backoff, while the run has attempts left. */
export class RetryRunError extends Error {
	constructor(message: string) {
		super(message);
		this.name = new.target.name;
	}
}

/**
 * The execution is over: the workflow function must unwind. `reason` is the
 * protocol's stop reason: `suspended` (a sleep, a wait or a retry backoff is
 * not over: the run resumes when it is due), `cancelled`, `stop` (the worker
 * drains or the run's shard moved: it resumes elsewhere), `nondeterminism`,
 * `failed` (the engine cannot go on with the run), or `gone` (the engine
 * exited: the run resumes from its journal under the next one).
 */
export class StoppedError extends CairnError {
	constructor(readonly reason: string, message: string) {
		super(message || reason);
	}
}

/** The run was cancelled: it ends cancelled. */
export class CancelledError extends StoppedError {}

/** The workflow's durable calls differ from its journal (the message names
 * both): the run fails. Guard code changes with `ctx.patched()`. */
export class NondeterminismError extends StoppedError {}

/** The error for a `stop` reply. */
export function stopError(reason: string, message: string): StoppedError {
	if (reason === "cancelled") return new CancelledError(reason, message);
	if (reason === "nondeterminism") return new NondeterminismError(reason, message);
	return new StoppedError(reason, message);
}

/**
 * `"Name: message"` for a thrown value, as a step's or a run's error: the
 * error's `name`, or its class's name when `name` was left at "Error" (a
 * `class Declined extends Error {}` reads "Declined: ..."); just the name
 * when the message is empty; a thrown non-Error as text.
 */
export function describe(err: unknown): string {
	if (!(err instanceof Error)) {
		if (typeof err === "string") return err;
		try {
			return `thrown: ${JSON.stringify(err) ?? String(err)}`;
		} catch {
			return `thrown: ${String(err)}`;
		}
	}
	let name = err.name;
	const ctor = (err as { constructor?: { name?: string } }).constructor?.name;
	if ((!name || name === "Error") && ctor) name = ctor;
	return err.message ? `${name}: ${err.message}` : name;
}
