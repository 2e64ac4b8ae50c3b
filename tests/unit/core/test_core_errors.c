/*
 * tests/unit/core/test_core_errors.c - the thread-local error record: set,
 * errno text, prefix (with truncation), restore, per-thread isolation, its
 * contract across failing and successful calls; the options version check.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "dvar/format.h"

static void test_core_errors__set_and_clear(void **state)
{
	(void)state;
	assert_int_equal(dvar_error_set(DVAR_EIO, "open '%s' (%d)", "x.idx", 7), DVAR_EIO);
	assert_int_equal(dvar_error_last()->code, DVAR_EIO);
	assert_string_equal(dvar_error_last()->message, "open 'x.idx' (7)");

	dvar_error_clear();
	assert_int_equal(dvar_error_last()->code, DVAR_OK);
	assert_non_null(dvar_error_last()->message);
	assert_string_equal(dvar_error_last()->message, "");
}

/* The contract of dvar/common.h: the status says whether a call failed, the
 * record why the most recent failure happened; successes leave it alone. */
static void test_core_errors__success_keeps_last_failure(void **state)
{
	dvar_reader *r = NULL;
	dvar_shape shape;
	const int64_t dims[2] = { 2, 3 };
	char failure[DVAR_ERROR_MESSAGE_MAX];
	int code;

	(void)state;
	dvar_error_clear();
	code = dvar_reader_open(&r, "/nonexistent/dvar-error-contract", NULL);
	assert_int_not_equal(code, DVAR_OK);
	assert_null(r);
	assert_int_equal(dvar_error_last()->code, code);
	assert_string_not_equal(dvar_error_last()->message, "");
	snprintf(failure, sizeof failure, "%s", dvar_error_last()->message);

	assert_int_equal(dvar_shape_init(&shape, 2, dims), DVAR_OK);
	assert_int_equal(dvar_error_last()->code, code);
	assert_string_equal(dvar_error_last()->message, failure);

	dvar_error_clear();
	assert_int_equal(dvar_error_last()->code, DVAR_OK);
	assert_string_equal(dvar_error_last()->message, "");
	dvar_free(NULL);
}

/* Every version from 1 to the current one passes, with one message otherwise. */
static void test_core_errors__check_version(void **state)
{
	dvar_write_options o;

	(void)state;
	for (unsigned int v = 1; v <= 3; v++)
		assert_int_equal(dvar_check_version("dvar_x_options", v, 3), DVAR_OK);
	assert_int_equal(dvar_check_version("dvar_x_options", 0, 3), DVAR_EINVAL);
	assert_string_equal(dvar_error_last()->message,
	                    "dvar_x_options: version 0 is not one this library knows (1 to 3); "
	                    "initialize it with its _INIT macro or dvar_x_options_init");
	assert_int_equal(dvar_check_version("dvar_x_options", 4, 3), DVAR_EINVAL);
	assert_non_null(strstr(dvar_error_last()->message, "version 4 is not one"));

	memset(&o, 0xff, sizeof o);
	assert_int_equal(dvar_write_options_init(&o, DVAR_WRITE_OPTIONS_VERSION), DVAR_OK);
	assert_int_equal(o.version, DVAR_WRITE_OPTIONS_VERSION);
	assert_int_equal(o.chunk_size, 0);
	assert_null(o.progress);
	assert_int_equal(dvar_write_options_init(&o, DVAR_WRITE_OPTIONS_VERSION + 1), DVAR_EINVAL);
	tu_assert_error_contains("dvar_write_options: version 2 is not one");
	assert_int_equal(dvar_write_options_init(NULL, DVAR_WRITE_OPTIONS_VERSION), DVAR_EINVAL);
}

static void test_core_errors__set_from_own_message(void **state)
{
	(void)state;
	dvar_error_set(DVAR_ECORRUPT, "bad crc");
	dvar_error_set(DVAR_EIO, "again: %s", dvar_error_last()->message);
	assert_string_equal(dvar_error_last()->message, "again: bad crc");
	assert_int_equal(dvar_error_last()->code, DVAR_EIO);
}

static void test_core_errors__long_message_truncated(void **state)
{
	char big[3000];

	(void)state;
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	dvar_error_set(DVAR_EINVAL, "%s", big);
	assert_int_equal(strlen(dvar_error_last()->message), DVAR_ERROR_MESSAGE_MAX - 1);
	assert_int_equal(dvar_error_last()->message[0], 'a');
}

static void test_core_errors__strerror(void **state)
{
	static const int codes[] = { DVAR_OK, DVAR_ERROR, DVAR_ENOTFOUND, DVAR_EEXISTS,
	                             DVAR_EINVAL, DVAR_ENOMEM, DVAR_EIO, DVAR_ECORRUPT,
	                             DVAR_EVERSION, DVAR_ESHAPE, DVAR_ECOMM, DVAR_EDEVICE,
	                             DVAR_ENOTSUPP, DVAR_EMISMATCH, DVAR_ECANCELED, DVAR_EBUSY };
	size_t n = sizeof codes / sizeof codes[0];

	(void)state;
	for (size_t i = 0; i < n; i++) {
		const char *s = dvar_strerror(codes[i]);
		assert_non_null(s);
		assert_string_not_equal(s, "unknown error");
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(s, dvar_strerror(codes[j]));
	}
	assert_string_equal(dvar_strerror(DVAR_EIO), "I/O error");
	assert_string_equal(dvar_strerror(DVAR_OK), "success");
	assert_string_equal(dvar_strerror(1), "unknown error");
	assert_string_equal(dvar_strerror(-16), "unknown error");
	assert_string_equal(dvar_version(), DVAR_VERSION_STRING);
	assert_string_equal(dvar_version(), "0.1.0");
}

static void test_core_errors__errno(void **state)
{
	char expect[256];

	(void)state;
	snprintf(expect, sizeof expect, "open 'f.bin': %s", strerror(ENOENT));
	assert_int_equal(dvar_error_set_errno(DVAR_ENOTFOUND, ENOENT, "open '%s'", "f.bin"),
	                 DVAR_ENOTFOUND);
	assert_int_equal(dvar_error_last()->code, DVAR_ENOTFOUND);
	assert_string_equal(dvar_error_last()->message, expect);
	assert_string_equal(dvar_error_last()->message, "open 'f.bin': No such file or directory");
	/* A call that ran out of memory is out of memory, whatever the caller's code. */
	assert_int_equal(dvar_error_set_errno(DVAR_EIO, ENOMEM, "opendir '%s'", "d"), DVAR_ENOMEM);
	assert_int_equal(dvar_error_last()->code, DVAR_ENOMEM);
	assert_string_equal(dvar_error_last()->message, "opendir 'd': Cannot allocate memory");
}

static void test_core_errors__errno_after_long_text(void **state)
{
	char big[2000];
	const char *msg;

	(void)state;
	memset(big, 'b', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	dvar_error_set_errno(DVAR_EIO, EIO, "%s", big);
	msg = dvar_error_last()->message;
	assert_int_equal(strlen(msg), DVAR_ERROR_MESSAGE_MAX - 1);
	assert_int_equal(msg[DVAR_ERROR_MESSAGE_MAX - 2], 'b');
}

static void test_core_errors__prefix(void **state)
{
	(void)state;
	dvar_error_set(DVAR_ECORRUPT, "checksum mismatch");
	assert_int_equal(dvar_error_prefix("reading '%s'", "w"), DVAR_ECORRUPT);
	assert_string_equal(dvar_error_last()->message, "reading 'w': checksum mismatch");
	assert_int_equal(dvar_error_prefix("restore"), DVAR_ECORRUPT);
	assert_string_equal(dvar_error_last()->message, "restore: reading 'w': checksum mismatch");
	assert_int_equal(dvar_error_last()->code, DVAR_ECORRUPT);

	/* With no message there is nothing to put ": " in front of. */
	dvar_error_clear();
	assert_int_equal(dvar_error_prefix("context %d", 3), DVAR_OK);
	assert_string_equal(dvar_error_last()->message, "context 3");
}

static void test_core_errors__prefix_truncates(void **state)
{
	char big[DVAR_ERROR_MESSAGE_MAX];
	char huge[3 * DVAR_ERROR_MESSAGE_MAX];
	const char *msg;

	(void)state;
	memset(big, 'm', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	dvar_error_set(DVAR_EIO, "%s", big);
	assert_int_equal(dvar_error_prefix("ctx"), DVAR_EIO);
	msg = dvar_error_last()->message;
	assert_int_equal(strlen(msg), DVAR_ERROR_MESSAGE_MAX - 1);
	assert_memory_equal(msg, "ctx: mmm", 8);

	/* A prefix longer than the buffer: the old message is dropped entirely. */
	memset(huge, 'p', sizeof huge - 1);
	huge[sizeof huge - 1] = '\0';
	dvar_error_set(DVAR_EIO, "short");
	dvar_error_prefix("%s", huge);
	msg = dvar_error_last()->message;
	assert_int_equal(strlen(msg), DVAR_ERROR_MESSAGE_MAX - 1);
	assert_null(strchr(msg, ':'));
}

static void test_core_errors__restore(void **state)
{
	char big[2 * DVAR_ERROR_MESSAGE_MAX];

	(void)state;
	assert_int_equal(dvar_error_restore(DVAR_ECOMM, "rank 3: peer gone"), DVAR_ECOMM);
	assert_int_equal(dvar_error_last()->code, DVAR_ECOMM);
	assert_string_equal(dvar_error_last()->message, "rank 3: peer gone");

	assert_int_equal(dvar_error_restore(DVAR_EIO, NULL), DVAR_EIO);
	assert_string_equal(dvar_error_last()->message, "");

	/* Its own message, or a tail of it, is a valid source. */
	dvar_error_set(DVAR_EIO, "abc: def");
	dvar_error_restore(DVAR_ESHAPE, dvar_error_last()->message);
	assert_string_equal(dvar_error_last()->message, "abc: def");
	dvar_error_restore(DVAR_ESHAPE, dvar_error_last()->message + 5);
	assert_string_equal(dvar_error_last()->message, "def");

	memset(big, 'r', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	dvar_error_restore(DVAR_EIO, big);
	assert_int_equal(strlen(dvar_error_last()->message), DVAR_ERROR_MESSAGE_MAX - 1);
}

struct thread_arg {
	pthread_barrier_t *barrier;
	int code;
	const char *text;
	int fresh_code;
	char fresh_message[64];
	int ok;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;
	const dvar_error *e = dvar_error_last();

	a->fresh_code = e->code;
	snprintf(a->fresh_message, sizeof a->fresh_message, "%s", e->message);
	dvar_error_set(a->code, "%s", a->text);
	/* Both threads have set their error before either reads it back. */
	pthread_barrier_wait(a->barrier);
	e = dvar_error_last();
	a->ok = e->code == a->code && strcmp(e->message, a->text) == 0;
	pthread_barrier_wait(a->barrier);
	return NULL;
}

static void test_core_errors__thread_local(void **state)
{
	pthread_barrier_t barrier;
	struct thread_arg a = { &barrier, DVAR_EIO, "thread one", -1, "x", 0 };
	struct thread_arg b = { &barrier, DVAR_ESHAPE, "thread two", -1, "x", 0 };
	pthread_t ta, tb;

	(void)state;
	dvar_error_set(DVAR_ENOMEM, "main thread");
	pthread_barrier_init(&barrier, NULL, 2);
	assert_int_equal(pthread_create(&ta, NULL, thread_main, &a), 0);
	assert_int_equal(pthread_create(&tb, NULL, thread_main, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	pthread_barrier_destroy(&barrier);

	assert_true(a.ok);
	assert_true(b.ok);
	/* A new thread starts with an empty record. */
	assert_int_equal(a.fresh_code, DVAR_OK);
	assert_string_equal(a.fresh_message, "");
	assert_int_equal(b.fresh_code, DVAR_OK);
	assert_int_equal(dvar_error_last()->code, DVAR_ENOMEM);
	assert_string_equal(dvar_error_last()->message, "main thread");
}

static void test_core_errors__now_is_monotonic(void **state)
{
	double a, b;

	(void)state;
	a = dvar_now();
	b = dvar_now();
	assert_true(a > 0.0);
	assert_true(b >= a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_errors__set_and_clear),
		cmocka_unit_test(test_core_errors__success_keeps_last_failure),
		cmocka_unit_test(test_core_errors__check_version),
		cmocka_unit_test(test_core_errors__set_from_own_message),
		cmocka_unit_test(test_core_errors__long_message_truncated),
		cmocka_unit_test(test_core_errors__strerror),
		cmocka_unit_test(test_core_errors__errno),
		cmocka_unit_test(test_core_errors__errno_after_long_text),
		cmocka_unit_test(test_core_errors__prefix),
		cmocka_unit_test(test_core_errors__prefix_truncates),
		cmocka_unit_test(test_core_errors__restore),
		cmocka_unit_test(test_core_errors__thread_local),
		cmocka_unit_test(test_core_errors__now_is_monotonic),
	};
	return cmocka_run_group_tests_name("core/errors", tests, NULL, NULL);
}
