/*
 * tests/testutil.h - helpers shared by the cmocka tests: a fresh scratch
 * directory per test, deterministic random data, message assertions, and
 * elements of dtype buffers (float16 / bfloat16 codecs, put and get).
 */
#ifndef DVAR_TESTUTIL_H
#define DVAR_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "dvar/runtime.h"

/** A new empty directory under $TMPDIR (or /tmp); free with tu_rmtree + free. */
char *tu_mkdtemp(void);

/** cmocka setup/teardown giving each test a fresh directory: *state is its path (char *). */
int tu_setup_dir(void **state);
int tu_teardown_dir(void **state);

/**
 * A strategy of `replicas` local replicas whose collectives give up after
 * timeout_ms (0: they wait); the test fails when it cannot be made.
 */
dvar_strategy *tu_strategy(int replicas, int timeout_ms);

/** Sleep for ms milliseconds (the rest of them after a signal too). */
void tu_sleep_ms(int ms);

/** Threads of this process now (Linux: /proc/self/task), once the count has
 *  stopped changing: a thread another test joined may linger there a moment. */
int tu_threads_settled(void);

/** Whether the process has n threads, waiting up to 2 s for it. */
int tu_threads_reach(int n);

/** Remove a directory tree (best effort). */
void tu_rmtree(const char *path);

/** Join path parts with '/'; the result is malloc'ed. */
char *tu_path(const char *a, const char *b);

/** A whole file, malloc'ed (one byte more than *len), or fail_msg saying why. */
unsigned char *tu_slurp(const char *path, size_t *len);

/** The names in dir (at most 64, besides . and ..), sorted, joined by
 * spaces, into buf ("" when empty). */
void tu_list_dir(const char *dir, char *buf, size_t cap);

/** Assert that dir's listing (tu_list_dir) is want: "" for an empty one. */
void tu_assert_listing(const char *dir, const char *want);

/** Damage: the byte at off of path XORed with 0x40, written back and fsynced. */
void tu_flip_byte(const char *path, uint64_t off);

/** Fill buf with deterministic pseudo-random bytes from seed. */
void tu_fill_random(void *buf, size_t len, uint64_t seed);

/** Next value of a splitmix64 generator. */
uint64_t tu_rand(uint64_t *state);

/** Assert that the thread's last dvar error message contains needle. */
#define tu_assert_error_contains(needle) tu_assert_error_contains_(needle, __FILE__, __LINE__)
void tu_assert_error_contains_(const char *needle, const char *file, int line);

/** float32 to float16 bits, round to nearest even (subnormals too); NaN gives a quiet NaN. */
uint16_t tu_f32_to_f16(float f);

/** float32 to bfloat16 bits, round to nearest even; NaN gives a quiet NaN. */
uint16_t tu_f32_to_bf16(float f);

/** float16 bits to float32 (exact). */
float tu_f16_to_f32(uint16_t h);

/** bfloat16 bits to float32 (exact). */
float tu_bf16_to_f32(uint16_t b);

/**
 * Set element i of a buffer of a dvar_dtype to x: floats as (float)x rounded
 * to nearest even for the narrow ones, bool as x != 0, integers as the low
 * bytes of (int64_t)x (so they wrap; x >= 2^63 goes through uint64_t). An
 * unknown dtype fails the test.
 */
void tu_put(int dtype, void *buf, size_t i, double x);

/** Element i of a buffer of a dvar_dtype as a double (dvar_dtype_to_f64). */
double tu_get(int dtype, const void *buf, size_t i);

#endif
