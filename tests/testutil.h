/*
 * tests/testutil.h - helpers shared by the cmocka tests: a fresh scratch
 * directory per test, deterministic random data, and message assertions.
 */
#ifndef DVAR_TESTUTIL_H
#define DVAR_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

/** A new empty directory under $TMPDIR (or /tmp); free with tu_rmtree + free. */
char *tu_mkdtemp(void);

/** cmocka setup/teardown giving each test a fresh directory: *state is its path (char *). */
int tu_setup_dir(void **state);
int tu_teardown_dir(void **state);

/** Remove a directory tree (best effort). */
void tu_rmtree(const char *path);

/** Join path parts with '/'; the result is malloc'ed. */
char *tu_path(const char *a, const char *b);

/** Fill buf with deterministic pseudo-random bytes from seed. */
void tu_fill_random(void *buf, size_t len, uint64_t seed);

/** Next value of a splitmix64 generator. */
uint64_t tu_rand(uint64_t *state);

/** Assert that the thread's last dvar error message contains needle. */
#define tu_assert_error_contains(needle) tu_assert_error_contains_(needle, __FILE__, __LINE__)
void tu_assert_error_contains_(const char *needle, const char *file, int line);

#endif
