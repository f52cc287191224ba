/* The compute share's two files between a task and the agent, as both
 * sides lay them out (libgpushare.so in C, the agent's arbiter in C++).
 *
 *   want   the task's (bound read-write into the sandbox): the time of its
 *          processes' last kernel launch, or of their last wait for a turn.
 *          Written by every process of the task; read by the agent.
 *   grant  the agent's (bound read-only): whether the task may launch now.
 *          Written by the agent only; read by every process of the task.
 *
 * Each is GPUSHARE_SHARE_FILE_BYTES long, made by the agent zero-filled,
 * and every field is one naturally aligned 64-bit word read and written
 * with atomic loads and stores, so no reader ever sees half a write and no
 * lock is shared between the agent and a job. A zero-filled want is "never
 * active"; a zero-filled grant is FREE (a stale one, see below).
 *
 * Times are CLOCK_MONOTONIC nanoseconds, the same clock in every pid and
 * mount namespace (a sandbox must not give a job its own time namespace,
 * which would offset it).
 *
 * The library maps both files. The agent (src/share/share_files.h) maps its
 * grants but reads a want with pread: a task may truncate its own want
 * file, and a mapping of a truncated file would fault in the agent. The
 * agent writes every grant at least every few milliseconds, changed or not
 * (the beat below).
 *
 * A grant is one word: the state in the top two bits, until_ns in the
 * others (2^62 ns is 146 years of uptime), so state and deadline are always
 * of one write without a sequence lock. beat_ns is the agent's clock at its
 * last write of the file: a grant whose beat is older than
 * GPUSHARE_GRANT_STALE_NS (an agent that stopped or never started) counts as
 * FREE, so a job is never frozen by a dead agent; the hardware's own time
 * slicing then shares the GPU. */
#ifndef GPUPOOL_GPUSHARE_SHARE_FILES_H_
#define GPUPOOL_GPUSHARE_SHARE_FILES_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUSHARE_SHARE_FILE_BYTES 64
#define GPUSHARE_GRANT_STALE_NS 1000000000LL

enum gpushare_grant_state {
  GPUSHARE_GRANT_FREE = 0, /* launch at will */
  GPUSHARE_GRANT_RUN = 1,  /* launch until until_ns, then wait */
  GPUSHARE_GRANT_WAIT = 2  /* launch nothing; finish what is queued */
};

struct gpushare_want_file {
  uint64_t last_active_ns;
  uint64_t reserved[7];
};

struct gpushare_grant_file {
  uint64_t grant; /* gpushare_grant_pack(state, until_ns) */
  uint64_t beat_ns;
  uint64_t reserved[6];
};

#define GPUSHARE_GRANT_UNTIL_MASK ((UINT64_C(1) << 62) - 1)

static inline uint64_t gpushare_grant_pack(unsigned state, uint64_t until_ns) {
  return ((uint64_t)(state & 3u) << 62) | (until_ns & GPUSHARE_GRANT_UNTIL_MASK);
}
static inline unsigned gpushare_grant_state_of(uint64_t grant) { return (unsigned)(grant >> 62); }
static inline uint64_t gpushare_grant_until(uint64_t grant) {
  return grant & GPUSHARE_GRANT_UNTIL_MASK;
}

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_GPUSHARE_SHARE_FILES_H_ */
