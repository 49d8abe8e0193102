/* The tracer's memory callback (inject.c's on_memory) fed made-up driver
 * calls, as CUPTI would feed them: each call's parameters decoded, a free
 * matched to its allocation, a failed allocation ignored, a stack walked
 * through this binary. No driver needed (CUPTI's clock runs without one).
 * Run by benches/cupti/build.sh --check. */
#include "inject.c"

#include <assert.h>

static void call(CUpti_CallbackId id, const char *name, CUpti_ApiCallbackSite site, void *params,
                 CUresult rc) {
  CUpti_CallbackData cb;
  memset(&cb, 0, sizeof cb);
  cb.callbackSite = site;
  cb.functionName = name;
  cb.functionParams = params;
  cb.functionReturnValue = &rc;
  on_memory(NULL, CUPTI_CB_DOMAIN_DRIVER_API, id, &cb);
}

/* Not static and not inlined, so that the stack shows it. */
__attribute__((noinline)) void gpufeed_test_free_site(CUdeviceptr p) {
  cuMemFree_v2_params f = {p};
  call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", CUPTI_API_ENTER, &f, CUDA_SUCCESS);
}

int main(int argc, char **argv) {
  const char *out = argc > 1 ? argv[1] : "/tmp/gpufeed-inject-test";
  uint64_t t0 = 0;
  assert(cuptiGetTimestamp(&t0) == CUPTI_SUCCESS);
  sum = sum_new(t0, 10);
  sum_thread(sum, (uint32_t)gettid(), "gpufeed-engine-0");
  /* Before the window: a pitched allocation and a pinned one. */
  CUdeviceptr dptr = 0xD000;
  size_t pitch = 512;
  cuMemAllocPitch_v2_params ap = {&dptr, &pitch, 500, 4, 4};
  call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, "cuMemAllocPitch_v2", CUPTI_API_EXIT, &ap,
       CUDA_SUCCESS);
  void *host = (void *)0xE000;
  cuMemHostAlloc_params hp = {&host, 100, 0};
  call(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, "cuMemHostAlloc", CUPTI_API_EXIT, &hp, CUDA_SUCCESS);
  /* A failed allocation's pointer means nothing. */
  CUdeviceptr junk = 0xF000;
  cuMemAlloc_v2_params bad = {&junk, 64};
  call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", CUPTI_API_EXIT, &bad,
       CUDA_ERROR_OUT_OF_MEMORY);
  /* An allocation's entry says nothing yet. */
  call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", CUPTI_API_ENTER, &bad, CUDA_SUCCESS);
  uint64_t now = 0;
  assert(cuptiGetTimestamp(&now) == CUPTI_SUCCESS);
  sum_window(sum, now, now + 60ull * 1000000000ull, now);
  gpufeed_test_free_site(0xD000);
  gpufeed_test_free_site(0);
  gpufeed_test_free_site(0xF000);
  cuMemFreeHost_params fh = {host};
  call(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, "cuMemFreeHost", CUPTI_API_ENTER, &fh, CUDA_SUCCESS);
  CUdeviceptr a = 0xA000;
  cuMemAllocAsync_params aa = {&a, 256, NULL};
  call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, "cuMemAllocAsync", CUPTI_API_EXIT, &aa, CUDA_SUCCESS);
  cuMemFreeAsync_params fa = {0xA000, NULL};
  call(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, "cuMemFreeAsync", CUPTI_API_ENTER, &fa, CUDA_SUCCESS);
  /* Another domain, or an id the tracer does not watch: nothing. */
  on_memory(NULL, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, NULL);
  assert(sum_write(sum, out) == 0);

  char path[512];
  snprintf(path, sizeof path, "%s.txt", out);
  FILE *f = fopen(path, "r");
  assert(f);
  static char txt[1 << 16];
  size_t n = fread(txt, 1, sizeof txt - 1, f);
  fclose(f);
  txt[n] = 0;
  const char *want[] = {
      "gpufeed-engine: cuMemFree_v2, 1: free of memory allocated before the window (by "
      "cuMemAllocPitch_v2 on gpufeed-engine,",
      "; 0.002 MB, 2048 to 2048 bytes each\n",
      "gpufeed-engine: cuMemFree_v2, 1: free of a null pointer\n",
      "gpufeed-engine: cuMemFree_v2, 1: free of memory never seen allocated\n",
      "gpufeed-engine: cuMemFreeHost, 1: free of memory allocated before the window (by "
      "cuMemHostAlloc on gpufeed-engine,",
      "gpufeed-engine: cuMemAllocAsync, 1: allocation; 0.000 MB, 256 to 256 bytes each\n",
      "gpufeed-engine: cuMemFreeAsync, 1: free of memory allocated in the window (by "
      "cuMemAllocAsync",
      "call stack of a cuMemFree_v2 on gpufeed-engine, pointer 0xd000:\n",
      "call stack of a cuMemFree_v2 on gpufeed-engine, pointer 0x0:\n",
      "(gpufeed_test_free_site+0x",
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(txt, want[i])) {
      fprintf(stderr, "missing: %s\n--- in:\n%s\n", want[i], txt);
      return 1;
    }
  puts("test_inject: ok");
  return 0;
}
