/*
 * tvmc_kernels.h -- the C ABI of the kernels in a tvmc artifact (mod.tar).
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
 *      bytes copied into its storage buffer.
 *   4. Copy each input (metadata.json "inputs", or the "null" nodes listed in arg_nodes
 *      that are not params) into its storage buffer.
 *   5. dlopen("mod.so"), and for each "tvm_op" node in node order, dlsym(func_name) and
 *      call it with the storage pointers of its input entries, then its output entry.
 *      A node whose func_name is "__nop" is an in-place view: skip it.
 *      Or, instead of step 5: build a table `void *entries[]` with the storage pointer of
 *      every entry e (entries[e]) and make one call, tvmc_graph_run(entries): the library's
 *      generated graph entry calls every kernel in node order.
 *   6. Read the outputs from the storage buffers of the entries listed in "heads".
 */
#ifndef TVMC_KERNELS_H_
#define TVMC_KERNELS_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this ABI; metadata.json "kernel_abi_version" carries the same number. */
#define TVMC_KERNEL_ABI_VERSION 2

/* Alignment in bytes of every buffer passed to a kernel. */
#define TVMC_BUFFER_ALIGNMENT 64

/* The graph entry: runs the whole model; entries[e] points to the buffer of data entry e. */
void tvmc_graph_run(void *const *entries);

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
