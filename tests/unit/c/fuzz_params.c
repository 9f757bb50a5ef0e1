/*
 * fuzz_params.c -- harness for the C API's parsers (test helper, built with AddressSanitizer by
 * tests/unit/test_fuzz.py). Linked with tvmc_runtime.c, a generated definition of
 * tvmc_module_description and the stub graph entry below.
 *
 *   fuzz_params FILE...
 *
 * For each file: tvmc_model_create from its bytes; on success set every input to zeros, run
 * (the stub entry computes nothing), read every output, destroy. Prints "<file>: <code>" per
 * file; exits 0 unless the sanitizer aborts it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tvmc_kernels.h"

void tvmc_graph_run(void *const *entries) { (void)entries; }
void tvmc_graph_init(void *const *entries) { (void)entries; }

int main(int argc, char **argv) {
  int a;
  for (a = 1; a < argc; a++) {
    FILE *f = fopen(argv[a], "rb");
    long n;
    unsigned char *data;
    tvmc_model *m = NULL;
    int rc, i;
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    data = malloc(n ? (size_t)n : 1);
    if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) return 2;
    fclose(f);
    rc = tvmc_model_create(data, (size_t)n, &m);
    free(data);
    if (rc == TVMC_OK) {
      for (i = 0; i < tvmc_model_num_inputs(m); i++) {
        tvmc_tensor_info info;
        void *zeros;
        tvmc_model_input_info(m, i, &info);
        zeros = calloc(1, info.nbytes ? (size_t)info.nbytes : 1);
        rc |= tvmc_model_set_input(m, info.name, info.dtype, info.shape, info.ndim, zeros, (size_t)info.nbytes);
        free(zeros);
      }
      rc |= tvmc_model_run(m);
      for (i = 0; i < tvmc_model_num_outputs(m); i++) {
        tvmc_tensor_info info;
        void *out;
        tvmc_model_output_info(m, i, &info);
        out = malloc(info.nbytes ? (size_t)info.nbytes : 1);
        rc |= tvmc_model_get_output(m, i, out, (size_t)info.nbytes);
        free(out);
      }
      tvmc_model_destroy(m);
    }
    printf("%s: %d %s\n", argv[a], rc, rc ? tvmc_last_error() : "");
  }
  return 0;
}
