// Copied from the team's shared recipe (shared/tools/litellm-proxy-offline), unchanged below this line.
// Stand-in for Prisma's native `query-engine` binary (HTTP + GraphQL protocol), as spawned by
// prisma-client-py 0.15.  It runs Prisma's official WASM query engine 5.17.0 (npm package
// @prisma/query-engine-wasm, same engine commit 393aa359...) through the official
// @prisma/adapter-pg driver adapter and node-postgres, and translates the GraphQL protocol
// that prisma-client-py speaks into the JSON protocol that the WASM build understands.
// Everything comes from the npm registry; nothing is downloaded at run time.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { parse, Kind } from 'graphql';
import pg from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { parse as pgArrayParse } from 'postgres-array';
import { bindAdapter } from '@prisma/driver-adapter-utils';
import * as runtime from '@prisma/query-engine-wasm/postgresql/query_engine_bg.js';

const ENGINE_HASH = '393aa359c9ad4a4bb28630fb5613f9c281cde053';
const args = process.argv.slice(2);
if (args.includes('--version') || args.includes('-v')) {
  process.stdout.write(`query-engine ${ENGINE_HASH}\n`);
  process.exit(0);
}
const portIdx = args.findIndex((a) => a === '-p' || a === '--port');
const port = portIdx >= 0 ? Number(args[portIdx + 1]) : 4466;
const debug = !!process.env.QE_SHIM_DEBUG;
const log = (...a) => { if (debug) process.stderr.write('[qe-shim] ' + a.join(' ') + '\n'); };

// ---- datamodel + connection --------------------------------------------------------------
const dmlPath = process.env.PRISMA_DML_PATH;
if (!dmlPath) { console.error('PRISMA_DML_PATH not set'); process.exit(1); }
const datamodel = fs.readFileSync(dmlPath, 'utf8');
const modelNames = [...datamodel.matchAll(/^\s*(?:model|view)\s+(\w+)\s*\{/gm)].map((m) => m[1])
  .sort((a, b) => b.length - a.length);
// model -> field -> { type, list, rel } parsed from the datamodel, used to tag Json inputs.
const FIELDS = {};
{
  let cur = null;
  for (const line of datamodel.split('\n')) {
    const t = line.trim();
    const m = t.match(/^(model|view|enum|type)\s+(\w+)\s*\{/);
    if (m) { cur = (m[1] === 'model' || m[1] === 'view') ? (FIELDS[m[2]] = {}) : null; continue; }
    if (t.startsWith('}')) { cur = null; continue; }
    if (!cur || !t || t.startsWith('//') || t.startsWith('@@')) continue;
    const f = t.match(/^(\w+)\s+(\w+)(\[\])?(\?)?/);
    if (f) cur[f[1]] = { type: f[2], list: !!f[3] };
  }
  for (const fs_ of Object.values(FIELDS)) for (const f of Object.values(fs_)) if (FIELDS[f.type]) f.rel = f.type;
}

let dbUrl = process.env.DATABASE_URL;
if (process.env.OVERWRITE_DATASOURCES) {
  try {
    const ds = JSON.parse(process.env.OVERWRITE_DATASOURCES);
    if (Array.isArray(ds) && ds[0]?.url) dbUrl = ds[0].url;
  } catch (e) { /* ignore */ }
}
if (!dbUrl) { console.error('no DATABASE_URL'); process.exit(1); }
const u = new URL(dbUrl);
const q = u.searchParams;
const schema = q.get('schema') || undefined;
const poolMax = Number(q.get('connection_limit') || 10);
const pgOptions = q.get('options') || undefined;
for (const k of [...q.keys()]) q.delete(k); // strip Prisma/libpq-only params; pg gets a clean URL
const pool = new pg.Pool({ connectionString: u.toString(), max: poolMax, options: pgOptions });

// adapter-pg 5.17 rejects result columns of types it does not know (e.g. `name`, `name[]`,
// `"char"`, `regclass`) with UnsupportedNativeDataType, where the native engine returned text.
// Re-label such columns as text / text[] before the adapter sees them.
const KNOWN_OIDS = new Set([21, 23, 20, 700, 701, 16, 1082, 1083, 1266, 1114, 1184, 1700, 790, 114, 3802,
  2950, 26, 1042, 25, 1043, 1560, 1562, 869, 650, 142, 17, 1005, 1007, 1021, 1022, 1231, 791, 1000,
  1002, 1014, 1009, 1015, 1563, 1561, 1041, 651, 143, 1182, 1183, 1115, 199, 3807, 1001, 2951, 1016, 1028]);
const asText = (v) => (v === null || typeof v === 'string') ? v
  : (typeof v?.toPostgres === 'function' ? v.toPostgres() : (typeof v === 'object' ? JSON.stringify(v) : String(v)));
{
  const proto = Object.getPrototypeOf(PrismaPg.prototype);
  const performIO = proto.performIO;
  proto.performIO = async function (query) {
    const res = await performIO.call(this, query);
    if (!res.ok || !res.value || !Array.isArray(res.value.fields)) return res;
    const { fields, rows } = res.value;
    fields.forEach((f, i) => {
      if (KNOWN_OIDS.has(f.dataTypeID) || f.dataTypeID >= 10000) return;
      const sample = rows.find((r) => r[i] !== null)?.[i];
      const isArray = Array.isArray(sample) || (typeof sample === 'string' && sample.startsWith('{') && [1003, 1187, 1270, 1185].includes(f.dataTypeID))
        || [1003, 1187].includes(f.dataTypeID);
      for (const r of rows) {
        if (r[i] === null) continue;
        if (isArray) {
          const arr = Array.isArray(r[i]) ? r[i] : pgArrayParse(String(r[i]));
          r[i] = arr.map(asText);
        } else r[i] = asText(r[i]);
      }
      f.dataTypeID = isArray ? 1009 : 25;
    });
    return res;
  };
}
const adapter = bindAdapter(new PrismaPg(pool, schema ? { schema } : undefined));

// ---- WASM engine ------------------------------------------------------------------------
const require = createRequire(import.meta.url);
const wasmPath = path.join(path.dirname(require.resolve('@prisma/query-engine-wasm/package.json')),
  'postgresql', 'query_engine_bg.wasm');
const wasmModule = new WebAssembly.Module(fs.readFileSync(wasmPath));
const instance = new WebAssembly.Instance(wasmModule, { './query_engine_bg.js': runtime });
runtime.__wbg_set_wasm(instance.exports);
const engine = new runtime.QueryEngine(
  { datamodel, logLevel: process.env.QE_SHIM_LOG_LEVEL || 'error', logQueries: false },
  (line) => { if (debug) process.stderr.write('[engine] ' + line + '\n'); },
  adapter,
);
const TRACE = JSON.stringify({ traceparent: '00-10-10-00' });
await engine.connect(TRACE);

// ---- GraphQL -> JSON protocol ------------------------------------------------------------
const ACTIONS = ['findUnique', 'findFirst', 'findMany', 'createOne', 'createMany', 'updateOne',
  'updateMany', 'deleteOne', 'deleteMany', 'upsertOne', 'aggregate', 'groupBy'];

function value(node) {
  switch (node.kind) {
    case Kind.STRING: return node.value;
    case Kind.INT: {
      const n = Number(node.value);
      return Number.isSafeInteger(n) ? n : { $type: 'BigInt', value: node.value };
    }
    case Kind.FLOAT: return Number(node.value);
    case Kind.BOOLEAN: return node.value;
    case Kind.NULL: return null;
    case Kind.ENUM: return node.value;
    case Kind.LIST: return node.values.map(value);
    case Kind.OBJECT: return Object.fromEntries(node.fields.map((f) => [f.name.value, value(f.value)]));
    default: throw new Error('unsupported GraphQL value ' + node.kind);
  }
}
const argsOf = (field) => Object.fromEntries((field.arguments || []).map((a) => [a.name.value, value(a.value)]));
function selection(set) {
  const out = {};
  for (const f of set.selections) {
    if (f.kind !== Kind.FIELD) throw new Error('unsupported selection ' + f.kind);
    const hasArgs = f.arguments && f.arguments.length > 0;
    if (f.selectionSet || hasArgs) {
      const o = {};
      if (hasArgs) o.arguments = argsOf(f);
      o.selection = f.selectionSet ? selection(f.selectionSet) : { $scalars: true };
      out[f.name.value] = o;
    } else {
      out[f.name.value] = true;
    }
  }
  return out;
}
// --- Json input tagging: the JSON protocol stores a plain string in a Json column as a JSON
// string, whereas the GraphQL protocol parsed it.  Walk the arguments with the model's field
// types and wrap strings bound for Json fields as {$type:'Json', value}.
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const tagJson = (v) => (typeof v === 'string' ? { $type: 'Json', value: v } : Array.isArray(v) ? v.map(tagJson) : v);
const mapList = (v, fn) => (Array.isArray(v) ? v.map(fn) : fn(v));
const JSON_FILTER_JSON_KEYS = new Set(['equals', 'not', 'array_contains', 'array_starts_with', 'array_ends_with', 'gt', 'gte', 'lt', 'lte']);
function whereIn(model, w) {
  if (Array.isArray(w)) return w.map((x) => whereIn(model, x));
  if (!isObj(w) || !FIELDS[model]) return w;
  const out = {};
  for (const [k, v] of Object.entries(w)) {
    const f = FIELDS[model][k];
    if (k === 'AND' || k === 'OR' || k === 'NOT') out[k] = whereIn(model, v);
    else if (!f) out[k] = isObj(v) ? whereIn(model, v) : v; // compound unique inputs
    else if (f.rel) {
      if (isObj(v) && Object.keys(v).some((x) => ['is', 'isNot', 'some', 'every', 'none'].includes(x))) {
        out[k] = Object.fromEntries(Object.entries(v).map(([x, y]) => [x, whereIn(f.rel, y)]));
      } else out[k] = whereIn(f.rel, v);
    } else if (f.type === 'Json') {
      out[k] = isObj(v) ? Object.fromEntries(Object.entries(v).map(([x, y]) => [x, JSON_FILTER_JSON_KEYS.has(x) ? tagJson(y) : y])) : tagJson(v);
    } else out[k] = v;
  }
  return out;
}
function dataIn(model, d) {
  if (Array.isArray(d)) return d.map((x) => dataIn(model, x));
  if (!isObj(d) || !FIELDS[model]) return d;
  const out = {};
  for (const [k, v] of Object.entries(d)) {
    const f = FIELDS[model][k];
    if (!f) out[k] = v;
    else if (f.rel) out[k] = relWrite(f.rel, v);
    else if (f.type === 'Json') out[k] = isObj(v) && 'set' in v ? { ...v, set: tagJson(v.set) } : tagJson(v);
    else out[k] = v;
  }
  return out;
}
function relWrite(rm, v) {
  if (!isObj(v)) return v;
  const out = {};
  for (const [k, x] of Object.entries(v)) {
    switch (k) {
      case 'create': out[k] = dataIn(rm, x); break;
      case 'connect': case 'disconnect': case 'delete': case 'set': case 'deleteMany':
        out[k] = typeof x === 'boolean' ? x : whereIn(rm, x); break;
      case 'connectOrCreate': out[k] = mapList(x, (y) => ({ ...y, where: whereIn(rm, y.where), create: dataIn(rm, y.create) })); break;
      case 'update': case 'updateMany':
        out[k] = mapList(x, (y) => (isObj(y) && 'data' in y && ('where' in y || k === 'updateMany') ? { ...y, where: whereIn(rm, y.where), data: dataIn(rm, y.data) } : dataIn(rm, y)));
        break;
      case 'upsert':
        out[k] = mapList(x, (y) => ({ ...y, ...(y.where ? { where: whereIn(rm, y.where) } : {}), create: dataIn(rm, y.create), update: dataIn(rm, y.update) }));
        break;
      case 'createMany': out[k] = { ...x, data: dataIn(rm, x.data) }; break;
      default: out[k] = x;
    }
  }
  return out;
}
function fixArgs(model, a) {
  if (!model) return a;
  const o = { ...a };
  for (const k of ['where', 'cursor']) if (k in o) o[k] = whereIn(model, o[k]);
  for (const k of ['data', 'create', 'update']) if (k in o) o[k] = dataIn(model, o[k]);
  return o;
}
function fixSelection(model, sel) {
  if (!model || !FIELDS[model]) return sel;
  for (const [k, v] of Object.entries(sel)) {
    const f = FIELDS[model][k];
    if (isObj(v) && f && f.rel) {
      if (v.arguments) v.arguments = fixArgs(f.rel, v.arguments);
      if (v.selection) fixSelection(f.rel, v.selection);
    }
  }
  return sel;
}

function toJson(gql) {
  const doc = parse(gql);
  const op = doc.definitions[0];
  const root = op.selectionSet.selections[0];
  const name = root.name.value;
  const query = { arguments: argsOf(root), selection: root.selectionSet ? selection(root.selectionSet) : {} };
  if (name === 'executeRaw' || name === 'queryRaw') return { action: name, query };
  let orThrow = false;
  let rest = name;
  if (rest.endsWith('OrThrow')) { orThrow = true; rest = rest.slice(0, -'OrThrow'.length); }
  const action = ACTIONS.find((a) => rest.startsWith(a) && modelNames.includes(rest.slice(a.length)));
  if (!action) throw new Error('cannot map GraphQL field ' + name);
  const modelName = rest.slice(action.length);
  query.arguments = fixArgs(modelName, query.arguments);
  fixSelection(modelName, query.selection);
  return { modelName, action: orThrow ? action + 'OrThrow' : action, query };
}

function untag(v) {
  if (Array.isArray(v)) return v.map(untag);
  if (v && typeof v === 'object') {
    if (typeof v.$type === 'string' && 'value' in v) return v.value; // DateTime/BigInt/Decimal/Bytes/Json
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = untag(x);
    return o;
  }
  return v;
}
function toGqlResponse(resp) {
  if (resp.errors) return resp;
  if (resp.data && typeof resp.data === 'object') {
    const vals = Object.values(resp.data);
    return { data: { result: untag(vals.length === 1 ? vals[0] : resp.data) } };
  }
  return resp;
}

async function handleQuery(body, txId) {
  const req = JSON.parse(body);
  if (Array.isArray(req.batch)) {
    const jsonBatch = {
      batch: req.batch.map((b) => toJson(b.query)),
      transaction: req.transaction ? { isolationLevel: null } : null,
    };
    log('batch', JSON.stringify(jsonBatch).slice(0, 2000));
    const resp = JSON.parse(await engine.query(JSON.stringify(jsonBatch), TRACE, txId));
    if (resp.errors) return resp;
    const results = (resp.batchResult || []).map(toGqlResponse);
    const firstErr = results.find((r) => r.errors);
    if (firstErr) return { errors: firstErr.errors };
    return { batchResult: results };
  }
  const jq = toJson(req.query);
  log('query', JSON.stringify(jq).slice(0, 2000));
  const raw = await engine.query(JSON.stringify(jq), TRACE, txId);
  log('resp', raw.slice(0, 2000));
  return toGqlResponse(JSON.parse(raw));
}

// ---- HTTP server (same routes as the native binary engine) -------------------------------
const readBody = (req) => new Promise((res, rej) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => res(Buffer.concat(chunks).toString('utf8')));
  req.on('error', rej);
});
const send = (res, obj, status = 200) => {
  const s = typeof obj === 'string' ? obj : JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(s);
};
const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, 'http://x');
    const body = await readBody(req);
    if (req.method === 'GET' && url.pathname === '/status') return send(res, { status: 'ok' });
    if (url.pathname === '/metrics') return send(res, url.searchParams.get('format') === 'prometheus' ? '' : { counters: [], gauges: [], histograms: [] });
    if (req.method === 'POST' && url.pathname === '/') {
      return send(res, await handleQuery(body, req.headers['x-transaction-id'] || undefined));
    }
    let m;
    if (req.method === 'POST' && url.pathname === '/transaction/start') {
      return send(res, await engine.startTransaction(body || '{}', TRACE));
    }
    if (req.method === 'POST' && (m = url.pathname.match(/^\/transaction\/([^/]+)\/(commit|rollback)$/))) {
      const r = m[2] === 'commit' ? await engine.commitTransaction(m[1], TRACE) : await engine.rollbackTransaction(m[1], TRACE);
      return send(res, r || '{}');
    }
    send(res, { errors: [{ error: 'not found: ' + req.method + ' ' + url.pathname }] }, 404);
  } catch (e) {
    log('error', e && e.stack);
    send(res, { errors: [{ error: String(e && e.message || e), user_facing_error: { is_panic: false, message: String(e && e.message || e), meta: {} } }] });
  }
});
server.listen(port, '127.0.0.1', () => log('listening on', port));
const stop = async () => { server.close(); try { await engine.disconnect(TRACE); } catch (e) {} await pool.end().catch(() => {}); process.exit(0); };
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
