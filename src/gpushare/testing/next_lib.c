/* Built twice (NEXT_ID 1 and 2) for the RTLD_NEXT test: libnext1 defines
 * gs_next_probe and asks dlsym(RTLD_NEXT) for the next definition, which is
 * libnext2's. With libgpushare.so's dlsym in between the answer must be
 * the same (its dlsym hands the lookup to glibc as a tail call). */
#define _GNU_SOURCE
#include <dlfcn.h>

int gs_next_probe(void) {
#if NEXT_ID == 1
  static int depth = 0;
  if (depth > 0) return -1; /* found ourselves again: RTLD_NEXT was broken */
  ++depth;
  int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gs_next_probe");
  int r = next == 0 ? -2 : 10 + next();
  --depth;
  return r;
#else
  return 2;
#endif
}
