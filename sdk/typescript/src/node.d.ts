/*
 * The few parts of Node's standard library the SDK uses, declared here so
 * that `make` compiles it with Debian's tsc alone (Debian 12 has no
 * @types/node package). Compile-time only: declarations are not emitted,
 * and nothing public in the SDK's API names a type declared here, so a
 * project with or without @types/node type-checks against the package.
 */

interface NodeEmitter {
	on(event: string, listener: (...args: any[]) => void): this;
	once(event: string, listener: (...args: any[]) => void): this;
	off(event: string, listener: (...args: any[]) => void): this;
	removeAllListeners(event?: string): this;
	listenerCount(event: string): number;
}

interface NodeBuffer extends Uint8Array {
	toString(encoding?: string, start?: number, end?: number): string;
	subarray(start?: number, end?: number): NodeBuffer;
	indexOf(value: number, byteOffset?: number): number;
}

declare var Buffer: {
	from(data: string, encoding?: string): NodeBuffer;
	from(data: Uint8Array): NodeBuffer;
	concat(list: readonly Uint8Array[], totalLength?: number): NodeBuffer;
	byteLength(s: string, encoding?: string): number;
	isBuffer(x: unknown): x is NodeBuffer;
};
type Buffer = NodeBuffer;

interface NodeStream extends NodeEmitter {
	write(data: string | Uint8Array, cb?: (err?: Error | null) => void): boolean;
	end(data?: string | Uint8Array | (() => void)): void;
	destroy(err?: Error): void;
	setEncoding?(enc: string): void;
	readonly destroyed: boolean;
}

interface NodeTimer {
	unref(): this;
	ref(): this;
}
declare function setTimeout(fn: (...args: any[]) => void, ms?: number): NodeTimer;
declare function clearTimeout(t: NodeTimer | undefined): void;
declare function setInterval(fn: (...args: any[]) => void, ms?: number): NodeTimer;
declare function clearInterval(t: NodeTimer | undefined): void;
declare function setImmediate(fn: (...args: any[]) => void): unknown;

interface AbortSignal {
	readonly aborted: boolean;
	readonly reason: any;
	addEventListener(type: "abort", listener: () => void, opts?: { once?: boolean }): void;
	removeEventListener(type: "abort", listener: () => void): void;
}
declare var AbortSignal: { prototype: AbortSignal };
declare class AbortController {
	readonly signal: AbortSignal;
	abort(reason?: any): void;
}

declare var __dirname: string;

declare var process: NodeEmitter & {
	readonly env: Record<string, string | undefined>;
	readonly version: string;
	readonly pid: number;
	readonly platform: string;
	exitCode: number | undefined;
	exit(code?: number): never;
	kill(pid: number, signal?: string | number): boolean;
	readonly stderr: NodeStream;
	readonly stdout: NodeStream;
};

declare module "node:child_process" {
	interface ChildProcess extends NodeEmitter {
		readonly pid?: number;
		readonly stdio: Array<NodeStream | null>;
		readonly exitCode: number | null;
		readonly signalCode: string | null;
		kill(signal?: string): boolean;
	}
	interface SpawnOptions {
		stdio?: Array<"pipe" | "inherit" | "ignore">;
		env?: Record<string, string | undefined>;
		detached?: boolean;
	}
	function spawn(command: string, args: readonly string[], options: SpawnOptions): ChildProcess;
}

declare module "node:fs" {
	const constants: { X_OK: number };
	function accessSync(path: string, mode?: number): void;
	function statSync(path: string): { isFile(): boolean };
	function readFileSync(path: string, encoding: "utf8"): string;
}

declare module "node:path" {
	function join(...parts: string[]): string;
	function resolve(...parts: string[]): string;
	function dirname(p: string): string;
	function basename(p: string): string;
	const delimiter: string;
}

declare module "node:os" {
	const constants: { signals: Record<string, number> };
}

declare module "node:async_hooks" {
	class AsyncLocalStorage<T> {
		getStore(): T | undefined;
		run<R>(store: T, fn: () => R): R;
	}
}

declare module "node:http" {
	interface IncomingMessage extends NodeEmitter {
		readonly statusCode?: number;
		readonly headers: Record<string, string | string[] | undefined>;
		setEncoding(enc: string): void;
	}
	interface ClientRequest extends NodeStream {
		setTimeout(ms: number, cb?: () => void): this;
	}
	interface RequestOptions {
		method?: string;
		headers?: Record<string, string | number>;
		timeout?: number;
	}
	function request(url: URL, options: RequestOptions, cb: (res: IncomingMessage) => void): ClientRequest;
}

declare module "node:https" {
	import { RequestOptions, IncomingMessage, ClientRequest } from "node:http";
	function request(url: URL, options: RequestOptions, cb: (res: IncomingMessage) => void): ClientRequest;
}

declare class URL {
	constructor(input: string, base?: string | URL);
	readonly protocol: string;
	pathname: string;
	search: string;
	readonly searchParams: { set(name: string, value: string): void };
	toString(): string;
}
