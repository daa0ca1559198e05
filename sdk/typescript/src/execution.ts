/**
 * One execution (docs/protocol.md, Executions): a call of a workflow
 * function on a lane, from the `run` message to its `return` or `fail`, or to
 * the `stop` that ends it. It puts the durable calls of the function in
 * order (one request at a time on the lane, in the order the function made
 * them, so `Promise.all` over two steps journals them in a fixed order),
 * runs step functions, and remembers that it is dead once a stop came: every
 * later call throws the same StoppedError and nothing more is sent.
 *
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";
import {
	CairnError,
	CallFailedError,
	InvalidArgumentError,
	NonRetryableError,
	ProtocolError,
	StoppedError,
	describe,
	stopError,
} from "./errors";
import { Lane } from "./lane";
import { Incoming, toJSON } from "./wire";

/** How often a running step asks the engine whether the run should stop. */
export const STOP_POLL_MS = 500;

/** The execution whose step function is running, for calls made inside it. */
const inStep = new AsyncLocalStorage<Execution>();

/** What a step function did: returned a value (as JSON text) or threw. */
export type Outcome = { ok: true; text: string } | { ok: false; message: string; retryable: boolean };

/** A step attempt that ran past its policy's `timeoutMs`. */
export class StepTimeoutError extends CairnError {}

export class Execution {
	/** Set once a stop reply came (or the engine went): the execution is over. */
	dead?: StoppedError;
	/** Set once the workflow function returned or threw. */
	finished = false;
	private tail: Promise<unknown> = Promise.resolve();
	private readonly onDeath = new Set<() => void>();

	constructor(
		readonly lane: Lane,
		readonly x: number,
		readonly runId: number,
		readonly workflow: string,
		readonly attempt: number,
		/** The run span's W3C trace context (protocol version 3). */
		readonly traceparent?: string,
	) {}

	/** The trace context of the step attempt whose function runs now. */
	stepTraceparent?: string;

	/** Runs call after every durable call made before it has settled. */
	serial<T>(call: () => Promise<T>): Promise<T> {
		if (inStep.getStore() === this)
			return Promise.reject(new CairnError("a step function may make no durable call but shouldStop()"));
		const p = this.tail.then(call);
		this.tail = p.catch(() => undefined);
		return p;
	}

	/** Sends a request for this execution and resolves with its reply; a stop
	 * reply ends the execution and throws. */
	async request(msg: Record<string, unknown> | string): Promise<Incoming> {
		this.check();
		const reply = await this.lane.request(typeof msg === "string" ? msg : { x: this.x, ...msg });
		if (reply.t === "stop") {
			this.kill(stopError(String(reply.reason ?? ""), String(reply.message ?? "")));
		}
		this.check();
		return reply;
	}

	/** A request whose answer is `ok` with a value, or `error`, which throws
	 * InvalidArgumentError (code `invalid`) or `failed` (CallFailedError
	 * or the subclass given). */
	async call(msg: Record<string, unknown>, failed: new (m: string) => CairnError = CallFailedError): Promise<unknown> {
		const reply = await this.request(msg);
		if (reply.t === "ok") return reply.value;
		throw this.refusal(reply, failed, String(msg.op));
	}

	/** The error for an `error` reply, or a ProtocolError for a reply the call does not expect. */
	refusal(reply: Incoming, failed: new (m: string) => CairnError, op: string): CairnError {
		const message = String(reply.message ?? "");
		if (reply.t === "error") return reply.code === "invalid" ? new InvalidArgumentError(message) : new failed(message);
		return new ProtocolError(`the engine answered ${op} with "${reply.t}"`);
	}

	/** Sends a message that gets no reply, unless the execution is over. */
	sendOnce(line: string): void {
		if (!this.dead) this.lane.send(line);
	}

	/** Throws if the execution is over or its function has returned. */
	check(): void {
		if (this.dead) throw this.dead;
		if (this.finished) throw new CairnError("the workflow function has returned: no more durable calls");
	}

	/** Ends the execution: later calls throw err, running steps are aborted. */
	kill(err: StoppedError): void {
		if (this.dead) return;
		this.dead = err;
		for (const f of [...this.onDeath]) f();
	}

	/** A value as JSON text the engine takes (at most `max_payload` bytes). */
	payload(value: unknown, what: string): string {
		const { text, bytes } = toJSON(value, what);
		if (bytes > this.lane.maxPayload)
			throw new InvalidArgumentError(`${what} is ${bytes} bytes, more than the engine takes (CAIRN_MAX_PAYLOAD, ${this.lane.maxPayload})`);
		return text;
	}

	/** The line of a message whose field `field` holds JSON text. */
	line(op: string, fields: Record<string, unknown>, field: string, text: string): string {
		const head = JSON.stringify({ x: this.x, op, ...fields });
		return `${head.slice(0, -1)},${JSON.stringify(field)}:${text}}\n`;
	}

	/**
	 * Runs one attempt of a step function: gives it an AbortSignal that aborts
	 * at timeoutMs (when > 0), once the engine says the run should stop (asked
	 * every STOP_POLL_MS while it runs), or when the execution dies. Resolves
	 * when the function settles or the timeout passes, whichever is first; a
	 * result that comes later goes nowhere.
	 */
	runAttempt<T>(fn: (signal: AbortSignal, attempt: number) => T | Promise<T>, attempt: number, timeoutMs: number): Promise<Outcome> {
		const ac = new AbortController();
		return new Promise<Outcome>((resolve) => {
			let done = false;
			let timer: NodeTimer | undefined;
			const finish = (o: Outcome): void => {
				if (done) return;
				done = true;
				clearTimeout(timer);
				clearInterval(poll);
				this.onDeath.delete(died);
				resolve(o);
			};
			const died = (): void => {
				ac.abort(this.dead);
				finish({ ok: false, message: describe(this.dead), retryable: true });
			};
			this.onDeath.add(died);
			if (timeoutMs > 0) {
				timer = setTimeout(() => {
					const err = new StepTimeoutError(`the step timed out after ${timeoutMs} ms`);
					ac.abort(err);
					finish({ ok: false, message: describe(err), retryable: true });
				}, timeoutMs);
			}
			let asking = false;
			const poll = setInterval(() => {
				if (asking || done) return;
				asking = true;
				this.askStop().then(
					(stop) => {
						asking = false;
						if (stop && !done) ac.abort(new StoppedError("stop", "the run is cancelled or handed over"));
					},
					() => {
						asking = false;
						if (!done) ac.abort(this.dead);
					},
				);
			}, STOP_POLL_MS);
			inStep.run(this, () => {
				Promise.resolve()
					.then(() => fn(ac.signal, attempt))
					.then(
						(value) => {
							let text: string;
							try {
								text = this.payload(value, "the step's result");
							} catch (err) {
								return finish({ ok: false, message: describe(err), retryable: false });
							}
							finish({ ok: true, text });
						},
						(err) => finish({ ok: false, message: describe(err), retryable: !(err instanceof NonRetryableError) }),
					);
			});
			if (this.dead) died();
		});
	}

	/** `should_stop`, outside the order of durable calls: made while a step function runs. */
	async askStop(): Promise<boolean> {
		const reply = await this.request({ op: "should_stop" });
		if (reply.t !== "ok") throw this.refusal(reply, CallFailedError, "should_stop");
		return reply.value === true;
	}

	/** True when the caller is this execution's running step function. */
	insideStep(): boolean {
		return inStep.getStore() === this;
	}
}
