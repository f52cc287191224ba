/* A task's GPU limits as the agent writes them for libgpushare.so, and
 * where the library finds them.
 *
 * The agent owns the limits: inside the sandbox the file is bound read-only
 * at GPUSHARE_LIMITS_PATH, where the job can read but not change it, and
 * the library takes no other. Only where that path does not exist (a job of
 * the process executor, which has no isolation to keep, and the library's
 * own tests) does $GPUSHARE_LIMITS name the file.
 *
 * The file is text, one "key value" per line, '#' starts a comment:
 *
 *   gpushare 1                      first line: the format's version
 *   memory_bytes 42949672960        cap per GPU for the whole task; 0 = none
 *   share_milli 500                 compute share in thousandths; 1000 = whole
 *   mode work-conserving            or strict
 *   usage /gpupool/share/usage      the task's shared usage ledger
 *   want /gpupool/share/want        the compute share's files (share_files.h):
 *   grant /gpupool/share/grant      both or neither; without them kernel
 *                                   launches are not held back
 *
 * share_milli and mode are the agent's inputs to its arbiter (src/share);
 * the library itself only obeys the grant. Unknown keys are errors (a newer
 * agent with an older library must not silently lose a limit). Pure: no I/O
 * but gpushare_read_limits. */
#ifndef GPUPOOL_GPUSHARE_LIMITS_H_
#define GPUPOOL_GPUSHARE_LIMITS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUSHARE_LIMITS_PATH "/gpupool/share/limits"
#define GPUSHARE_PATH_MAX 512

enum gpushare_mode { GPUSHARE_WORK_CONSERVING = 0, GPUSHARE_STRICT = 1 };

struct gpushare_limits {
  uint64_t memory_bytes; /* 0: no cap */
  uint32_t share_milli;  /* 1..1000 */
  int mode;              /* enum gpushare_mode */
  char usage_path[GPUSHARE_PATH_MAX];
  char want_path[GPUSHARE_PATH_MAX];  /* "": no compute gating */
  char grant_path[GPUSHARE_PATH_MAX]; /* set exactly when want_path is */
};

/* Parses `text` (`len` bytes). 0 on success; -1 with a message naming the
 * line and what was wrong in `err`. */
int gpushare_parse_limits(const char* text, size_t len, struct gpushare_limits* out, char* err,
                          size_t err_len);

/* Finds and reads the limits: 1 when found and valid, 0 when there are none
 * (neither the sandbox's file nor $GPUSHARE_LIMITS), -1 when a file is there
 * but unreadable or invalid (message in `err`). */
int gpushare_read_limits(struct gpushare_limits* out, char* err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_GPUSHARE_LIMITS_H_ */
