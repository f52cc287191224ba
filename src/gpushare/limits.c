#define _GNU_SOURCE
#include "gpushare/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(char* err, size_t err_len, int line, const char* what, const char* detail) {
  if (err_len > 0) snprintf(err, err_len, "limits line %d: %s%s", line, what, detail);
  return -1;
}

/* A decimal number without sign, spaces or overflow. */
static int parse_u64(const char* s, size_t n, uint64_t* out) {
  if (n == 0 || n > 20) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    uint64_t d = (uint64_t)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

static int key_is(const char* key, size_t key_len, const char* want) {
  return strlen(want) == key_len && memcmp(key, want, key_len) == 0;
}

/* An absolute path into `out` (GPUSHARE_PATH_MAX bytes). */
static int parse_path(const char* val, size_t val_len, char* out, int line, const char* what,
                      char* err, size_t err_len) {
  if (val_len >= GPUSHARE_PATH_MAX || val[0] != '/') return fail(err, err_len, line, what, "");
  memcpy(out, val, val_len);
  out[val_len] = '\0';
  return 0;
}

/* One "key value" line (comment and surrounding blanks already removed). */
static int parse_line(const char* s, size_t n, int line, int* seen_header,
                      struct gpushare_limits* out, char* err, size_t err_len) {
  size_t k = 0;
  while (k < n && s[k] != ' ' && s[k] != '\t') ++k;
  size_t v = k;
  while (v < n && (s[v] == ' ' || s[v] == '\t')) ++v;
  const char* val = s + v;
  size_t val_len = n - v;
  if (val_len == 0) return fail(err, err_len, line, "a key without a value", "");
  uint64_t num = 0;
  if (!*seen_header) {
    if (!key_is(s, k, "gpushare") || parse_u64(val, val_len, &num) != 0 || num != 1) {
      return fail(err, err_len, line, "the first line must be \"gpushare 1\"", "");
    }
    *seen_header = 1;
    return 0;
  }
  if (key_is(s, k, "memory_bytes")) {
    if (parse_u64(val, val_len, &num) != 0) {
      return fail(err, err_len, line, "memory_bytes must be a whole number of bytes", "");
    }
    out->memory_bytes = num;
  } else if (key_is(s, k, "share_milli")) {
    if (parse_u64(val, val_len, &num) != 0 || num < 1 || num > 1000) {
      return fail(err, err_len, line, "share_milli must be 1 to 1000", "");
    }
    out->share_milli = (uint32_t)num;
  } else if (key_is(s, k, "mode")) {
    if (key_is(val, val_len, "work-conserving")) {
      out->mode = GPUSHARE_WORK_CONSERVING;
    } else if (key_is(val, val_len, "strict")) {
      out->mode = GPUSHARE_STRICT;
    } else {
      return fail(err, err_len, line, "mode must be work-conserving or strict", "");
    }
  } else if (key_is(s, k, "usage")) {
    return parse_path(val, val_len, out->usage_path, line, "usage must be an absolute path", err,
                      err_len);
  } else if (key_is(s, k, "want")) {
    return parse_path(val, val_len, out->want_path, line, "want must be an absolute path", err,
                      err_len);
  } else if (key_is(s, k, "grant")) {
    return parse_path(val, val_len, out->grant_path, line, "grant must be an absolute path", err,
                      err_len);
  } else {
    char key[40];
    size_t kn = k < sizeof key - 1 ? k : sizeof key - 1;
    memcpy(key, s, kn);
    key[kn] = '\0';
    return fail(err, err_len, line, "unknown key ", key);
  }
  return 0;
}

int gpushare_parse_limits(const char* text, size_t len, struct gpushare_limits* out, char* err,
                          size_t err_len) {
  memset(out, 0, sizeof *out);
  out->share_milli = 1000;
  out->mode = GPUSHARE_WORK_CONSERVING;
  int seen_header = 0;
  int line = 0;
  size_t i = 0;
  while (i < len) {
    ++line;
    size_t end = i;
    while (end < len && text[end] != '\n') ++end;
    size_t stop = i;
    while (stop < end && text[stop] != '#') ++stop;
    size_t a = i, b = stop;
    while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r')) ++a;
    while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r')) --b;
    if (b > a) {
      for (size_t c = a; c < b; ++c) {
        if (text[c] == '\0') return fail(err, err_len, line, "a NUL byte", "");
      }
      if (parse_line(text + a, b - a, line, &seen_header, out, err, err_len) != 0) return -1;
    }
    i = end + 1;
  }
  if (!seen_header) return fail(err, err_len, line, "empty: no \"gpushare 1\" line", "");
  if (out->memory_bytes > 0 && out->usage_path[0] == '\0') {
    return fail(err, err_len, line, "a memory cap needs a usage ledger (usage PATH)", "");
  }
  if ((out->want_path[0] == '\0') != (out->grant_path[0] == '\0')) {
    return fail(err, err_len, line, "want and grant go together (the compute share's files)", "");
  }
  return 0;
}

int gpushare_read_limits(struct gpushare_limits* out, char* err, size_t err_len) {
  const char* path = GPUSHARE_LIMITS_PATH;
  if (access(path, F_OK) != 0) {
    path = getenv("GPUSHARE_LIMITS");
    if (path == NULL || path[0] == '\0') return 0;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  char buf[4096];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      snprintf(err, err_len, "cannot read %s: %s", path, strerror(errno));
      close(fd);
      return -1;
    }
    if (r == 0) break;
    len += (size_t)r;
    if (len == sizeof buf) {
      snprintf(err, err_len, "%s is larger than %zu bytes", path, sizeof buf);
      close(fd);
      return -1;
    }
  }
  close(fd);
  return gpushare_parse_limits(buf, len, out, err, err_len) == 0 ? 1 : -1;
}
