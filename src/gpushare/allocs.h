/* This process's live GPU allocations: what each device pointer, memory
 * handle or array holds and on which of the ledger's GPUs, so that a free
 * gives back exactly what the allocation took. Thread-safe; a forked child
 * starts empty (device memory belongs to the process that allocated it). */
#ifndef GPUPOOL_GPUSHARE_ALLOCS_H_
#define GPUPOOL_GPUSHARE_ALLOCS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gpushare_alloc_kind {
  GPUSHARE_DEVPTR = 1, /* cuMemAlloc*, managed, async */
  GPUSHARE_HANDLE = 2, /* cuMemCreate */
  GPUSHARE_ARRAY = 3   /* cuArrayCreate, cuArray3DCreate */
};

/* Records an allocation; -1 when out of memory. A key already present is
 * replaced (the driver handed it out again, so the old one is gone). */
int gpushare_allocs_add(int kind, uint64_t key, int dev, uint64_t bytes);

/* Removes the allocation: 1 with its GPU and bytes, 0 if unknown. */
int gpushare_allocs_take(int kind, uint64_t key, int* dev, uint64_t* bytes);

/* How many allocations are recorded (tests). */
uint64_t gpushare_allocs_count(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_GPUSHARE_ALLOCS_H_ */
