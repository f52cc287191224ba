#define _GNU_SOURCE
#include "gpushare/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>

#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "gpushare/glibc_compat.h"

struct slot {
  int32_t pid; /* 0: free */
  uint32_t pad;
  uint64_t start_time;
  uint64_t bytes[GPUSHARE_MAX_DEVICES];
};

struct ledger_file {
  _Atomic int32_t lock_owner; /* pid holding the lock; 0: free */
  uint32_t pad;
  unsigned char uuids[GPUSHARE_MAX_DEVICES][16]; /* all zero: unused */
  struct slot slots[GPUSHARE_LEDGER_SLOTS];
};

struct gpushare_ledger {
  struct ledger_file* file;
  int pid;             /* the process the cached slot belongs to */
  uint64_t start_time; /* its start time */
  int slot;            /* -1: none yet */
};

size_t gpushare_ledger_bytes(void) { return sizeof(struct ledger_file); }

uint64_t gpushare_process_start_time(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  /* The command name may hold spaces and parentheses: fields follow the
   * last ')'. Field 3 (state) comes first; starttime is field 22. */
  char* p = strrchr(buf, ')');
  if (p == NULL) return 0;
  int field = 2;
  for (; *p != '\0'; ++p) {
    if (*p == ' ') {
      ++field;
      if (field == 22) return strtoull(p + 1, NULL, 10);
    }
  }
  return 0;
}

struct gpushare_ledger* gpushare_ledger_open(const char* path, char* err, size_t err_len) {
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    snprintf(err, err_len, "cannot open the usage ledger %s: %s", path, strerror(errno));
    return NULL;
  }
  /* (lseek, not fstat: fstat's symbol is too new for older glibcs.) */
  off_t size = lseek(fd, 0, SEEK_END);
  if (size < 0) {
    snprintf(err, err_len, "the usage ledger %s is not a regular file", path);
    close(fd);
    return NULL;
  }
  if ((size_t)size < sizeof(struct ledger_file) &&
      ftruncate(fd, (off_t)sizeof(struct ledger_file)) != 0) {
    snprintf(err, err_len, "cannot size the usage ledger %s: %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  void* m = mmap(NULL, sizeof(struct ledger_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    snprintf(err, err_len, "cannot map the usage ledger %s: %s", path, strerror(errno));
    return NULL;
  }
  struct gpushare_ledger* l = calloc(1, sizeof *l);
  if (l == NULL) {
    munmap(m, sizeof(struct ledger_file));
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  l->file = m;
  l->slot = -1;
  return l;
}

void gpushare_ledger_close(struct gpushare_ledger* l) {
  if (l == NULL) return;
  munmap(l->file, sizeof(struct ledger_file));
  free(l);
}

static int alive(int pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

/* The threads of one process share its pid, which is all the file's lock
 * word tells apart: they take turns on this mutex first. Held across fork
 * by the atfork handlers, so a child never starts with it locked. */
static pthread_mutex_t process_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void before_fork(void) { pthread_mutex_lock(&process_lock); }
static void after_fork(void) { pthread_mutex_unlock(&process_lock); }
static void register_atfork(void) { pthread_atfork(before_fork, after_fork, after_fork); }

static void lock(struct ledger_file* f, int self) {
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&process_lock);
  for (unsigned spins = 0;; ++spins) {
    int32_t expected = 0;
    if (atomic_compare_exchange_weak(&f->lock_owner, &expected, self)) return;
    /* A holder that died holding the lock (killed mid-update): take it. */
    if (expected != 0 && expected != self && !alive(expected) &&
        atomic_compare_exchange_strong(&f->lock_owner, &expected, self)) {
      return;
    }
    if (expected == self) {
      /* No thread of ours holds it (process_lock): a corrupt word. */
      atomic_store(&f->lock_owner, self);
      return;
    }
    if (spins < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50 * 1000};
      nanosleep(&ts, NULL);
    }
  }
}

static void unlock(struct ledger_file* f) {
  atomic_store(&f->lock_owner, 0);
  pthread_mutex_unlock(&process_lock);
}

/* Whether slot `s` is held by a process that still runs. */
static int slot_live(const struct slot* s) {
  if (s->pid <= 0) return 0;
  if (!alive(s->pid)) return 0;
  uint64_t start = gpushare_process_start_time(s->pid);
  return start == 0 || start == s->start_time;
}

static void drop_dead_slots(struct ledger_file* f, int self) {
  for (int i = 0; i < GPUSHARE_LEDGER_SLOTS; ++i) {
    struct slot* s = &f->slots[i];
    if (s->pid != 0 && s->pid != self && !slot_live(s)) memset(s, 0, sizeof *s);
  }
}

/* This process's slot, claimed if it has none; -1 if none is free. Under
 * the lock. */
static int own_slot(struct gpushare_ledger* l, int self) {
  /* The first use in this process image. A record of this same process
   * (pid and start time) is then from the image it replaced by exec, whose
   * device memory went with it: it starts again from nothing. */
  int fresh = 0;
  if (l->pid != self) {
    l->pid = self;
    l->start_time = gpushare_process_start_time(self);
    l->slot = -1;
    fresh = 1;
  }
  struct ledger_file* f = l->file;
  if (l->slot >= 0 && f->slots[l->slot].pid == self &&
      f->slots[l->slot].start_time == l->start_time) {
    return l->slot;
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < GPUSHARE_LEDGER_SLOTS; ++i) {
      struct slot* s = &f->slots[i];
      if (s->pid == self && s->start_time == l->start_time) {
        if (fresh) memset(s->bytes, 0, sizeof s->bytes);
        return l->slot = i;
      }
    }
    for (int i = 0; i < GPUSHARE_LEDGER_SLOTS; ++i) {
      struct slot* s = &f->slots[i];
      if (s->pid == 0) {
        memset(s, 0, sizeof *s);
        s->pid = self;
        s->start_time = l->start_time;
        return l->slot = i;
      }
    }
    drop_dead_slots(f, self);
  }
  return -1;
}

int gpushare_ledger_device(struct gpushare_ledger* l, const unsigned char uuid[16]) {
  static const unsigned char zero[16];
  struct ledger_file* f = l->file;
  int self = getpid();
  lock(f, self);
  int found = -1;
  for (int i = 0; i < GPUSHARE_MAX_DEVICES && found < 0; ++i) {
    if (memcmp(f->uuids[i], uuid, 16) == 0) found = i;
  }
  for (int i = 0; i < GPUSHARE_MAX_DEVICES && found < 0; ++i) {
    if (memcmp(f->uuids[i], zero, 16) == 0) {
      memcpy(f->uuids[i], uuid, 16);
      found = i;
    }
  }
  unlock(f);
  return found;
}

static uint64_t total_on(const struct ledger_file* f, int dev) {
  uint64_t sum = 0;
  for (int i = 0; i < GPUSHARE_LEDGER_SLOTS; ++i) {
    if (f->slots[i].pid != 0) {
      uint64_t b = f->slots[i].bytes[dev];
      sum = sum + b < sum ? UINT64_MAX : sum + b;
    }
  }
  return sum;
}

int gpushare_ledger_charge(struct gpushare_ledger* l, int dev, uint64_t bytes, uint64_t cap) {
  if (dev < 0 || dev >= GPUSHARE_MAX_DEVICES) return -1;
  struct ledger_file* f = l->file;
  int self = getpid();
  lock(f, self);
  int slot = own_slot(l, self);
  int ok = slot >= 0;
  if (ok && cap > 0) {
    uint64_t used = total_on(f, dev);
    if (bytes > cap || used > cap - bytes) {
      /* Before refusing, forget the processes that are gone. */
      drop_dead_slots(f, self);
      used = total_on(f, dev);
      ok = bytes <= cap && used <= cap - bytes;
    }
  }
  if (ok) f->slots[slot].bytes[dev] += bytes;
  unlock(f);
  return ok ? 0 : -1;
}

void gpushare_ledger_release(struct gpushare_ledger* l, int dev, uint64_t bytes) {
  if (dev < 0 || dev >= GPUSHARE_MAX_DEVICES) return;
  struct ledger_file* f = l->file;
  int self = getpid();
  lock(f, self);
  int slot = own_slot(l, self);
  if (slot >= 0) {
    uint64_t* b = &f->slots[slot].bytes[dev];
    *b = *b > bytes ? *b - bytes : 0;
  }
  unlock(f);
}

uint64_t gpushare_ledger_used(struct gpushare_ledger* l, int dev) {
  if (dev < 0 || dev >= GPUSHARE_MAX_DEVICES) return 0;
  struct ledger_file* f = l->file;
  int self = getpid();
  lock(f, self);
  drop_dead_slots(f, self);
  uint64_t used = total_on(f, dev);
  unlock(f);
  return used;
}

void gpushare_ledger_drop_self(struct gpushare_ledger* l) {
  struct ledger_file* f = l->file;
  int self = getpid();
  lock(f, self);
  for (int i = 0; i < GPUSHARE_LEDGER_SLOTS; ++i) {
    if (f->slots[i].pid == self) memset(&f->slots[i], 0, sizeof f->slots[i]);
  }
  l->slot = -1;
  unlock(f);
}
