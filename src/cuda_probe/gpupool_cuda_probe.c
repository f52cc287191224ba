/* gpupool-cuda-probe: whether CUDA works here, for `gpupool agent selftest`,
 * which runs it inside the sandbox jobs get (the GPUs' device nodes and the
 * driver's libraries as a job sees them).
 *
 * Loads libcuda.so.1 the way CUDA programs do (by soname), calls cuInit,
 * cuDriverGetVersion, cuDeviceGetCount and cuDeviceGetName, and prints one
 * line of JSON:
 *   {"ok": true, "driver_version": 12040, "devices": ["NVIDIA A100-SXM4-80GB"]}
 *   {"ok": false, "step": "cuInit", "error": 100, "message": "no CUDA-capable device"}
 * Exit status 0 when cuInit succeeded and a device is visible, 1 otherwise.
 * Plain C, libc and libdl only: it runs in any job environment. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_int_fn)(int*);
typedef int (*cu_device_get_fn)(int*, int);
typedef int (*cu_device_name_fn)(char*, int, int);
typedef int (*cu_error_string_fn)(int, const char**);

static void json_string(const char* s) {
  putchar('"');
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      printf("\\%c", c);
    } else if (c < 0x20) {
      printf("\\u%04x", c);
    } else {
      putchar(c);
    }
  }
  putchar('"');
}

static int fail(void* lib, const char* step, int code, const char* message) {
  const char* text = message;
  if (lib != NULL && code != 0) {
    cu_error_string_fn error_string = (cu_error_string_fn)dlsym(lib, "cuGetErrorString");
    const char* s = NULL;
    if (error_string != NULL && error_string(code, &s) == 0 && s != NULL) text = s;
  }
  printf("{\"ok\": false, \"step\": ");
  json_string(step);
  printf(", \"error\": %d, \"message\": ", code);
  json_string(text != NULL ? text : "");
  printf("}\n");
  return 1;
}

int main(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* why = dlerror();
    return fail(NULL, "dlopen libcuda.so.1", 0, why != NULL ? why : "not found");
  }
  cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
  cu_int_fn driver_version = (cu_int_fn)dlsym(lib, "cuDriverGetVersion");
  cu_int_fn device_count = (cu_int_fn)dlsym(lib, "cuDeviceGetCount");
  cu_device_get_fn device_get = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
  cu_device_name_fn device_name = (cu_device_name_fn)dlsym(lib, "cuDeviceGetName");
  if (init == NULL || driver_version == NULL || device_count == NULL || device_get == NULL ||
      device_name == NULL) {
    return fail(NULL, "dlsym", 0, "libcuda.so.1 lacks the CUDA driver API");
  }
  int rc = init(0);
  if (rc != 0) return fail(lib, "cuInit", rc, "");
  int version = 0;
  rc = driver_version(&version);
  if (rc != 0) return fail(lib, "cuDriverGetVersion", rc, "");
  int count = 0;
  rc = device_count(&count);
  if (rc != 0) return fail(lib, "cuDeviceGetCount", rc, "");
  if (count == 0) return fail(lib, "cuDeviceGetCount", 0, "no device visible");
  printf("{\"ok\": true, \"driver_version\": %d, \"devices\": [", version);
  for (int i = 0; i < count; ++i) {
    int device = 0;
    char name[256] = "";
    if (device_get(&device, i) != 0 || device_name(name, (int)sizeof name, device) != 0) {
      strcpy(name, "?");
    }
    if (i > 0) printf(", ");
    json_string(name);
  }
  printf("]}\n");
  return 0;
}
