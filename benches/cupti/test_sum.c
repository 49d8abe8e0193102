/* sum.c on made-up activities whose sums are known: the half of the
 * tracer that needs no GPU. Run by benches/cupti/build.sh --check. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sum.h"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  assert(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = calloc(1, (size_t)n + 1);
  assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  return buf;
}

static void has(const char *text, const char *want) {
  if (!strstr(text, want)) {
    fprintf(stderr, "missing: %s\n--- in:\n%s\n", want, text);
    exit(1);
  }
}

/* Write `s` as PREFIX-SUFFIX, free it, and read back the summary. */
static char *written(Sum *s, const char *prefix, const char *suffix) {
  char path[512];
  snprintf(path, sizeof path, "%s-%s", prefix, suffix);
  assert(sum_write(s, path) == 0);
  sum_free(s);
  snprintf(path, sizeof path, "%s-%s.txt", prefix, suffix);
  return slurp(path);
}

int main(int argc, char **argv) {
  const char *prefix = argc > 1 ? argv[1] : "/tmp/gpufeed-cupti-test";
  const uint64_t MS = 1000000;
  Sum *s = sum_new(1000 * MS, 3);
  /* Before the window is set nothing counts. */
  sum_api(s, SUM_DRIVER, 5, "cuEarly", 7, 1001 * MS, 1002 * MS);
  sum_window(s, 2000 * MS, 2100 * MS, 2001 * MS);
  sum_stream(s, 13, 2, 0);
  sum_stream(s, 14, 1, -1);
  /* Two workers and the batch thread; one call outside the window. */
  sum_thread(s, 101, "gpufeed-cpu-0\n");
  sum_thread(s, 102, "gpufeed-cpu-1");
  sum_thread(s, 103, "gpufeed-batch");
  sum_api(s, SUM_DRIVER, 300, "cuMemFreeHost", 101, 2000 * MS, 2004 * MS);
  sum_api(s, SUM_DRIVER, 300, "cuMemFreeHost", 102, 2010 * MS, 2012 * MS);
  sum_api(s, SUM_DRIVER, 12, "cuEventQuery", 103, 2020 * MS, 2020 * MS + 1000);
  sum_api(s, SUM_DRIVER, 12, "cuEventQuery", 103, 2200 * MS, 2201 * MS);
  sum_api(s, SUM_RUNTIME, 2000, "cudaHuge", 103, 2020 * MS, 2021 * MS);
  /* A wait still running when the window closes: 5 of its 35 ms count. */
  sum_thread(s, 104, "gpufeed-engine-0");
  sum_api(s, SUM_DRIVER, 40, "cuEventSynchronize", 104, 2095 * MS, 2130 * MS);
  /* Kernels on two streams overlapping 5 ms; a copy beside one. */
  sum_kernel(s, 13, "idct\"x", 2030 * MS, 2040 * MS);
  sum_kernel(s, 14, "idct\"x", 2035 * MS, 2045 * MS);
  sum_kernel(s, 14, "color", 2050 * MS, 2150 * MS); /* runs past the window: cut at 2100 */
  sum_memcpy(s, 13, 1, 1, 3, 0, 2000000, 2060 * MS, 2062 * MS);
  sum_memset(s, 13, 64, 2090 * MS, 2091 * MS);
  sum_note(s, "made-up activities");
  sum_close(s, 2150 * MS); /* after the window's end: no change */
  uint32_t tids[8];
  assert(sum_tids(s, tids, 8) == 4 && tids[2] == 103);
  assert(sum_write(s, prefix) == 0);
  sum_free(s);

  char path[512];
  snprintf(path, sizeof path, "%s.txt", prefix);
  char *txt = slurp(path);
  has(txt, "window of 100.0 ms");
  has(txt, "made-up activities");
  has(txt, "unknown domain or callback id: 1");
  /* The workers fold into one group: 6 ms of 2 threads' 100 ms. */
  has(txt, "gpufeed-cpu (2 threads): 2 calls, 6.0 ms in calls (3.0 % of the threads' window)");
  has(txt, "cuMemFreeHost                                        2       6.00    3000.0     4.000");
  has(txt, "gpufeed-batch (1 threads): 1 calls, 0.0 ms");
  has(txt, "gpufeed-engine (1 threads): 1 calls, 5.0 ms in calls (5.0 % of the threads' window)");
  has(txt, "cuEventSynchronize                                   1       5.00    5000.0    35.000");
  has(txt, "      13 non-blocking      0        1      10.00       1      2.00      2.00      1     1.00");
  has(txt, "      14 blocking         -1        2      60.00");
  has(txt, "HtoD pageable>device sync          1 copies      2.00 MB      2.00 ms");
  /* "color" counts up to the window's end. */
  has(txt, "       1      50.00 ms  50000.0 us  color");
  /* Any: 2030-2045, 2050-2100 = 65; a kernel: the same; two: 2035-2040;
   * the copy (2060-2062) and memset (2090-2091) beside "color". */
  has(txt, "any work 65.0 ms; a kernel 65.0; two or more kernels 5.0; a copy or memset beside a kernel 3.0");
  /* Cap 3: the events starting in [2000, 2001) ms are the first call
   * only; nothing else fits the trace's part of the window. */
  has(txt, "trace events kept 1, left out 0 (cap 3)");
  free(txt);

  snprintf(path, sizeof path, "%s.json", prefix);
  char *json = slurp(path);
  has(json, "{\"ph\":\"X\",\"pid\":1,\"tid\":101,\"name\":\"cuMemFreeHost\",\"ts\":1000000.000,\"dur\":4000.000}");
  has(json, "\"args\":{\"name\":\"gpufeed-cpu-0\"}");
  has(json, "\"args\":{\"name\":\"stream 14 (blocking)\"}");
  free(json);
  /* A process exiting mid-window closes it where it is. */
  Sum *e = sum_new(0, 10);
  sum_window(e, 10 * MS, 100 * MS, 100 * MS);
  sum_close(e, 50 * MS);
  txt = written(e, prefix, "exit");
  has(txt, "window of 40.0 ms");
  free(txt);

  /* Memory calls: the table of live allocations through growth and
   * deletions, what each free in the window was, and the stacks. */
  Sum *m = sum_new(0, 10);
  sum_window(m, 100 * MS, 200 * MS, 100 * MS);
  sum_thread(m, 7, "gpufeed-engine-0");
  sum_thread(m, 8, "gpufeed-engine-1");
  sum_thread(m, 9, "gpufeed-batch");
  sum_mem_alloc(m, "cuMemAllocPitch_v2", 7, 0xA000, 4096, 0);
  sum_mem_alloc(m, "cuMemAlloc_v2", 7, 0xB000, 8192, 60 * MS);
  sum_mem_free(m, "cuMemFree_v2", 7, 0xB000, 70 * MS);
  assert(!sum_wants_stack(m, 0xB000)); /* before the window */
  for (uint64_t i = 0; i < 3000; i++)
    sum_mem_alloc(m, "cuMemAlloc_v2", 7, 0x100000 + 256 * i, 256, 80 * MS);
  for (uint64_t i = 0; i < 3000; i += 3) sum_mem_free(m, "cuMemFree_v2", 8, 0x100000 + 256 * i, 90 * MS);
  for (uint64_t i = 0; i < 3000; i++) sum_mem_free(m, "cuMemFree_v2", 7, 0x100000 + 256 * i, 160 * MS);
  sum_mem_free(m, "cuMemFree_v2", 8, 0xA000, 150 * MS);
  for (int i = 0; i < 3; i++) {
    sum_mem_free(m, "cuMemFree_v2", 7 + (uint32_t)(i % 2), 0, (120 + (uint64_t)i) * MS);
    assert(sum_wants_stack(m, 0) == (i < 2));
    if (i < 2) sum_stack(m, "cuMemFree_v2", 7, 0, "    libnvjpeg.so.13(+0x1234)\n");
  }
  assert(sum_wants_stack(m, 0xA000));
  sum_mem_free(m, "cuMemFree_v2", 8, 0xB000, 130 * MS);
  sum_mem_alloc(m, "cuMemAllocAsync", 9, 0xC000, 512, 140 * MS);
  sum_mem_free(m, "cuMemFreeAsync", 9, 0xC000, 141 * MS);
  sum_mem_free(m, "cuMemFree_v2", 8, 0xA000, 250 * MS); /* after the window */
  txt = written(m, prefix, "mem");
  has(txt, "  gpufeed-engine: cuMemFree_v2, 2000: free of memory allocated before the window (by cuMemAlloc_v2 on gpufeed-engine, 80.000 ms before on average); 0.512 MB, 256 to 256 bytes each\n");
  has(txt, "  gpufeed-engine: cuMemFree_v2, 1001: free of memory never seen allocated\n");
  has(txt, "  gpufeed-engine: cuMemFree_v2, 3: free of a null pointer\n");
  has(txt, "  gpufeed-engine: cuMemFree_v2, 1: free of memory allocated before the window (by cuMemAllocPitch_v2 on gpufeed-engine, 150.000 ms before on average); 0.004 MB, 4096 to 4096 bytes each\n");
  has(txt, "  gpufeed-batch: cuMemAllocAsync, 1: allocation; 0.001 MB, 512 to 512 bytes each\n");
  has(txt, "  gpufeed-batch: cuMemFreeAsync, 1: free of memory allocated in the window (by cuMemAllocAsync on gpufeed-batch, 1.000 ms before on average); 0.001 MB, 512 to 512 bytes each\n");
  has(txt, "  call stack of a cuMemFree_v2 on gpufeed-engine, pointer 0x0:\n    libnvjpeg.so.13(+0x1234)\n");
  free(txt);
  puts("test_sum: ok");
  return 0;
}
