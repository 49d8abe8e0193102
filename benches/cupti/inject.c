/* A CUPTI activity tracer for gpufeed's GPU runs: where the GPU machine
 * has no Nsight Systems (docs/BENCHMARKS.md; the device tool's nsys
 * cannot make a report), this says which host threads wait in which CUDA
 * calls and what runs on which stream, for issue 16's open question: why
 * both nvJPEG routes at once run slower than either alone.
 *
 * The CUDA driver loads it at cuInit when CUDA_INJECTION64_PATH names it
 * and calls InitializeInjection (CUPTI's injection samples). It traces
 * one window of the run, so that the steady state is seen and the
 * tracing's cost stays out of the rest:
 *
 *   GPUFEED_CUPTI_OUT      file prefix (default gpufeed-cupti): PREFIX.txt,
 *                          the summary, and PREFIX.json, a Chrome trace
 *   GPUFEED_CUPTI_FROM_S   seconds after cuInit the window opens (4)
 *   GPUFEED_CUPTI_FOR_S    its length in seconds (1)
 *   GPUFEED_CUPTI_TRACE_S  the part of it kept as a Chrome trace (0.25)
 *
 * GPU activities (kernels, copies, memsets) and stream creations are
 * recorded from the start, since CUPTI may miss kernels of modules loaded
 * before their kind is enabled; API calls only in the window, since each
 * traced call costs the calling thread. The files are written by the
 * tracer's own thread as the window closes, while the pipeline's threads
 * still live to be named; a process that ends earlier writes at exit.
 *
 * Beside the activity records, driver callbacks on the memory calls
 * (allocations from cuInit, frees in the window) give what the records
 * lack: each free's pointer, and whether and where its memory was
 * allocated, with the call stacks of the window's first frees. */
/* cupti.h: the activity and callback APIs, and the calls' parameter
 * structures (generated_cuda_meta.h, which needs cupti.h's stand-ins for
 * the obsolete v1 types). */
#include <cupti.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sum.h"

/* CUPTI's activity buffers: large enough that a window of API tracing on
 * 20 threads does not drop records (CUPTI counts drops; the summary
 * notes them). */
#define BUFFER_BYTES (32u << 20)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER;
static Sum *sum;
/* The window opened; finish() began; finish() wrote the files. */
static int opened, written, done;
static char prefix[1024] = "gpufeed-cupti";

static const CUpti_ActivityKind GPU_KINDS[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET};
static const CUpti_ActivityKind API_KINDS[] = {CUPTI_ACTIVITY_KIND_DRIVER,
                                               CUPTI_ACTIVITY_KIND_RUNTIME};

static CUpti_SubscriberHandle subscriber;
static int subscribed;

static const CUpti_CallbackId MEMORY_CALLS[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,       CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,   CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,     CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,   CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,       CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync};

/* Under `lock`. */
static void note_locked(const char *what, CUptiResult r) {
  const char *msg = NULL;
  if (cuptiGetResultString(r, &msg) != CUPTI_SUCCESS) msg = NULL;
  char line[512];
  snprintf(line, sizeof line, "CUPTI error: %s: %s", what, msg ? msg : "?");
  sum_note(sum, line);
  fprintf(stderr, "gpufeed-cupti: %s\n", line);
}

static void check(const char *what, CUptiResult r) {
  if (r == CUPTI_SUCCESS) return;
  pthread_mutex_lock(&lock);
  note_locked(what, r);
  pthread_mutex_unlock(&lock);
}

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  /* CUPTI wants 8-byte aligned buffers (cupti_activity.h). */
  *buffer = aligned_alloc(8, BUFFER_BYTES);
  *size = *buffer ? BUFFER_BYTES : 0;
  *max_records = 0;
}

/* Under `lock`. */
static void record(const CUpti_Activity *a) {
  switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      const CUpti_ActivityAPI *r = (const CUpti_ActivityAPI *)a;
      CUpti_CallbackDomain d = a->kind == CUPTI_ACTIVITY_KIND_DRIVER
                                   ? CUPTI_CB_DOMAIN_DRIVER_API
                                   : CUPTI_CB_DOMAIN_RUNTIME_API;
      /* The names are CUPTI's static strings. */
      const char *name = NULL;
      if (cuptiGetCallbackName(d, r->cbid, &name) != CUPTI_SUCCESS) name = NULL;
      sum_api(sum, (int)d, r->cbid, name, r->threadId, r->start, r->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
      sum_kernel(sum, k->streamId, k->name, k->start, k->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
      int async = (m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) != 0;
      sum_memcpy(sum, m->streamId, m->copyKind, m->srcKind, m->dstKind, async, m->bytes,
                 m->start, m->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
      sum_memset(sum, m->streamId, m->bytes, m->start, m->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_STREAM: {
      const CUpti_ActivityStream *s = (const CUpti_ActivityStream *)a;
      sum_stream(sum, s->streamId, (int)s->flag, (int)s->priority);
      break;
    }
    default:
      break;
  }
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                               size_t valid) {
  (void)size;
  pthread_mutex_lock(&lock);
  CUpti_Activity *a = NULL;
  while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) record(a);
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped) {
    char line[128];
    snprintf(line, sizeof line, "CUPTI dropped %zu records (buffers full)", dropped);
    sum_note(sum, line);
  }
  pthread_mutex_unlock(&lock);
  free(buffer);
}

/* The calling thread's stack, one frame a line, without the tracer's own
 * two frames: each frame's library and its nearest exported symbol. */
#define SAME_HEAD(T, U, a, b)                                               \
  _Static_assert(offsetof(T, a) == offsetof(U, a) && offsetof(T, b) == offsetof(U, b), \
                 #U " begins as " #T " does")
SAME_HEAD(cuMemAlloc_v2_params, cuMemAllocAsync_params, dptr, bytesize);
SAME_HEAD(cuMemAlloc_v2_params, cuMemAllocFromPoolAsync_params, dptr, bytesize);
SAME_HEAD(cuMemAlloc_v2_params, cuMemAllocManaged_params, dptr, bytesize);
SAME_HEAD(cuMemAllocHost_v2_params, cuMemHostAlloc_params, pp, bytesize);

__attribute__((noinline)) static void walk(char *out, size_t size) {
  void *pcs[32];
  int n = backtrace(pcs, 32);
  size_t o = 0;
  out[0] = 0;
  for (int i = 2; i < n && o + 256 < size; i++) {
    Dl_info info;
    int w;
    if (dladdr(pcs[i], &info) && info.dli_fname) {
      const char *lib = strrchr(info.dli_fname, '/');
      lib = lib ? lib + 1 : info.dli_fname;
      if (info.dli_sname && info.dli_saddr)
        w = snprintf(out + o, size - o, "    %s(%s+0x%lx)\n", lib, info.dli_sname,
                     (unsigned long)((char *)pcs[i] - (char *)info.dli_saddr));
      else
        w = snprintf(out + o, size - o, "    %s(+0x%lx)\n", lib,
                     (unsigned long)((char *)pcs[i] - (char *)info.dli_fbase));
    } else {
      w = snprintf(out + o, size - o, "    %p\n", pcs[i]);
    }
    if (w < 0) break;
    o += (size_t)w;
  }
}

/* Frees on entry (the pointer), allocations on a successful exit (the
 * pointer the call wrote). */
__attribute__((noinline)) static void CUPTIAPI on_memory(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                               const void *data) {
  (void)userdata;
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !data) return;
  const CUpti_CallbackData *cb = data;
  const void *p = cb->functionParams;
  uint64_t t = 0;
  if (!p || cuptiGetTimestamp(&t) != CUPTI_SUCCESS) return;
  uint32_t tid = (uint32_t)gettid();
  if (cb->callbackSite == CUPTI_API_ENTER) {
    uint64_t ptr;
    switch (id) {
      case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
        ptr = (uint64_t)((const cuMemFree_v2_params *)p)->dptr;
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
        ptr = (uint64_t)(uintptr_t)((const cuMemFreeHost_params *)p)->p;
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
        ptr = (uint64_t)((const cuMemFreeAsync_params *)p)->dptr;
        break;
      default:
        return;
    }
    pthread_mutex_lock(&lock);
    sum_mem_free(sum, cb->functionName, tid, ptr, t);
    int want = sum_wants_stack(sum, ptr);
    pthread_mutex_unlock(&lock);
    if (want) {
      /* Outside the lock: dladdr takes the loader's. */
      char frames[4096];
      walk(frames, sizeof frames);
      pthread_mutex_lock(&lock);
      sum_stack(sum, cb->functionName, tid, ptr, frames);
      pthread_mutex_unlock(&lock);
    }
    return;
  }
  const CUresult *rc = cb->functionReturnValue;
  if (cb->callbackSite != CUPTI_API_EXIT || !rc || *rc != CUDA_SUCCESS) return;
  uint64_t ptr = 0, bytes = 0;
  switch (id) {
    /* These four begin with the same two fields (asserted below). */
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      const cuMemAlloc_v2_params *a = p;
      ptr = a->dptr ? (uint64_t)*a->dptr : 0;
      bytes = a->bytesize;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
      const cuMemAllocHost_v2_params *a = p;
      ptr = a->pp ? (uint64_t)(uintptr_t)*a->pp : 0;
      bytes = a->bytesize;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      const cuMemAllocPitch_v2_params *a = p;
      ptr = a->dptr ? (uint64_t)*a->dptr : 0;
      bytes = a->pPitch ? (uint64_t)*a->pPitch * a->Height : 0;
      break;
    }
    default:
      return;
  }
  pthread_mutex_lock(&lock);
  sum_mem_alloc(sum, cb->functionName, tid, ptr, bytes, t);
  pthread_mutex_unlock(&lock);
}

static double env_seconds(const char *name, double fallback) {
  const char *v = getenv(name);
  char *end = NULL;
  double x = v ? strtod(v, &end) : fallback;
  return v && end != v && x >= 0 ? x : fallback;
}

static void sleep_seconds(double s) {
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&t, &t) != 0) {
  }
}

/* Name the threads seen from /proc while they live (gettid ids: the
 * tracer asks CUPTI for system thread ids). Under `lock`. */
static void name_threads(void) {
  uint32_t tids[256];
  size_t n = sum_tids(sum, tids, 256);
  for (size_t i = 0; i < n && i < 256; i++) {
    char path[64], name[64] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%u/comm", tids[i]);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(name, sizeof name, f)) sum_thread(sum, tids[i], name);
    fclose(f);
  }
}

/* Close the window (if open), flush, name, write; once. Tracing stops
 * with it, so the rest of the run goes untraced. The flush runs the
 * buffer callback on this thread, which takes `lock`. */
static void finish(const char *why) {
  pthread_mutex_lock(&lock);
  int first = !written;
  written = 1;
  int was_open = opened;
  pthread_mutex_unlock(&lock);
  if (!first) return;
  /* At exit with the window never opened there is nothing to flush, and
   * CUPTI calls then may meet a driver already shutting down. */
  if (was_open) {
    uint64_t now = 0;
    if (cuptiGetTimestamp(&now) == CUPTI_SUCCESS) {
      pthread_mutex_lock(&lock);
      sum_close(sum, now);
      pthread_mutex_unlock(&lock);
    }
    if (subscribed) check("memory callbacks off", cuptiUnsubscribe(subscriber));
    for (size_t i = 0; i < sizeof API_KINDS / sizeof *API_KINDS; i++)
      check("disable API tracing", cuptiActivityDisable(API_KINDS[i]));
    for (size_t i = 0; i < sizeof GPU_KINDS / sizeof *GPU_KINDS; i++)
      check("disable GPU tracing", cuptiActivityDisable(GPU_KINDS[i]));
    check("flush", cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  }
  pthread_mutex_lock(&lock);
  if (!was_open) sum_note(sum, "the process ended before the window opened: nothing traced");
  sum_note(sum, why);
  name_threads();
  int rc = sum_write(sum, prefix);
  done = 1;
  pthread_cond_broadcast(&finished);
  pthread_mutex_unlock(&lock);
  fprintf(stderr, "gpufeed-cupti: %s %s.txt and %s.json\n", rc == 0 ? "wrote" : "could not write",
          prefix, prefix);
}

static void *timer(void *arg) {
  (void)arg;
  double from = env_seconds("GPUFEED_CUPTI_FROM_S", 4.0);
  double len = env_seconds("GPUFEED_CUPTI_FOR_S", 1.0);
  double json = env_seconds("GPUFEED_CUPTI_TRACE_S", 0.25);
  sleep_seconds(from);
  uint64_t now = 0;
  check("timestamp", cuptiGetTimestamp(&now));
  pthread_mutex_lock(&lock);
  if (written) {
    pthread_mutex_unlock(&lock);
    return NULL;
  }
  sum_window(sum, now, now + (uint64_t)(len * 1e9), now + (uint64_t)(json * 1e9));
  opened = 1;
  char line[160];
  snprintf(line, sizeof line, "window: %.3f s to %.3f s after cuInit; Chrome trace: its first %.3f s",
           from, from + len, json);
  sum_note(sum, line);
  pthread_mutex_unlock(&lock);
  for (size_t i = 0; i < sizeof API_KINDS / sizeof *API_KINDS; i++)
    check("enable API tracing", cuptiActivityEnable(API_KINDS[i]));
  sleep_seconds(len);
  /* GPU work queued in the window may end after it: let it land. */
  sleep_seconds(0.2);
  finish("written as the window closed");
  return NULL;
}

/* A process that ends while the tracer's thread is writing waits for the
 * files (at most 10 s), so that they are whole. */
static void at_exit(void) {
  finish("written at exit");
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  pthread_mutex_lock(&lock);
  while (!done && pthread_cond_timedwait(&finished, &lock, &until) == 0) {
  }
  pthread_mutex_unlock(&lock);
}

/* Called by the CUDA driver in cuInit (CUDA_INJECTION64_PATH). 1: go on. */
__attribute__((visibility("default"))) int InitializeInjection(void) {
  const char *out = getenv("GPUFEED_CUPTI_OUT");
  if (out && *out) snprintf(prefix, sizeof prefix, "%s", out);
  uint64_t t0 = 0;
  cuptiGetTimestamp(&t0);
  /* 120,000 events: ~13 MB of JSON, ~1.3 MB packed in the runner's logs. */
  sum = sum_new(t0, 120000);
  check("system thread ids", cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
  check("buffer callbacks", cuptiActivityRegisterCallbacks(requested, completed));
  check("stream records", cuptiActivityEnable(CUPTI_ACTIVITY_KIND_STREAM));
  for (size_t i = 0; i < sizeof GPU_KINDS / sizeof *GPU_KINDS; i++)
    check("GPU activity records", cuptiActivityEnable(GPU_KINDS[i]));
  /* Memory callbacks from the start: a free in the window can then say
   * where its memory was allocated. */
  CUptiResult r = cuptiSubscribe(&subscriber, on_memory, NULL);
  check("memory callbacks", r);
  subscribed = r == CUPTI_SUCCESS;
  for (size_t i = 0; subscribed && i < sizeof MEMORY_CALLS / sizeof *MEMORY_CALLS; i++)
    check("memory callback",
          cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, MEMORY_CALLS[i]));
  /* backtrace loads libgcc's unwinder on its first call: here, not in a
   * callback. */
  void *first[2];
  (void)backtrace(first, 2);
  /* Buffers hand back their records at least every half second, so that
   * the GPU records of start-up do not wait for the window's flush. */
  check("flush period", cuptiActivityFlushPeriod(500));
  atexit(at_exit);
  pthread_t t;
  if (pthread_create(&t, NULL, timer, NULL) == 0) pthread_detach(t);
  return 1;
}
