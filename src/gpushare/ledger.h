/* The usage ledger: how much GPU memory each process of one task holds on
 * each GPU, shared by every process of the task through one file that the
 * agent creates for it (the "usage" path of the limits) and each process
 * maps.
 *
 * The ledger is the task's own: its processes must write it, so a hostile
 * job can corrupt it, and that only lies about its own use. It never holds
 * limits (those are in the read-only limits file), and the agent's NVML
 * backstop stops a task whose real use passes its cap whatever the ledger
 * says. One process's records do not outlive it: a record whose process is
 * gone (or whose pid now names another process) is dropped, which is how
 * memory is released when a process exits without freeing; a process that
 * execs another program starts its record again from nothing.
 *
 * Layout (host byte order, fixed size GPUSHARE_LEDGER_BYTES): a header with
 * a lock word (the pid holding it; a dead holder's lock is taken over) and
 * the UUIDs of the GPUs seen, then GPUSHARE_LEDGER_SLOTS process records
 * {pid, start time, bytes per GPU}. An empty (all-zero) file is a valid
 * empty ledger; a file of size 0 is grown to the size on first use.
 * Thread-safe; fork-aware (a child gets records of its own). */
#ifndef GPUPOOL_GPUSHARE_LEDGER_H_
#define GPUPOOL_GPUSHARE_LEDGER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUSHARE_MAX_DEVICES 16
#define GPUSHARE_LEDGER_SLOTS 256

struct gpushare_ledger;

/* The size of the ledger file in bytes. */
size_t gpushare_ledger_bytes(void);

/* Opens and maps the ledger at `path` (which must exist: the agent makes
 * it). NULL with a message in `err` on failure. */
struct gpushare_ledger* gpushare_ledger_open(const char* path, char* err, size_t err_len);
void gpushare_ledger_close(struct gpushare_ledger* l);

/* The ledger's index of the GPU with this UUID, added if new; -1 when the
 * table of GPUs is full. */
int gpushare_ledger_device(struct gpushare_ledger* l, const unsigned char uuid[16]);

/* Adds `bytes` on GPU `dev` to this process's record if the task's total
 * there stays within `cap` (0: no cap): 0. Otherwise -1 and nothing
 * changes (also when no record is free for this process). */
int gpushare_ledger_charge(struct gpushare_ledger* l, int dev, uint64_t bytes, uint64_t cap);

/* Takes `bytes` off this process's record for GPU `dev` (not below 0). */
void gpushare_ledger_release(struct gpushare_ledger* l, int dev, uint64_t bytes);

/* What the task's live processes hold on GPU `dev`. */
uint64_t gpushare_ledger_used(struct gpushare_ledger* l, int dev);

/* Clears this process's record (at exit). */
void gpushare_ledger_drop_self(struct gpushare_ledger* l);

/* The start time of process `pid` (field 22 of /proc/PID/stat, clock ticks
 * since boot); 0 when it cannot be read. */
uint64_t gpushare_process_start_time(int pid);

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_GPUSHARE_LEDGER_H_ */
