/* The CUPTI tracer's sums and files (sum.h). Plain C, no CUPTI: the
 * tracer (inject.c) calls in under one lock. */
#include "sum.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Callback ids per domain: CUDA 13.0's CUPTI has 807 driver and 523
 * runtime ids (cupti_driver_cbid.h, cupti_runtime_cbid.h); larger ids
 * are counted as out of range, not dropped silently. */
#define CBIDS 1024

typedef struct {
  uint64_t calls, ns, max;
} Acc;

typedef struct {
  uint32_t tid;
  char name[32];
  Acc *api; /* [2][CBIDS]: driver, runtime */
} Thread;

typedef struct {
  uint32_t id;
  int flag, prio;
  uint64_t kernels, kernel_ns, copies, copy_ns, copy_bytes, sets, set_ns;
} Stream;

typedef struct {
  int copy, src, dst, async;
  uint64_t n, bytes, ns;
} Copy;

typedef struct {
  const char *key; /* the pointer last seen for this name */
  char *name;
  uint64_t n, ns;
} Kernel;

/* A GPU activity's span, for the concurrency sweep. */
typedef struct {
  uint64_t start, end;
  int kernel;
} Span;

/* A live allocation, by address (an open-addressing table). */
typedef struct {
  uint64_t ptr, bytes, t;
  const char *api;
  uint32_t tid;
} Live;

/* What a memory call in the window was. */
enum { M_ALLOC, M_NULL, M_IN_WINDOW, M_BEFORE, M_UNSEEN, M_KINDS };

typedef struct {
  const char *api, *by_api;
  uint32_t tid, by_tid;
  int origin;
  uint64_t bytes, age;
} Mem;

typedef struct {
  const char *api;
  uint32_t tid;
  uint64_t ptr;
  char *frames;
} Stack;

/* Memory-call records kept in the window; more are counted as left out. */
#define MEMS_CAP 200000
/* Call stacks kept: of frees of a null pointer, and of others. */
#define STACKS_NULL 2
#define STACKS_PTR 4

#define VEC(T)        \
  struct {            \
    T *v;             \
    size_t n, cap;    \
  }

struct Sum {
  uint64_t t0, from, to, json_to;
  size_t json_cap, json_n, json_dropped;
  char *json;
  size_t json_len, json_size;
  const char *names[2][CBIDS];
  uint64_t out_of_range;
  VEC(Thread) threads;
  VEC(Stream) streams;
  VEC(Copy) copies;
  VEC(Kernel) kernels;
  VEC(Span) spans;
  Live *live;
  size_t live_n, live_cap;
  VEC(Mem) mems;
  uint64_t mems_left_out;
  VEC(Stack) stacks;
  /* The last free was counted in the window. */
  int counted;
  char notes[4096];
};

#define PUSH(vec, item)                                                     \
  do {                                                                      \
    if ((vec).n == (vec).cap) {                                             \
      (vec).cap = (vec).cap ? 2 * (vec).cap : 16;                           \
      (vec).v = realloc((vec).v, (vec).cap * sizeof(*(vec).v));             \
      if (!(vec).v) abort();                                                \
    }                                                                       \
    (vec).v[(vec).n++] = (item);                                            \
  } while (0)

Sum *sum_new(uint64_t t0, size_t json_cap) {
  Sum *s = calloc(1, sizeof(Sum));
  if (!s) abort();
  s->t0 = t0;
  s->json_cap = json_cap;
  /* Nothing counts until sum_window sets the window. */
  s->from = s->to = s->json_to = UINT64_MAX;
  return s;
}

void sum_free(Sum *s) {
  for (size_t i = 0; i < s->threads.n; i++) free(s->threads.v[i].api);
  for (size_t i = 0; i < s->kernels.n; i++) free(s->kernels.v[i].name);
  free(s->threads.v);
  free(s->streams.v);
  free(s->copies.v);
  free(s->kernels.v);
  free(s->spans.v);
  free(s->live);
  free(s->mems.v);
  for (size_t i = 0; i < s->stacks.n; i++) free(s->stacks.v[i].frames);
  free(s->stacks.v);
  free(s->json);
  free(s);
}

void sum_window(Sum *s, uint64_t from, uint64_t to, uint64_t json_to) {
  s->from = from;
  s->to = to;
  s->json_to = json_to;
}

void sum_close(Sum *s, uint64_t now) {
  if (now >= s->from && now < s->to) s->to = now;
  if (s->json_to > s->to) s->json_to = s->to;
}

void sum_note(Sum *s, const char *note) {
  size_t n = strlen(s->notes);
  snprintf(s->notes + n, sizeof(s->notes) - n, "%s\n", note);
}

static int in_window(const Sum *s, uint64_t start) { return start >= s->from && start < s->to; }

/* The part of [start, end) before the window's end: what an activity
 * starting in the window counts toward sums, so that a call still running
 * when the window closes (a 30 ms engine wait) cannot take a thread's
 * share of the window past 100 %. */
static uint64_t within(const Sum *s, uint64_t start, uint64_t end) {
  uint64_t stop = end < s->to ? end : s->to;
  return stop > start ? stop - start : 0;
}

static void json_append(Sum *s, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    size_t room = s->json_size - s->json_len;
    va_start(ap, fmt);
    int n = vsnprintf(s->json ? s->json + s->json_len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < room) {
      s->json_len += (size_t)n;
      return;
    }
    s->json_size = s->json_size ? 2 * s->json_size + (size_t)n : 1 << 20;
    s->json = realloc(s->json, s->json_size);
    if (!s->json) abort();
  }
}

/* `src` as a JSON string's contents, cut at `max` bytes. */
static void escape(char *dst, size_t size, const char *src, size_t max) {
  size_t o = 0;
  for (size_t i = 0; src[i] && i < max && o + 7 < size; i++) {
    unsigned char c = (unsigned char)src[i];
    if (c == '"' || c == '\\') {
      dst[o++] = '\\';
      dst[o++] = (char)c;
    } else if (c < 0x20) {
      o += (size_t)snprintf(dst + o, size - o, "\\u%04x", c);
    } else {
      dst[o++] = (char)c;
    }
  }
  dst[o] = 0;
}

/* One complete event ("ph":"X") for the Chrome trace, if it starts in the
 * trace's part of the window and there is room. */
static void json_event(Sum *s, int pid, uint32_t tid, const char *name, uint64_t start,
                       uint64_t end, const char *args) {
  if (start < s->from || start >= s->json_to) return;
  if (s->json_n >= s->json_cap) {
    s->json_dropped++;
    return;
  }
  char esc[256];
  escape(esc, sizeof esc, name, 120);
  uint64_t dur = end > start ? end - start : 0;
  json_append(s, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f%s%s},\n",
              pid, tid, esc, (double)(start - s->t0) / 1e3, (double)dur / 1e3,
              args ? ",\"args\":" : "", args ? args : "");
  s->json_n++;
}

static Thread *thread(Sum *s, uint32_t tid) {
  for (size_t i = 0; i < s->threads.n; i++)
    if (s->threads.v[i].tid == tid) return &s->threads.v[i];
  Thread t = {.tid = tid};
  snprintf(t.name, sizeof t.name, "tid-%u", tid);
  t.api = calloc(2 * CBIDS, sizeof(Acc));
  if (!t.api) abort();
  PUSH(s->threads, t);
  return &s->threads.v[s->threads.n - 1];
}

static Stream *stream(Sum *s, uint32_t id) {
  for (size_t i = 0; i < s->streams.n; i++)
    if (s->streams.v[i].id == id) return &s->streams.v[i];
  Stream st = {.id = id};
  PUSH(s->streams, st);
  return &s->streams.v[s->streams.n - 1];
}

void sum_thread(Sum *s, uint32_t tid, const char *name) {
  Thread *t = thread(s, tid);
  snprintf(t->name, sizeof t->name, "%s", name);
  size_t n = strlen(t->name);
  while (n > 0 && (t->name[n - 1] == '\n' || t->name[n - 1] == ' ')) t->name[--n] = 0;
}

size_t sum_tids(const Sum *s, uint32_t *tids, size_t cap) {
  size_t n = s->threads.n < cap ? s->threads.n : cap;
  for (size_t i = 0; i < n; i++) tids[i] = s->threads.v[i].tid;
  return s->threads.n;
}

void sum_stream(Sum *s, uint32_t id, int flag, int prio) {
  Stream *st = stream(s, id);
  st->flag = flag;
  st->prio = prio;
}

void sum_api(Sum *s, int domain, uint32_t cbid, const char *name, uint32_t tid, uint64_t start,
             uint64_t end) {
  if (!in_window(s, start)) return;
  if ((domain != SUM_DRIVER && domain != SUM_RUNTIME) || cbid >= CBIDS) {
    s->out_of_range++;
    return;
  }
  int d = domain - 1;
  if (!s->names[d][cbid]) s->names[d][cbid] = name ? name : "?";
  Acc *a = &thread(s, tid)->api[d * CBIDS + cbid];
  uint64_t whole = end > start ? end - start : 0;
  a->calls++;
  a->ns += within(s, start, end);
  if (whole > a->max) a->max = whole;
  json_event(s, 1, tid, s->names[d][cbid], start, end, NULL);
}

static void span(Sum *s, uint64_t start, uint64_t end, int kernel) {
  Span sp = {start, end > s->to ? s->to : end, kernel};
  if (sp.end < sp.start) sp.end = sp.start;
  PUSH(s->spans, sp);
}

void sum_kernel(Sum *s, uint32_t id, const char *name, uint64_t start, uint64_t end) {
  if (!in_window(s, start)) return;
  if (!name) name = "?";
  Kernel *k = NULL;
  for (size_t i = 0; i < s->kernels.n && !k; i++)
    if (s->kernels.v[i].key == name || strcmp(s->kernels.v[i].name, name) == 0) k = &s->kernels.v[i];
  if (!k) {
    Kernel nk = {.key = name, .name = strdup(name)};
    if (!nk.name) abort();
    PUSH(s->kernels, nk);
    k = &s->kernels.v[s->kernels.n - 1];
  }
  k->key = name;
  uint64_t ns = within(s, start, end);
  k->n++;
  k->ns += ns;
  Stream *st = stream(s, id);
  st->kernels++;
  st->kernel_ns += ns;
  span(s, start, end, 1);
  json_event(s, 2, id, k->name, start, end, NULL);
}

static const char *memory_kind(int k) {
  static const char *names[] = {"?", "pageable", "pinned", "device", "array", "managed",
                                "device-static", "managed-static"};
  return k >= 0 && k < 8 ? names[k] : "?";
}

static const char *copy_kind(int k) {
  static const char *names[] = {"?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
  return k >= 0 && k < 11 ? names[k] : "?";
}

void sum_memcpy(Sum *s, uint32_t id, int kind, int src, int dst, int async, uint64_t bytes,
                uint64_t start, uint64_t end) {
  if (!in_window(s, start)) return;
  uint64_t ns = within(s, start, end);
  Copy *c = NULL;
  for (size_t i = 0; i < s->copies.n && !c; i++) {
    Copy *x = &s->copies.v[i];
    if (x->copy == kind && x->src == src && x->dst == dst && x->async == async) c = x;
  }
  if (!c) {
    Copy nc = {.copy = kind, .src = src, .dst = dst, .async = async};
    PUSH(s->copies, nc);
    c = &s->copies.v[s->copies.n - 1];
  }
  c->n++;
  c->bytes += bytes;
  c->ns += ns;
  Stream *st = stream(s, id);
  st->copies++;
  st->copy_ns += ns;
  st->copy_bytes += bytes;
  span(s, start, end, 0);
  char name[64], args[64];
  snprintf(name, sizeof name, "memcpy %s %s>%s%s", copy_kind(kind), memory_kind(src),
           memory_kind(dst), async ? "" : " (sync)");
  snprintf(args, sizeof args, "{\"bytes\":%llu}", (unsigned long long)bytes);
  json_event(s, 2, id, name, start, end, args);
}

void sum_memset(Sum *s, uint32_t id, uint64_t bytes, uint64_t start, uint64_t end) {
  if (!in_window(s, start)) return;
  uint64_t ns = within(s, start, end);
  Stream *st = stream(s, id);
  st->sets++;
  st->set_ns += ns;
  span(s, start, end, 0);
  char args[64];
  snprintf(args, sizeof args, "{\"bytes\":%llu}", (unsigned long long)bytes);
  json_event(s, 2, id, "memset", start, end, args);
}

static size_t home(uint64_t ptr, size_t cap) {
  uint64_t h = ptr * 0x9E3779B97F4A7C15ull;
  return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static void live_put(Sum *s, Live l);

static void live_grow(Sum *s) {
  Live *old = s->live;
  size_t cap = s->live_cap;
  s->live_cap = cap ? 2 * cap : 1024;
  s->live = calloc(s->live_cap, sizeof(Live));
  if (!s->live) abort();
  s->live_n = 0;
  for (size_t i = 0; i < cap; i++)
    if (old[i].ptr) live_put(s, old[i]);
  free(old);
}

/* Insert, or replace the entry at the same address (memory freed by a
 * call the tracer does not watch, then allocated again). */
static void live_put(Sum *s, Live l) {
  if (2 * (s->live_n + 1) > s->live_cap) live_grow(s);
  size_t mask = s->live_cap - 1, i = home(l.ptr, s->live_cap);
  while (s->live[i].ptr && s->live[i].ptr != l.ptr) i = (i + 1) & mask;
  if (!s->live[i].ptr) s->live_n++;
  s->live[i] = l;
}

/* Take the entry at `ptr` out (0 if none), shifting its followers back
 * so that every entry stays reachable from its home slot. */
static int live_take(Sum *s, uint64_t ptr, Live *out) {
  if (!s->live_cap || !ptr) return 0;
  size_t mask = s->live_cap - 1, i = home(ptr, s->live_cap);
  while (s->live[i].ptr != ptr) {
    if (!s->live[i].ptr) return 0;
    i = (i + 1) & mask;
  }
  *out = s->live[i];
  s->live[i].ptr = 0;
  s->live_n--;
  for (size_t j = i;;) {
    j = (j + 1) & mask;
    if (!s->live[j].ptr) break;
    size_t k = home(s->live[j].ptr, s->live_cap);
    /* k in (i, j], cyclically: the entry stays where it is. */
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
    s->live[i] = s->live[j];
    s->live[j].ptr = 0;
    i = j;
  }
  return 1;
}

static void mem_push(Sum *s, Mem m) {
  if (s->mems.n >= MEMS_CAP) {
    s->mems_left_out++;
    return;
  }
  (void)thread(s, m.tid);
  if (m.by_api) (void)thread(s, m.by_tid);
  PUSH(s->mems, m);
}

void sum_mem_alloc(Sum *s, const char *api, uint32_t tid, uint64_t ptr, uint64_t bytes,
                   uint64_t t) {
  if (!ptr) return;
  live_put(s, (Live){ptr, bytes, t, api, tid});
  if (in_window(s, t)) mem_push(s, (Mem){.api = api, .tid = tid, .origin = M_ALLOC, .bytes = bytes});
}

void sum_mem_free(Sum *s, const char *api, uint32_t tid, uint64_t ptr, uint64_t t) {
  Live l;
  int seen = live_take(s, ptr, &l);
  s->counted = in_window(s, t);
  if (!s->counted) return;
  Mem m = {.api = api, .tid = tid};
  if (!ptr) {
    m.origin = M_NULL;
  } else if (!seen) {
    m.origin = M_UNSEEN;
  } else {
    m.origin = l.t >= s->from ? M_IN_WINDOW : M_BEFORE;
    m.bytes = l.bytes;
    m.age = t > l.t ? t - l.t : 0;
    m.by_api = l.api;
    m.by_tid = l.tid;
  }
  mem_push(s, m);
}

static int stack_room(const Sum *s, uint64_t ptr) {
  int null = 0, other = 0;
  for (size_t i = 0; i < s->stacks.n; i++) {
    if (s->stacks.v[i].ptr)
      other++;
    else
      null++;
  }
  return ptr ? other < STACKS_PTR : null < STACKS_NULL;
}

int sum_wants_stack(const Sum *s, uint64_t ptr) { return s->counted && stack_room(s, ptr); }

void sum_stack(Sum *s, const char *api, uint32_t tid, uint64_t ptr, const char *frames) {
  /* The tracer walks the stack outside the lock, so others may have
   * filled the room meanwhile. */
  if (!stack_room(s, ptr)) return;
  Stack st = {api, tid, ptr, strdup(frames ? frames : "")};
  if (!st.frames) abort();
  PUSH(s->stacks, st);
}

/* A thread's group: its name without a trailing "-N" (gpufeed-cpu-3 →
 * gpufeed-cpu), so that the 16 workers read as one row. */
static void group_of(const char *name, char *out, size_t size) {
  snprintf(out, size, "%s", name);
  size_t n = strlen(out);
  while (n > 0 && out[n - 1] >= '0' && out[n - 1] <= '9') n--;
  if (n > 0 && n < strlen(out) && out[n - 1] == '-') out[n - 1] = 0;
}

typedef struct {
  int domain;
  uint32_t cbid;
  Acc acc;
} Row;

static int by_ns_desc(const void *a, const void *b) {
  uint64_t x = ((const Row *)a)->acc.ns, y = ((const Row *)b)->acc.ns;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int kernel_by_ns_desc(const void *a, const void *b) {
  uint64_t x = ((const Kernel *)a)->ns, y = ((const Kernel *)b)->ns;
  return x < y ? 1 : x > y ? -1 : 0;
}

typedef struct {
  uint64_t t;
  int delta, kernel;
} Edge;

static int by_time(const void *a, const void *b) {
  const Edge *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->delta - y->delta; /* ends before starts at the same instant */
}

static double ms(uint64_t ns) { return (double)ns / 1e6; }

static const char *stream_flag(int f) {
  switch (f) {
    case 1: return "blocking";
    case 2: return "non-blocking";
    case 3: return "NULL";
    default: return "(no record)";
  }
}

/* Time in the window with any GPU work, with a kernel, with two or more
 * kernels, with a copy or memset beside a kernel. */
static void concurrency(const Sum *s, FILE *f) {
  size_t n = s->spans.n;
  Edge *e = malloc((2 * n + 1) * sizeof(Edge));
  if (!e) abort();
  for (size_t i = 0; i < n; i++) {
    e[2 * i] = (Edge){s->spans.v[i].start, 1, s->spans.v[i].kernel};
    e[2 * i + 1] = (Edge){s->spans.v[i].end, -1, s->spans.v[i].kernel};
  }
  qsort(e, 2 * n, sizeof(Edge), by_time);
  uint64_t any = 0, one = 0, two = 0, beside = 0;
  int k = 0, other = 0;
  for (size_t i = 0; i < 2 * n; i++) {
    if (i > 0) {
      uint64_t dt = e[i].t - e[i - 1].t;
      if (k + other > 0) any += dt;
      if (k >= 1) one += dt;
      if (k >= 2) two += dt;
      if (k >= 1 && other >= 1) beside += dt;
    }
    if (e[i].kernel)
      k += e[i].delta;
    else
      other += e[i].delta;
  }
  free(e);
  double w = s->to > s->from && s->to != UINT64_MAX ? ms(s->to - s->from) : 0;
  fprintf(f, "\n== GPU concurrency in the window (%.1f ms)\n", w);
  fprintf(f, "any work %.1f ms; a kernel %.1f; two or more kernels %.1f; a copy or memset beside a kernel %.1f\n",
          ms(any), ms(one), ms(two), ms(beside));
}

static void group_of_tid(const Sum *s, uint32_t tid, char *out, size_t size) {
  for (size_t i = 0; i < s->threads.n; i++)
    if (s->threads.v[i].tid == tid) {
      group_of(s->threads.v[i].name, out, size);
      return;
    }
  snprintf(out, size, "tid-%u", tid);
}

static const char *origin_name(int o) {
  static const char *names[] = {"allocation", "free of a null pointer",
                                "free of memory allocated in the window",
                                "free of memory allocated before the window",
                                "free of memory never seen allocated"};
  return o >= 0 && o < M_KINDS ? names[o] : "?";
}

typedef struct {
  char group[32], by_group[32];
  const char *api, *by_api;
  int origin;
  uint64_t n, bytes, min, max, age;
} MemRow;

static int mem_row_by_n_desc(const void *a, const void *b) {
  uint64_t x = ((const MemRow *)a)->n, y = ((const MemRow *)b)->n;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Memory calls in the window, by thread group, call, what was freed and
 * who had allocated it. */
static void memory(const Sum *s, FILE *f) {
  fprintf(f, "\n== memory calls in the window (driver callbacks: pointers and sizes)\n");
  if (!s->mems.n) {
    fprintf(f, "  none\n");
    return;
  }
  MemRow *rows = calloc(s->mems.n, sizeof(MemRow));
  if (!rows) abort();
  size_t n = 0;
  for (size_t i = 0; i < s->mems.n; i++) {
    const Mem *m = &s->mems.v[i];
    MemRow k = {.api = m->api, .by_api = m->by_api, .origin = m->origin};
    group_of_tid(s, m->tid, k.group, sizeof k.group);
    if (m->by_api) group_of_tid(s, m->by_tid, k.by_group, sizeof k.by_group);
    MemRow *r = NULL;
    for (size_t j = 0; j < n && !r; j++) {
      MemRow *x = &rows[j];
      if (x->api == k.api && x->by_api == k.by_api && x->origin == k.origin &&
          strcmp(x->group, k.group) == 0 && strcmp(x->by_group, k.by_group) == 0)
        r = x;
    }
    if (!r) {
      r = &rows[n++];
      *r = k;
      r->min = UINT64_MAX;
    }
    r->n++;
    r->bytes += m->bytes;
    r->age += m->age;
    if (m->bytes < r->min) r->min = m->bytes;
    if (m->bytes > r->max) r->max = m->bytes;
  }
  qsort(rows, n, sizeof(MemRow), mem_row_by_n_desc);
  for (size_t i = 0; i < n; i++) {
    const MemRow *r = &rows[i];
    fprintf(f, "  %s: %s, %llu: %s", r->group, r->api ? r->api : "?", (unsigned long long)r->n,
            origin_name(r->origin));
    if (r->by_api)
      fprintf(f, " (by %s on %s, %.3f ms before on average)", r->by_api, r->by_group,
              ms(r->age) / (double)r->n);
    if (r->origin == M_ALLOC || r->by_api)
      fprintf(f, "; %.3f MB, %llu to %llu bytes each", (double)r->bytes / 1e6,
              (unsigned long long)r->min, (unsigned long long)r->max);
    fputc('\n', f);
  }
  free(rows);
  if (s->mems_left_out)
    fprintf(f, "  (%llu more calls left out: the cap is %d)\n",
            (unsigned long long)s->mems_left_out, MEMS_CAP);
  for (size_t i = 0; i < s->stacks.n; i++) {
    const Stack *st = &s->stacks.v[i];
    char g[32];
    group_of_tid(s, st->tid, g, sizeof g);
    fprintf(f, "\n  call stack of a %s on %s, pointer 0x%llx:\n%s", st->api ? st->api : "?", g,
            (unsigned long long)st->ptr, st->frames);
  }
}

static void summary(const Sum *s, FILE *f) {
  double w = s->to > s->from && s->to != UINT64_MAX ? ms(s->to - s->from) : 0;
  fprintf(f, "gpufeed CUPTI summary: activities starting in a window of %.1f ms\n", w);
  fputs(s->notes, f);
  if (s->out_of_range) fprintf(f, "API records with unknown domain or callback id: %llu\n",
                               (unsigned long long)s->out_of_range);

  /* Groups of threads, in order of first appearance. */
  char groups[64][32];
  size_t ngroups = 0;
  for (size_t i = 0; i < s->threads.n; i++) {
    char g[32];
    group_of(s->threads.v[i].name, g, sizeof g);
    size_t j = 0;
    while (j < ngroups && strcmp(groups[j], g) != 0) j++;
    if (j == ngroups && ngroups < 64) snprintf(groups[ngroups++], 32, "%s", g);
  }
  Row *rows = malloc(2 * CBIDS * sizeof(Row));
  if (!rows) abort();
  fprintf(f, "\n== host threads' CUDA API calls, by thread group\n");
  for (size_t g = 0; g < ngroups; g++) {
    size_t members = 0;
    for (int d = 0; d < 2; d++)
      for (uint32_t c = 0; c < CBIDS; c++) rows[d * CBIDS + c] = (Row){d + 1, c, {0, 0, 0}};
    for (size_t i = 0; i < s->threads.n; i++) {
      char name[32];
      group_of(s->threads.v[i].name, name, sizeof name);
      if (strcmp(name, groups[g]) != 0) continue;
      members++;
      for (size_t r = 0; r < 2 * CBIDS; r++) {
        Acc *a = &s->threads.v[i].api[r];
        rows[r].acc.calls += a->calls;
        rows[r].acc.ns += a->ns;
        if (a->max > rows[r].acc.max) rows[r].acc.max = a->max;
      }
    }
    uint64_t total = 0, calls = 0;
    for (size_t r = 0; r < 2 * CBIDS; r++) {
      total += rows[r].acc.ns;
      calls += rows[r].acc.calls;
    }
    qsort(rows, 2 * CBIDS, sizeof(Row), by_ns_desc);
    fprintf(f, "\n%s (%zu threads): %llu calls, %.1f ms in calls (%.1f %% of the threads' window)\n",
            groups[g], members, (unsigned long long)calls, ms(total),
            w > 0 ? 100.0 * ms(total) / (w * (double)members) : 0.0);
    /* Totals and means count each call up to the window's end; the
     * longest is the whole call. */
    fprintf(f, "  %-44s %9s %10s %9s %9s\n", "call", "calls", "total ms", "mean us", "max ms");
    for (size_t r = 0; r < 2 * CBIDS && r < 25 && rows[r].acc.calls > 0; r++) {
      const char *name = s->names[rows[r].domain - 1][rows[r].cbid];
      fprintf(f, "  %-44s %9llu %10.2f %9.1f %9.3f\n", name ? name : "?",
              (unsigned long long)rows[r].acc.calls, ms(rows[r].acc.ns),
              (double)rows[r].acc.ns / 1e3 / (double)rows[r].acc.calls, ms(rows[r].acc.max));
    }
  }
  free(rows);

  fprintf(f, "\n== GPU work by stream (creation flag from CUPTI's stream records)\n");
  fprintf(f, "  %8s %-13s %5s %8s %10s %7s %9s %9s %6s %8s\n", "stream", "flag", "prio",
          "kernels", "kernel ms", "copies", "copy ms", "copy MB", "sets", "set ms");
  for (size_t i = 0; i < s->streams.n; i++) {
    const Stream *st = &s->streams.v[i];
    if (!st->kernels && !st->copies && !st->sets) continue;
    fprintf(f, "  %8u %-13s %5d %8llu %10.2f %7llu %9.2f %9.2f %6llu %8.2f\n", st->id,
            stream_flag(st->flag), st->prio, (unsigned long long)st->kernels, ms(st->kernel_ns),
            (unsigned long long)st->copies, ms(st->copy_ns), (double)st->copy_bytes / 1e6,
            (unsigned long long)st->sets, ms(st->set_ns));
  }

  fprintf(f, "\n== copies by kind\n");
  for (size_t i = 0; i < s->copies.n; i++) {
    const Copy *c = &s->copies.v[i];
    fprintf(f, "  %-4s %s>%s %-6s %8llu copies %9.2f MB %9.2f ms\n", copy_kind(c->copy),
            memory_kind(c->src), memory_kind(c->dst), c->async ? "async" : "sync",
            (unsigned long long)c->n, (double)c->bytes / 1e6, ms(c->ns));
  }

  fprintf(f, "\n== kernels by total time\n");
  Kernel *ks = malloc((s->kernels.n + 1) * sizeof(Kernel));
  if (!ks) abort();
  if (s->kernels.n) memcpy(ks, s->kernels.v, s->kernels.n * sizeof(Kernel));
  qsort(ks, s->kernels.n, sizeof(Kernel), kernel_by_ns_desc);
  for (size_t i = 0; i < s->kernels.n && i < 30; i++)
    fprintf(f, "  %8llu %10.2f ms %8.1f us  %.90s\n", (unsigned long long)ks[i].n, ms(ks[i].ns),
            (double)ks[i].ns / 1e3 / (double)ks[i].n, ks[i].name);
  free(ks);

  concurrency(s, f);
  memory(s, f);
  fprintf(f, "\ntrace events kept %zu, left out %zu (cap %zu)\n", s->json_n, s->json_dropped,
          s->json_cap);
}

int sum_write(Sum *s, const char *prefix) {
  char path[4096];
  snprintf(path, sizeof path, "%s.txt", prefix);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  summary(s, f);
  if (fclose(f) != 0) return -1;

  snprintf(path, sizeof path, "%s.json", prefix);
  f = fopen(path, "w");
  if (!f) return -1;
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
  if (s->json) fwrite(s->json, 1, s->json_len, f);
  fputs("{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"host threads (CUDA API)\"}},\n", f);
  fputs("{\"ph\":\"M\",\"pid\":2,\"name\":\"process_name\",\"args\":{\"name\":\"GPU streams\"}}", f);
  for (size_t i = 0; i < s->threads.n; i++) {
    char esc[96];
    escape(esc, sizeof esc, s->threads.v[i].name, 31);
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}",
            s->threads.v[i].tid, esc);
  }
  for (size_t i = 0; i < s->streams.n; i++)
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":2,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":\"stream %u (%s)\"}}",
            s->streams.v[i].id, s->streams.v[i].id, stream_flag(s->streams.v[i].flag));
  fputs("\n]}\n", f);
  return fclose(f) == 0 ? 0 : -1;
}
