/**
 * The worker: registers workflow functions, starts the engine and serves
 * the runs it sends, each execution lane's on the event loop, concurrently.
 * It forwards SIGTERM and SIGINT to the engine (which drains) and exits with
 * its status; it starts a new engine when one dies (docs/protocol.md, When
 * one side dies).
 *
 * @module
 */
import { Context, ContinueAsNew } from "./context";
import { Engine, engineEnv, findEngine, laneCount, nextBackoff } from "./engine";
import { CairnError, NonRetryableError, RetryRunError, StoppedError, describe, stopError } from "./errors";
import { Execution } from "./execution";
import { Lane } from "./lane";
import { log } from "./log";
import { SDK_NAME } from "./version";
import { RunRetryPolicy } from "./policy";
import { Incoming, clip, encode, hello } from "./wire";

/** A workflow function: takes the run's input, returns its output (JSON). */
export type WorkflowFunction<I = any, O = any> = (ctx: Context, input: I) => Promise<O> | O;

/** How a workflow is served. */
export interface WorkflowOptions {
	/** The policy between attempts of the whole run (after a {@link RetryRunError}). */
	retry?: RunRetryPolicy;
}

/** How a worker runs. */
export interface WorkerOptions {
	/** Runs executed at once (the engine's CAIRN_CONCURRENCY); default: CAIRN_CONCURRENCY, else 16. */
	concurrency?: number;
	/** The environment the engine gets (and where the SDK reads its settings); default: process.env. */
	env?: Record<string, string | undefined>;
	/** Exit the process with the engine's status when run() ends; default true. */
	exit?: boolean;
}

interface Registered {
	fn: WorkflowFunction;
	retry?: RunRetryPolicy;
}

/**
 * Serves workflows:
 *
 *     const worker = new Worker();
 *     worker.workflow("ts.hello", async (ctx, input: { name: string }) => {
 *       const id = await ctx.step("greet", () => `hello ${input.name}`);
 *       return { id };
 *     });
 *     await worker.run();
 */
export class Worker {
	private readonly flows = new Map<string, Registered>();
	private engine?: Engine;
	private stopping = false;
	private wake?: () => void;

	constructor(private readonly options: WorkerOptions = {}) {}

	/**
	 * Registers a workflow under `name` (1 to 128 of `[A-Za-z0-9_.:-]`); the
	 * engine checks the name when run() starts it.
	 */
	workflow<I = any, O = any>(name: string, fn: WorkflowFunction<I, O>, opts: WorkflowOptions = {}): this {
		if (this.flows.has(name)) throw new CairnError(`workflow "${name}" is registered twice`);
		this.flows.set(name, { fn, retry: opts.retry });
		return this;
	}

	/**
	 * Starts the engine and serves runs until SIGTERM or SIGINT (or stop()),
	 * then waits for the engine to drain. Resolves with the engine's exit
	 * status, after exiting the process with it unless `exit: false`: 0 after
	 * a drain; the engine's own status when it exits before it is ready (a bad
	 * setting, no database); 127 when no engine is found.
	 */
	async run(): Promise<number> {
		let status: number;
		try {
			status = await this.serve();
		} catch (err) {
			process.stderr.write(`cairn: ${(err as Error).message}\n`);
			status = (err as Error).name === "EngineNotFoundError" ? 127 : 2;
		}
		if (this.options.exit !== false) process.exit(status);
		return status;
	}

	/** Drains: the engine stops taking runs and exits; no new engine starts. */
	stop(): void {
		this.stopping = true;
		this.engine?.kill("SIGTERM");
		this.wake?.();
	}

	private async serve(): Promise<number> {
		if (this.flows.size === 0) throw new CairnError("no workflow registered: call worker.workflow(name, fn) before run()");
		const env = engineEnv(this.options.env ?? process.env, this.options.concurrency);
		const say = (level: "error" | "warn" | "info", msg: string, fields: Record<string, unknown> = {}): void =>
			log(level, msg, fields, env);
		const bin = findEngine(this.options.env ?? process.env);
		const n = laneCount(env);
		const greeting = hello(
			SDK_NAME,
			`node ${process.version.replace(/^v/, "")}`,
			[...this.flows].map(([name, f]) => ({ name, retry: f.retry })),
		);
		const onSignal = (): void => this.stop();
		process.on("SIGTERM", onSignal);
		process.on("SIGINT", onSignal);
		// A durable call left unawaited rejects with StoppedError when its
		// execution ends; that is no reason to crash the process.
		const onUnhandled = (reason: unknown): void => {
			if (reason instanceof StoppedError) return;
			throw reason;
		};
		const ownUnhandled = process.listenerCount("unhandledRejection") === 0;
		if (ownUnhandled) process.on("unhandledRejection", onUnhandled);
		try {
			let backoff: number | undefined;
			for (;;) {
				const engine: Engine = new Engine(
					bin,
					env,
					n,
					greeting,
					(lane, msg) => this.execute(lane, msg),
					(err) => {
						say("error", "the engine broke the protocol; killing it", { error: err.message });
						engine.kill("SIGKILL");
					},
				);
				this.engine = engine;
				say("info", "engine started", { pid: engine.child.pid ?? "", bin, lanes: n });
				const welcome = await engine.welcomed;
				if (welcome)
					say("info", "engine ready", { pid: engine.child.pid ?? "", protocol: String(welcome.protocol), engine: String(welcome.engine) });
				const status = await engine.exited;
				this.engine = undefined;
				if (!welcome || this.stopping) return status;
				backoff = nextBackoff(backoff, Date.now() - engine.startedAt);
				say("warn", "the engine exited; starting another", { status, restart_in_ms: backoff });
				await this.pause(backoff);
				if (this.stopping) return 0;
			}
		} finally {
			process.off("SIGTERM", onSignal);
			process.off("SIGINT", onSignal);
			if (ownUnhandled) process.off("unhandledRejection", onUnhandled);
		}
	}

	private pause(ms: number): Promise<void> {
		return new Promise((resolve) => {
			const t = setTimeout(resolve, ms);
			this.wake = () => {
				clearTimeout(t);
				resolve();
			};
		});
	}

	/** Starts an execution for a `run` message. */
	private execute(lane: Lane, msg: Incoming): void {
		const { x, run, workflow } = msg;
		if (typeof x !== "number" || typeof run !== "number" || typeof workflow !== "string") {
			log("error", "the engine sent a run without x, run or workflow; killing it", {}, this.options.env);
			this.engine?.kill("SIGKILL");
			return;
		}
		const exec = new Execution(
			lane,
			x,
			run,
			workflow,
			typeof msg.attempt === "number" ? msg.attempt : 1,
			typeof msg.traceparent === "string" ? msg.traceparent : undefined,
		);
		lane.onClose = () => exec.kill(stopError("gone", "the engine is gone"));
		void this.perform(exec, this.flows.get(workflow), msg.input);
	}

	/** Calls the workflow function and sends how it ended, unless the
	 * execution was stopped meanwhile (then nothing is sent). */
	private async perform(exec: Execution, flow: Registered | undefined, input: unknown): Promise<void> {
		let line: string;
		try {
			if (!flow) throw new NonRetryableError(`workflow "${exec.workflow}" is not served by this worker`);
			const output = await flow.fn(new Context(exec), input);
			if (output instanceof ContinueAsNew) line = continueLine(exec, output);
			else line = exec.line("return", {}, "value", exec.payload(output, "the workflow's output"));
		} catch (err) {
			line = encode({ x: exec.x, op: "fail", message: clip(describe(err)), retryable: err instanceof RetryRunError });
		}
		exec.finished = true;
		exec.sendOnce(line);
	}
}

/** The message that ends an execution that continues as new (protocol
 * version 2), or a failure of the run when the engine speaks only 1. */
function continueLine(exec: Execution, next: ContinueAsNew): string {
	if (exec.lane.protocol < 2)
		throw new NonRetryableError(`continueAsNew needs protocol version 2; the engine speaks ${exec.lane.protocol}: use a newer cairn-worker`);
	return exec.line("continue_as_new", {}, "input", exec.payload(next.input, "the input of the run it continues as"));
}
