/**
 * Retry policies, as the SDK's API spells them and as the protocol does
 * (docs/protocol.md, Steps). A module of its own: the package's public
 * declarations reach it, and it names no Node type.
 *
 * @module
 */
import { InvalidArgumentError } from "./errors";

/**
 * A retry policy (docs/protocol.md, Steps). Absent fields take the engine's
 * defaults: 3 attempts, 1000 ms, ×2, at most 60000 ms, jitter 0.2, no
 * timeout.
 */
export interface RetryPolicy {
	/** Attempts in all, the first included (1: no retry). */
	maxAttempts?: number;
	/** The wait before the second attempt, in milliseconds. */
	initialMs?: number;
	/** How much each wait grows over the one before. */
	multiplier?: number;
	/** The longest wait, in milliseconds. */
	maxMs?: number;
	/** Each wait is drawn from ±jitter of its nominal (0.2: ±20%; negative: none). */
	jitter?: number;
	/** Bounds each attempt of a step, in milliseconds (steps only). */
	timeoutMs?: number;
}

/** The policy between attempts of a whole run: a retry policy without a timeout. */
export type RunRetryPolicy = Omit<RetryPolicy, "timeoutMs">;

const WIRE_FIELDS: Array<[keyof RetryPolicy, string]> = [
	["maxAttempts", "max_attempts"],
	["initialMs", "initial_ms"],
	["multiplier", "multiplier"],
	["maxMs", "max_ms"],
	["jitter", "jitter"],
	["timeoutMs", "timeout_ms"],
];

/**
 * A retry policy as the protocol spells it (snake_case), or undefined when
 * it sets nothing. Throws InvalidArgumentError for a field that is not a
 * finite number, naming it.
 */
export function wirePolicy(policy: RetryPolicy | undefined): Record<string, number> | undefined {
	if (!policy) return undefined;
	const out: Record<string, number> = {};
	let any = false;
	for (const [field, wire] of WIRE_FIELDS) {
		const v = policy[field];
		if (v === undefined) continue;
		if (typeof v !== "number" || !Number.isFinite(v))
			throw new InvalidArgumentError(`invalid retry policy: ${field} is ${String(v)}; expected a number`);
		out[wire] = v;
		any = true;
	}
	return any ? out : undefined;
}

