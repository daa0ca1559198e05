// An OTLP/HTTP trace receiver for tests/test_tracing.c and the bench's
// tracing phase: it decodes each POST /v1/traces with protobufjs and the
// official opentelemetry-proto definitions (the .proto files an npm package
// of the OpenTelemetry project ships), and writes one JSON line per span to
// the file --out names: ids in hex, name, times, attributes, status, events
// and the resource's attributes. It answers 200 with an empty
// ExportTraceServiceResponse, or with --discard only that (the bench's sink).
//
//   node receiver.js [--out FILE] [--discard] [--port N]
//
// Prints "listening PORT" on stdout once it accepts connections.
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');
const protobuf = require('protobufjs');

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const out = opt('--out');
const discard = args.includes('--discard');
const port = Number(opt('--port') || 0);

const base = path.dirname(require.resolve('@opentelemetry/otlp-proto-exporter-base/package.json'));
const protos = path.join(base, 'build', 'protos');
const root = new protobuf.Root();
root.resolvePath = (origin, target) => path.join(protos, target);
root.loadSync('opentelemetry/proto/collector/trace/v1/trace_service.proto');
const Request = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
const Response = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse');
const ok = Buffer.from(Response.encode(Response.create({})).finish());

const hex = (b) => (b && b.length ? Buffer.from(b).toString('hex') : '');
const value = (v) => {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.doubleValue !== undefined) return v.doubleValue;
  return null;
};
const attrs = (list) => Object.fromEntries((list || []).map((kv) => [kv.key, value(kv.value)]));
const nanos = (n) => (n === undefined || n === null ? 0 : Number(BigInt(n.toString())));

function lines(req) {
  const rows = [];
  for (const rs of req.resourceSpans || []) {
    const resource = attrs(rs.resource && rs.resource.attributes);
    for (const ss of rs.scopeSpans || []) {
      for (const s of ss.spans || []) {
        rows.push(JSON.stringify({
          trace_id: hex(s.traceId),
          span_id: hex(s.spanId),
          parent: hex(s.parentSpanId),
          name: s.name,
          kind: s.kind,
          start_ns: nanos(s.startTimeUnixNano),
          end_ns: nanos(s.endTimeUnixNano),
          attributes: attrs(s.attributes),
          status: { code: (s.status && s.status.code) || 0, message: (s.status && s.status.message) || '' },
          events: (s.events || []).map((e) => ({ name: e.name, attributes: attrs(e.attributes) })),
          scope: ss.scope ? ss.scope.name : '',
          resource,
        }));
      }
    }
  }
  return rows;
}

const server = http.createServer((q, r) => {
  const chunks = [];
  q.on('data', (c) => chunks.push(c));
  q.on('end', () => {
    if (q.method !== 'POST' || q.url !== '/v1/traces') {
      r.writeHead(404).end();
      return;
    }
    if (!discard) {
      let rows;
      try {
        rows = lines(Request.toObject(Request.decode(Buffer.concat(chunks)), { longs: String }));
      } catch (e) {
        process.stderr.write(`receiver: cannot decode: ${e.message}\n`);
        r.writeHead(400).end();
        return;
      }
      if (out && rows.length) fs.appendFileSync(out, rows.join('\n') + '\n');
    }
    r.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end(ok);
  });
});
server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
