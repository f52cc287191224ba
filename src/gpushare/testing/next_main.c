#include <stdio.h>
int gs_next_probe(void);
int main(void) {
  printf("%d\n", gs_next_probe());
  return 0;
}
