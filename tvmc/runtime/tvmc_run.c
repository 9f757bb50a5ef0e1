/*
 * tvmc_run.c -- run a tvmc CPU artifact from the command line, on the C API of tvmc_kernels.h
 * alone (no Python, no runtime library: libc, and libgomp when the kernels run in parallel).
 *
 * Build it for the artifact's target with `tvmc build-runner mod.tar -o tvmc_run` (the target's
 * C compiler driver, e.g. aarch64-linux-gnu-gcc), or by hand beside mod.so:
 *     cc -std=c99 -O2 -I. tvmc_run.c mod.so -Wl,-rpath,'$ORIGIN' -o tvmc_run
 * It loads mod.so from its own folder ($ORIGIN), so copy mod.so, mod.params and tvmc_run into
 * one folder of the device. `tvmc run` runs it under user-mode emulation (qemu-user) for
 * artifacts of another architecture.
 *
 *   tvmc_run [-p mod.params] [-i NAME=IN.npy]... [-o NAME=OUT.npy]... [-r REPEAT] [-n NUMBER] [-m MS]
 *
 *   -p, --params FILE       the params blob (mod.params); leave it out for a model without params
 *   -i, --input NAME=FILE   input NAME from a .npy file (little-endian, C order, the input's dtype
 *                           and shape); repeatable. Inputs not given stay zero.
 *   -I, --input-dir DIR     input k (in the order of tvmc_model_input_info) from DIR/input_<k>.npy
 *   -o, --output NAME=FILE  write output NAME as a .npy file; repeatable
 *   -O, --output-dir DIR    write output k to DIR/output_<k>.npy
 *   -r, --repeat N          time the run: N measurements (default 0: one untimed run)
 *   -n, --number N          runs per measurement (default 1)
 *   -m, --min-repeat-ms MS  a measurement lasts at least MS milliseconds: NUMBER grows until one does
 *                           (default 0; TVM's min_repeat_ms, as tvmc tune's runner does it)
 *   -h, --help
 *
 * It prints each input and output (name, dtype, shape) and, with --repeat, the time per run in
 * ms over the measurements (each the mean of NUMBER runs, after one untimed warm-up run; NUMBER
 * as --min-repeat-ms grew it) and a
 * line "measurements_ms: t1 t2 ..." for programs that read it. Parallel loops use
 * OMP_NUM_THREADS threads.
 *
 * Files: -p and -i read regular files only (a FIFO or a device is refused at once, never waited
 * on). An output is written to a temporary file beside it and renamed into place, and never onto
 * a file this run reads or has mapped: an input, the params, mod.so, the runner itself.
 *
 * Exit codes: 0 success; the C API's code (1-7, TVMC_ERR_*) when a call fails, with
 * tvmc_last_error(), except an input the model does not take (TVMC_ERR_INPUT: a dtype, a shape,
 * a size outside a symbolic dimension's range), which exits 8 as `tvmc run` does; 64 usage; 65 a
 * .npy file that is not what the model takes; 66 a file that cannot be read; 73 a file that cannot
 * be written. Errors are one line "error: ..." on stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "tvmc_kernels.h"

#define EXIT_INPUT 8 /* tvmc.errors.InputError's exit code */
#define EXIT_USAGE 64
#define EXIT_DATA 65
#define EXIT_NOINPUT 66
#define EXIT_CANTCREATE 73
#define MAX_NDIM 32
#define MAX_ARGS 256

static void die(int code, const char *fmt, ...) {
  va_list ap;
  fputs("error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(code);
}

static void check(int rc, const char *what) {
  if (rc != TVMC_OK) die(rc == TVMC_ERR_INPUT ? EXIT_INPUT : rc, "%s: %s", what, tvmc_last_error());
}

/* ------------------------------------------------------------------------------------------
 * .npy files (NumPy's format, versions 1.0 to 3.0): magic, version, header length, a Python
 * dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }, then the data.
 * bfloat16 has no descriptor of its own: numpy writes ml_dtypes' bfloat16 arrays as 2-byte void
 * elements ('<V2'; np.load(f).view(ml_dtypes.bfloat16) reads them back). */

static const struct {
  const char *descr, *dtype;
} npy_dtypes[] = {
    {"<f4", "float32"}, {"<f8", "float64"}, {"<f2", "float16"}, {"<i8", "int64"},  {"<i4", "int32"},
    {"<i2", "int16"},   {"|i1", "int8"},    {"<u8", "uint64"},  {"<u4", "uint32"}, {"<u2", "uint16"},
    {"|u1", "uint8"},   {"|b1", "bool"},    {"<V2", "bfloat16"},
};
#define NUM_NPY_DTYPES ((int)(sizeof(npy_dtypes) / sizeof(npy_dtypes[0])))

/* Bytes per element of a tvmc dtype name (0 when it has no .npy form here). */
static size_t dtype_size(const char *dtype) {
  int k;
  for (k = 0; k < NUM_NPY_DTYPES; k++)
    if (strcmp(npy_dtypes[k].dtype, dtype) == 0) return (size_t)(npy_dtypes[k].descr[2] - '0');
  return 0;
}

typedef struct {
  const char *dtype;
  int32_t ndim;
  int64_t shape[MAX_NDIM];
  unsigned char *data; /* malloc'd; the tensor's bytes */
  size_t nbytes;
} npy_array;

/* The value of 'key' in the header dict: a pointer just after "'key':" and its blanks. */
static const char *npy_field(const char *header, const char *key) {
  char quoted[32];
  const char *p;
  snprintf(quoted, sizeof(quoted), "'%s'", key);
  p = strstr(header, quoted);
  if (!p) return NULL;
  p += strlen(quoted);
  while (*p == ' ') p++;
  if (*p++ != ':') return NULL;
  while (*p == ' ') p++;
  return p;
}

/* `path` opened for reading if it is a regular file (opened non-blocking, so a FIFO cannot block,
 * and checked with fstat on what was opened); dies naming the path otherwise. */
static FILE *open_regular(const char *path) {
  struct stat st;
  FILE *f;
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0) die(EXIT_NOINPUT, "%s: cannot open (%s)", path, strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    die(EXIT_NOINPUT, "%s: not a regular file (%s)", path,
        S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "a device or socket");
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || !(f = fdopen(fd, "rb"))) {
    close(fd);
    die(EXIT_NOINPUT, "%s: cannot open", path);
  }
  return f;
}

/* The params blob of the regular file `path`, read whole (its size from fstat). */
static unsigned char *read_params(const char *path, size_t *size) {
  FILE *f = open_regular(path);
  struct stat st;
  unsigned char *data;
  if (fstat(fileno(f), &st) != 0) die(EXIT_NOINPUT, "%s: cannot read", path);
  *size = (size_t)st.st_size;
  data = (unsigned char *)malloc(*size ? *size : 1);
  if (!data) die(TVMC_ERR_MEMORY, "%s: out of memory for %lu bytes", path, (unsigned long)*size);
  if (fread(data, 1, *size, f) != *size) die(EXIT_NOINPUT, "%s: read failed", path);
  fclose(f);
  return data;
}

/* Files an output must not replace: (device, inode) of the inputs and params, and of every file
 * mapped into this process (/proc/self/maps: mod.so, the runner, libc; under qemu-user, the
 * emulated process's own maps). */
typedef struct {
  dev_t dev;
  ino_t ino;
} file_id;

#define MAX_PROTECTED 1024
static file_id protected_files[MAX_PROTECTED];
static int num_protected = 0;

static void protect_path(const char *path) {
  struct stat st;
  if (num_protected < MAX_PROTECTED && stat(path, &st) == 0) {
    protected_files[num_protected].dev = st.st_dev;
    protected_files[num_protected++].ino = st.st_ino;
  }
}

static void protect_mapped_files(void) {
  char line[4096];
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) return;
  while (fgets(line, sizeof(line), maps) && num_protected < MAX_PROTECTED) {
    unsigned int major_, minor_;
    unsigned long long inode;
    if (sscanf(line, "%*s %*s %*s %x:%x %llu", &major_, &minor_, &inode) == 3 && inode != 0) {
      protected_files[num_protected].dev = makedev(major_, minor_);
      protected_files[num_protected++].ino = (ino_t)inode;
    }
  }
  fclose(maps);
}

static void check_output_path(const char *path) {
  struct stat st;
  int i;
  if (stat(path, &st) != 0) return; /* a new file */
  if (!S_ISREG(st.st_mode)) die(EXIT_CANTCREATE, "%s: not a regular file; outputs are written to regular files", path);
  for (i = 0; i < num_protected; i++)
    if (protected_files[i].dev == st.st_dev && protected_files[i].ino == st.st_ino)
      die(EXIT_CANTCREATE, "%s: is a file this run reads (an input, the params, mod.so or the runner); "
          "choose another output name", path);
}

static void npy_read(const char *path, npy_array *a) {
  FILE *f = open_regular(path);
  unsigned char head[12];
  uint32_t header_len;
  char *header;
  const char *p;
  size_t prefix, i;
  long size;
  if (!f) die(EXIT_NOINPUT, "%s: cannot open", path);
  if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0)
    die(EXIT_DATA, "%s: not a .npy file (no \\x93NUMPY signature)", path);
  if (head[6] == 1) {
    header_len = (uint32_t)head[8] | (uint32_t)head[9] << 8;
    prefix = 10;
  } else if (head[6] == 2 || head[6] == 3) {
    if (fread(head + 10, 1, 2, f) != 2) die(EXIT_DATA, "%s: truncated .npy header", path);
    header_len = (uint32_t)head[8] | (uint32_t)head[9] << 8 | (uint32_t)head[10] << 16 | (uint32_t)head[11] << 24;
    prefix = 12;
  } else {
    die(EXIT_DATA, "%s: .npy format version %d.%d is not supported", path, head[6], head[7]);
  }
  if (header_len > (1u << 20)) die(EXIT_DATA, "%s: .npy header of %u bytes is too long", path, header_len);
  header = (char *)malloc(header_len + 1);
  if (!header || fread(header, 1, header_len, f) != header_len) die(EXIT_DATA, "%s: truncated .npy header", path);
  header[header_len] = 0;

  p = npy_field(header, "descr");
  a->dtype = NULL;
  for (i = 0; p && *p == '\'' && i < (size_t)NUM_NPY_DTYPES; i++) {
    size_t n = strlen(npy_dtypes[i].descr);
    if (strncmp(p + 1, npy_dtypes[i].descr, n) == 0 && p[1 + n] == '\'') a->dtype = npy_dtypes[i].dtype;
  }
  if (!a->dtype) die(EXIT_DATA, "%s: dtype %.12s is not a little-endian numeric or bool dtype", path, p ? p : "?");
  p = npy_field(header, "fortran_order");
  if (!p || strncmp(p, "False", 5) != 0) die(EXIT_DATA, "%s: the array is not in C order (fortran_order)", path);
  p = npy_field(header, "shape");
  if (!p || *p++ != '(') die(EXIT_DATA, "%s: no shape in the .npy header", path);
  a->ndim = 0;
  a->nbytes = 1;
  for (;;) {
    char *end;
    long long d;
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    d = strtoll(p, &end, 10);
    if (end == p || d < 0 || a->ndim == MAX_NDIM) die(EXIT_DATA, "%s: bad shape in the .npy header", path);
    a->shape[a->ndim++] = (int64_t)d;
    a->nbytes *= (size_t)d;
    p = end;
  }
  free(header);
  for (i = 0; i < (size_t)NUM_NPY_DTYPES; i++)
    if (npy_dtypes[i].dtype == a->dtype) a->nbytes *= (size_t)(npy_dtypes[i].descr[2] - '0');
  if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
      (size_t)size != prefix + header_len + a->nbytes || fseek(f, (long)(prefix + header_len), SEEK_SET) != 0)
    die(EXIT_DATA, "%s: the file does not hold exactly the %lu data bytes its header says", path,
        (unsigned long)a->nbytes);
  a->data = (unsigned char *)malloc(a->nbytes ? a->nbytes : 1);
  if (!a->data || fread(a->data, 1, a->nbytes, f) != a->nbytes) die(EXIT_NOINPUT, "%s: read failed", path);
  fclose(f);
}

static void npy_write(const char *path, const tvmc_tensor_info *info, const void *data) {
  char header[1024];
  int n, i, k;
  const char *descr = NULL;
  FILE *f;
  char *tmp;
  int fd;
  unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
  for (k = 0; k < NUM_NPY_DTYPES; k++)
    if (strcmp(npy_dtypes[k].dtype, info->dtype) == 0) descr = npy_dtypes[k].descr;
  if (!descr) die(EXIT_DATA, "output '%s': dtype %s has no .npy form here", info->name, info->dtype);
  n = snprintf(header, sizeof(header), "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (i = 0; i < info->ndim && n < 900; i++)
    n += snprintf(header + n, sizeof(header) - (size_t)n, "%lld,%s", (long long)info->shape[i],
                  (i + 1 < info->ndim) ? " " : "");
  if (info->ndim > 1) n--; /* "(2, 3)" but "(5,)" */
  n += snprintf(header + n, sizeof(header) - (size_t)n, "), }");
  while ((10 + n + 1) % 64) header[n++] = ' '; /* NumPy aligns the data to 64 bytes */
  header[n++] = '\n';
  prefix[8] = (unsigned char)(n & 0xff);
  prefix[9] = (unsigned char)(n >> 8);
  tmp = (char *)malloc(strlen(path) + 16);
  if (!tmp) die(TVMC_ERR_MEMORY, "out of memory");
  sprintf(tmp, "%s.tmp.XXXXXX", path);
  fd = mkstemp(tmp);
  f = fd < 0 ? NULL : fdopen(fd, "wb");
  if (!f || fwrite(prefix, 1, 10, f) != 10 || fwrite(header, 1, (size_t)n, f) != (size_t)n ||
      fwrite(data, 1, (size_t)info->nbytes, f) != (size_t)info->nbytes || fclose(f) != 0 ||
      chmod(tmp, 0644) != 0 || rename(tmp, path) != 0) {
    if (fd >= 0) unlink(tmp);
    die(EXIT_CANTCREATE, "%s: cannot write", path);
  }
  free(tmp);
}

/* ------------------------------------------------------------------------------------------
 * Command line. */

typedef struct {
  const char *name; /* NULL: by index */
  int32_t index;
  const char *path;
} binding;

static void usage(FILE *out) {
  fputs("usage: tvmc_run [-p mod.params] [-i NAME=IN.npy]... [-I DIR] [-o NAME=OUT.npy]... [-O DIR]\n"
        "                [-r REPEAT] [-n NUMBER] [-m MIN_REPEAT_MS]\n"
        "Runs mod.so (found beside this program) on .npy inputs; see tvmc/runtime/tvmc_run.c.\n",
        out);
}

static long count_arg(const char *flag, const char *text) {
  char *end;
  long v = strtol(text, &end, 10);
  if (end == text || *end || v < 0 || v > 1000000000L) die(EXIT_USAGE, "%s takes a count, not '%s'", flag, text);
  return v;
}

static double ms_arg(const char *flag, const char *text) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !(v >= 0) || v > 3.6e6) die(EXIT_USAGE, "%s takes milliseconds (0 to 3600000), not '%s'", flag, text);
  return v;
}

static binding split_binding(const char *flag, const char *text) {
  binding b;
  const char *eq = strchr(text, '=');
  char *name;
  if (!eq || eq == text || !eq[1]) die(EXIT_USAGE, "%s takes NAME=FILE, not '%s'", flag, text);
  name = (char *)malloc((size_t)(eq - text) + 1);
  if (!name) die(TVMC_ERR_MEMORY, "out of memory");
  memcpy(name, text, (size_t)(eq - text));
  name[eq - text] = 0;
  b.name = name;
  b.index = -1;
  b.path = eq + 1;
  return b;
}

static int32_t find_tensor(const tvmc_model *m, const char *name, int output) {
  int32_t i, count = output ? tvmc_model_num_outputs(m) : tvmc_model_num_inputs(m);
  for (i = 0; i < count; i++) {
    tvmc_tensor_info info;
    check(output ? tvmc_model_output_info(m, i, &info) : tvmc_model_input_info(m, i, &info), "tensor info");
    if (strcmp(info.name, name) == 0) return i;
  }
  die(TVMC_ERR_ARGUMENT, "the model has no %s named '%s'", output ? "output" : "input", name);
  return -1;
}

static char *dir_file(const char *dir, const char *stem, int32_t k) {
  size_t n = strlen(dir) + strlen(stem) + 32;
  char *path = (char *)malloc(n);
  if (!path) die(TVMC_ERR_MEMORY, "out of memory");
  snprintf(path, n, "%s/%s_%d.npy", dir, stem, (int)k);
  return path;
}

static void print_tensor(const char *kind, const tvmc_tensor_info *info, const char *arrow, const char *path) {
  int32_t d;
  printf("%s %s %s [", kind, info->name, info->dtype);
  for (d = 0; d < info->ndim; d++) printf("%s%lld", d ? "," : "", (long long)info->shape[d]);
  printf("]%s%s%s\n", path ? arrow : "", path ? " " : "", path ? path : "");
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void time_runs(tvmc_model *m, long repeat, long number, double min_repeat_ms) {
  double *samples = (double *)malloc(sizeof(double) * (size_t)repeat), *sorted;
  double mean = 0, var = 0, median;
  long r, k;
  if (!samples) die(TVMC_ERR_MEMORY, "out of memory");
  check(tvmc_model_run(m), "run"); /* warm-up */
  for (r = 0; r < repeat; r++) {
    double dt;
    for (;;) { /* a measurement shorter than min_repeat_ms is taken again with more runs */
      double t0 = now_ms(), grown;
      for (k = 0; k < number; k++) check(tvmc_model_run(m), "run");
      dt = now_ms() - t0;
      if (dt >= min_repeat_ms || number >= (1L << 20)) break;
      grown = (double)number * min_repeat_ms / (dt > 1e-3 ? dt : 1e-3) + 1;
      number = grown > (double)(number * 2) ? (grown < (double)(1L << 20) ? (long)grown : 1L << 20) : number * 2;
    }
    samples[r] = dt / (double)number;
    mean += samples[r] / (double)repeat;
  }
  for (r = 0; r < repeat; r++) var += (samples[r] - mean) * (samples[r] - mean) / (double)repeat;
  sorted = (double *)malloc(sizeof(double) * (size_t)repeat);
  if (!sorted) die(TVMC_ERR_MEMORY, "out of memory");
  memcpy(sorted, samples, sizeof(double) * (size_t)repeat);
  qsort(sorted, (size_t)repeat, sizeof(double), compare_doubles);
  median = repeat % 2 ? sorted[repeat / 2] : (sorted[repeat / 2 - 1] + sorted[repeat / 2]) / 2;
  printf("time per run (ms; %ld measurements x %ld runs): mean %.4f median %.4f min %.4f max %.4f std %.4f\n",
         repeat, number, mean, median, sorted[0], sorted[repeat - 1], sqrt(var));
  printf("measurements_ms:");
  for (r = 0; r < repeat; r++) printf(" %.6f", samples[r]);
  printf("\n");
  free(sorted);
  free(samples);
}

int main(int argc, char **argv) {
  const char *params = NULL, *input_dir = NULL, *output_dir = NULL;
  binding inputs[MAX_ARGS], outputs[MAX_ARGS];
  int n_inputs = 0, n_outputs = 0, i;
  long repeat = 0, number = 1;
  double min_repeat_ms = 0;
  tvmc_model *m;
  int32_t k, ni, no;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_value = i + 1 < argc;
#define IS(short_flag, long_flag) (strcmp(a, short_flag) == 0 || strcmp(a, long_flag) == 0)
    if (IS("-h", "--help")) {
      usage(stdout);
      return 0;
    }
    if (!has_value) {
      usage(stderr);
      die(EXIT_USAGE, "%s: unknown option or missing value", a);
    }
    if (IS("-p", "--params")) params = argv[++i];
    else if (IS("-I", "--input-dir")) input_dir = argv[++i];
    else if (IS("-O", "--output-dir")) output_dir = argv[++i];
    else if (IS("-r", "--repeat")) repeat = count_arg(a, argv[++i]);
    else if (IS("-n", "--number")) number = count_arg(a, argv[++i]);
    else if (IS("-m", "--min-repeat-ms")) min_repeat_ms = ms_arg(a, argv[++i]);
    else if (IS("-i", "--input") && n_inputs < MAX_ARGS) inputs[n_inputs++] = split_binding(a, argv[++i]);
    else if (IS("-o", "--output") && n_outputs < MAX_ARGS) outputs[n_outputs++] = split_binding(a, argv[++i]);
    else {
      usage(stderr);
      die(EXIT_USAGE, "%s: unknown option", a);
    }
#undef IS
  }
  if (number < 1) die(EXIT_USAGE, "--number must be at least 1");

  if (params) {
    size_t size;
    unsigned char *blob = read_params(params, &size);
    check(tvmc_model_create(blob, size, &m), "params");
    free(blob);
    protect_path(params);
  } else {
    check(tvmc_model_create(NULL, 0, &m), "model");
  }
  ni = tvmc_model_num_inputs(m);
  no = tvmc_model_num_outputs(m);
  for (k = 0; input_dir && k < ni; k++) {
    if (n_inputs == MAX_ARGS) die(EXIT_USAGE, "more than %d inputs", MAX_ARGS);
    inputs[n_inputs].name = NULL;
    inputs[n_inputs].index = k;
    inputs[n_inputs++].path = dir_file(input_dir, "input", k);
  }
  for (k = 0; output_dir && k < no; k++) {
    if (n_outputs == MAX_ARGS) die(EXIT_USAGE, "more than %d outputs", MAX_ARGS);
    outputs[n_outputs].name = NULL;
    outputs[n_outputs].index = k;
    outputs[n_outputs++].path = dir_file(output_dir, "output", k);
  }

  for (i = 0; i < n_inputs; i++)
    if (inputs[i].name) inputs[i].index = find_tensor(m, inputs[i].name, 0);
  for (i = 0; i < n_outputs; i++)
    if (outputs[i].name) outputs[i].index = find_tensor(m, outputs[i].name, 1);
  for (i = 0; i < n_inputs; i++) protect_path(inputs[i].path);
  protect_mapped_files();
  for (i = 0; i < n_outputs; i++) check_output_path(outputs[i].path);

  for (i = 0; i < n_inputs; i++) {
    tvmc_tensor_info info;
    npy_array a;
    check(tvmc_model_input_info(m, inputs[i].index, &info), "input info");
    npy_read(inputs[i].path, &a);
    check(tvmc_model_set_input(m, info.name, a.dtype, a.shape, a.ndim, a.data, a.nbytes), inputs[i].path);
    free(a.data);
    print_tensor("input", &info, " <-", inputs[i].path);
  }
  if (repeat > 0) time_runs(m, repeat, number, min_repeat_ms);
  else check(tvmc_model_run(m), "run");
  for (k = 0; k < no; k++) {
    tvmc_tensor_info info;
    int64_t shape[MAX_NDIM];
    void *data;
    int written = 0;
    check(tvmc_model_output_info(m, k, &info), "output info");
    if (info.ndim > MAX_NDIM) die(EXIT_DATA, "output '%s' has more than %d dimensions", info.name, MAX_NDIM);
    /* an output whose shape depends on the data: its run-time shape, within the bound info gives */
    check(tvmc_model_output_shape(m, k, shape, info.ndim), "output shape");
    info.shape = shape;
    info.nbytes = (uint64_t)dtype_size(info.dtype);
    for (i = 0; i < info.ndim; i++) info.nbytes *= (uint64_t)shape[i];
    data = malloc(info.nbytes ? (size_t)info.nbytes : 1);
    if (!data) die(TVMC_ERR_MEMORY, "out of memory");
    check(tvmc_model_get_output(m, k, data, (size_t)info.nbytes), "output");
    for (i = 0; i < n_outputs; i++) {
      if (outputs[i].index == k) {
        npy_write(outputs[i].path, &info, data);
        print_tensor("output", &info, " ->", outputs[i].path);
        written = 1;
      }
    }
    if (!written) print_tensor("output", &info, "", NULL);
    free(data);
  }
  tvmc_model_destroy(m);
  return 0;
}
