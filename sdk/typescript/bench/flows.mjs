// The workflows `make bench` runs through the TypeScript SDK (tests/bench.c,
// phase sdk): the twins of workers/examples/bench_flows.c and the built-in
// noop.
//
//   ts.bench3  three journaled steps, each returning a small object;
//              returns {"steps": 3}.
//   ts.stamp   takes {"i": k} and, as its first instruction, writes
//              process.hrtime.bigint() (CLOCK_MONOTONIC, as the bench reads
//              it) into int64 slot k of the file named by $BENCH_STAMPS
//              (one pwrite into the file the bench has mapped); returns null.
//   ts.noop    returns its input.
//
// Run from the repository after make: node sdk/typescript/bench/flows.mjs
import { fstatSync, openSync, writeSync } from "node:fs";
import { Worker } from "../dist/index.js";

const worker = new Worker();

worker.workflow("ts.bench3", async (ctx) => {
  for (const [n, name] of ["one", "two", "three"].entries()) await ctx.step(name, () => ({ n }));
  return { steps: 3 };
});

// The stamps file: its descriptor and its slots, opened on first use.
let stamps;
function stampsFile() {
  if (stamps === undefined) {
    stamps = null;
    if (process.env.BENCH_STAMPS) {
      const fd = openSync(process.env.BENCH_STAMPS, "r+");
      stamps = { fd, slots: Math.floor(fstatSync(fd).size / 8) };
    }
  }
  return stamps;
}

worker.workflow("ts.stamp", async (ctx, input) => {
  const now = process.hrtime.bigint();
  const file = stampsFile();
  const i = input?.i;
  if (file && Number.isInteger(i) && i >= 0 && i < file.slots) {
    writeSync(file.fd, new BigInt64Array([now]), 0, 8, i * 8); // native order, as C's int64

  }
  return null;
});

worker.workflow("ts.noop", async (ctx, input) => input);

await worker.run();
