/**
 * cairn's TypeScript SDK: durable workflows written as async functions, run
 * by cairn's engine (`cairn-worker`), which this package starts beside the
 * Node process and speaks to over local sockets (docs/protocol.md); and a
 * client of the HTTP API for programs that start, signal and read runs.
 *
 *     import { Worker } from "cairn-sdk";
 *
 *     const worker = new Worker();
 *     worker.workflow("ts.hello", async (ctx, input: { name: string }) => {
 *       const greeting = await ctx.step("greet", () => `hello ${input.name}`);
 *       await ctx.sleep(1000);
 *       return { greeting };
 *     });
 *     await worker.run();
 *
 * @packageDocumentation
 */
export { Worker, WorkerOptions, WorkflowFunction, WorkflowOptions } from "./worker";
export {
	ChildResult,
	ChildrenWaitOptions,
	Context,
	ContinueAsNew,
	NameOptions,
	RunId,
	StepFunction,
	WaitOptions,
} from "./context";
export { RetryPolicy, RunRetryPolicy } from "./policy";
export { Client, ClientOptions, EnqueueOptions, Enqueued, ResultOptions, Run, RunStatus } from "./client";
export {
	CairnError,
	CallFailedError,
	CancelledError,
	ChildFailedError,
	EngineNotFoundError,
	HttpError,
	InvalidArgumentError,
	NondeterminismError,
	NonRetryableError,
	ProtocolError,
	RetryRunError,
	RunFailedError,
	StepFailedError,
	StoppedError,
	WaitTimeoutError,
} from "./errors";
export { VERSION } from "./version";
