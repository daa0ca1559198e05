/**
 * Client calls for Node programs that start, signal and read runs, over the
 * HTTP API (`/v1/` on a cairn-worker's endpoint, docs/sql-http.md). It needs
 * the endpoint's URL and its bearer token: options, else `CAIRN_URL` and
 * `CAIRN_HTTP_TOKEN` from the environment.
 *
 * @module
 */
import * as http from "node:http";
import * as https from "node:https";
import { HttpError, RunFailedError, WaitTimeoutError } from "./errors";
import { RunId } from "./context";

/** Where the API is and how to reach it. */
export interface ClientOptions {
	/** The endpoint, e.g. `http://127.0.0.1:8080`; default CAIRN_URL, else that. */
	url?: string;
	/** The bearer token; default CAIRN_HTTP_TOKEN. */
	token?: string;
	/** Give up on a request after this many milliseconds; default 30000 (long polls add their wait). */
	timeoutMs?: number;
}

/** How a run is enqueued (the fields of `POST /v1/runs`). */
export interface EnqueueOptions {
	/** Idempotency key: the same `(workflow, key)` again returns the first run. */
	key?: string;
	/** The shard group. */
	group?: string;
	/** Start after this long: milliseconds, or a duration such as "30s". */
	delay?: number | string;
	/** Start at this time. */
	runAt?: Date | string;
	/** Attempts of the whole run (default 3). */
	maxAttempts?: number;
	/** Flow control: runs of one key share its slots. */
	concurrencyKey?: string;
	/** Higher runs first among those due. */
	priority?: number;
}

/** The answer to an enqueue. */
export interface Enqueued {
	id: RunId;
	/** True when the key named a run that already existed. */
	existed: boolean;
	/** True when flow control holds the run. */
	held?: boolean;
	status: RunStatus;
	output?: unknown;
	error?: string | null;
}

/** A run's state. */
export type RunStatus = "pending" | "running" | "sleeping" | "waiting" | "completed" | "failed" | "cancelled" | string;

/** A run, as `GET /v1/runs/ID` gives it. */
export interface Run<I = unknown, O = unknown> {
	id: RunId;
	workflow: string;
	key: string;
	group: string;
	shard: number;
	status: RunStatus;
	attempt: number;
	max_attempts: number;
	cancel_requested: boolean;
	input: I;
	output: O | null;
	error: string | null;
	created_unix_ms: number;
	started_unix_ms: number | null;
	finished_unix_ms: number | null;
	/** Fields that could not be decrypted. */
	unreadable?: string[];
}

/** How long to wait for a run. */
export interface ResultOptions {
	/** Milliseconds; default: a minute. */
	timeoutMs?: number;
}

const FINISHED = new Set(["completed", "failed", "cancelled"]);

/** The HTTP API's long polls answer within at most this long. */
const MAX_POLL_MS = 60000;

/**
 * A client of the HTTP API:
 *
 *     const client = new Client();               // CAIRN_URL, CAIRN_HTTP_TOKEN
 *     const { id } = await client.enqueue("ts.order", { item: "book", amount: 12 });
 *     await client.signal(id, "approval", { by: "ann" });
 *     const out = await client.result<{ tracking: string }>(id);
 */
export class Client {
	private readonly base: string;
	private readonly token?: string;
	private readonly timeoutMs: number;

	constructor(opts: ClientOptions = {}) {
		this.base = (opts.url ?? process.env.CAIRN_URL ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
		this.token = opts.token ?? process.env.CAIRN_HTTP_TOKEN;
		this.timeoutMs = opts.timeoutMs ?? 30000;
	}

	/** Enqueues a run of `workflow` with `input`. */
	enqueue<I = unknown>(workflow: string, input?: I, opts: EnqueueOptions = {}): Promise<Enqueued> {
		const body: Record<string, unknown> = { workflow, input: input === undefined ? null : input };
		if (opts.key !== undefined) body.key = opts.key;
		if (opts.group !== undefined) body.group = opts.group;
		if (opts.delay !== undefined) body.delay = opts.delay;
		if (opts.runAt !== undefined) body.run_at = opts.runAt instanceof Date ? opts.runAt.toISOString() : opts.runAt;
		if (opts.maxAttempts !== undefined) body.max_attempts = opts.maxAttempts;
		if (opts.concurrencyKey !== undefined) body.concurrency_key = opts.concurrencyKey;
		if (opts.priority !== undefined) body.priority = opts.priority;
		return this.request("POST", "/v1/runs", body) as Promise<Enqueued>;
	}

	/** Sends the signal `name` with `payload` to the run. */
	async signal(run: RunId, name: string, payload: unknown = null): Promise<void> {
		await this.request("POST", `/v1/runs/${run}/signals/${encodeURIComponent(name)}`, payload);
	}

	/** Cancels the run: at once if it has not started, else at its next durable call. */
	async cancel(run: RunId): Promise<void> {
		await this.request("POST", `/v1/runs/${run}/cancel`);
	}

	/** Runs a failed or cancelled run again from its journal. */
	async retry(run: RunId): Promise<void> {
		await this.request("POST", `/v1/runs/${run}/retry`);
	}

	/** The run as it is now. */
	get<I = unknown, O = unknown>(run: RunId): Promise<Run<I, O>> {
		return this.request("GET", `/v1/runs/${run}`) as Promise<Run<I, O>>;
	}

	/** The run once it has finished (completed, failed or cancelled); throws
	 * WaitTimeoutError if it has not within `timeoutMs`. */
	async wait<I = unknown, O = unknown>(run: RunId, opts: ResultOptions = {}): Promise<Run<I, O>> {
		const deadline = Date.now() + (opts.timeoutMs ?? 60000);
		for (;;) {
			const left = deadline - Date.now();
			const waitMs = Math.max(0, Math.min(left, MAX_POLL_MS));
			const got = (await this.request("GET", `/v1/runs/${run}?wait=${waitMs}ms`, undefined, waitMs)) as Run<I, O>;
			if (FINISHED.has(got.status)) return got;
			if (Date.now() >= deadline) throw new WaitTimeoutError(`run ${run} is still ${got.status} after ${opts.timeoutMs ?? 60000} ms`);
		}
	}

	/** The run's output once it has completed; throws RunFailedError when it
	 * failed or was cancelled, WaitTimeoutError when it is not done in time. */
	async result<O = unknown>(run: RunId, opts: ResultOptions = {}): Promise<O> {
		const got = await this.wait<unknown, O>(run, opts);
		if (got.status === "completed") return got.output as O;
		throw new RunFailedError(got.error ?? `run ${run} was ${got.status}`, run, got.status);
	}

	/** One request; the parsed JSON answer, or HttpError with the server's message. */
	private request(method: string, path: string, body?: unknown, extraMs = 0): Promise<unknown> {
		const url = new URL(this.base + path);
		const data = body === undefined ? undefined : JSON.stringify(body);
		const headers: Record<string, string | number> = {};
		if (this.token) headers.Authorization = `Bearer ${this.token}`;
		if (data !== undefined) {
			headers["Content-Type"] = "application/json";
			headers["Content-Length"] = Buffer.byteLength(data, "utf8");
		} else if (method === "POST") {
			headers["Content-Length"] = 0;
		}
		const mod = url.protocol === "https:" ? https : http;
		return new Promise((resolve, reject) => {
			const req = mod.request(url, { method, headers }, (res) => {
				const chunks: Buffer[] = [];
				res.on("data", (c: Buffer) => chunks.push(c));
				res.on("error", (err: Error) => reject(new HttpError(`${method} ${path}: ${err.message}`, 0)));
				res.on("end", () => {
					const text = Buffer.concat(chunks).toString("utf8");
					const status = res.statusCode ?? 0;
					let parsed: unknown = null;
					try {
						parsed = text ? JSON.parse(text) : null;
					} catch {
						parsed = null;
					}
					if (status >= 200 && status < 300) return resolve(parsed);
					const message = (parsed as { error?: unknown } | null)?.error;
					reject(new HttpError(typeof message === "string" ? message : `${method} ${path}: HTTP ${status} ${text.slice(0, 200)}`, status));
				});
			});
			req.setTimeout(this.timeoutMs + extraMs, () => req.destroy(new Error(`no answer within ${this.timeoutMs + extraMs} ms`)));
			req.on("error", (err: Error) => reject(new HttpError(`${method} ${url.toString()}: ${err.message}`, 0)));
			req.end(data);
		});
	}
}
