/*
 * tvmc_kernels.h -- the C ABI of the kernels in a tvmc artifact (mod.tar), and the C API
 * that runs the whole model (RUNNING THE MODEL FROM C below).
 *
 * A mod.tar holds:
 *   mod.so          shared library with one exported C function per fused kernel
 *   mod.json        the graph, in TVM's graph-executor JSON schema
 *   mod.params      the constants (weights), in safetensors layout
 *   metadata.json   tvmc version, target, input/output names, shapes and dtypes,
 *                   and "kernel_abi_version" (must equal TVMC_KERNEL_ABI_VERSION below)
 *   tvmc_kernels.h  this file
 *
 * KERNELS
 *
 *   Each node of mod.json with "op": "tvm_op" names a kernel in attrs.func_name.
 *   The kernel has the signature
 *
 *       void <func_name>(void *arg0, void *arg1, ..., void *argN);
 *
 *   with the node's inputs first, in the order of the node's "inputs" list, then its one
 *   output (attrs.num_inputs inputs, attrs.num_outputs == 1). Every argument points to a
 *   contiguous row-major buffer of that tensor's dtype (attrs.dltype in mod.json), whose
 *   start is 64-byte aligned (TVMC_BUFFER_ALIGNMENT). Arguments never alias each other.
 *   A kernel returns nothing and reports no errors: shapes are fixed at compile time.
 *
 *   Kernels may be called one after another from any thread, but not concurrently on
 *   the same buffers. Loops marked parallel run inside the kernel on libgomp threads
 *   (mod.so needs libgomp.so.1); set the thread count with OMP_NUM_THREADS or
 *   omp_set_num_threads() from the calling thread.
 *
 * RUNNING THE MODEL FROM C (no Python needed)
 *
 *   mod.so of a CPU target contains a small C API (tvmc/runtime/tvmc_runtime.c, compiled into
 *   it): link against mod.so (or dlopen it), then
 *
 *       tvmc_model *m;
 *       if (tvmc_model_create_from_file("mod.params", &m) != TVMC_OK)
 *           fprintf(stderr, "%s\n", tvmc_last_error());
 *       tvmc_tensor_info in;
 *       tvmc_model_input_info(m, 0, &in);              name, dtype, shape, size of input 0
 *       tvmc_model_set_input(m, in.name, "float32", shape, ndim, data, nbytes);
 *       tvmc_model_run(m);
 *       tvmc_model_output_shape(m, 0, shape, ndim);     the shape output 0 has after this run
 *       tvmc_model_get_output(m, 0, out, out_nbytes);
 *       tvmc_model_destroy(m);
 *
 *   The API checks everything it is given against the module description the library was
 *   compiled for (the symbol tvmc_module_description, JSON: storage plan, entries, inputs,
 *   outputs, params): the params blob (mod.params, safetensors) must hold every param with
 *   its dtype, shape and byte size, an input must have the dtype, shape and byte size of the
 *   description, an output buffer its byte size. mod.json is not read: the description is the
 *   plan the kernels were compiled for. Every function returns TVMC_OK or an error code;
 *   tvmc_last_error() then holds one line saying what is wrong (the last error of the process:
 *   call the API from one thread at a time). A model may be run any number of times.
 *
 *   A complete program on this API ships with tvmc: tvmc_run (tvmc/runtime/tvmc_run.c; build it
 *   for the artifact's target with `tvmc build-runner mod.tar -o tvmc_run`): .npy inputs and
 *   outputs, a timing loop.
 *
 * WEBASSEMBLY (wasm32 targets: mod.wasm instead of mod.so)
 *
 *   mod.wasm imports nothing and exports its linear memory ("memory"), every kernel, tvmc_graph_run
 *   and tvmc_graph_init, tvmc_module_description (the address of the description; the same bytes
 *   are the module's custom section "tvmc_module_description"), all of the C API above, and the
 *   module's allocator, wasi-libc's malloc and free. Pointers are 32-bit byte offsets into that
 *   memory, size_t is 32 bits, tvmc_tensor_info is 24 bytes (name, dtype, ndim, shape at 0, 4, 8,
 *   12; nbytes at 16).
 *   Memory management is explicit: the host allocates what it hands to the API with the exported
 *   malloc (the params blob, input data, output buffers, the out pointer of tvmc_model_create),
 *   copies bytes in and out of the memory, and frees them with free; tvmc_model_create allocates
 *   the storage plan inside the module (storage_bytes of the description, 64-byte aligned) and
 *   kernels that need a workspace malloc and free it during the call; tvmc_model_destroy frees the
 *   model. The memory grows (memory.grow) when malloc needs more: views of it taken before a call
 *   may be detached after it. Parallel loops run serially (one thread, no imports);
 *   tvmc_model_create_from_file reports TVMC_ERR_IO (no file system). tvmc/runtime/web/tvmc.js
 *   (browsers, Node) and tvmc/runtime/wasm.py (wasmtime) are hosts that follow these rules.
 *
 * RUNNING THE KERNELS BY HAND
 *
 *   1. Read mod.json. For entry e (node_row_ptr[node] + output index):
 *        attrs.shape[1][e]       its shape
 *        attrs.dltype[1][e]      its dtype ("float32", "int64", ...)
 *        attrs.storage_id[1][e]  the storage buffer it lives in
 *      (attrs values are TVM's tagged lists, e.g. ["list_int", [0, 1, 2]].)
 *   2. Allocate one buffer per storage id, 64-byte aligned (aligned_alloc), of
 *      storage_bytes[sid] bytes, where "storage_bytes" is a top-level list of mod.json.
 *      Several entries may share a storage id: the plan already accounts for lifetimes.
 *   3. Copy the params: mod.params is a safetensors file, i.e. an 8-byte little-endian
 *      header length H, then H bytes of JSON {name: {"dtype", "shape",
 *      "data_offsets": [begin, end]}, ...}, then the data; offsets count from the end of
 *      the header. Each "null" node of mod.json whose name is in that header gets those
 *      bytes copied into its storage buffer. Then call, once, every "tvm_op" node whose attrs
 *      have "load_time": "1" (as in step 5; they take only params, e.g. Winograd weight
 *      transforms; ABI version 5): their outputs keep their storage for every run.
 *   4. Copy each input (metadata.json "inputs", or the "null" nodes listed in arg_nodes
 *      that are not params) into its storage buffer.
 *   5. dlopen("mod.so"), and for each "tvm_op" node in node order that is not a load-time
 *      node, dlsym(func_name) and call it with the storage pointers of its input entries, then
 *      its output entry.
 *      A node whose func_name is "__nop" is an in-place view: skip it.
 *      A "tvmc_loop" node (a Loop whose trip count or condition is known only at run time;
 *      ABI version 4) is run, not called: its inputs are the trip count M (int64 scalar), the
 *      condition (bool, one byte), the initial carried values, then captured tensors; its
 *      attrs list body_nodes [begin, end) (nodes after it, skipped in node order and run as
 *      its body), body_inputs (iteration, condition, carried values) and body_outputs
 *      (condition, carried values). While i < M and cond: store i and cond into body_inputs,
 *      run the body's nodes, take the body's condition, copy its carried outputs to the
 *      carried inputs; then copy carried value output_index[j] into the loop's output j.
 *      Or, instead of step 5: build a table `void *entries[]` with the storage pointer of
 *      every entry e (entries[e]) and make one call, tvmc_graph_run(entries): the library's
 *      generated graph entry calls every kernel in node order and runs the loops (after one
 *      call of tvmc_graph_init(entries) once the params are in: the load-time nodes).
 *   6. Read the outputs from the storage buffers of the entries listed in "heads". When mod.json
 *      has "output_shapes", a head with a non-null item there has a shape known only at run
 *      time: attrs.shape is its bound, the item names the entry of an int64[ndim] tensor that
 *      holds the run-time shape after the run, and the data is the leading corner of the bound
 *      (rows of the bound's strides). Version 3 of this ABI added these run-time shapes.
 */
#ifndef TVMC_KERNELS_H_
#define TVMC_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this ABI; metadata.json "kernel_abi_version" carries the same number. */
#define TVMC_KERNEL_ABI_VERSION 5

/* Alignment in bytes of every buffer passed to a kernel. */
#define TVMC_BUFFER_ALIGNMENT 64

/* The graph entry: runs the whole model; entries[e] points to the buffer of data entry e. */
void tvmc_graph_run(void *const *entries);
/* The load-time entry: runs the load-time kernels (mod.json nodes with attrs "load_time"), once,
 * after the params are copied in and before the first tvmc_graph_run (tvmc_model_create does). */
void tvmc_graph_init(void *const *entries);

/* The module description (NUL-terminated JSON) the library was compiled for; see
 * tvmc/codegen/description.py for its fields. */
extern const char tvmc_module_description[];

/* ---- C API ---------------------------------------------------------------------------- */

/* Return codes. */
#define TVMC_OK 0
#define TVMC_ERR_ARGUMENT 1    /* a NULL pointer, an unknown input name, an index out of range */
#define TVMC_ERR_PARAMS 2      /* the params blob is not safetensors or does not match the description */
#define TVMC_ERR_INPUT 3       /* an input's dtype, shape or byte size differs from the description */
#define TVMC_ERR_OUTPUT 4      /* an output buffer's byte size differs from the output's, or its
                                  run-time shape breaks its bound (tvmc_model_output_shape) */
#define TVMC_ERR_MEMORY 5      /* an allocation failed */
#define TVMC_ERR_IO 6          /* a file cannot be read (or the build has no file system) */
#define TVMC_ERR_DESCRIPTION 7 /* the embedded description is malformed (a damaged library) */

/* A model: its storage buffers (64-byte aligned), params copied in, inputs and outputs. */
typedef struct tvmc_model tvmc_model;

/* An input or output: pointers stay valid until tvmc_model_destroy. */
typedef struct {
  const char *name;     /* the ONNX graph input / output name (UTF-8) */
  const char *dtype;    /* "float32", "int64", "int32", "bool", ... */
  int32_t ndim;
  const int64_t *shape; /* ndim dimensions, row-major */
  uint64_t nbytes;      /* bytes of the tensor */
} tvmc_tensor_info;

/* Create a model from the params blob in memory (the bytes of mod.params; NULL and 0 for a
 * model without params). The blob is copied: it may be freed after the call. */
int tvmc_model_create(const void *params, size_t params_size, tvmc_model **out);
/* Create a model from the mod.params file at params_path. */
int tvmc_model_create_from_file(const char *params_path, tvmc_model **out);
/* Free a model and everything it allocated (NULL is ignored). */
void tvmc_model_destroy(tvmc_model *model);

int32_t tvmc_model_num_inputs(const tvmc_model *model);
int32_t tvmc_model_num_outputs(const tvmc_model *model);
/* Describe input / output `index` (0-based, in the order of metadata.json). */
int tvmc_model_input_info(const tvmc_model *model, int32_t index, tvmc_tensor_info *info);
int tvmc_model_output_info(const tvmc_model *model, int32_t index, tvmc_tensor_info *info);

/* Copy `nbytes` bytes of `data` into input `name`; dtype, shape and nbytes must be the input's. */
int tvmc_model_set_input(tvmc_model *model, const char *name, const char *dtype, const int64_t *shape,
                         int32_t ndim, const void *data, size_t nbytes);
/* Run the whole model once (the kernels' parallel loops use OMP_NUM_THREADS threads). */
int tvmc_model_run(tvmc_model *model);
/* The table of data entry pointers that tvmc_model_run hands to tvmc_graph_run (entries[e] is the
 * buffer of entry e, see RUNNING THE KERNELS BY HAND): for calling kernels one by one, e.g. to time
 * each. Valid until tvmc_model_destroy; NULL for a NULL model. */
void *const *tvmc_model_entries(const tvmc_model *model);
/* The shape output `index` has after the last tvmc_model_run, into shape[0..ndim) (ndim must be
 * the output's). An output whose shape depends on the data (NonZero, Unique, ... in the model)
 * has a bound, the shape tvmc_model_output_info gives, and a run-time shape within it; every other
 * output's run-time shape is its shape. (Since ABI version 3.) A run-time shape outside the bound
 * (the inputs break a range stated by `tvmc compile --value-range`, which sized the bound of a
 * Range, Expand or ConstantOfShape) is never truncated: this function and tvmc_model_get_output
 * return TVMC_ERR_OUTPUT, and tvmc_last_error() names the output, its run-time shape and bound. */
int tvmc_model_output_shape(const tvmc_model *model, int32_t index, int64_t *shape, int32_t ndim);
/* Copy output `index`, with its run-time shape (row-major), into `data`; nbytes must be its size in
 * bytes at that shape (tvmc_model_output_info's nbytes for an output without a run-time shape). */
int tvmc_model_get_output(const tvmc_model *model, int32_t index, void *data, size_t nbytes);
/* One line describing the last error (empty when none occurred yet). */
const char *tvmc_last_error(void);

/* A kernel with one input and one output, e.g. void fused_nn_relu(void *x, void *y). */
typedef void (*tvmc_kernel1_t)(void *in0, void *out);
/* A kernel with two inputs, e.g. conv2d(data, weight) -> out. */
typedef void (*tvmc_kernel2_t)(void *in0, void *in1, void *out);
/* A kernel with three inputs, e.g. conv2d(data, weight, bias) -> out. */
typedef void (*tvmc_kernel3_t)(void *in0, void *in1, void *in2, void *out);

#ifdef __cplusplus
}
#endif

#endif /* TVMC_KERNELS_H_ */
