#define _GNU_SOURCE
#include "gpushare/allocs.h"

#include <pthread.h>

#include <stdlib.h>
#include <string.h>
#include "gpushare/glibc_compat.h"

/* Open addressing with linear probing and tombstones; grows at 1/2 load. */
struct entry {
  uint64_t key;
  uint64_t bytes;
  int32_t kind; /* 0: empty; -1: deleted */
  int32_t dev;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry* table;
static size_t capacity; /* a power of two */
static size_t used;     /* live + deleted */
static size_t live;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void before_fork(void) { pthread_mutex_lock(&table_lock); }
static void in_parent(void) { pthread_mutex_unlock(&table_lock); }
static void in_child(void) {
  /* The child holds none of its parent's device memory. */
  free(table);
  table = NULL;
  capacity = used = live = 0;
  pthread_mutex_unlock(&table_lock);
}
static void register_atfork(void) { pthread_atfork(before_fork, in_parent, in_child); }

static size_t slot_of(int kind, uint64_t key) {
  uint64_t h = key ^ ((uint64_t)kind << 61);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return (size_t)h & (capacity - 1);
}

static struct entry* find(int kind, uint64_t key) {
  if (capacity == 0) return NULL;
  for (size_t i = slot_of(kind, key), n = 0; n < capacity; i = (i + 1) & (capacity - 1), ++n) {
    struct entry* e = &table[i];
    if (e->kind == 0) return NULL;
    if (e->kind == kind && e->key == key) return e;
  }
  return NULL;
}

static int grow(void) {
  size_t old_capacity = capacity;
  struct entry* old = table;
  size_t fresh =
      old_capacity == 0 ? 256 : (live * 4 > old_capacity ? old_capacity * 2 : old_capacity);
  struct entry* t = calloc(fresh, sizeof *t);
  if (t == NULL) return -1;
  table = t;
  capacity = fresh;
  used = live = 0;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old[i].kind > 0) {
      struct entry* e = &table[slot_of(old[i].kind, old[i].key)];
      while (e->kind != 0) e = &table[((size_t)(e - table) + 1) & (capacity - 1)];
      *e = old[i];
      ++used;
      ++live;
    }
  }
  free(old);
  return 0;
}

int gpushare_allocs_add(int kind, uint64_t key, int dev, uint64_t bytes) {
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&table_lock);
  struct entry* e = find(kind, key);
  if (e == NULL) {
    if ((used + 1) * 2 > capacity && grow() != 0) {
      pthread_mutex_unlock(&table_lock);
      return -1;
    }
    size_t i = slot_of(kind, key);
    while (table[i].kind > 0) i = (i + 1) & (capacity - 1);
    e = &table[i];
    if (e->kind == 0) ++used;
    ++live;
  }
  e->kind = kind;
  e->key = key;
  e->dev = dev;
  e->bytes = bytes;
  pthread_mutex_unlock(&table_lock);
  return 0;
}

int gpushare_allocs_take(int kind, uint64_t key, int* dev, uint64_t* bytes) {
  pthread_mutex_lock(&table_lock);
  struct entry* e = find(kind, key);
  if (e != NULL) {
    *dev = e->dev;
    *bytes = e->bytes;
    e->kind = -1;
    --live;
  }
  pthread_mutex_unlock(&table_lock);
  return e != NULL;
}

uint64_t gpushare_allocs_count(void) {
  pthread_mutex_lock(&table_lock);
  uint64_t n = live;
  pthread_mutex_unlock(&table_lock);
  return n;
}
