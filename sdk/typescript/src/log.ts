/**
 * The SDK's log lines, in the engine's format so that the two read as one
 * log on standard error: `ts=... level=... msg="..." key=value` (logfmt), or
 * one JSON object a line with `CAIRN_LOG_FORMAT=json`; `CAIRN_LOG_LEVEL`
 * (error, warn, info, debug) filters them as it filters the engine's.
 *
 * @module
 */

const LEVELS = ["error", "warn", "info", "debug"];

function logfmtValue(s: string): string {
	return s === "" || /[\s"=\\]/.test(s) ? JSON.stringify(s) : s;
}

/** One log line, built whole and written with one write. */
export function formatLine(level: string, msg: string, fields: Record<string, unknown>, json: boolean, now = new Date()): string {
	const ts = now.toISOString();
	if (json) {
		const o: Record<string, string> = { ts, level, msg };
		for (const [k, v] of Object.entries(fields)) o[k] = String(v);
		return JSON.stringify(o) + "\n";
	}
	let line = `ts=${ts} level=${level} msg=${JSON.stringify(msg)}`;
	for (const [k, v] of Object.entries(fields)) line += ` ${k}=${logfmtValue(String(v))}`;
	return line + "\n";
}

/** Writes a line to standard error when the level passes env's CAIRN_LOG_LEVEL. */
export function log(
	level: "error" | "warn" | "info" | "debug",
	msg: string,
	fields: Record<string, unknown> = {},
	env: Record<string, string | undefined> = process.env,
): void {
	const max = LEVELS.indexOf(env.CAIRN_LOG_LEVEL || "info");
	if (LEVELS.indexOf(level) > (max < 0 ? 2 : max)) return;
	process.stderr.write(formatLine(level, msg, { component: "sdk", ...fields }, env.CAIRN_LOG_FORMAT === "json"));
}
