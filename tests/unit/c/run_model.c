/*
 * run_model.c -- a small C program on the C API of tvmc_kernels.h (test helper; the kind of
 * runner a device without Python uses).
 *
 *   run_model PARAMS IN_0.bin ... IN_n.bin OUT_0.bin ... OUT_m.bin
 *
 * Reads the params file and one raw file per model input (row-major bytes of the input's
 * dtype and shape, in the order of tvmc_model_input_info), runs the model once, and writes
 * one raw file per output. On an error it prints "error: <code>: <tvmc_last_error()>" and
 * exits with the API's return code.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tvmc_kernels.h"

static int check(int rc) {
  if (rc != TVMC_OK) {
    fprintf(stderr, "error: %d: %s\n", rc, tvmc_last_error());
    exit(rc);
  }
  return rc;
}

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  void *data;
  long n;
  if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fprintf(stderr, "error: cannot read %s\n", path);
    exit(100);
  }
  data = malloc(n ? (size_t)n : 1);
  if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) exit(100);
  fclose(f);
  *size = (size_t)n;
  return data;
}

int main(int argc, char **argv) {
  tvmc_model *m;
  int32_t i, ni, no;
  if (argc < 2) return 100;
  check(tvmc_model_create_from_file(argv[1], &m));
  ni = tvmc_model_num_inputs(m);
  no = tvmc_model_num_outputs(m);
  if (argc != 2 + ni + no) {
    fprintf(stderr, "error: the model has %d inputs and %d outputs\n", (int)ni, (int)no);
    return 100;
  }
  for (i = 0; i < ni; i++) {
    tvmc_tensor_info info;
    size_t size;
    void *data = read_file(argv[2 + i], &size);
    check(tvmc_model_input_info(m, i, &info));
    check(tvmc_model_set_input(m, info.name, info.dtype, info.shape, info.ndim, data, size));
    free(data);
  }
  check(tvmc_model_run(m));
  for (i = 0; i < no; i++) {
    tvmc_tensor_info info;
    void *data;
    FILE *f;
    check(tvmc_model_output_info(m, i, &info));
    data = malloc(info.nbytes ? (size_t)info.nbytes : 1);
    check(tvmc_model_get_output(m, i, data, (size_t)info.nbytes));
    f = fopen(argv[2 + ni + i], "wb");
    if (!f || fwrite(data, 1, (size_t)info.nbytes, f) != (size_t)info.nbytes) return 100;
    fclose(f);
    free(data);
  }
  tvmc_model_destroy(m);
  return 0;
}
