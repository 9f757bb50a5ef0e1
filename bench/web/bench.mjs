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

const WARMUP = 3;
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
console.log(JSON.stringify({ node: process.version, onnxruntime_web: ort.env.versions.web, results }));
