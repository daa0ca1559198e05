/**
 * The engine: a `cairn-worker --sdk-fds 3-(3+N)` child process
 * (docs/protocol.md, Starting the engine). Node's extra `'pipe'` stdio
 * entries are connected stream socket pairs, and become the child's file
 * descriptors 3, 4, ...: fd 3 is the control lane, 4 to 3+N the execution
 * lanes. This module finds the executable, builds its environment, starts
 * it and says `hello`; the worker decides what to do with it.
 *
 * @module
 */
import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { EngineNotFoundError, InvalidArgumentError } from "./errors";
import { Lane, LaneStream } from "./lane";
import { Incoming } from "./wire";

/** The SDK's defaults for the engine's environment, where unset. */
export const ENGINE_DEFAULTS: Record<string, string> = {
	CAIRN_SHARD_GROUPS: "typescript",
	CAIRN_HTTP_ADDR: "127.0.0.1:0",
	CAIRN_CONCURRENCY: "16",
};

/** Restarts of an engine that died: after 1 s, doubling up to 30 s while
 * each one dies within a minute of starting. */
export const BACKOFF_FIRST_MS = 1000;
export const BACKOFF_MAX_MS = 30000;
export const BACKOFF_RESET_AFTER_MS = 60000;

function executable(p: string): boolean {
	try {
		fs.accessSync(p, fs.constants.X_OK);
		return fs.statSync(p).isFile();
	} catch {
		return false;
	}
}

/**
 * The `cairn-worker` to start: `CAIRN_WORKER_BIN`, else `bin/cairn-worker`
 * of the repository this package sits in (sdk/typescript), else
 * `cairn-worker` on `PATH`. Throws EngineNotFoundError.
 *
 * @param here the folder of the compiled SDK (its dist/)
 */
export function findEngine(env: Record<string, string | undefined>, here: string = __dirname): string {
	const named = env.CAIRN_WORKER_BIN;
	if (named) {
		if (executable(named)) return named;
		throw new EngineNotFoundError(`CAIRN_WORKER_BIN=${named}: not an executable file`);
	}
	const pkg = path.dirname(here);
	if (path.basename(pkg) === "typescript" && path.basename(path.dirname(pkg)) === "sdk") {
		const inRepo = path.resolve(pkg, "..", "..", "bin", "cairn-worker");
		if (executable(inRepo)) return inRepo;
	}
	for (const dir of (env.PATH ?? "").split(path.delimiter)) {
		if (!dir) continue;
		const p = path.join(dir, "cairn-worker");
		if (executable(p)) return p;
	}
	throw new EngineNotFoundError(
		"cannot find cairn-worker: set CAIRN_WORKER_BIN, build the repository with make (bin/cairn-worker), or put cairn-worker on PATH",
	);
}

/** The number of execution lanes: CAIRN_CONCURRENCY. Throws InvalidArgumentError. */
export function laneCount(env: Record<string, string | undefined>): number {
	const text = env.CAIRN_CONCURRENCY ?? ENGINE_DEFAULTS.CAIRN_CONCURRENCY;
	const n = /^[0-9]+$/.test(text) ? Number(text) : 0;
	if (n < 1 || n > 1000)
		throw new InvalidArgumentError(`invalid value for CAIRN_CONCURRENCY: "${text}"; expected a number of runs executed at once, 1 to 1000`);
	return n;
}

/** The engine's environment: `env` with the SDK's defaults where unset;
 * `concurrency`, when given, sets CAIRN_CONCURRENCY. */
export function engineEnv(env: Record<string, string | undefined>, concurrency?: number): Record<string, string> {
	const out: Record<string, string> = {};
	for (const [k, v] of Object.entries(env)) if (v !== undefined) out[k] = v;
	for (const [k, v] of Object.entries(ENGINE_DEFAULTS)) if (!out[k]) out[k] = v;
	if (concurrency !== undefined) out.CAIRN_CONCURRENCY = String(concurrency);
	laneCount(out);
	return out;
}

/** A process's exit status as a shell tells it: 128 + N after signal N. */
export function exitStatus(code: number | null, signal: string | null): number {
	if (code !== null) return code;
	const n = signal ? os.constants.signals[signal] : undefined;
	return 128 + (n ?? 0);
}

/** The wait before the next start of an engine that lived `uptimeMs` after
 * a wait of `previousMs` (undefined: none yet). */
export function nextBackoff(previousMs: number | undefined, uptimeMs: number): number {
	if (previousMs === undefined || uptimeMs >= BACKOFF_RESET_AFTER_MS) return BACKOFF_FIRST_MS;
	return Math.min(previousMs * 2, BACKOFF_MAX_MS);
}

/** A stream for a lane of an engine that did not start. */
const NO_STREAM: LaneStream = { on: () => undefined, write: () => false, destroy: () => undefined };

/** A started engine: its process, its lanes, and what became of it. */
export class Engine {
	readonly child: ChildProcess;
	readonly control: Lane;
	readonly lanes: Lane[] = [];
	readonly startedAt = Date.now();
	/** The exit status once it has exited (see exitStatus). */
	readonly exited: Promise<number>;
	/** `welcome`, or undefined once the engine refused or exited first. */
	readonly welcomed: Promise<Incoming | undefined>;

	/**
	 * Starts the engine and says hello.
	 *
	 * @param onRun gets each `run` message and the lane it came on
	 * @param onBroken gets a ProtocolError when the engine breaks the protocol
	 */
	constructor(
		bin: string,
		env: Record<string, string>,
		n: number,
		hello: Record<string, unknown>,
		onRun: (lane: Lane, msg: Incoming) => void,
		onBroken: (err: Error) => void,
	) {
		// Its own process group (detached): a Ctrl-C in a terminal reaches the
		// SDK process alone, which forwards one SIGTERM; a second signal would
		// make the engine give up its drain.
		this.child = spawn(bin, ["--sdk-fds", `3-${3 + n}`], {
			stdio: ["inherit", "inherit", "inherit", ...new Array<"pipe">(n + 1).fill("pipe")],
			env,
			detached: true,
		});
		let welcome: (m: Incoming | undefined) => void = () => undefined;
		this.welcomed = new Promise((resolve) => (welcome = resolve));
		this.exited = new Promise((resolve) => {
			let done = false;
			const exit = (status: number): void => {
				if (done) return;
				done = true;
				this.close();
				welcome(undefined);
				resolve(status);
			};
			// "close", not "exit": it comes once the lanes are read to their
			// end, so a `refused` written just before the exit is not lost.
			this.child.on("close", (code: number | null, signal: string | null) => exit(exitStatus(code, signal)));
			this.child.on("error", (err: Error & { code?: string }) => {
				process.stderr.write(`cairn: cannot start ${bin}: ${err.message}\n`);
				exit(err.code === "ENOENT" ? 127 : 126);
			});
		});
		// After a failed spawn there may be no streams: the "error" event says why.
		const stream = (i: number): LaneStream => this.child.stdio[3 + i] ?? NO_STREAM;
		this.control = new Lane(
			stream(0),
			(msg) => {
				if (msg.t === "welcome") {
					for (const lane of this.lanes) lane.setMaxPayload(Number(msg.max_payload) || lane.maxPayload);
					welcome(msg);
				} else if (msg.t === "refused") {
					process.stderr.write(`cairn: the engine refused this worker: ${String(msg.message)}\n`);
					welcome(undefined);
				}
			},
			onBroken,
		);
		for (let i = 1; i <= n; i++) {
			const lane: Lane = new Lane(
				stream(i),
				(msg) => (msg.t === "run" ? onRun(lane, msg) : onBroken(new Error(`"${msg.t}" on an execution lane`))),
				onBroken,
			);
			this.lanes.push(lane);
		}
		this.control.send(hello);
	}

	/** Sends the engine a signal (SIGTERM drains it). */
	kill(signal: string): void {
		if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
	}

	/** Closes every lane: waiting requests are answered `gone`. */
	close(): void {
		this.control.close();
		for (const lane of this.lanes) lane.close();
	}
}
