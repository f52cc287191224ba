/* libgpushare.so loads into whatever a job runs, images with an older glibc
 * included: the few glibc functions whose newest symbol version is recent
 * are bound to their first version, which every glibc since that
 * architecture's first has. `objdump -T libgpushare.so` lists no version
 * past GLIBC_2.17 (gpushare_test checks). */
#ifndef GPUPOOL_GPUSHARE_GLIBC_COMPAT_H_
#define GPUPOOL_GPUSHARE_GLIBC_COMPAT_H_

#if defined(__x86_64__)
#define GS_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define GS_GLIBC_BASE "GLIBC_2.17"
#else
#error "libgpushare: unknown architecture"
#endif

__asm__(".symver dlopen, dlopen@" GS_GLIBC_BASE);
__asm__(".symver pthread_once, pthread_once@" GS_GLIBC_BASE);
__asm__(".symver pthread_atfork, pthread_atfork@" GS_GLIBC_BASE);

#endif /* GPUPOOL_GPUSHARE_GLIBC_COMPAT_H_ */
