/* Default options of the address sanitizer, compiled into each executable
 * of a sanitizer build (an environment's ASAN_OPTIONS or LSAN_OPTIONS still
 * overrides each one it names).
 *
 * intercept_tls_get_addr=0: GCC 12's runtime takes a dynamic TLS block that
 * starts 16 bytes past a page boundary for one with a glibc 2.19 header,
 * and reads a start and a size from the two words before it. Since glibc
 * 2.25 there is no header there, and a block malloc placed at that offset
 * by chance gives LeakSanitizer a garbage range to scan at exit: its tracer
 * dies ("Tracer caught signal 11") and the process exits 1 with no leak
 * found. gRPC's threads use dynamic TLS, so any short gRPC client could hit
 * it, about once per sanitizer pass of the suite. Without the interceptor,
 * LeakSanitizer does not scan dynamic TLS blocks for pointers; no block of
 * this project's is reachable only from one. */
__attribute__((visibility("default"))) const char *__asan_default_options(void);

const char *__asan_default_options(void)
{
    return "intercept_tls_get_addr=0";
}
