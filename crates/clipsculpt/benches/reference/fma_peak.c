// The CPU's f32 peak: 24 independent AVX-512 fused multiply-add chains per thread (no loads), N threads
// (default 2, at most 64); prints GFLOP/s. Context for the products' rates, not part of any build:
//   gcc -O2 -mavx512f -mfma -pthread benches/reference/fma_peak.c -o /tmp/fma_peak && /tmp/fma_peak 2
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define ITERS 200000000L
static void *work(void *out) {
  __m512 a[24]; __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 24; i++) a[i] = _mm512_set1_ps((float)i);
  for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  __m512 s = a[0]; for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, a[i]);
  *(float *)out = _mm512_reduce_add_ps(s); return 0;
}
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 1 || n > 64) { fprintf(stderr, "usage: fma_peak [THREADS, 1-64]\n"); return 2; }
  pthread_t t[64]; float o[64];
  struct timespec s, e; clock_gettime(CLOCK_MONOTONIC, &s);
  for (int i = 0; i < n; i++) pthread_create(&t[i], 0, work, &o[i]);
  for (int i = 0; i < n; i++) pthread_join(t[i], 0);
  clock_gettime(CLOCK_MONOTONIC, &e);
  double sec = (e.tv_sec - s.tv_sec) + (e.tv_nsec - s.tv_nsec) * 1e-9;
  printf("%d threads: %.0f GFLOP/s (%.2f s, checksum %g)\n", n, n * ITERS * 24.0 * 16 * 2 / sec / 1e9, sec, o[0]);
}
