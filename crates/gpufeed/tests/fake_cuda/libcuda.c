/* A stand-in for libcuda.so: just enough of the CUDA driver API for `gpufeed bench`'s copy
 * benchmark to run on a machine without a GPU. "Device" memory is host memory, copies are
 * memcpy, streams and events are no-ops. Built by tests/doctor.rs with the system C compiler. */
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
static void *current_ctx = 0;
static char ctx_token;
static char event_token;

int cuInit(unsigned int flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *dev, int ordinal) { if (ordinal != 0) return 101; *dev = 0; return 0; }
int cuDeviceGetName(char *name, int len, int dev) {
    (void)dev; strncpy(name, "Fake CUDA GPU", (size_t)len); name[len - 1] = 0; return 0;
}
int cuDeviceGetUuid_v2(unsigned char *uuid, int dev) {
    (void)dev; for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xc0 + i); return 0;
}
int cuDeviceGetUuid(unsigned char *uuid, int dev) { return cuDeviceGetUuid_v2(uuid, dev); }
int cuDeviceGetAttribute(int *v, int attrib, int dev) {
    (void)dev;
    switch (attrib) {
    case 75: *v = 9; break; /* compute capability major */
    case 76: *v = 0; break; /* minor */
    default: *v = 0;        /* no memory pools: plain cuMemAlloc */
    }
    return 0;
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = &ctx_token; return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
int cuDevicePrimaryCtxRelease(int dev) { (void)dev; return 0; }
int cuCtxGetCurrent(void **ctx) { *ctx = current_ctx; return 0; }
int cuCtxSetCurrent(void *ctx) { current_ctx = ctx; return 0; }
int cuCtxSynchronize(void) { return 0; }
int cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
    *free_b = (size_t)8 << 30; *total_b = (size_t)16 << 30; return 0;
}
int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    void *m = malloc(n ? n : 1); if (!m) return 2; *p = (CUdeviceptr)(size_t)m; return 0;
}
int cuMemFree_v2(CUdeviceptr p) { free((void *)(size_t)p); return 0; }
int cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) {
    (void)s; memset((void *)(size_t)p, v, n); return 0;
}
int cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void *)(size_t)p, v, n); return 0; }
int cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags; *p = malloc(n ? n : 1); return *p ? 0 : 2;
}
int cuMemFreeHost(void *p) { free(p); return 0; }
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
    (void)s; memcpy((void *)(size_t)dst, src, n); return 0;
}
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
    (void)s; memcpy(dst, (const void *)(size_t)src, n); return 0;
}
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { memcpy((void *)(size_t)dst, src, n); return 0; }
int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { memcpy(dst, (const void *)(size_t)src, n); return 0; }
int cuStreamSynchronize(void *s) { (void)s; return 0; }
int cuStreamWaitEvent(void *s, void *e, unsigned int f) { (void)s; (void)e; (void)f; return 0; }
int cuEventCreate(void **e, unsigned int flags) { (void)flags; *e = &event_token; return 0; }
int cuEventDestroy_v2(void *e) { (void)e; return 0; }
int cuEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }
int cuEventSynchronize(void *e) { (void)e; return 0; }
int cuEventQuery(void *e) { (void)e; return 0; }
int cuGetErrorString(int err, const char **s) { (void)err; *s = "fake error"; return 0; }
int cuGetErrorName(int err, const char **s) { (void)err; *s = "CUDA_ERROR_FAKE"; return 0; }
