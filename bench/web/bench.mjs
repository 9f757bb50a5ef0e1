// tvmc's wasm32 artifacts (tvmc.js) beside onnxruntime-web (wasm backend: SIMD, one thread, graph
// optimization 'all') in one Node process: for each model of a manifest written by bench/web_bench.py,
// both runtimes get the same inputs, run WARMUP untimed runs, then `repeat` timed runs each
// (interleaved: one run of each tvmc build, one onnxruntime-web run, ...), and report medians in ms and the
// outputs (to check that both compute the same). Prints one JSON document.
//
//   node [--experimental-wasm-relaxed-simd] bench/web/bench.mjs MANIFEST.json
//
// MANIFEST: {"repeat": N, "models": [{"name", "site" (a web output folder), "onnx" (model path),
//            "inputs": [{"name", "dtype", "shape", "file" (raw little-endian data)}],
//            "sites" (optional: {label: web output folder}, several tvmc builds timed in the same
//            interleaved rounds; their medians and outputs come back under `sites`)}]}
import { readFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";
import * as ort from "onnxruntime-web";

// untimed runs first: V8 starts each wasm function in its baseline compiler (Liftoff) and
// compiles the hot ones with TurboFan in the background; with 3 the medians of onnxruntime-web's
// large module still caught baseline code in some runs (resnet_style_64 int8: 2.0 to 6.6 ms)
const WARMUP = 10;
const TYPED = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array, uint8: Uint8Array,
  int8: Int8Array };

const manifest = JSON.parse(await readFile(process.argv[2], "utf8"));
ort.env.wasm.numThreads = 1;
ort.env.logLevel = "error";
const { loadModel } = await import(pathToFileURL(new URL("../../tvmc/runtime/web/tvmc.js", import.meta.url).pathname));

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[(s.length >> 1) - 1] + s[s.length >> 1]) / 2;
};
const timed = async (fn) => {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
};

// Does this engine compute i32x4.relaxed_dot_i8x16_i7x16_add_s as the relaxed-SIMD proposal says
// (lane i: c[i] + the sum of a[4i + j] b[4i + j], b in [0, 127], where no engine may differ)?
// A module of one function: v128 at 48 = relaxed_dot(v128 at 0, v128 at 16, v128 at 32).
// null: the engine refuses relaxed SIMD; else {ok, got, expected}.
const probeRelaxedDot = async () => {
  const bytes = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 3, 2, 1, 0, 5, 3, 1, 0, 1, 7, 13, 2,
    3, 114, 117, 110, 0, 0, 3, 109, 101, 109, 2, 0, 10, 31, 1, 29, 0, 65, 48, 65, 0, 253, 0, 4, 0, 65, 16, 253, 0, 4,
    0, 65, 32, 253, 0, 4, 0, 253, 147, 2, 253, 11, 4, 0, 11]);
  let instance;
  try {
    ({ instance } = await WebAssembly.instantiate(bytes));
  } catch {
    return null;
  }
  const buf = instance.exports.mem.buffer;
  const a = [-128, 127, -5, 100, 3, -77, 60, -1, 127, 127, -128, -128, 9, 8, 7, 6];
  const b = [127, 127, 1, 0, 5, 9, 100, 127, 127, 127, 127, 127, 0, 1, 2, 3];
  const c = [1000, -7, 0, 5];
  new Int8Array(buf, 0, 16).set(a);
  new Int8Array(buf, 16, 16).set(b);
  new Int32Array(buf, 32, 4).set(c);
  instance.exports.run();
  const got = Array.from(new Int32Array(buf, 48, 4));
  const expected = c.map((ci, l) => ci + [0, 1, 2, 3].reduce((s, j) => s + a[4 * l + j] * b[4 * l + j], 0));
  return { ok: got.every((g, l) => g === expected[l]), got, expected };
};

const results = [];
for (const m of manifest.models) {
  const inputs = {};
  for (const i of m.inputs) {
    const bytes = await readFile(i.file);
    inputs[i.name] = { ...i, data: new TYPED[i.dtype](bytes.buffer, bytes.byteOffset, bytes.byteLength / TYPED[i.dtype].BYTES_PER_ELEMENT) };
  }
  const sites = m.sites ?? { tvmc: m.site };
  const models = {};
  for (const [label, site] of Object.entries(sites)) {
    models[label] = await loadModel(pathToFileURL(`${site}/`));
    for (const i of Object.values(inputs)) models[label].setInput(i.name, i.data);
  }
  const session = await ort.InferenceSession.create(m.onnx, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  const feeds = Object.fromEntries(Object.values(inputs).map((i) => [i.name, new ort.Tensor(i.dtype, i.data, i.shape)]));
  let ortOut;
  for (let k = 0; k < WARMUP; k++) {
    for (const model of Object.values(models)) model.run();
    ortOut = await session.run(feeds);
  }
  const ms = Object.fromEntries(Object.keys(models).map((label) => [label, []]));
  const ortMs = [];
  for (let k = 0; k < manifest.repeat; k++) {
    for (const [label, model] of Object.entries(models)) ms[label].push(await timed(() => model.run()));
    ortMs.push(await timed(async () => { ortOut = await session.run(feeds); }));
  }
  const bySite = {};
  for (const [label, model] of Object.entries(models)) {
    const outputs = {};
    model.outputs.forEach((t, k) => { outputs[t.name] = Array.from(model.getOutput(k), Number); });
    bySite[label] = { ms: median(ms[label]), outputs };
    model.destroy();
  }
  const ortOutputs = {};
  for (const [name, t] of Object.entries(ortOut)) ortOutputs[name] = Array.from(t.data, Number);
  const first = Object.values(bySite)[0];
  results.push({ name: m.name, tvmc_ms: first.ms, ort_web_ms: median(ortMs), outputs: first.outputs,
    ort_outputs: ortOutputs, sites: bySite });
  await session.release();
}
console.log(JSON.stringify({ node: process.version, v8: process.versions.v8, onnxruntime_web: ort.env.versions.web,
  warmup: WARMUP,
  relaxed_dot: await probeRelaxedDot(), results }));
