/**
 * The protocol's messages and framing (docs/protocol.md): one JSON object
 * per line, ended by `\n`. Pure functions and one small class, no I/O, so
 * the unit tests cover them without an engine.
 *
 * @module
 */
import { InvalidArgumentError, ProtocolError } from "./errors";
import { RunRetryPolicy, wirePolicy } from "./policy";

/** The protocol versions this SDK speaks: 2 adds `continue_as_new`. */
export const PROTOCOLS = [1, 2, 3];

/** What a line may hold beyond `max_payload` (docs/protocol.md, Framing). */
export const LINE_SLACK = 64 * 1024;

/** The `max_payload` assumed until `welcome` tells the real one. */
export const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/** A message from the engine: `welcome`, `refused`, `run`, or a reply. */
export interface Incoming {
	t: string;
	[field: string]: unknown;
}

/** The `hello` message: the first thing said on the control lane. */
export function hello(
	sdk: string,
	runtime: string,
	workflows: Array<{ name: string; retry?: RunRetryPolicy }>,
): Record<string, unknown> {
	return {
		op: "hello",
		protocols: PROTOCOLS,
		sdk,
		runtime,
		workflows: workflows.map((w) => {
			const retry = wirePolicy(w.retry);
			return retry ? { name: w.name, retry } : { name: w.name };
		}),
	};
}

/**
 * A message as one line: compact JSON and `\n`. JSON.stringify escapes the
 * control characters, so the line holds no raw newline. Throws
 * InvalidArgumentError for a value JSON cannot hold (a BigInt, a cycle) or a
 * line longer than `maxLine` bytes.
 */
export function encode(msg: Record<string, unknown>, maxLine = DEFAULT_MAX_PAYLOAD + LINE_SLACK): string {
	let text: string;
	try {
		text = JSON.stringify(msg);
	} catch (err) {
		throw new InvalidArgumentError(`not JSON: ${(err as Error).message}`);
	}
	const bytes = Buffer.byteLength(text, "utf8") + 1;
	if (bytes > maxLine)
		throw new InvalidArgumentError(`a message of ${bytes} bytes is longer than the engine takes (${maxLine})`);
	return text + "\n";
}

/**
 * A value as JSON text, and its size in bytes. `undefined` is `null`.
 * Throws InvalidArgumentError (with `what` named) for what JSON cannot hold.
 */
export function toJSON(value: unknown, what: string): { text: string; bytes: number } {
	let text: string | undefined;
	try {
		text = JSON.stringify(value === undefined ? null : value);
	} catch (err) {
		throw new InvalidArgumentError(`${what} is not JSON: ${(err as Error).message}`);
	}
	if (text === undefined) text = "null"; // a function or a symbol
	return { text, bytes: Buffer.byteLength(text, "utf8") };
}

/** The longest error message sent to the engine, in characters. */
export const MAX_MESSAGE = 16 * 1024;

/** A message cut to MAX_MESSAGE characters. */
export function clip(message: string): string {
	return message.length <= MAX_MESSAGE ? message : message.slice(0, MAX_MESSAGE - 3) + "...";
}

/** Parses one line from the engine; throws ProtocolError unless it is a JSON object with a string `t`. */
export function decode(line: string): Incoming {
	let msg: unknown;
	try {
		msg = JSON.parse(line);
	} catch (err) {
		throw new ProtocolError(`the engine sent a line that is not JSON: ${(err as Error).message}`);
	}
	if (typeof msg !== "object" || msg === null || Array.isArray(msg) || typeof (msg as Incoming).t !== "string")
		throw new ProtocolError(`the engine sent a line that is not a message: ${line.slice(0, 200)}`);
	return msg as Incoming;
}

/**
 * Cuts a byte stream into lines. Chunks may end anywhere, in the middle of
 * a line or of a UTF-8 character: bytes are kept until their `\n` comes,
 * and only whole lines are decoded.
 */
export class LineSplitter {
	private parts: Buffer[] = [];
	private size = 0;

	/** @param maxLine the longest line accepted, in bytes, its `\n` included */
	constructor(public maxLine = DEFAULT_MAX_PAYLOAD + LINE_SLACK) {}

	/** The complete lines that `chunk` ends, without their `\n`. Throws
	 * ProtocolError once a line grows past `maxLine`. */
	push(chunk: Buffer): string[] {
		const lines: string[] = [];
		let from = 0;
		for (;;) {
			const nl = chunk.indexOf(0x0a, from);
			if (nl < 0) break;
			const piece = chunk.subarray(from, nl);
			if (this.size + piece.length + 1 > this.maxLine) this.tooLong(this.size + piece.length + 1);
			if (this.size === 0) {
				lines.push(piece.toString("utf8"));
			} else {
				this.parts.push(piece);
				lines.push(Buffer.concat(this.parts, this.size + piece.length).toString("utf8"));
				this.parts = [];
				this.size = 0;
			}
			from = nl + 1;
		}
		if (from < chunk.length) {
			const rest = chunk.subarray(from);
			if (this.size + rest.length >= this.maxLine) this.tooLong(this.size + rest.length);
			// A copy: the stream may reuse the chunk's memory.
			this.parts.push(Buffer.from(rest));
			this.size += rest.length;
		}
		return lines;
	}

	/** Bytes held of a line not yet ended. */
	get pending(): number {
		return this.size;
	}

	private tooLong(n: number): never {
		this.parts = [];
		this.size = 0;
		throw new ProtocolError(`the engine sent a line of more than ${n - 1} bytes (the most is ${this.maxLine})`);
	}
}
