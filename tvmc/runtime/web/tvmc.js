// tvmc.js -- the JavaScript runtime of tvmc's wasm32 artifacts: a dependency-free ES module for
// browsers and Node (18+). It states the executor contract of tvmc/runtime in JavaScript:
//
//   import { loadModel } from "./tvmc.js";
//   const model = await loadModel("./");           // a folder (URL or path) with mod.wasm, mod.params, metadata.json
//   model.inputs                                    // [{name, dtype, shape, nbytes}], likewise model.outputs
//   model.setInput("data", new Float32Array(...));  // a typed array of the input's dtype and size
//   model.setInput("ids", ids, [1, 9]);             // symbolic shapes: any shape in the compiled ranges
//   model.run();                                    // the whole graph: one call into the module
//   const y = model.getOutput(0);                   // a typed array (a copy), by index or name
//   const t = model.time({ runs: 20, warmup: 2 });  // {medianMs, meanMs, minMs, maxMs, runs}
//   model.destroy();
//
// mod.wasm imports nothing; it exports its memory, the kernels, the graph entry and the C API of
// tvmc_kernels.h, and its allocator (malloc, free). Memory management is explicit and all inside
// the module: loadModel copies the params blob into memory from the module's malloc, hands it to
// tvmc_model_create (which checks it against the description embedded in the module, keeps its
// own copy, allocates every storage buffer of the plan, 64-byte aligned) and frees the blob; one
// staging buffer per input and output is allocated once; destroy() frees everything. Addresses are
// byte offsets into the module's memory; views of it are made anew after every call, since a
// memory.grow (inside malloc) detaches earlier views. Errors are thrown as Error("tvmc: ...")
// with the C API's message (tvmc_last_error).
//
// Symbolic shapes (an artifact compiled for a range, metadata.json "size_vars"): model.sizeVars
// lists the variables [{name, range: "lo..hi"}], an input's `symbolicShape` gives each dimension
// as a number or the variable's expression, and its `shape` is the upper bound its staging buffer
// holds. setInput(name, array, shape) takes any shape in the ranges (the C API checks each
// dimension and names the input, the dimension, its value and the range); outputs come at their
// run-time shape (outputShape, getOutput).

const TYPED_ARRAYS = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array, bfloat16: Uint16Array, int64: BigInt64Array,
  int32: Int32Array, int16: Int16Array, int8: Int8Array, uint64: BigUint64Array, uint32: Uint32Array,
  uint16: Uint16Array, uint8: Uint8Array, bool: Uint8Array,
};
const TENSOR_INFO_BYTES = 24; // tvmc_tensor_info on wasm32: name, dtype, ndim, shape (4 bytes each), nbytes (u64 at 16)

const MAX_METADATA_BYTES = 16 << 20; // as tvmc/package.py: metadata.json is read first, with this bound

/** The bytes of `name` in `base`: at most `limit` bytes, else an Error naming the file (a file:
 * URL must be a regular file, never a FIFO to wait on; an HTTP body is read with the bound). */
async function readFile(base, name, limit) {
  const url = new URL(name, base);
  const tooLarge = (n) => new Error(`tvmc: ${url}: ${n} bytes, more than the ${limit} expected`);
  if (url.protocol === "file:") {
    const fs = await import("node:fs");
    let handle;
    try {
      handle = await fs.promises.open(url, fs.constants.O_RDONLY | (fs.constants.O_NONBLOCK || 0));
    } catch (e) {
      throw new Error(`tvmc: ${url}: cannot open (${e.code || e.message})`);
    }
    try {
      const st = await handle.stat();
      if (!st.isFile()) throw new Error(`tvmc: ${url}: not a regular file`);
      if (st.size > limit) throw tooLarge(st.size);
      const data = new Uint8Array(st.size);
      let done = 0;
      while (done < data.length) {
        const { bytesRead } = await handle.read(data, done, data.length - done, done);
        if (bytesRead === 0) throw new Error(`tvmc: ${url}: shorter than its size`);
        done += bytesRead;
      }
      return data;
    } finally {
      await handle.close();
    }
  }
  const response = await fetch(url);
  if (!response.ok) throw new Error(`tvmc: cannot fetch ${url}: HTTP ${response.status}`);
  const declared = Number(response.headers.get("content-length"));
  if (declared > limit) throw tooLarge(declared);
  const chunks = [];
  let total = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limit) {
      await reader.cancel();
      throw tooLarge(`more than ${limit}`);
    }
    chunks.push(value);
  }
  const data = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    data.set(c, at);
    at += c.byteLength;
  }
  return data;
}

async function sha256Hex(data) {
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", data));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** metadata.json's record of `name`: its size (a safe integer) and sha256 (64 hex digits). */
function recorded(metadata, name, url) {
  const size = metadata && metadata.member_bytes && metadata.member_bytes[name];
  const sha = metadata && metadata.member_sha256 && metadata.member_sha256[name];
  if (!Number.isSafeInteger(size) || size < 0 || typeof sha !== "string" || !/^[0-9a-f]{64}$/.test(sha)) {
    throw new Error(`tvmc: ${url}: metadata.json records no valid size and sha256 for ${name}`);
  }
  return { size, sha };
}

/** The bytes of member `name`: exactly the size metadata.json records, and its sha256 where the
 * engine has Web Crypto (Node, and browsers in a secure context). */
async function readMember(base, name, metadata) {
  const url = new URL(name, base);
  const { size, sha } = recorded(metadata, name, url);
  const data = await readFile(base, name, size);
  if (data.byteLength !== size) throw new Error(`tvmc: ${url}: ${data.byteLength} bytes, metadata.json records ${size}`);
  if (globalThis.crypto && globalThis.crypto.subtle && (await sha256Hex(data)) !== sha) {
    throw new Error(`tvmc: ${url}: differs from the one packaged (its sha256 is not the one metadata.json records)`);
  }
  return data;
}

function baseUrl(folder) {
  const text = String(folder).endsWith("/") ? String(folder) : `${folder}/`;
  if (/^[a-z][a-z0-9+.-]*:/i.test(text)) return new URL(text);
  if (typeof process !== "undefined" && process.versions && process.versions.node) {
    return new URL(text, `file://${process.cwd()}/`);
  }
  return new URL(text, globalThis.location.href);
}

/** The example input of the web page and the tests: element i of a float tensor is
 * ((i * 7919) % 1000) / 500 - 1 (rounded to the dtype), of an integer or bool tensor i % 2. */
export function exampleInput(dtype, count) {
  const Typed = TYPED_ARRAYS[dtype];
  if (!Typed) throw new Error(`tvmc: no typed array for dtype ${dtype}`);
  const out = new Typed(count);
  for (let i = 0; i < count; i++) {
    if (dtype.startsWith("float") && dtype !== "float16") out[i] = ((i * 7919) % 1000) / 500 - 1;
    else out[i] = Typed === BigInt64Array || Typed === BigUint64Array ? BigInt(i % 2) : i % 2;
  }
  return out;
}

export class Model {
  /** Use loadModel(); `exports` are the instance's exports, `params` the bytes of mod.params. */
  constructor(exports, params, metadata) {
    this.exports = exports;
    this.metadata = metadata;
    const blob = this.#malloc(params.byteLength);
    this.#bytes().set(params, blob);
    const out = this.#malloc(4);
    const rc = exports.tvmc_model_create(blob, params.byteLength, out);
    exports.free(blob);
    this.#check(rc);
    this.handle = this.#view().getUint32(out, true);
    exports.free(out);
    this.info = this.#malloc(TENSOR_INFO_BYTES);
    this.inputs = this.#tensors(exports.tvmc_model_num_inputs(this.handle), exports.tvmc_model_input_info);
    this.outputs = this.#tensors(exports.tvmc_model_num_outputs(this.handle), exports.tvmc_model_output_info);
    this.sizeVars = Array.isArray(metadata.size_vars) ? metadata.size_vars : [];
    for (const [list, described] of [[this.inputs, metadata.inputs], [this.outputs, metadata.outputs]]) {
      for (const t of list) {
        const meta = Array.isArray(described) ? described.find((m) => m && m.name === t.name) : undefined;
        if (meta && Array.isArray(meta.symbolic_shape)) t.symbolicShape = meta.symbolic_shape;
      }
    }
  }

  #bytes() { return new Uint8Array(this.exports.memory.buffer); }
  #view() { return new DataView(this.exports.memory.buffer); }

  #malloc(nbytes) {
    const addr = this.exports.malloc(Math.max(nbytes, 1));
    if (addr === 0) throw new Error(`tvmc: out of memory allocating ${nbytes} bytes in the wasm module`);
    return addr;
  }

  #string(addr) {
    const bytes = this.#bytes();
    let end = addr;
    while (bytes[end] !== 0) end++;
    return new TextDecoder().decode(bytes.subarray(addr, end));
  }

  #check(rc) {
    if (rc !== 0) throw new Error(`tvmc: ${this.#string(this.exports.tvmc_last_error())} (code ${rc})`);
  }

  #tensors(count, describe) {
    const list = [];
    for (let i = 0; i < count; i++) {
      this.#check(describe(this.handle, i, this.info));
      const view = this.#view();
      const [name, dtype, ndim, shapeAddr] = [0, 4, 8, 12].map((o) => view.getUint32(this.info + o, true));
      const shape = [];
      for (let d = 0; d < ndim; d++) shape.push(Number(view.getBigInt64(shapeAddr + 8 * d, true)));
      const nbytes = Number(view.getBigUint64(this.info + 16, true));
      list.push({ name: this.#string(name), dtype: this.#string(dtype), shape, nbytes,
                  nameAddr: name, dtypeAddr: dtype, shapeAddr, buffer: this.#malloc(nbytes) });
    }
    return list;
  }

  #find(list, key, what) {
    const t = typeof key === "number" ? list[key] : list.find((x) => x.name === key);
    if (!t) throw new Error(`tvmc: unknown ${what} '${key}'; the model's ${what}s are: ${list.map((x) => x.name).join(", ")}`);
    return t;
  }

  /** Copy `array` (a typed array of the input's dtype, row-major in `shape`) into input `name`.
   * `shape` defaults to the input's shape (its upper bound for an input of symbolic shape); an input
   * of symbolic shape takes any shape of its rank within the compiled ranges, which the C API checks. */
  setInput(name, array, shape = undefined) {
    const t = this.#find(this.inputs, name, "input");
    const Typed = TYPED_ARRAYS[t.dtype];
    const dims = shape === undefined ? t.shape : Array.from(shape, Number);
    if (dims.length !== t.shape.length || !dims.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new Error(`tvmc: input '${t.name}': expected a shape of ${t.shape.length} dimensions, got [${dims.join(",")}]`);
    }
    const nbytes = dims.reduce((a, d) => a * d, Typed.BYTES_PER_ELEMENT);
    if (!(array instanceof Typed) || array.byteLength !== nbytes) {
      throw new Error(`tvmc: input '${t.name}': expected a ${Typed.name} of ${nbytes} bytes ` +
                      `(${t.dtype} [${dims.join(",")}]), got ${array.constructor.name} of ${array.byteLength} bytes`);
    }
    // a shape past the bound (which the C API refuses) is handed over from buffers of its own
    const staged = nbytes > t.nbytes ? this.#malloc(nbytes) : t.buffer;
    const shapeAddr = shape === undefined ? t.shapeAddr : this.#malloc(8 * Math.max(dims.length, 1));
    try {
      this.#bytes().set(new Uint8Array(array.buffer, array.byteOffset, array.byteLength), staged);
      if (shapeAddr !== t.shapeAddr) {
        const view = this.#view();
        dims.forEach((d, k) => view.setBigInt64(shapeAddr + 8 * k, BigInt(d), true));
      }
      this.#check(this.exports.tvmc_model_set_input(this.handle, t.nameAddr, t.dtypeAddr, shapeAddr,
                                                    dims.length, staged, nbytes));
    } finally {
      if (staged !== t.buffer) this.exports.free(staged);
      if (shapeAddr !== t.shapeAddr) this.exports.free(shapeAddr);
    }
  }

  /** Run the whole graph once (tvmc_model_run: the module's graph entry). */
  run() { this.#check(this.exports.tvmc_model_run(this.handle)); }

  /** The shape output `key` (index or name) has after the last run: outputs[i].shape, or within that
   * bound for an output whose shape depends on the data (tvmc_model_output_shape). */
  outputShape(key) {
    const t = this.#find(this.outputs, key, "output");
    const addr = this.#malloc(8 * Math.max(t.shape.length, 1));
    try {
      this.#check(this.exports.tvmc_model_output_shape(this.handle, this.outputs.indexOf(t), addr, t.shape.length));
      const view = this.#view();
      return t.shape.map((_, d) => Number(view.getBigInt64(addr + 8 * d, true)));
    } finally {
      this.exports.free(addr);
    }
  }

  /** A copy of output `key` (index or name) as a typed array of its dtype, row-major in outputShape(key). */
  getOutput(key) {
    const t = this.#find(this.outputs, key, "output");
    const Typed = TYPED_ARRAYS[t.dtype];
    const nbytes = this.outputShape(key).reduce((a, d) => a * d, Typed.BYTES_PER_ELEMENT);
    this.#check(this.exports.tvmc_model_get_output(this.handle, this.outputs.indexOf(t), t.buffer, nbytes));
    return new Typed(this.exports.memory.buffer.slice(t.buffer, t.buffer + nbytes));
  }

  /** Time run(): `warmup` untimed runs, then `runs` timed ones (performance.now). Milliseconds. */
  time({ runs = 10, warmup = 1 } = {}) {
    for (let i = 0; i < warmup; i++) this.run();
    const samples = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      this.run();
      samples.push(performance.now() - t0);
    }
    const sorted = [...samples].sort((a, b) => a - b);
    const mid = sorted.length >> 1;
    return {
      medianMs: sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2,
      meanMs: samples.reduce((a, b) => a + b, 0) / samples.length,
      minMs: sorted[0], maxMs: sorted[sorted.length - 1], runs,
    };
  }

  /** Free the model and its staging buffers (the instance itself is garbage-collected). */
  destroy() {
    for (const t of [...this.inputs, ...this.outputs]) this.exports.free(t.buffer);
    this.exports.free(this.info);
    this.exports.tvmc_model_destroy(this.handle);
    this.handle = 0;
  }
}

/** Load mod.wasm, mod.params and metadata.json from `folder` (a URL or, in Node, a path; the web
 * output of `tvmc compile --output-format web`, or an unpacked mod.tar) and create the model.
 * Every read is bounded (docs/limits.md): metadata.json at most 16 MiB, then mod.wasm and
 * mod.params exactly the sizes it records, with their sha256 checked where Web Crypto exists.
 * Every failure is an Error whose message starts with "tvmc: " and names the file. */
export async function loadModel(folder) {
  const base = baseUrl(folder);
  const metaBytes = await readFile(base, "metadata.json", MAX_METADATA_BYTES);
  let metadata;
  try {
    metadata = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(metaBytes));
  } catch (e) {
    throw new Error(`tvmc: ${new URL("metadata.json", base)}: not valid JSON (${e.message})`);
  }
  if (metadata === null || typeof metadata !== "object" || Array.isArray(metadata)) {
    throw new Error(`tvmc: ${new URL("metadata.json", base)}: not a JSON object`);
  }
  const [wasm, params] = await Promise.all(["mod.wasm", "mod.params"].map((name) => readMember(base, name, metadata)));
  let instance;
  try {
    ({ instance } = await WebAssembly.instantiate(wasm, {}));
  } catch (e) {
    throw new Error(`tvmc: ${new URL("mod.wasm", base)}: this engine cannot run the module (${e.message})`);
  }
  const needed = ["memory", "malloc", "free", "tvmc_model_create", "tvmc_last_error", "tvmc_model_num_inputs",
                  "tvmc_model_num_outputs", "tvmc_model_input_info", "tvmc_model_output_info"];
  const missing = needed.filter((name) => !(name in instance.exports));
  if (missing.length) throw new Error(`tvmc: ${new URL("mod.wasm", base)}: not a tvmc module (no ${missing.join(", ")})`);
  try {
    return new Model(instance.exports, params, metadata);
  } catch (e) {
    if (e instanceof Error && e.message.startsWith("tvmc: ")) throw e;
    throw new Error(`tvmc: ${new URL("mod.wasm", base)}: the module failed while loading the model (${e.message})`);
  }
}
