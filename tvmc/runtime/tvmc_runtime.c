/*
 * tvmc_runtime.c -- the C API of a tvmc CPU artifact (declared and documented in
 * tvmc_kernels.h), compiled into mod.so by `tvmc compile` with the target's C compiler.
 *
 * Portable C99. Everything the library was compiled for comes from the module description
 * that the codegen embeds (`tvmc_module_description`, JSON, see tvmc/codegen/description.py):
 * storage sizes, each data entry's storage, dtype and shape, the inputs, outputs and params.
 * The params blob (mod.params, safetensors) and every input are checked against it before the
 * graph entry `tvmc_graph_run` touches a buffer. mod.json is not read: the description is the
 * plan the kernels were compiled for.
 *
 * Symbolic shapes (a description with "size_vars"): each storage holds its tensor at the bound
 * shape, so nothing is allocated at run time. tvmc_model_set_input binds the size variables from
 * the input's shape (a dimension that is a variable takes its value after a check against the
 * variable's range; a constant one must match); tvmc_model_run evaluates every entry's
 * "sym_shape" (postfix programs, tvmc.graph.symbolic.to_postfix), checks that the inputs agree
 * on the variables and that every shape fits its storage, and passes the variables' values to the
 * graph entry after the data entries (pointers[num_entries]); outputs come at their run-time shape.
 * This code is compiled only with -DTVMC_SYMBOLIC_SHAPES (the backends define it for such
 * models), so the C API of a static model is compiled from the same code as before.
 *
 * Platform: with libc (the default) memory comes from malloc/free and files from stdio. Define
 * TVMC_RUNTIME_NO_FILES for a libc without files (wasm32 with wasi-libc: malloc and string
 * functions, no stdio, so the module imports nothing), or TVMC_RUNTIME_NO_LIBC (no libc at all)
 * and provide
 *     void *tvmc_platform_malloc(size_t nbytes);  void tvmc_platform_free(void *ptr);
 *     void *memcpy(void *, const void *, size_t); void *memset(void *, int, size_t);
 * Without files tvmc_model_create_from_file reports TVMC_ERR_IO (no file system).
 */
#include <stddef.h>
#include <stdint.h>

#include "tvmc_kernels.h"

#ifdef TVMC_RUNTIME_NO_LIBC
void *tvmc_platform_malloc(size_t nbytes);
void tvmc_platform_free(void *ptr);
void *memcpy(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
#else
#ifndef TVMC_RUNTIME_NO_FILES
#include <stdio.h>
#endif
#include <stdlib.h>
#include <string.h>
static void *tvmc_platform_malloc(size_t nbytes) { return malloc(nbytes); }
static void tvmc_platform_free(void *ptr) { free(ptr); }
#endif

#define MAX_JSON_DEPTH 64
#define MAX_NDIM 32
#ifdef TVMC_SYMBOLIC_SHAPES
#define MAX_SHAPE_STACK 64
#endif

/* ------------------------------------------------------------------------------------------
 * Errors: a code and one line of text (the message of the last failed call). */

static char last_error[512];
static size_t error_len;

static void err_str(const char *s) {
  while (*s && error_len + 1 < sizeof(last_error)) last_error[error_len++] = *s++;
  last_error[error_len] = 0;
}

static void err_strn(const char *s, size_t n) {
  size_t i;
  for (i = 0; i < n && s[i] && error_len + 1 < sizeof(last_error); i++) {
    char c = s[i];
    last_error[error_len++] = (c >= 32 && c < 127) ? c : '?';
  }
  last_error[error_len] = 0;
}

static void err_u64(uint64_t v) {
  char digits[24];
  int n = 0;
  do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
  while (n && error_len + 1 < sizeof(last_error)) last_error[error_len++] = digits[--n];
  last_error[error_len] = 0;
}

static void err_dims(int32_t ndim, const int64_t *shape) {
  int32_t i;
  err_str("[");
  for (i = 0; i < ndim; i++) {
    if (i) err_str(",");
    if (shape[i] < 0) { err_str("-"); err_u64((uint64_t)(-(shape[i] + 1)) + 1); }
    else err_u64((uint64_t)shape[i]);
  }
  err_str("]");
}

static void err_shape(const char *dtype, int32_t ndim, const int64_t *shape, uint64_t nbytes) {
  err_str(dtype);
  err_str(" ");
  err_dims(ndim, shape);
  err_str(" (");
  err_u64(nbytes);
  err_str(" bytes)");
}

static int fail(int code, const char *a, const char *b, const char *c) {
  error_len = 0;
  last_error[0] = 0;
  if (a) err_str(a);
  if (b) err_str(b);
  if (c) err_str(c);
  return code;
}

const char *tvmc_last_error(void) { return last_error; }

/* ------------------------------------------------------------------------------------------
 * Allocation: every block of a model is on its list, so a failed create and destroy free all. */

typedef struct block { struct block *next; } block;

static void *alloc_in(block **list, size_t nbytes, size_t alignment) {
  size_t head = sizeof(block) + alignment;
  unsigned char *raw, *p;
  if (nbytes > (size_t)-1 - head - sizeof(void *)) return NULL;
  raw = (unsigned char *)tvmc_platform_malloc(head + sizeof(void *) + nbytes);
  if (!raw) return NULL;
  ((block *)raw)->next = *list;
  *list = (block *)raw;
  p = raw + sizeof(block) + sizeof(void *);
  p += (alignment - (uintptr_t)p % alignment) % alignment;
  return p;
}

static void free_all(block *list) {
  while (list) {
    block *next = list->next;
    tvmc_platform_free(list);
    list = next;
  }
}

/* ------------------------------------------------------------------------------------------
 * JSON: a strict parser into a flat token array; tok.next is the index after its subtree. */

enum { J_OBJ, J_ARR, J_STR, J_NUM, J_LIT };

typedef struct {
  int type;
  size_t start, end; /* text span; for strings without the quotes */
  int64_t size;      /* members of an object (key/value pairs) or items of an array */
  int64_t next;
} jtok;

typedef struct {
  const char *s;
  size_t n, pos;
  jtok *toks; /* NULL while counting */
  int64_t count;
} jparser;

static void j_ws(jparser *p) {
  while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r' ||
                           p->s[p->pos] == '\t'))
    p->pos++;
}

static int64_t j_new(jparser *p, int type, size_t start) {
  int64_t i = p->count++;
  if (p->toks) {
    p->toks[i].type = type;
    p->toks[i].start = start;
    p->toks[i].end = start;
    p->toks[i].size = 0;
    p->toks[i].next = i + 1;
  }
  return i;
}

static int bytes_equal(const char *a, const char *b, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

static size_t cstr_len(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

static int is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int j_string(jparser *p) {
  int64_t t;
  size_t start = ++p->pos;
  while (p->pos < p->n && p->s[p->pos] != '"') {
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c < 32) return 0;
    if (c == '\\') {
      if (++p->pos >= p->n) return 0;
      c = (unsigned char)p->s[p->pos];
      if (c == 'u') {
        int k;
        for (k = 1; k <= 4; k++)
          if (p->pos + k >= p->n || !is_hex(p->s[p->pos + k])) return 0;
        p->pos += 4;
      } else if (!(c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
                   c == 't')) {
        return 0;
      }
    }
    p->pos++;
  }
  if (p->pos >= p->n) return 0;
  t = j_new(p, J_STR, start);
  if (p->toks) p->toks[t].end = p->pos;
  p->pos++;
  return 1;
}

static int j_value(jparser *p, int depth) {
  char c;
  size_t start;
  int64_t t;
  j_ws(p);
  if (p->pos >= p->n || depth > MAX_JSON_DEPTH) return 0;
  c = p->s[p->pos];
  start = p->pos;
  if (c == '{' || c == '[') {
    int64_t members = 0;
    char close = c == '{' ? '}' : ']';
    t = j_new(p, c == '{' ? J_OBJ : J_ARR, start);
    p->pos++;
    j_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
      p->pos++;
    } else {
      for (;;) {
        if (c == '{') {
          j_ws(p);
          if (p->pos >= p->n || p->s[p->pos] != '"' || !j_string(p)) return 0;
          j_ws(p);
          if (p->pos >= p->n || p->s[p->pos] != ':') return 0;
          p->pos++;
        }
        if (!j_value(p, depth + 1)) return 0;
        members++;
        j_ws(p);
        if (p->pos >= p->n) return 0;
        if (p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->s[p->pos] != close) return 0;
        p->pos++;
        break;
      }
    }
    if (p->toks) {
      p->toks[t].size = members;
      p->toks[t].end = p->pos;
      p->toks[t].next = p->count;
    }
    return 1;
  }
  if (c == '"') return j_string(p);
  if (c == '-' || (c >= '0' && c <= '9')) {
    p->pos++;
    while (p->pos < p->n && ((p->s[p->pos] >= '0' && p->s[p->pos] <= '9') || p->s[p->pos] == '.' ||
                             p->s[p->pos] == 'e' || p->s[p->pos] == 'E' || p->s[p->pos] == '+' ||
                             p->s[p->pos] == '-'))
      p->pos++;
    t = j_new(p, J_NUM, start);
    if (p->toks) p->toks[t].end = p->pos;
    return 1;
  }
  {
    static const char *const lits[] = {"true", "false", "null"};
    int k;
    for (k = 0; k < 3; k++) {
      size_t len = cstr_len(lits[k]);
      if (p->n - p->pos >= len && bytes_equal(p->s + p->pos, lits[k], len)) {
        t = j_new(p, J_LIT, start);
        p->pos += len;
        if (p->toks) p->toks[t].end = p->pos;
        return 1;
      }
    }
  }
  return 0;
}

/* Parse `n` bytes of JSON into tokens allocated on `list`; returns the token count, 0 on error. */
static int64_t j_parse(const char *s, size_t n, block **list, jtok **out) {
  jparser p;
  p.s = s; p.n = n; p.pos = 0; p.toks = NULL; p.count = 0;
  if (!j_value(&p, 0)) return 0;
  j_ws(&p);
  if (p.pos != n) return 0;
  if ((uint64_t)p.count > ((size_t)-1) / sizeof(jtok)) return 0;
  p.toks = (jtok *)alloc_in(list, (size_t)p.count * sizeof(jtok), sizeof(void *));
  if (!p.toks) return -1;
  p.pos = 0; p.count = 0;
  j_value(&p, 0);
  *out = p.toks;
  return p.count;
}

static int hex4(const char *s) {
  int v = 0, k;
  for (k = 0; k < 4; k++) {
    char c = s[k];
    v = v * 16 + (c <= '9' ? c - '0' : (c | 32) - 'a' + 10);
  }
  return v;
}

/* Decode string token `t` into `out` (UTF-8, NUL-terminated; room for t.end - t.start + 1 bytes
 * always suffices). Returns the length, or -1 on an invalid surrogate. */
static int64_t j_decode(const char *s, const jtok *t, char *out) {
  size_t i = t->start, n = 0;
  while (i < t->end) {
    char c = s[i++];
    uint32_t cp;
    if (c != '\\') { out[n++] = c; continue; }
    c = s[i++];
    switch (c) {
      case 'b': out[n++] = '\b'; continue;
      case 'f': out[n++] = '\f'; continue;
      case 'n': out[n++] = '\n'; continue;
      case 'r': out[n++] = '\r'; continue;
      case 't': out[n++] = '\t'; continue;
      case 'u': break;
      default: out[n++] = c; continue;
    }
    cp = (uint32_t)hex4(s + i);
    i += 4;
    if (cp >= 0xD800 && cp < 0xDC00) {
      uint32_t lo;
      if (i + 6 > t->end || s[i] != '\\' || s[i + 1] != 'u') return -1;
      lo = (uint32_t)hex4(s + i + 2);
      if (lo < 0xDC00 || lo >= 0xE000) return -1;
      i += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp < 0xE000) {
      return -1;
    }
    if (cp == 0) return -1;
    if (cp < 0x80) {
      out[n++] = (char)cp;
    } else if (cp < 0x800) {
      out[n++] = (char)(0xC0 | (cp >> 6));
      out[n++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out[n++] = (char)(0xE0 | (cp >> 12));
      out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      out[n++] = (char)(0x80 | (cp & 0x3F));
    } else {
      out[n++] = (char)(0xF0 | (cp >> 18));
      out[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
      out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      out[n++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  out[n] = 0;
  return (int64_t)n;
}

/* A non-negative integer token (no sign, fraction or exponent) that fits in int64. */
static int j_uint(const char *s, const jtok *t, int64_t *out) {
  uint64_t v = 0;
  size_t i;
  if (t->type != J_NUM || t->end == t->start) return 0;
  for (i = t->start; i < t->end; i++) {
    char c = s[i];
    if (c < '0' || c > '9') return 0;
    if (v > (UINT64_C(0x7FFFFFFFFFFFFFFF) - (uint64_t)(c - '0')) / 10) return 0;
    v = v * 10 + (uint64_t)(c - '0');
  }
  *out = (int64_t)v;
  return 1;
}

/* Index of the value of key `key` in object token `obj`, or -1. */
static int64_t j_get(const char *s, const jtok *toks, int64_t obj, const char *key) {
  int64_t k = obj + 1, m;
  size_t len = cstr_len(key);
  if (toks[obj].type != J_OBJ) return -1;
  for (m = 0; m < toks[obj].size; m++) {
    int64_t v = k + 1;
    if (toks[k].end - toks[k].start == len && bytes_equal(s + toks[k].start, key, len)) return v;
    k = toks[v].next;
  }
  return -1;
}

/* ------------------------------------------------------------------------------------------
 * Dtypes: name, size in bytes, safetensors code. */

static const struct { const char *name; uint32_t size; const char *code; } dtypes[] = {
    {"float32", 4, "F32"}, {"float64", 8, "F64"}, {"float16", 2, "F16"}, {"int64", 8, "I64"},
    {"int32", 4, "I32"},   {"int16", 2, "I16"},   {"int8", 1, "I8"},     {"uint64", 8, "U64"},
    {"uint32", 4, "U32"},  {"uint16", 2, "U16"},  {"uint8", 1, "U8"},    {"bool", 1, "BOOL"},
    {"bfloat16", 2, "BF16"},
};
#define NUM_DTYPES ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

static int dtype_index(const char *s, size_t len) {
  int i;
  for (i = 0; i < NUM_DTYPES; i++)
    if (cstr_len(dtypes[i].name) == len && bytes_equal(dtypes[i].name, s, len)) return i;
  return -1;
}

/* ------------------------------------------------------------------------------------------
 * The model. */

typedef struct {
  int64_t storage_id;
  int64_t offset; /* bytes from the start of its storage ("offset": a concatenation's input, else 0) */
  int dtype;
  int32_t ndim;
  int64_t *shape;
  uint64_t nbytes;
#ifdef TVMC_SYMBOLIC_SHAPES
  int64_t sym;      /* symbolic shapes: the token of its "sym_shape", else -1 */
  int64_t *cur;     /* the shape at run time (the bound when static); `shape` is the bound */
  uint64_t cur_nbytes;
#endif
} entry_t;

typedef struct {
  char *name;
  int64_t entry;
  int64_t shape_entry; /* an output with a run-time shape: the entry of its int64[ndim] shape; else -1 */
#ifdef TVMC_SYMBOLIC_SHAPES
  int64_t *given;      /* an input of symbolic shape: the shape set_input took (the bound before) */
#endif
} tensor_t;

#ifdef TVMC_SYMBOLIC_SHAPES
typedef struct {
  char *name;
  int64_t lo, hi;
  int32_t set_by; /* the input whose shape gave its value, or -1 */
} size_var_t;
#endif


struct tvmc_model {
  block *blocks;
  int64_t num_storage, num_entries;
  int32_t num_inputs, num_outputs, num_params;
  uint64_t *storage_bytes;
  entry_t *entries;
  void **pointers; /* pointers[e]: the storage of entry e, what tvmc_graph_run takes */
  tensor_t *inputs, *outputs, *params;
#ifdef TVMC_SYMBOLIC_SHAPES
  const char *desc; /* the description and its tokens (sym_shape programs are read at run time) */
  jtok *toks;
  int32_t num_vars;
  size_var_t *vars;
  int64_t *sizes; /* the variables' values: pointers[num_entries], what the kernels take */
  int64_t *shaped_at; /* the values the entries' run-time shapes were last evaluated at */
  int shaped;         /* whether shaped_at holds them (runs at the same sizes skip eval_shapes) */
#endif
};

static int bad_description(const char *what) {
  return fail(TVMC_ERR_DESCRIPTION, "the embedded module description is malformed: ", what, NULL);
}

static int read_shape(const char *s, const jtok *toks, int64_t arr, tvmc_model *m, int32_t *ndim,
                      int64_t **shape, uint64_t itemsize, uint64_t *nbytes) {
  int64_t k, i;
  uint64_t total = itemsize;
  if (arr < 0 || toks[arr].type != J_ARR || toks[arr].size > MAX_NDIM) return 0;
  *ndim = (int32_t)toks[arr].size;
  *shape = (int64_t *)alloc_in(&m->blocks, sizeof(int64_t) * (size_t)(toks[arr].size + 1), sizeof(int64_t));
  if (!*shape) return -1;
  for (i = 0, k = arr + 1; i < toks[arr].size; i++, k = toks[k].next) {
    int64_t d;
    if (!j_uint(s, &toks[k], &d)) return 0;
    if (d && total > UINT64_C(0xFFFFFFFFFFFFFFFF) / (uint64_t)d) return 0;
    total *= (uint64_t)d;
    (*shape)[i] = d;
  }
  *nbytes = total;
  return 1;
}

static int read_tensors(const char *s, const jtok *toks, int64_t root, const char *key, tvmc_model *m,
                        tensor_t **out, int32_t *count) {
  int64_t arr = j_get(s, toks, root, key), k, i;
  if (arr < 0 || toks[arr].type != J_ARR || toks[arr].size > 0x7FFFFFFF) return bad_description(key);
  *count = (int32_t)toks[arr].size;
  *out = (tensor_t *)alloc_in(&m->blocks, sizeof(tensor_t) * (size_t)(*count + 1), sizeof(void *));
  if (!*out) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
  for (i = 0, k = arr + 1; i < *count; i++, k = toks[k].next) {
    int64_t name = j_get(s, toks, k, "name"), e = j_get(s, toks, k, "entry");
    if (name < 0 || toks[name].type != J_STR || e < 0 || !j_uint(s, &toks[e], &(*out)[i].entry) ||
        (*out)[i].entry >= m->num_entries)
      return bad_description(key);
    (*out)[i].shape_entry = -1;
#ifdef TVMC_SYMBOLIC_SHAPES
    (*out)[i].given = m->entries[(*out)[i].entry].cur;
#endif
    if ((e = j_get(s, toks, k, "shape_entry")) >= 0) {
      const entry_t *data = &m->entries[(*out)[i].entry], *shape;
      if (!j_uint(s, &toks[e], &(*out)[i].shape_entry) || (*out)[i].shape_entry >= m->num_entries)
        return bad_description(key);
      shape = &m->entries[(*out)[i].shape_entry];
      if (cstr_len(dtypes[shape->dtype].name) != 5 || !bytes_equal(dtypes[shape->dtype].name, "int64", 5) ||
          shape->ndim != 1 || shape->shape[0] != data->ndim)
        return bad_description(key);
    }
    (*out)[i].name = (char *)alloc_in(&m->blocks, toks[name].end - toks[name].start + 1, 1);
    if (!(*out)[i].name) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
    if (j_decode(s, &toks[name], (*out)[i].name) < 0) return bad_description(key);
  }
  return TVMC_OK;
}

#ifdef TVMC_SYMBOLIC_SHAPES
/* Dimension token `t` of a sym_shape (an int, or a postfix program: ints, "$k" and operators)
 * with the variables' current values into *out; 0 when malformed or a division by zero. */
static int eval_dim(const tvmc_model *m, int64_t t, int64_t *out) {
  const char *s = m->desc;
  const jtok *toks = m->toks;
  int64_t stack[MAX_SHAPE_STACK], k, i;
  int depth = 0;
  if (toks[t].type == J_NUM) return j_uint(s, &toks[t], out);
  if (toks[t].type != J_ARR) return 0;
  for (i = 0, k = t + 1; i < toks[t].size; i++, k = toks[k].next) {
    const char *w = s + toks[k].start;
    size_t len = toks[k].end - toks[k].start;
    if (toks[k].type == J_NUM) {
      if (depth == MAX_SHAPE_STACK || !j_uint(s, &toks[k], &stack[depth])) return 0;
      depth++;
    } else if (toks[k].type == J_STR && len >= 2 && w[0] == '$') {
      int64_t v = 0;
      size_t c;
      for (c = 1; c < len; c++) {
        if (w[c] < '0' || w[c] > '9' || v > m->num_vars) return 0;
        v = v * 10 + (w[c] - '0');
      }
      if (v >= m->num_vars || depth == MAX_SHAPE_STACK) return 0;
      stack[depth++] = m->sizes[v];
    } else if (toks[k].type == J_STR && depth >= 2) {
      int64_t b = stack[--depth], a = stack[depth - 1], r;
      if (len == 1 && w[0] == '+') r = a + b;
      else if (len == 1 && w[0] == '-') r = a - b;
      else if (len == 1 && w[0] == '*') r = a * b;
      else if ((len == 2 && w[0] == '/' && w[1] == '/') || (len == 1 && w[0] == '%')) {
        int64_t q;
        if (b == 0) return 0;
        q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) q--; /* floor division */
        r = w[0] == '%' ? a - q * b : q;
      } else if (len == 3 && bytes_equal(w, "min", 3)) r = a < b ? a : b;
      else if (len == 3 && bytes_equal(w, "max", 3)) r = a > b ? a : b;
      else return 0;
      stack[depth - 1] = r;
    } else {
      return 0;
    }
  }
  if (depth != 1) return 0;
  *out = stack[0];
  return 1;
}

/* Every symbolic entry's run-time shape (cur, cur_nbytes) from the variables' values, each
 * dimension checked against its bound (so every tensor fits its storage); nothing to do when the
 * values are those of the last evaluation (the programs are read from the description's text). */
static int eval_shapes(tvmc_model *m) {
  int64_t i, k, t;
  int32_t v;
  if (m->shaped) {
    for (v = 0; v < m->num_vars && m->shaped_at[v] == m->sizes[v]; v++) {}
    if (v == m->num_vars) return TVMC_OK;
  }
  m->shaped = 0;
  for (i = 0; i < m->num_entries; i++) {
    entry_t *e = &m->entries[i];
    uint64_t nbytes = dtypes[e->dtype].size;
    if (e->sym < 0) continue;
    for (k = 0, t = e->sym + 1; k < e->ndim; k++, t = m->toks[t].next) {
      int64_t d;
      if (!eval_dim(m, t, &d) || d < 0 || d > e->shape[k]) {
        fail(TVMC_ERR_INPUT, "the shape of data entry ", NULL, NULL);
        err_u64((uint64_t)i);
        err_str(" is outside its bound ");
        err_dims(e->ndim, e->shape);
        err_str(" at these sizes (a malformed description?)");
        return TVMC_ERR_INPUT;
      }
      e->cur[k] = d;
      nbytes *= (uint64_t)d;
    }
    e->cur_nbytes = nbytes;
  }
  for (v = 0; v < m->num_vars; v++) m->shaped_at[v] = m->sizes[v];
  m->shaped = 1;
  return TVMC_OK;
}
#endif

static int read_description(tvmc_model *m) {
  const char *s = tvmc_module_description;
  jtok *toks;
  int64_t n = j_parse(s, cstr_len(s), &m->blocks, &toks), root = 0, arr, k, i;
  int rc;
  if (n < 0) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
  if (n == 0 || toks[0].type != J_OBJ) return bad_description("not a JSON object");
#ifdef TVMC_SYMBOLIC_SHAPES
  m->desc = s;
  m->toks = toks;
  if ((arr = j_get(s, toks, root, "size_vars")) >= 0) {
    if (toks[arr].type != J_ARR || toks[arr].size > 0x7FFFFFFF) return bad_description("size_vars");
    m->num_vars = (int32_t)toks[arr].size;
    m->vars = (size_var_t *)alloc_in(&m->blocks, sizeof(size_var_t) * (size_t)(m->num_vars + 1), 8);
    m->sizes = (int64_t *)alloc_in(&m->blocks, sizeof(int64_t) * (size_t)(m->num_vars + 1), 8);
    m->shaped_at = (int64_t *)alloc_in(&m->blocks, sizeof(int64_t) * (size_t)(m->num_vars + 1), 8);
    if (!m->vars || !m->sizes || !m->shaped_at) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
    for (i = 0, k = arr + 1; i < m->num_vars; i++, k = toks[k].next) {
      size_var_t *v = &m->vars[i];
      int64_t name = j_get(s, toks, k, "name"), lo = j_get(s, toks, k, "lo"), hi = j_get(s, toks, k, "hi");
      if (name < 0 || toks[name].type != J_STR || lo < 0 || !j_uint(s, &toks[lo], &v->lo) || hi < 0 ||
          !j_uint(s, &toks[hi], &v->hi) || v->lo > v->hi)
        return bad_description("size_vars");
      v->name = (char *)alloc_in(&m->blocks, toks[name].end - toks[name].start + 1, 1);
      if (!v->name) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
      if (j_decode(s, &toks[name], v->name) < 0) return bad_description("size_vars");
      v->set_by = -1;
      m->sizes[i] = v->hi;
    }
  }
#endif

  arr = j_get(s, toks, root, "storage_bytes");
  if (arr < 0 || toks[arr].type != J_ARR) return bad_description("storage_bytes");
  m->num_storage = toks[arr].size;
  m->storage_bytes = (uint64_t *)alloc_in(&m->blocks, sizeof(uint64_t) * (size_t)(m->num_storage + 1), 8);
  if (!m->storage_bytes) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
  for (i = 0, k = arr + 1; i < m->num_storage; i++, k = toks[k].next) {
    int64_t b;
    if (!j_uint(s, &toks[k], &b)) return bad_description("storage_bytes");
    m->storage_bytes[i] = (uint64_t)b;
  }

  arr = j_get(s, toks, root, "entries");
  if (arr < 0 || toks[arr].type != J_ARR) return bad_description("entries");
  m->num_entries = toks[arr].size;
  m->entries = (entry_t *)alloc_in(&m->blocks, sizeof(entry_t) * (size_t)(m->num_entries + 1), 8);
  m->pointers = (void **)alloc_in(&m->blocks, sizeof(void *) * (size_t)(m->num_entries + 1), sizeof(void *));
  if (!m->entries || !m->pointers) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
  for (i = 0, k = arr + 1; i < m->num_entries; i++, k = toks[k].next) {
    entry_t *e = &m->entries[i];
    int64_t sid = j_get(s, toks, k, "storage_id"), dt = j_get(s, toks, k, "dtype"), off;
    if (sid < 0 || !j_uint(s, &toks[sid], &e->storage_id) || e->storage_id >= m->num_storage ||
        dt < 0 || toks[dt].type != J_STR ||
        (e->dtype = dtype_index(s + toks[dt].start, toks[dt].end - toks[dt].start)) < 0)
      return bad_description("entries");
    rc = read_shape(s, toks, j_get(s, toks, k, "shape"), m, &e->ndim, &e->shape, dtypes[e->dtype].size,
                    &e->nbytes);
    if (rc < 0) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
    off = j_get(s, toks, k, "offset");
    e->offset = 0;
    if (off >= 0 && !j_uint(s, &toks[off], &e->offset)) return bad_description("entries");
    if (!rc || (uint64_t)e->offset > m->storage_bytes[e->storage_id] ||
        e->nbytes > m->storage_bytes[e->storage_id] - (uint64_t)e->offset)
      return bad_description("entries");
#ifdef TVMC_SYMBOLIC_SHAPES
    e->cur = e->shape;
    e->cur_nbytes = e->nbytes;
    e->sym = j_get(s, toks, k, "sym_shape");
    if (e->sym >= 0) {
      if (!m->num_vars || toks[e->sym].type != J_ARR || toks[e->sym].size != e->ndim) return bad_description("entries");
      e->cur = (int64_t *)alloc_in(&m->blocks, sizeof(int64_t) * (size_t)(e->ndim + 1), sizeof(int64_t));
      if (!e->cur) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
    }
#endif
  }
  if ((rc = read_tensors(s, toks, root, "inputs", m, &m->inputs, &m->num_inputs)) != TVMC_OK) return rc;
  if ((rc = read_tensors(s, toks, root, "outputs", m, &m->outputs, &m->num_outputs)) != TVMC_OK) return rc;
#ifndef TVMC_SYMBOLIC_SHAPES
  return read_tensors(s, toks, root, "params", m, &m->params, &m->num_params);
#else
  if ((rc = read_tensors(s, toks, root, "params", m, &m->params, &m->num_params)) != TVMC_OK) return rc;
  for (i = 0; i < m->num_inputs; i++) {
    entry_t *e = &m->entries[m->inputs[i].entry];
    if (e->sym < 0) continue;
    m->inputs[i].given = (int64_t *)alloc_in(&m->blocks, sizeof(int64_t) * (size_t)(e->ndim + 1), sizeof(int64_t));
    if (!m->inputs[i].given) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
    for (k = 0; k < e->ndim; k++) m->inputs[i].given[k] = e->shape[k];
  }
  if (m->num_vars && (rc = eval_shapes(m)) != TVMC_OK) return bad_description("sym_shape");
  return TVMC_OK;
#endif
}

static int params_error(const char *name, const char *what) {
  fail(TVMC_ERR_PARAMS, "params: ", name ? "param '" : what, NULL);
  if (name) {
    err_strn(name, 64);
    err_str("' ");
    err_str(what);
  }
  return TVMC_ERR_PARAMS;
}

/* Copy every param of the description from the safetensors blob, checking dtype, shape and
 * byte range of each against the description and the blob's size. */
static int load_params(tvmc_model *m, const unsigned char *blob, size_t size) {
  uint64_t header_len = 0, data_len;
  const char *header;
  jtok *toks;
  int64_t n, i;
  char *key;
  block *scratch = NULL;
  int rc = TVMC_OK;
  if (m->num_params == 0 && (blob == NULL || size == 0)) return TVMC_OK;
  if (blob == NULL || size < 8) return params_error(NULL, "not a safetensors blob (shorter than 8 bytes)");
  for (i = 7; i >= 0; i--) header_len = header_len * 256 + blob[i];
  if (header_len > size - 8) return params_error(NULL, "header length exceeds the blob");
  header = (const char *)blob + 8;
  data_len = size - 8 - header_len;
  n = j_parse(header, (size_t)header_len, &scratch, &toks);
  if (n < 0) { free_all(scratch); return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL); }
  if (n == 0 || toks[0].type != J_OBJ) { free_all(scratch); return params_error(NULL, "header is not a JSON object"); }
  key = (char *)alloc_in(&scratch, (size_t)header_len + 1, 1);
  if (!key) { free_all(scratch); return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL); }
  for (i = 0; i < m->num_params && rc == TVMC_OK; i++) {
    const tensor_t *p = &m->params[i];
    const entry_t *e = &m->entries[p->entry];
    int64_t k = 1, found = -1, c, dt, shape, offsets, begin, end, d;
    for (c = 0; c < toks[0].size; c++) {
      if (toks[k].type == J_STR && j_decode(header, &toks[k], key) >= 0 && cstr_len(key) == cstr_len(p->name) &&
          bytes_equal(key, p->name, cstr_len(key))) {
        found = k + 1;
        break;
      }
      k = toks[k + 1].next;
    }
    if (found < 0) { rc = params_error(p->name, "is missing"); break; }
    dt = j_get(header, toks, found, "dtype");
    shape = j_get(header, toks, found, "shape");
    offsets = j_get(header, toks, found, "data_offsets");
    if (dt < 0 || toks[dt].type != J_STR ||
        toks[dt].end - toks[dt].start != cstr_len(dtypes[e->dtype].code) ||
        !bytes_equal(header + toks[dt].start, dtypes[e->dtype].code, cstr_len(dtypes[e->dtype].code))) {
      rc = params_error(p->name, "has another dtype than ");
      err_str(dtypes[e->dtype].name);
      break;
    }
    if (shape < 0 || toks[shape].type != J_ARR || toks[shape].size != e->ndim) {
      rc = params_error(p->name, "has another shape than ");
      err_shape(dtypes[e->dtype].name, e->ndim, e->shape, e->nbytes);
      break;
    }
    for (c = 0, k = shape + 1; c < e->ndim; c++, k = toks[k].next) {
      if (!j_uint(header, &toks[k], &d) || d != e->shape[c]) {
        rc = params_error(p->name, "has another shape than ");
        err_shape(dtypes[e->dtype].name, e->ndim, e->shape, e->nbytes);
        break;
      }
    }
    if (rc != TVMC_OK) break;
    if (offsets < 0 || toks[offsets].type != J_ARR || toks[offsets].size != 2 ||
        !j_uint(header, &toks[offsets + 1], &begin) || !j_uint(header, &toks[toks[offsets + 1].next], &end) ||
        begin > end || (uint64_t)end > data_len || (uint64_t)(end - begin) != e->nbytes) {
      rc = params_error(p->name, "has a byte range that is not its ");
      err_u64(e->nbytes);
      err_str(" bytes inside the blob");
      break;
    }
    if (e->nbytes) memcpy(m->pointers[p->entry], blob + 8 + header_len + begin, (size_t)e->nbytes);
  }
  free_all(scratch);
  return rc;
}

int tvmc_model_create(const void *params, size_t params_size, tvmc_model **out) {
  block *blocks = NULL;
  tvmc_model *m;
  int64_t i;
  void **storage;
  int rc;
  if (!out) return fail(TVMC_ERR_ARGUMENT, "tvmc_model_create: out is NULL", NULL, NULL);
  *out = NULL;
  m = (tvmc_model *)alloc_in(&blocks, sizeof(tvmc_model), sizeof(void *));
  if (!m) return fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
  memset(m, 0, sizeof(*m));
  m->blocks = blocks;
  rc = read_description(m);
  if (rc == TVMC_OK) {
    storage = (void **)alloc_in(&m->blocks, sizeof(void *) * (size_t)(m->num_storage + 1), sizeof(void *));
    if (!storage) rc = fail(TVMC_ERR_MEMORY, "out of memory", NULL, NULL);
    for (i = 0; rc == TVMC_OK && i < m->num_storage; i++) {
      /* storage i starts (7 i mod 64) cache lines into its block: large storages (each its own
       * page-aligned mapping from malloc) would otherwise all start at one offset within a 4 KiB
       * page, where their first lines share the same cache sets */
      size_t color = (size_t)(7 * i % 64) * TVMC_BUFFER_ALIGNMENT;
      uint64_t nbytes = m->storage_bytes[i] ? m->storage_bytes[i] : 1;
      storage[i] = nbytes <= (uint64_t)((size_t)-1) - color ?
                   alloc_in(&m->blocks, (size_t)nbytes + color, TVMC_BUFFER_ALIGNMENT) : NULL;
      if (storage[i]) storage[i] = (char *)storage[i] + color;
      if (!storage[i]) {
        rc = fail(TVMC_ERR_MEMORY, "out of memory for storage ", NULL, NULL);
        err_u64((uint64_t)i);
        err_str(" (");
        err_u64(nbytes);
        err_str(" bytes)");
      } else {
        memset(storage[i], 0, (size_t)m->storage_bytes[i]);
      }
    }
    for (i = 0; rc == TVMC_OK && i < m->num_entries; i++)
      m->pointers[i] = (char *)storage[m->entries[i].storage_id] + m->entries[i].offset;
#ifdef TVMC_SYMBOLIC_SHAPES
    if (rc == TVMC_OK) m->pointers[m->num_entries] = m->sizes; /* the size variables, after the data entries */
#endif
  }
  if (rc == TVMC_OK) rc = load_params(m, (const unsigned char *)params, params_size);
  if (rc == TVMC_OK) tvmc_graph_init((void *const *)m->pointers); /* the load-time kernels, once */
  if (rc != TVMC_OK) {
    free_all(m->blocks);
    return rc;
  }
  *out = m;
  return TVMC_OK;
}

int tvmc_model_create_from_file(const char *params_path, tvmc_model **out) {
#if defined(TVMC_RUNTIME_NO_LIBC) || defined(TVMC_RUNTIME_NO_FILES)
  (void)params_path;
  if (out) *out = NULL;
  return fail(TVMC_ERR_IO, "tvmc_model_create_from_file: this build has no file system; use tvmc_model_create",
              NULL, NULL);
#else
  FILE *f;
  long size;
  unsigned char *data;
  int rc;
  if (!out || !params_path) return fail(TVMC_ERR_ARGUMENT, "tvmc_model_create_from_file: NULL argument", NULL, NULL);
  *out = NULL;
  f = fopen(params_path, "rb");
  if (!f) return fail(TVMC_ERR_IO, params_path, ": cannot open", NULL);
  if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return fail(TVMC_ERR_IO, params_path, ": cannot read (not a regular file?)", NULL);
  }
  data = (unsigned char *)tvmc_platform_malloc(size ? (size_t)size : 1);
  if (!data) {
    fclose(f);
    return fail(TVMC_ERR_MEMORY, params_path, ": out of memory", NULL);
  }
  if (fread(data, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    tvmc_platform_free(data);
    return fail(TVMC_ERR_IO, params_path, ": read failed", NULL);
  }
  fclose(f);
  rc = tvmc_model_create(data, (size_t)size, out);
  tvmc_platform_free(data);
  return rc;
#endif
}

void tvmc_model_destroy(tvmc_model *model) {
  if (model) free_all(model->blocks);
}

int32_t tvmc_model_num_inputs(const tvmc_model *model) { return model ? model->num_inputs : 0; }

int32_t tvmc_model_num_outputs(const tvmc_model *model) { return model ? model->num_outputs : 0; }

static int tensor_info(const tvmc_model *m, const tensor_t *list, int32_t count, int32_t index,
                       tvmc_tensor_info *info, const char *what) {
  const entry_t *e;
  if (!m || !info) return fail(TVMC_ERR_ARGUMENT, what, ": NULL argument", NULL);
  if (index < 0 || index >= count) return fail(TVMC_ERR_ARGUMENT, what, ": index out of range", NULL);
  e = &m->entries[list[index].entry];
  info->name = list[index].name;
  info->dtype = dtypes[e->dtype].name;
  info->ndim = e->ndim;
  info->shape = e->shape;
  info->nbytes = e->nbytes;
  return TVMC_OK;
}

int tvmc_model_input_info(const tvmc_model *model, int32_t index, tvmc_tensor_info *info) {
  return tensor_info(model, model ? model->inputs : NULL, model ? model->num_inputs : 0, index, info,
                     "tvmc_model_input_info");
}

int tvmc_model_output_info(const tvmc_model *model, int32_t index, tvmc_tensor_info *info) {
  return tensor_info(model, model ? model->outputs : NULL, model ? model->num_outputs : 0, index, info,
                     "tvmc_model_output_info");
}

#ifdef TVMC_SYMBOLIC_SHAPES
/* The variable that dimension token `tok` of a sym_shape is (the program ["$k"]), else -1. */
static int64_t dim_var(const tvmc_model *m, int64_t tok) {
  const jtok *t = &m->toks[tok];
  const char *w;
  size_t n, p;
  int64_t var = 0;
  if (t->type != J_ARR || t->size != 1 || t[1].type != J_STR) return -1;
  w = m->desc + t[1].start;
  n = t[1].end - t[1].start;
  if (n < 2 || w[0] != '$') return -1;
  for (p = 1; p < n; p++) {
    if (w[p] < '0' || w[p] > '9' || var > m->num_vars) return -1;
    var = var * 10 + (w[p] - '0');
  }
  return var < m->num_vars ? var : -1;
}

static void err_var(const size_var_t *v) {
  err_strn(v->name, 64);
  err_str(" in ");
  err_u64((uint64_t)v->lo);
  err_str("..");
  err_u64((uint64_t)v->hi);
}

/* set_input of input `i` whose shape is symbolic: dtype and rank as compiled, each dimension
 * that is a variable within the variable's range (it binds the variable), a constant one equal,
 * the bytes those of the shape; a dimension that is an expression is checked at run. */
static int set_symbolic_input(tvmc_model *m, int32_t i, const char *dtype, const int64_t *shape, int32_t ndim,
                              const void *data, size_t nbytes) {
  tensor_t *t = &m->inputs[i];
  const entry_t *e = &m->entries[t->entry];
  const jtok *toks = m->toks;
  uint64_t need = dtypes[e->dtype].size;
  int64_t k, tok;
  if (ndim != e->ndim || cstr_len(dtype) != cstr_len(dtypes[e->dtype].name) ||
      !bytes_equal(dtype, dtypes[e->dtype].name, cstr_len(dtype))) {
    fail(TVMC_ERR_INPUT, "input '", NULL, NULL);
    err_strn(t->name, 64);
    err_str("': expected ");
    err_str(dtypes[e->dtype].name);
    err_str(" of ");
    err_u64((uint64_t)e->ndim);
    err_str(" dimensions, got ");
    err_strn(dtype, 16);
    err_str(" of ");
    err_u64((uint64_t)(ndim < 0 ? 0 : ndim));
    return TVMC_ERR_INPUT;
  }
  for (k = 0, tok = e->sym + 1; k < ndim; k++, tok = toks[tok].next) {
    int64_t d = shape[k], c = 0, var = dim_var(m, tok);
    if (var >= 0) {
      const size_var_t *v = &m->vars[var];
      if (d < v->lo || d > v->hi) {
        fail(TVMC_ERR_INPUT, "input '", NULL, NULL);
        err_strn(t->name, 64);
        err_str("': dimension ");
        err_u64((uint64_t)k);
        err_str(" is ");
        if (d < 0) { err_str("-"); err_u64((uint64_t)(-(d + 1)) + 1); } else err_u64((uint64_t)d);
        err_str(", outside the range of ");
        err_var(v);
        err_str(" the model was compiled for");
        return TVMC_ERR_INPUT;
      }
    } else if (toks[tok].type == J_NUM && (!j_uint(m->desc, &toks[tok], &c) || d != c)) {
      fail(TVMC_ERR_INPUT, "input '", NULL, NULL);
      err_strn(t->name, 64);
      err_str("': dimension ");
      err_u64((uint64_t)k);
      err_str(" must be ");
      err_u64((uint64_t)c);
      err_str(", got ");
      err_dims(ndim, shape);
      return TVMC_ERR_INPUT;
    }
    if (d < 0 || d > e->shape[k]) return fail(TVMC_ERR_INPUT, "input '", t->name, "': a dimension is outside its bound");
    need *= (uint64_t)d;
  }
  if ((uint64_t)nbytes != need) {
    fail(TVMC_ERR_INPUT, "input '", NULL, NULL);
    err_strn(t->name, 64);
    err_str("': shape ");
    err_dims(ndim, shape);
    err_str(" is ");
    err_u64(need);
    err_str(" bytes, got ");
    err_u64((uint64_t)nbytes);
    return TVMC_ERR_INPUT;
  }
  for (k = 0, tok = e->sym + 1; k < ndim; k++, tok = toks[tok].next) {
    int64_t var = dim_var(m, tok);
    t->given[k] = shape[k];
    if (var >= 0) {
      m->sizes[var] = shape[k];
      m->vars[var].set_by = i;
    }
  }
  if (nbytes) memcpy(m->pointers[t->entry], data, nbytes);
  return TVMC_OK;
}

/* Before a run of a model with symbolic shapes: every shape evaluated at the variables' values,
 * and each input's shape as set equal to its evaluated shape (inputs sharing a variable agree). */
static int bind_shapes(tvmc_model *m) {
  int32_t i;
  int64_t k, tok;
  int rc = eval_shapes(m);
  if (rc != TVMC_OK) return rc;
  for (i = 0; i < m->num_inputs; i++) {
    const tensor_t *t = &m->inputs[i];
    const entry_t *e = &m->entries[t->entry];
    if (e->sym < 0) continue;
    for (k = 0, tok = e->sym + 1; k < e->ndim; k++, tok = m->toks[tok].next) {
      int64_t var = dim_var(m, tok);
      if (t->given[k] == e->cur[k]) continue;
      fail(TVMC_ERR_INPUT, "input '", NULL, NULL);
      err_strn(t->name, 64);
      err_str("': dimension ");
      err_u64((uint64_t)k);
      err_str(" is ");
      err_u64((uint64_t)t->given[k]);
      if (var >= 0) {
        err_str(", but ");
        err_strn(m->vars[var].name, 64);
        err_str(" is ");
        err_u64((uint64_t)m->sizes[var]);
        if (m->vars[var].set_by >= 0) {
          err_str(" (from input '");
          err_strn(m->inputs[m->vars[var].set_by].name, 64);
          err_str("')");
        }
      } else {
        err_str(", but the other inputs' sizes make it ");
        err_u64((uint64_t)e->cur[k]);
      }
      return TVMC_ERR_INPUT;
    }
  }
  return TVMC_OK;
}
#endif

int tvmc_model_set_input(tvmc_model *model, const char *name, const char *dtype, const int64_t *shape,
                         int32_t ndim, const void *data, size_t nbytes) {
  int32_t i, k;
  const entry_t *e = NULL;
  int same_kind, same_shape;
  if (!model || !name || !dtype || (ndim && !shape) || (nbytes && !data))
    return fail(TVMC_ERR_ARGUMENT, "tvmc_model_set_input: NULL argument", NULL, NULL);
  for (i = 0; i < model->num_inputs; i++) {
    if (cstr_len(model->inputs[i].name) == cstr_len(name) &&
        bytes_equal(model->inputs[i].name, name, cstr_len(name))) {
      e = &model->entries[model->inputs[i].entry];
      break;
    }
  }
  if (!e) {
    fail(TVMC_ERR_ARGUMENT, "unknown input '", NULL, NULL);
    err_strn(name, 64);
    err_str("'");
    return TVMC_ERR_ARGUMENT;
  }
#ifdef TVMC_SYMBOLIC_SHAPES
  if (e->sym >= 0) return set_symbolic_input(model, i, dtype, shape, ndim, data, nbytes);
#endif
  same_kind = ndim == e->ndim && cstr_len(dtype) == cstr_len(dtypes[e->dtype].name) &&
              bytes_equal(dtype, dtypes[e->dtype].name, cstr_len(dtype));
  same_shape = same_kind;
  for (k = 0; same_shape && k < ndim; k++) same_shape = shape[k] == e->shape[k];
  if (!same_shape || (uint64_t)nbytes != e->nbytes) {
    fail(TVMC_ERR_INPUT, "input '", NULL, NULL);
    err_strn(name, 64);
    err_str("': expected ");
    err_shape(dtypes[e->dtype].name, e->ndim, e->shape, e->nbytes);
    err_str(", got ");
    err_strn(dtype, 16);
    err_str(" of ");
    err_u64((uint64_t)(ndim < 0 ? 0 : ndim));
    err_str(" dimensions (");
    err_u64((uint64_t)nbytes);
    err_str(" bytes)");
    if (same_kind && !same_shape)  /* another size of the same rank and dtype: say how to compile a range */
      err_str("; the artifact is fixed-shape: compile it for a range of sizes to run others "
              "(tvmc compile --input-shapes NAME:[LO..HI,...] or --dim-range VAR=LO..HI)");
    return TVMC_ERR_INPUT;
  }
  if (nbytes) memcpy(model->pointers[model->inputs[i].entry], data, nbytes);
  return TVMC_OK;
}

int tvmc_model_run(tvmc_model *model) {
  if (!model) return fail(TVMC_ERR_ARGUMENT, "tvmc_model_run: model is NULL", NULL, NULL);
#ifdef TVMC_SYMBOLIC_SHAPES
  if (model->num_vars) {
    int rc = bind_shapes(model);
    if (rc != TVMC_OK) return rc;
  }
#endif
  tvmc_graph_run((void *const *)model->pointers);
  return TVMC_OK;
}

void *const *tvmc_model_entries(const tvmc_model *model) { return model ? (void *const *)model->pointers : NULL; }

/* The run-time shape of output `t` into shape[0..ndim) and its size in bytes; the shape entry is
 * checked against the bound (a kernel wrote it). */
static int run_time_shape(const tvmc_model *m, const tensor_t *t, int64_t *shape, uint64_t *nbytes) {
  const entry_t *e = &m->entries[t->entry];
#ifdef TVMC_SYMBOLIC_SHAPES
  const int64_t *dims = t->shape_entry < 0 ? e->cur : (const int64_t *)m->pointers[t->shape_entry];
#else
  const int64_t *dims = t->shape_entry < 0 ? e->shape : (const int64_t *)m->pointers[t->shape_entry];
#endif
  int32_t k;
  *nbytes = dtypes[e->dtype].size;
  for (k = 0; k < e->ndim; k++) {
    if (dims[k] < 0 || dims[k] > e->shape[k]) {
      fail(TVMC_ERR_OUTPUT, "output '", NULL, NULL);
      err_strn(t->name, 64);
      err_str("' has run-time shape ");
      err_dims(e->ndim, dims);
      err_str(", outside its bound ");
      err_dims(e->ndim, e->shape);
      err_str(" (do the inputs break a --value-range stated at compile time?)");
      return TVMC_ERR_OUTPUT;
    }
    shape[k] = dims[k];
    *nbytes *= (uint64_t)dims[k];
  }
  return TVMC_OK;
}

int tvmc_model_output_shape(const tvmc_model *model, int32_t index, int64_t *shape, int32_t ndim) {
  uint64_t nbytes;
  if (!model || (ndim && !shape)) return fail(TVMC_ERR_ARGUMENT, "tvmc_model_output_shape: NULL argument", NULL, NULL);
  if (index < 0 || index >= model->num_outputs)
    return fail(TVMC_ERR_ARGUMENT, "tvmc_model_output_shape: index out of range", NULL, NULL);
  if (ndim != model->entries[model->outputs[index].entry].ndim)
    return fail(TVMC_ERR_ARGUMENT, "tvmc_model_output_shape: ndim is not the output's", NULL, NULL);
  return run_time_shape(model, &model->outputs[index], shape, &nbytes);
}

int tvmc_model_get_output(const tvmc_model *model, int32_t index, void *data, size_t nbytes) {
  const entry_t *e;
  const tensor_t *t;
  int64_t shape[MAX_NDIM + 1], pos[MAX_NDIM + 1];
  uint64_t need, row, offset;
  int32_t k;
  int rc;
  if (!model || (nbytes && !data)) return fail(TVMC_ERR_ARGUMENT, "tvmc_model_get_output: NULL argument", NULL, NULL);
  if (index < 0 || index >= model->num_outputs)
    return fail(TVMC_ERR_ARGUMENT, "tvmc_model_get_output: index out of range", NULL, NULL);
  t = &model->outputs[index];
  e = &model->entries[t->entry];
  if ((rc = run_time_shape(model, t, shape, &need)) != TVMC_OK) return rc;
  if ((uint64_t)nbytes != need) {
    fail(TVMC_ERR_OUTPUT, "output '", NULL, NULL);
    err_strn(t->name, 64);
    err_str("' has ");
    err_u64(need);
    err_str(" bytes, the buffer ");
    err_u64((uint64_t)nbytes);
    return TVMC_ERR_OUTPUT;
  }
  if (!nbytes) return TVMC_OK;
  if (t->shape_entry < 0 || e->ndim == 0) {
    memcpy(data, model->pointers[t->entry], nbytes);
    return TVMC_OK;
  }
  /* the leading corner of the bound, one innermost row at a time */
  row = (uint64_t)shape[e->ndim - 1] * dtypes[e->dtype].size;
  for (k = 0; k < e->ndim; k++) pos[k] = 0;
  for (offset = 0; offset < nbytes; offset += row) {
    uint64_t src = 0;
    for (k = 0; k < e->ndim; k++) src = src * (uint64_t)e->shape[k] + (uint64_t)pos[k];
    memcpy((char *)data + offset, (const char *)model->pointers[t->entry] + src * dtypes[e->dtype].size, row);
    for (k = e->ndim - 2; k >= 0 && ++pos[k] == shape[k]; k--) pos[k] = 0;
  }
  return TVMC_OK;
}
