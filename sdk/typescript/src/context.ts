/**
 * The context a workflow function gets: every durable call of the protocol
 * (docs/protocol.md, Durable calls), typed. Each call is one request to the
 * engine, which answers from the run's journal or does the call now; the
 * semantics are those of the C functions of the same names (docs/workflows.md,
 * docs/composing.md).
 *
 * @module
 */
import { CallFailedError, ChildFailedError, InvalidArgumentError, StepFailedError, WaitTimeoutError } from "./errors";
import { Execution } from "./execution";
import { RetryPolicy, wirePolicy } from "./policy";
import { clip } from "./wire";

/**
 * A step's function: the side-effecting work (call an API, write a row).
 * `signal` aborts when the attempt's `timeoutMs` passes, when the run is
 * cancelled or handed over, or when the engine goes: pass it to what the
 * step waits for (`fetch(url, { signal })`). `attempt` is 1 for the first
 * attempt. Throw {@link NonRetryableError} to fail the step at once; any
 * other error is retried per the step's policy. The value it returns must be
 * JSON; the step hands back what JSON keeps of it (a Date becomes a string),
 * the same on the first execution as on every replay.
 */
export type StepFunction<T> = (signal: AbortSignal, attempt: number) => T | Promise<T>;

/** A durable call's name in the journal: 1 to 128 of `[A-Za-z0-9_.:-]`. */
export interface NameOptions {
	/** The call's name in the journal; replay checks names in order. */
	name?: string;
}

/** How long a wait may last. */
export interface WaitOptions {
	/** Milliseconds, counted from the wait's first call; none when absent. */
	timeoutMs?: number;
}

/** A run's id, as the engine and the HTTP API give it. */
export type RunId = number;

/**
 * What {@link Context.continueAsNew} gives, for the workflow to return: the
 * run ends and its successor starts with `input` and a fresh journal.
 */
export class ContinueAsNew {
	constructor(readonly input: unknown) {}
}

/** One child's end in a wait for many ({@link Context.waitForChildren}). */
export interface ChildResult<O = unknown> {
	/** The child's id. */
	child: RunId;
	/** How it ended. */
	status: "completed" | "failed" | "cancelled";
	/** Its output, when it completed. */
	output: O | null;
	/** Why it did not complete. */
	error: string | null;
}

/** Which children a wait for many waits for. */
export interface ChildrenWaitOptions extends WaitOptions {
	/** Met once this many of them ended (1: any); all of them when absent. */
	first?: number;
}

declare global {
	/** What the SDK needs of AbortSignal; merges with the DOM's and @types/node's. */
	interface AbortSignal {
		readonly aborted: boolean;
		readonly reason: any;
	}
}

function whole(v: number, what: string): number {
	if (typeof v !== "number" || !Number.isFinite(v)) throw new InvalidArgumentError(`${what} is ${String(v)}; expected a number of milliseconds`);
	return Math.round(v);
}

/**
 * The context of one execution of a workflow function. A function runs from
 * the top every time its run resumes (after a sleep, a signal, a crash):
 * each durable call then returns what the journal recorded, without doing
 * anything again, so keep the sequence of durable calls a function of the
 * input and of earlier results, and do side effects in steps.
 *
 * Durable calls are made one at a time, in the order the function makes
 * them; a call the engine answers with a stop throws {@link StoppedError},
 * which must travel out of the function.
 */
export class Context {
	/** @internal */
	constructor(private readonly exec: Execution) {}

	/** The run's id. */
	get runId(): RunId {
		return this.exec.runId;
	}

	/** The workflow's name. */
	get workflow(): string {
		return this.exec.workflow;
	}

	/** 1 for the run's first attempt, 2 after a {@link RetryRunError} ... */
	get attempt(): number {
		return this.exec.attempt;
	}

	/**
	 * The W3C `traceparent` of where the run is now: inside a step function,
	 * the OpenTelemetry span of its attempt; elsewhere, the run's span. The
	 * same in every replay; pass it on to the services a step calls.
	 * Undefined from an engine older than protocol version 3.
	 */
	get traceparent(): string | undefined {
		return this.exec.stepTraceparent ?? this.exec.traceparent;
	}

	/**
	 * Runs `fn` once and journals its result under `name`; a replay returns
	 * the journaled result without running it. A failed attempt is retried
	 * after a durable backoff (the run suspends meanwhile) per `policy`
	 * (default: 3 attempts, 1 s, ×2); `policy.timeoutMs` bounds each attempt.
	 * Throws {@link StepFailedError} once the attempts are used up or the step
	 * failed for good.
	 */
	step<T>(name: string, fn: StepFunction<T>, policy?: RetryPolicy): Promise<T> {
		const exec = this.exec;
		return exec.serial(async () => {
			const retry = wirePolicy(policy);
			const timeoutMs = policy?.timeoutMs && policy.timeoutMs > 0 ? policy.timeoutMs : 0;
			const msg: Record<string, unknown> = { op: "step", name };
			if (retry) msg.retry = retry;
			if (timeoutMs) msg.await = true;
			let reply = await exec.request(msg);
			if (reply.t === "run_step") {
				const attempt = typeof reply.attempt === "number" ? reply.attempt : 1;
				exec.stepTraceparent = typeof reply.traceparent === "string" ? reply.traceparent : undefined;
				let outcome;
				try {
					outcome = await exec.runAttempt(fn, attempt, timeoutMs);
				} finally {
					exec.stepTraceparent = undefined;
				}
				exec.check();
				if (outcome.ok) {
					const line = exec.line("step_result", {}, "value", outcome.text);
					const value = JSON.parse(outcome.text) as T;
					if (!timeoutMs) {
						exec.sendOnce(line);
						return value;
					}
					reply = await exec.request(line);
					if (reply.t === "ok") return value;
				} else {
					reply = await exec.request({ op: "step_error", message: clip(outcome.message), retryable: outcome.retryable });
				}
			}
			if (reply.t === "ok") return reply.value as T;
			throw exec.refusal(reply, StepFailedError, "step");
		});
	}

	/** Sleeps durably for `ms` milliseconds: the run suspends and resumes
	 * when it is due, on whichever worker then owns it. */
	sleep(ms: number, opts: NameOptions = {}): Promise<void> {
		return this.exec.serial(async () => {
			await this.exec.call({ op: "sleep", name: opts.name ?? "sleep", ms: whole(ms, "sleep's ms") });
		});
	}

	/** Sleeps durably until `when` (a Date or Unix milliseconds). */
	sleepUntil(when: Date | number, opts: NameOptions = {}): Promise<void> {
		return this.exec.serial(async () => {
			const ms = when instanceof Date ? when.getTime() : when;
			await this.exec.call({ op: "sleep_until", name: opts.name ?? "sleep_until", unix_ms: whole(ms, "sleepUntil's time") });
		});
	}

	/**
	 * Waits for the signal `name` (`cairn signal RUN name PAYLOAD`) and returns
	 * its payload. A signal sent before the call is buffered and returned at
	 * once; signals of one name are consumed in the order they were sent.
	 * Throws {@link WaitTimeoutError} once `timeoutMs` has passed since the
	 * first call.
	 */
	waitForSignal<T = unknown>(name: string, opts: WaitOptions = {}): Promise<T> {
		return this.exec.serial(async () => {
			const timeout = opts.timeoutMs === undefined ? null : whole(opts.timeoutMs, "timeoutMs");
			const reply = await this.exec.request({ op: "signal", name, timeout_ms: timeout });
			if (reply.t === "ok") return reply.value as T;
			if (reply.t === "timeout") throw new WaitTimeoutError(`no signal "${name}" came within ${timeout} ms`);
			throw this.exec.refusal(reply, CallFailedError, "signal");
		});
	}

	/** The wall clock, journaled: a replay sees the same time. */
	now(): Promise<Date> {
		return this.exec.serial(async () => new Date(Number(await this.exec.call({ op: "now" }))));
	}

	/** A random 64-bit number, journaled: a replay sees the same number. */
	random(): Promise<bigint> {
		return this.exec.serial(async () => BigInt(String(await this.exec.call({ op: "random" }))));
	}

	/**
	 * Starts a child run of `workflow` with `input`, once (a replay finds the
	 * same child), and returns its id. A parent that ends cancelled asks its
	 * unfinished children to cancel.
	 */
	startChild(workflow: string, input: unknown = null, opts: NameOptions = {}): Promise<RunId> {
		const exec = this.exec;
		return exec.serial(async () => {
			const line = exec.line("child_start", { name: opts.name ?? "child", workflow }, "input", exec.payload(input, "the child's input"));
			return Number(await this.value(line, "child_start"));
		});
	}

	/**
	 * Waits for the child run `child` to finish and returns its output.
	 * Throws {@link ChildFailedError} when it failed or was cancelled (the
	 * message says which and why), {@link WaitTimeoutError} once `timeoutMs`
	 * has passed since the first call.
	 */
	waitForChild<O = unknown>(child: RunId, opts: WaitOptions = {}): Promise<O> {
		return this.exec.serial(async () => {
			const msg: Record<string, unknown> = { op: "child_wait", child };
			if (opts.timeoutMs !== undefined) msg.timeout_ms = whole(opts.timeoutMs, "timeoutMs");
			const reply = await this.exec.request(msg);
			if (reply.t === "ok") return reply.value as O;
			if (reply.t === "timeout") throw new WaitTimeoutError(`child run ${child} did not finish within ${opts.timeoutMs} ms`);
			throw this.exec.refusal(reply, ChildFailedError, "child_wait");
		});
	}

	/**
	 * Waits for the children `children` (ids this run started, none twice)
	 * as one durable call: all of them, or the `first` to end (1: any). The
	 * run suspends and is woken once, when the wait can be met. Resolves to
	 * one entry per child, in the order given: its {@link ChildResult}, or
	 * null for one that has not ended (those that ended by then, `first` or
	 * more); a child that failed is a result, not an error. Throws
	 * {@link WaitTimeoutError} once `timeoutMs` has passed since the first
	 * call, {@link InvalidArgumentError} for an id this run did not start.
	 */
	waitForChildren<O = unknown>(children: RunId[], opts: ChildrenWaitOptions = {}): Promise<(ChildResult<O> | null)[]> {
		return this.exec.serial(async () => {
			const ids = children.map(Number);
			const msg: Record<string, unknown> = { op: "child_wait_all", children: ids };
			if (opts.first !== undefined) msg.k = opts.first;
			if (opts.timeoutMs !== undefined) msg.timeout_ms = whole(opts.timeoutMs, "timeoutMs");
			const reply = await this.exec.request(msg);
			if (reply.t === "timeout") throw new WaitTimeoutError(`the children did not finish within ${opts.timeoutMs} ms`);
			if (reply.t !== "ok") throw this.exec.refusal(reply, ChildFailedError, "child_wait_all");
			return (reply.value as ({ status: ChildResult["status"]; output?: O; error?: string } | null)[]).map((r, i) =>
				r === null ? null : { child: ids[i], status: r.status, output: r.output ?? null, error: r.error ?? null },
			);
		});
	}

	/**
	 * {@link waitForChildren} of all of them: their outputs, in the order
	 * given. Throws {@link ChildFailedError} naming the first that failed or
	 * was cancelled.
	 */
	async waitForAllChildren<O = unknown>(children: RunId[], opts: WaitOptions = {}): Promise<O[]> {
		const results = await this.waitForChildren<O>(children, { timeoutMs: opts.timeoutMs });
		return results.map((r) => {
			if (r === null || r.status !== "completed") throw new ChildFailedError(`child run ${r?.child} ${r?.status}: ${r?.error}`);
			return r.output as O;
		});
	}

	/** {@link startChild} and {@link waitForChild} in one. */
	async child<O = unknown>(workflow: string, input: unknown = null, opts: NameOptions & WaitOptions = {}): Promise<O> {
		const id = await this.startChild(workflow, input, opts);
		return this.waitForChild<O>(id, opts);
	}

	/** Sends the signal `signal` with `payload` to the run `run`, once.
	 * Throws {@link CallFailedError} when that run does not exist or has finished. */
	send(run: RunId, signal: string, payload: unknown = null, opts: NameOptions = {}): Promise<void> {
		const exec = this.exec;
		return exec.serial(async () => {
			await this.value(exec.line("send", { name: opts.name ?? "send", run, signal }, "payload", exec.payload(payload, "the signal's payload")), "send");
		});
	}

	/** Enqueues an independent run of `workflow` with `input`, once, and
	 * returns its id: nobody waits for it or cancels it. */
	enqueue(workflow: string, input: unknown = null, opts: NameOptions = {}): Promise<RunId> {
		const exec = this.exec;
		return exec.serial(async () => {
			const line = exec.line("enqueue", { name: opts.name ?? "enqueue", workflow }, "input", exec.payload(input, "the run's input"));
			return Number(await this.value(line, "enqueue"));
		});
	}

	/** Publishes `value` under `key` on this run (`cairn event RUN KEY`); the latest value wins. */
	setEvent(key: string, value: unknown): Promise<void> {
		const exec = this.exec;
		return exec.serial(async () => {
			await this.value(exec.line("set_event", { key }, "value", exec.payload(value, "the event's value")), "set_event");
		});
	}

	/**
	 * Versioned code: true on a run that reaches this point with the patched
	 * code (a marker is journaled, and every replay finds it), false on a run
	 * whose journal, written before the patch, has another call here.
	 *
	 *     if (await ctx.patched("charge-in-two-steps")) { new calls } else { old calls }
	 */
	patched(patch: string): Promise<boolean> {
		return this.exec.serial(async () => (await this.exec.call({ op: "patched", patch })) === true);
	}

	/**
	 * Return what this gives to end the run and start its successor: a new
	 * run of the same workflow with `input` and a fresh journal, in the run's
	 * final commit (a crash leaves the run going on or exactly one
	 * successor). A workflow that loops without end (a poller, a
	 * subscription) does so every so many iterations, so that its journal
	 * stays small:
	 *
	 *     return ctx.continueAsNew({ cursor });
	 *
	 * The run ends completed; {@link Client.result} and `cairn result`
	 * follow the chain to its last run, and a signal to a run that continued
	 * goes to the last run of its chain. A run cancelled meanwhile ends
	 * cancelled instead.
	 */
	continueAsNew(input: unknown = null): ContinueAsNew {
		return new ContinueAsNew(input);
	}

	/** True once the run is cancelled, the worker drains or the run's shard
	 * moves. A step function may call it (a long one should, or watch its
	 * signal). */
	shouldStop(): Promise<boolean> {
		if (this.exec.insideStep()) return this.exec.askStop();
		return this.exec.serial(() => this.exec.askStop());
	}

	/** Sends a request built as a line; its `ok` value, or the error it got. */
	private async value(line: string, op: string): Promise<unknown> {
		const reply = await this.exec.request(line);
		if (reply.t === "ok") return reply.value;
		throw this.exec.refusal(reply, CallFailedError, op);
	}
}
