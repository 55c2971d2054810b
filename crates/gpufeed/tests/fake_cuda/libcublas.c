/* A stand-in for libcublas.so: a handle, a stream, and cublasGemmEx that does no arithmetic but
 * takes a time set by its precision (fp32 1 ms, TF32 250 us, fp16/bf16 125 us), so the bench's
 * precision wiring and speed-up arithmetic can be tested without a GPU. */
#include <time.h>

static char handle_token;

static void sleep_us(long us) {
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, 0);
}

int cublasCreate_v2(void **h) { *h = &handle_token; return 0; }
int cublasDestroy_v2(void *h) { (void)h; return 0; }
int cublasSetStream_v2(void *h, void *s) { (void)h; (void)s; return 0; }

int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
                 int atype, int lda, const void *B, int btype, int ldb, const void *beta, void *C,
                 int ctype, int ldc, int compute, int algo) {
    (void)h; (void)ta; (void)tb; (void)m; (void)n; (void)k; (void)alpha; (void)A; (void)lda;
    (void)B; (void)ldb; (void)beta; (void)C; (void)ldc; (void)algo;
    if (atype != btype || atype != ctype) return 7; /* CUBLAS_STATUS_INVALID_VALUE */
    switch (atype) {
    case 0:  /* CUDA_R_32F */
        if (compute == 68) { sleep_us(1000); return 0; } /* CUBLAS_COMPUTE_32F */
        if (compute == 77) { sleep_us(250); return 0; }  /* CUBLAS_COMPUTE_32F_FAST_TF32 */
        return 7;
    case 2:  /* CUDA_R_16F */
    case 14: /* CUDA_R_16BF */
        if (compute == 68) { sleep_us(125); return 0; }
        return 7;
    default:
        return 7;
    }
}
