/* The tracer's start-up and file writing without a GPU: load it as the
 * CUDA driver would and call InitializeInjection. Every CUPTI call fails
 * here (no driver); the tracer must note the failures, open and close its
 * window, write both files, and return 1 so that the driver goes on.
 *
 *   smoke LIB [stay_ms]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "smoke: %s\n", dlerror());
    return 1;
  }
  int (*init)(void) = (int (*)(void))dlsym(lib, "InitializeInjection");
  if (!init || init() != 1) return 1;
  usleep((useconds_t)(argc > 2 ? atoi(argv[2]) : 0) * 1000);
  return 0;
}
