/**
 * One connection to the engine (a socket of the socket pair given to it as
 * a file descriptor): it cuts what arrives into messages, pairs each reply
 * with the request waiting for it (replies come in the order of the
 * requests, docs/protocol.md, Executions), and hands `run` messages to
 * whoever serves the lane. When the socket closes, every request still
 * waiting gets a `stop` reply with reason `gone`.
 *
 * @module
 */
import { ProtocolError } from "./errors";
import { DEFAULT_MAX_PAYLOAD, Incoming, LINE_SLACK, LineSplitter, decode, encode } from "./wire";

/** The reply every waiting request gets once the engine is gone. */
export const GONE: Incoming = { t: "stop", reason: "gone", message: "the engine is gone" };

/** The stream a lane reads and writes: a Node socket. */
export interface LaneStream {
	on(event: string, listener: (...args: any[]) => void): unknown;
	write(data: string): boolean;
	destroy(): void;
}

export class Lane {
	/** The largest payload the engine takes (`welcome`'s `max_payload`). */
	maxPayload = DEFAULT_MAX_PAYLOAD;
	private readonly splitter = new LineSplitter();
	private waiters: Array<(reply: Incoming) => void> = [];
	private closedFlag = false;
	/** Called once when the lane closes: the worker ends the lane's execution. */
	onClose?: () => void;

	/**
	 * @param stream the socket
	 * @param onMessage gets each message that is no reply (`run`, `welcome`, `refused`)
	 * @param onBroken gets a ProtocolError when the engine sends what the protocol forbids
	 */
	constructor(
		private readonly stream: LaneStream,
		private readonly onMessage: (msg: Incoming) => void,
		private readonly onBroken: (err: Error) => void,
	) {
		stream.on("data", (chunk: Buffer) => this.receive(chunk));
		stream.on("error", () => this.close());
		stream.on("close", () => this.close());
		stream.on("end", () => this.close());
	}

	/** Sets `max_payload` from `welcome`: lines may be that long plus 64 KiB. */
	setMaxPayload(bytes: number): void {
		this.maxPayload = bytes;
		this.splitter.maxLine = bytes + LINE_SLACK;
	}

	get closed(): boolean {
		return this.closedFlag;
	}

	/** Sends a message that gets no reply (`hello`, `return`, `fail`, `step_result`). */
	send(msg: Record<string, unknown> | string): void {
		const line = typeof msg === "string" ? msg : encode(msg, this.maxPayload + LINE_SLACK);
		if (!this.closedFlag) this.stream.write(line);
	}

	/** Sends a request and resolves with its reply (GONE once the lane closes).
	 * Throws InvalidArgumentError for a message the engine would refuse. */
	request(msg: Record<string, unknown> | string): Promise<Incoming> {
		const line = typeof msg === "string" ? msg : encode(msg, this.maxPayload + LINE_SLACK);
		if (this.closedFlag) return Promise.resolve(GONE);
		return new Promise((resolve) => {
			this.waiters.push(resolve);
			this.stream.write(line);
		});
	}

	/** Closes the lane: waiting requests get GONE. */
	close(): void {
		if (this.closedFlag) return;
		this.closedFlag = true;
		const waiting = this.waiters;
		this.waiters = [];
		for (const w of waiting) w(GONE);
		this.stream.destroy();
		this.onClose?.();
	}

	private receive(chunk: Buffer): void {
		if (this.closedFlag) return;
		let lines: string[];
		try {
			lines = this.splitter.push(chunk);
		} catch (err) {
			return this.broken(err as Error);
		}
		for (const line of lines) {
			if (this.closedFlag) return;
			let msg: Incoming;
			try {
				msg = decode(line);
			} catch (err) {
				return this.broken(err as Error);
			}
			if (msg.t === "run" || msg.t === "welcome" || msg.t === "refused") {
				this.onMessage(msg);
				continue;
			}
			const waiter = this.waiters.shift();
			if (!waiter) return this.broken(new ProtocolError(`the engine sent a reply nobody asked for: ${line.slice(0, 200)}`));
			waiter(msg);
		}
	}

	private broken(err: Error): void {
		this.close();
		this.onBroken(err);
	}
}
