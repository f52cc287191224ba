/* Kernel launches and the compute share's gate.
 *
 * Every launch path (cuLaunchKernel, cuLaunchKernelEx, the cooperative
 * launches and their per-thread-stream twins) passes gate() before the
 * driver sees it. Without want and grant files in the task's limits the
 * gate is one load and a branch. With them (share_files.h) it
 *  - stamps the task's want file with the time, at most every millisecond:
 *    that is how the agent learns that the task wants the GPU;
 *  - reads the grant the agent wrote for the task:
 *      FREE: launches, keeping this process's queue of launched work within
 *        about FREE_DEPTH_NS, so that it gives the GPU back within that when
 *        a neighbour wakes;
 *      RUN, before until_ns: launches, keeping the queue within about
 *        RUN_DEPTH_NS, so that little of it runs into the next holder's
 *        slice;
 *      WAIT, or RUN past until_ns: synchronizes once (hands the GPU over
 *        with nothing of its own queued), then sleeps in WAIT_STEP_NS steps,
 *        stamping want (a task that waits wants), until the grant lets it
 *        launch.
 *
 * Bounding the queue. A launch returns before its kernel runs, and a
 * process may queue far ahead of the GPU (a real driver holds about a
 * thousand launches; the tests' fake, 50 ms). The gate cannot see kernel
 * durations, so it counts launches since its last cuCtxSynchronize and
 * synchronizes after `batch` of them (or once a queue's depth of time has
 * passed), and adapts `batch` to how long that synchronize waited, which is
 * how long the queue was: halved when it waited more than the depth,
 * doubled when it waited less than half of it. The task's own synchronizes
 * (cuCtxSynchronize; cuStreamSynchronize of the one stream it launched on
 * since) empty the queue too, and count as the gate's: a PyTorch loop
 * synchronizes every few kernels (torch.cuda.synchronize(), .item()), and
 * had the gate counted those launches as still queued, its next synchronize
 * would have found the queue empty and doubled `batch` again and again, and
 * the queue, once it outgrew the loop's own, would have run that long into
 * the next holder's turn (seen on an H200 as a 0.3 share getting 0.34).
 *
 * Threads of a process share the counters through relaxed atomics: a race
 * only moves a synchronize by a launch. The fast path (FREE, nothing due)
 * reads the coarse monotonic clock, which is served from memory even where
 * the precise one would need a system call; RUN and WAIT decisions read the
 * precise one. Failing to open the grant leaves launches ungated (with a
 * message): the task cannot cause that, the file is the agent's. Failing to
 * open the want file gates by the grant all the same and the task counts as
 * idle: hiding its own activity only ever costs the task itself. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gpushare/glibc_compat.h"
#include "gpushare/internal.h"
#include "gpushare/share_files.h"

#define STAMP_EVERY_NS 1000000LL /* want's resolution; the agent's window is 20 ms */
#define FREE_DEPTH_NS 20000000LL
#define RUN_DEPTH_NS 2000000LL
#define WAIT_STEP_NS 500000L
#define BATCH_START 4u
#define BATCH_MAX 4096u

enum { GATE_UNKNOWN = 0, GATE_OFF = 1, GATE_ON = 2 };

static _Atomic int gate_mode;
static pthread_once_t gate_once = PTHREAD_ONCE_INIT;
static uint64_t* want_word;        /* in the mapped want file, or private_want */
static const uint64_t* grant_word; /* in the mapped grant file */
static const uint64_t* beat_word;
static uint64_t private_want;
static cuCtxSynchronize_t synchronize_fn;
static _Atomic int64_t stamped_ns; /* this process's last store into want */
static _Atomic int64_t synced_ns;  /* its last synchronize */
static _Atomic unsigned pending;   /* launches since */
static _Atomic unsigned batch = BATCH_START;
/* The stream every pending launch went to (stream_key), or STREAMS_MIXED. */
static _Atomic uintptr_t pending_stream;
#define STREAMS_MIXED UINTPTR_MAX

/* A stream as the gate tells them apart: the handle, and whether a NULL
 * handle meant the per-thread default stream (the _ptsz entry points). */
static inline uintptr_t stream_key(CUstream stream, int ptsz) {
  return ((uintptr_t)stream << 1) | (uintptr_t)(ptsz != 0);
}

static int64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Maps the first GPUSHARE_SHARE_FILE_BYTES of `path`; NULL with `err`. */
static void* map_share_file(const char* path, int writable, char* err, size_t err_len) {
  int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    snprintf(err, err_len, "cannot open %s: %m", path);
    return NULL;
  }
  /* lseek, not fstat: fstat is a GLIBC_2.33 symbol (glibc_compat.h). */
  off_t size = lseek(fd, 0, SEEK_END);
  void* p = MAP_FAILED;
  if (size >= GPUSHARE_SHARE_FILE_BYTES) {
    p = mmap(NULL, GPUSHARE_SHARE_FILE_BYTES, writable ? PROT_READ | PROT_WRITE : PROT_READ,
             MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) snprintf(err, err_len, "cannot map %s: %m", path);
  } else {
    snprintf(err, err_len, "%s is not a compute share file (%lld bytes)", path, (long long)size);
  }
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

static void open_gate(void) {
  struct gpushare_limits limits;
  char err[600], msg[700];
  /* Unreadable limits: memory.c says so and refuses allocations. */
  if (gpushare_read_limits(&limits, err, sizeof err) != 1 || limits.grant_path[0] == '\0') {
    atomic_store(&gate_mode, GATE_OFF);
    return;
  }
  const struct gpushare_grant_file* grant = map_share_file(limits.grant_path, 0, err, sizeof err);
  if (grant == NULL) {
    snprintf(msg, sizeof msg, "%s; kernel launches are not held to the compute share", err);
    gs_say(msg);
    atomic_store(&gate_mode, GATE_OFF);
    return;
  }
  struct gpushare_want_file* want = map_share_file(limits.want_path, 1, err, sizeof err);
  if (want == NULL) {
    snprintf(msg, sizeof msg, "%s; the task counts as idle when its neighbours want the GPU", err);
    gs_say(msg);
  }
  want_word = want != NULL ? &want->last_active_ns : &private_want;
  grant_word = &grant->grant;
  beat_word = &grant->beat_ns;
  synchronize_fn = (cuCtxSynchronize_t)gs_real_driver("cuCtxSynchronize");
  atomic_store_explicit(&gate_mode, GATE_ON, memory_order_release);
}

static void stamp(int64_t now) {
  if (now - atomic_load_explicit(&stamped_ns, memory_order_relaxed) < STAMP_EVERY_NS) return;
  atomic_store_explicit(&stamped_ns, now, memory_order_relaxed);
  __atomic_store_n(want_word, (uint64_t)now, __ATOMIC_RELAXED);
}

/* Waits for this process's launched work; how long that took. */
static int64_t synchronize(void) {
  int64_t start = clock_ns(CLOCK_MONOTONIC);
  if (synchronize_fn != NULL) (void)synchronize_fn();
  int64_t end = clock_ns(CLOCK_MONOTONIC);
  atomic_store_explicit(&synced_ns, end, memory_order_relaxed);
  atomic_store_explicit(&pending, 0, memory_order_relaxed);
  return end - start;
}

/* Before a launch the grant allows: synchronizes when `batch` launches or
 * `depth` have passed since the last synchronize, and adapts `batch` so
 * that the queue stays about `depth` long. */
static void bound_queue(int64_t now, int64_t depth, uintptr_t stream) {
  unsigned n = atomic_load_explicit(&pending, memory_order_relaxed);
  unsigned b = atomic_load_explicit(&batch, memory_order_relaxed);
  int64_t since = now - atomic_load_explicit(&synced_ns, memory_order_relaxed);
  if (n < b && (n == 0 || since < depth)) {
    if (n == 0) {
      atomic_store_explicit(&pending_stream, stream, memory_order_relaxed);
    } else if (atomic_load_explicit(&pending_stream, memory_order_relaxed) != stream) {
      atomic_store_explicit(&pending_stream, STREAMS_MIXED, memory_order_relaxed);
    }
    atomic_store_explicit(&pending, n + 1, memory_order_relaxed);
    return;
  }
  int64_t waited = synchronize();
  if (waited > depth) {
    b = b > 1 ? b / 2 : 1;
  } else if (n >= b && waited < depth / 2 && b < BATCH_MAX) {
    b *= 2;
  }
  atomic_store_explicit(&batch, b, memory_order_relaxed);
  atomic_store_explicit(&pending_stream, stream, memory_order_relaxed);
  atomic_store_explicit(&pending, 1, memory_order_relaxed);
}

/* The task's own synchronize returned: nothing it launched (with `stream`
 * at 0 for the whole context; else nothing on that stream) is queued. */
static void synchronized_by_task(int whole_context, uintptr_t stream) {
  if (atomic_load_explicit(&gate_mode, memory_order_acquire) != GATE_ON) return;
  if (!whole_context && atomic_load_explicit(&pending_stream, memory_order_relaxed) != stream) {
    return;
  }
  atomic_store_explicit(&synced_ns, clock_ns(CLOCK_MONOTONIC), memory_order_relaxed);
  atomic_store_explicit(&pending, 0, memory_order_relaxed);
}

/* The queue depth the grant allows at `now` (precise clock); 0: none. */
static int64_t allowed_depth(int64_t now) {
  uint64_t grant = __atomic_load_n(grant_word, __ATOMIC_ACQUIRE);
  unsigned state = gpushare_grant_state_of(grant);
  if (state == GPUSHARE_GRANT_FREE) return FREE_DEPTH_NS;
  if (state == GPUSHARE_GRANT_RUN && now < (int64_t)gpushare_grant_until(grant)) {
    return RUN_DEPTH_NS;
  }
  int64_t beat = (int64_t)__atomic_load_n(beat_word, __ATOMIC_ACQUIRE);
  if (now - beat > GPUSHARE_GRANT_STALE_NS) return FREE_DEPTH_NS; /* no live agent */
  return 0;
}

static void gate_slow(uintptr_t stream);

static inline void gate(uintptr_t stream) {
  if (atomic_load_explicit(&gate_mode, memory_order_acquire) != GATE_OFF) gate_slow(stream);
}

static void gate_slow(uintptr_t stream) {
  if (atomic_load_explicit(&gate_mode, memory_order_acquire) == GATE_UNKNOWN) {
    pthread_once(&gate_once, open_gate);
    if (atomic_load_explicit(&gate_mode, memory_order_acquire) != GATE_ON) return;
  }
  int64_t now = clock_ns(CLOCK_MONOTONIC_COARSE);
  stamp(now);
  uint64_t grant = __atomic_load_n(grant_word, __ATOMIC_ACQUIRE);
  if (gpushare_grant_state_of(grant) == GPUSHARE_GRANT_FREE) {
    bound_queue(now, FREE_DEPTH_NS, stream);
    return;
  }
  now = clock_ns(CLOCK_MONOTONIC);
  int64_t depth = allowed_depth(now);
  if (depth == 0) {
    if (atomic_load_explicit(&pending, memory_order_relaxed) > 0) (void)synchronize();
    const struct timespec step = {0, WAIT_STEP_NS};
    while (depth == 0) {
      nanosleep(&step, NULL);
      now = clock_ns(CLOCK_MONOTONIC);
      stamp(now);
      depth = allowed_depth(now);
    }
  }
  bound_queue(now, depth, stream);
}

#define LAUNCH(name, ptsz)                                                                        \
  CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                unsigned int by, unsigned int bz, unsigned int shared, CUstream stream,           \
                void** params, void** extra) {                                                    \
    name##_t real = GS_REAL(name);                                                                \
    if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;                                          \
    gate(stream_key(stream, ptsz));                                                               \
    return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);                        \
  }
LAUNCH(cuLaunchKernel, 0)
LAUNCH(cuLaunchKernel_ptsz, 1)

#define LAUNCH_EX(name, ptsz)                                                              \
  CUresult name(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) { \
    name##_t real = GS_REAL(name);                                                         \
    if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;                                   \
    gate(config != NULL ? stream_key(config->hStream, ptsz) : STREAMS_MIXED);              \
    return real(config, f, params, extra);                                                 \
  }
LAUNCH_EX(cuLaunchKernelEx, 0)
LAUNCH_EX(cuLaunchKernelEx_ptsz, 1)

#define LAUNCH_COOPERATIVE(name, ptsz)                                                            \
  CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                unsigned int by, unsigned int bz, unsigned int shared, CUstream stream,           \
                void** params) {                                                                  \
    name##_t real = GS_REAL(name);                                                                \
    if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;                                          \
    gate(stream_key(stream, ptsz));                                                               \
    return real(f, gx, gy, gz, bx, by, bz, shared, stream, params);                               \
  }
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel, 0)
LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz, 1)

/* The task's own synchronizes: passed through, then noted (see the top). */
CUresult cuCtxSynchronize(void) {
  cuCtxSynchronize_t real = GS_REAL(cuCtxSynchronize);
  if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real();
  if (r == CUDA_SUCCESS) synchronized_by_task(1, 0);
  return r;
}

#define STREAM_SYNCHRONIZE(name, ptsz)                                        \
  CUresult name(CUstream stream) {                                            \
    name##_t real = GS_REAL(name);                                            \
    if (real == NULL) return CUDA_ERROR_NOT_INITIALIZED;                      \
    CUresult r = real(stream);                                                \
    if (r == CUDA_SUCCESS) synchronized_by_task(0, stream_key(stream, ptsz)); \
    return r;                                                                 \
  }
STREAM_SYNCHRONIZE(cuStreamSynchronize, 0)
STREAM_SYNCHRONIZE(cuStreamSynchronize_ptsz, 1)
