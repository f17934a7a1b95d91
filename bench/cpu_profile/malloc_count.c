/* SPDX-License-Identifier: Apache-2.0 */
// LD_PRELOAD shim: counts malloc/calloc/realloc calls of the whole process; prints them at exit.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
static atomic_long n_malloc, n_calloc, n_realloc;
void* malloc(size_t n) { atomic_fetch_add_explicit(&n_malloc, 1, memory_order_relaxed); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { atomic_fetch_add_explicit(&n_calloc, 1, memory_order_relaxed); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { atomic_fetch_add_explicit(&n_realloc, 1, memory_order_relaxed); return __libc_realloc(p, n); }
__attribute__((destructor)) static void report(void) {
  char buf[160];
  int len = snprintf(buf, sizeof buf, "malloc_count: malloc %ld calloc %ld realloc %ld\n", (long)n_malloc, (long)n_calloc, (long)n_realloc);
  if (write(2, buf, len) < 0) {}
}
