/* What the CUPTI tracer (inject.c) learns in its window, summed and
 * written out; no CUPTI here, so test_sum.c checks it on any machine.
 *
 * Times are nanoseconds on CUPTI's clock. Only activities that start in
 * the window [from, to) count, each up to the window's end (a call's
 * longest time excepted, which is the whole call); the Chrome trace
 * holds those that start in [from, json_to), at most json_cap of them,
 * whole. */
#ifndef GPUFEED_CUPTI_SUM_H
#define GPUFEED_CUPTI_SUM_H

#include <stddef.h>
#include <stdint.h>

typedef struct Sum Sum;

/* Domains of API calls, as CUPTI numbers them (CUpti_CallbackDomain). */
enum { SUM_DRIVER = 1, SUM_RUNTIME = 2 };

/* Trace times are microseconds from t0 (CUPTI's clock at start-up). */
Sum *sum_new(uint64_t t0, size_t json_cap);
void sum_free(Sum *s);
void sum_window(Sum *s, uint64_t from, uint64_t to, uint64_t json_to);
/* The window ends at `now` if it had not yet (the process is exiting). */
void sum_close(Sum *s, uint64_t now);

/* One host thread's call into the driver or runtime API. `name` must
 * outlive `s` (CUPTI's callback names are static). */
void sum_api(Sum *s, int domain, uint32_t cbid, const char *name, uint32_t tid, uint64_t start,
             uint64_t end);
/* GPU work on a stream. Kernel names are copied. */
void sum_kernel(Sum *s, uint32_t stream, const char *name, uint64_t start, uint64_t end);
void sum_memcpy(Sum *s, uint32_t stream, int copy_kind, int src_kind, int dst_kind, int async,
                uint64_t bytes, uint64_t start, uint64_t end);
void sum_memset(Sum *s, uint32_t stream, uint64_t bytes, uint64_t start, uint64_t end);
/* A stream's creation flag (CUpti_ActivityStreamFlag: 1 default, i.e.
 * blocking, 2 non-blocking, 3 the NULL stream). */
void sum_stream(Sum *s, uint32_t stream, int flag, int priority);
/* A thread's name (from /proc; the tracer reads it while the thread
 * lives). Copied. */
void sum_thread(Sum *s, uint32_t tid, const char *name);
/* Threads seen so far: fills `tids` (up to `cap`), returns the count. */
size_t sum_tids(const Sum *s, uint32_t *tids, size_t cap);
/* Memory calls, from the tracer's driver callbacks (inject.c), which see
 * what activity records do not: the pointer and the size. They are there
 * for 4bbffad's CUPTI window (docs/BENCHMARKS.md), where nvJPEG's
 * hardware decode called `cuMemFree` ~18 times a call with no allocation
 * beside it: freeing what, allocated where, or a null pointer?
 *
 * An allocation of `bytes` at `ptr` by `api` counts whenever it happens,
 * so that a free in the window can say who allocated its memory, and
 * when; a free (`ptr` 0: a null pointer) counts in the window only, as do
 * allocations' rows in the summary. `api` must outlive `s`. */
void sum_mem_alloc(Sum *s, const char *api, uint32_t tid, uint64_t ptr, uint64_t bytes,
                   uint64_t t);
void sum_mem_free(Sum *s, const char *api, uint32_t tid, uint64_t ptr, uint64_t t);
/* Whether the summary wants the call stack of the free just counted (the
 * first few of each kind: null, or not), and that stack, one frame a line
 * (copied; dropped where the room was taken meanwhile). */
int sum_wants_stack(const Sum *s, uint64_t ptr);
void sum_stack(Sum *s, const char *api, uint32_t tid, uint64_t ptr, const char *frames);

/* A note printed at the top of the summary (copied). */
void sum_note(Sum *s, const char *note);

/* PREFIX.txt (the summary) and PREFIX.json (the Chrome trace). 0 on
 * success. */
int sum_write(Sum *s, const char *prefix);

#endif
