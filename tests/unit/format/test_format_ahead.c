/*
 * tests/unit/format/test_format_ahead.c - the thread reading ahead of a
 * read through the page cache (format/ahead.c): it asks for the ranges in
 * order, no further than its window beyond the tasks started, skips the
 * ranges a reader took already, and stops when told; a warm or small read
 * starts no thread.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"
#include "format/ahead.h"

#define MIB ((uint64_t)1 << 20)
#define RANGES 8

typedef struct {
	char *dir, *path;
	int fd;
} fixture;

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = tu_mkdtemp();
	f->path = tu_path(f->dir, "data");
	unsigned char *buf = malloc(RANGES * MIB);
	assert_non_null(buf);
	tu_fill_random(buf, RANGES * MIB, 3);
	int fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, RANGES * MIB), (ssize_t)(RANGES * MIB));
	assert_int_equal(fsync(fd), 0);
	close(fd);
	free(buf);
	f->fd = open(f->path, O_RDONLY);
	assert_true(f->fd >= 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	dvar_ahead__tune(0, 0);
	close(f->fd);
	tu_rmtree(f->dir);
	free(f->path);
	free(f->dir);
	free(f);
	return 0;
}

/* The file's pages dropped: whether they went (tmpfs keeps them). */
static int drop(const fixture *f)
{
	assert_int_equal(posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	void *m = mmap(NULL, RANGES * MIB, PROT_READ, MAP_SHARED, f->fd, 0);
	unsigned char vec[RANGES * MIB / 4096];
	assert_true(m != MAP_FAILED);
	assert_int_equal(mincore(m, RANGES * MIB, vec), 0);
	munmap(m, RANGES * MIB);
	for (size_t k = 0; k < sizeof(vec); k++)
		if (vec[k] & 1)
			return 0;
	return 1;
}

/* Pages of range k (1 MiB) in the page cache. */
static size_t resident(const fixture *f, int k)
{
	void *m = mmap(NULL, RANGES * MIB, PROT_READ, MAP_SHARED, f->fd, 0);
	unsigned char vec[MIB / 4096];
	size_t n = 0;
	assert_true(m != MAP_FAILED);
	assert_int_equal(mincore((char *)m + (size_t)k * MIB, MIB, vec), 0);
	munmap(m, RANGES * MIB);
	for (size_t i = 0; i < sizeof(vec); i++)
		n += vec[i] & 1;
	return n;
}

static dvar_ahead_range *ranges(const fixture *f)
{
	dvar_ahead_range *g = malloc(RANGES * sizeof(*g));
	assert_non_null(g);
	for (int k = 0; k < RANGES; k++)
		g[k] = (dvar_ahead_range){ f->fd, (uint64_t)k * MIB, MIB };
	return g;
}

static uint64_t advised(void)
{
	uint64_t started, n;
	dvar_ahead__stats(&started, &n);
	return n;
}

/* Waits (up to 10 s) for the advice count to reach want; then a moment
 * more, to see that it goes no further. */
static void await_advised(uint64_t want)
{
	for (int i = 0; i < 10000 && advised() < want; i++)
		tu_sleep_ms(1);
	tu_sleep_ms(50);
	assert_int_equal(advised(), want);
}

/* Window 2 MiB: ranges 0 and 1 at once; 2 once task 0 is taken; after task
 * 5 is taken, 6 and 7 but not 3 to 5, which are the readers'. What was
 * asked for arrives in the page cache; what was not stays out. */
static void window_and_order(void **state)
{
	fixture *f = *state;
	if (!drop(f)) {
		skip(); /* the page cache cannot drop this file (tmpfs): nothing is cold */
		return;
	}
	dvar_ahead__tune(1, 2 * MIB);
	uint64_t before = advised();
	dvar_ahead *a = dvar_ahead_start(ranges(f), RANGES);
	assert_non_null(a);
	await_advised(before + 2);
	dvar_ahead_started(a, 0);
	await_advised(before + 3);
	dvar_ahead_started(a, 5);
	await_advised(before + 5);
	dvar_ahead_stop(a);
	for (int k = 0; k < RANGES; k++) {
		size_t n = 0;
		for (int i = 0; i < 5000 && (n = resident(f, k)) < MIB / 4096 && (k < 3 || k > 5); i++)
			tu_sleep_ms(1);
		print_message("range %d: %zu of %llu pages cached\n", k, n,
		              (unsigned long long)(MIB / 4096));
		if (k >= 3 && k <= 5)
			assert_int_equal(n, 0);
		else
			assert_int_equal(n, MIB / 4096);
	}
}

/* Stopped while waiting for the readers: it asks for nothing more. */
static void stop_while_waiting(void **state)
{
	fixture *f = *state;
	if (!drop(f)) {
		skip();
		return;
	}
	dvar_ahead__tune(1, MIB);
	uint64_t before = advised();
	dvar_ahead *a = dvar_ahead_start(ranges(f), RANGES);
	assert_non_null(a);
	await_advised(before + 1);
	dvar_ahead_stop(a);
	assert_int_equal(advised(), before + 1);
	dvar_ahead_stop(NULL);
	dvar_ahead_started(NULL, 3);
}

/* No thread for a read whose first and last ranges are cached, nor for a
 * read smaller than the least worth one; the ranges are freed either way
 * (the sanitizers' build checks). */
static void not_started(void **state)
{
	fixture *f = *state;
	unsigned char *buf = malloc(RANGES * MIB);
	assert_non_null(buf);
	assert_int_equal(pread(f->fd, buf, RANGES * MIB, 0), (ssize_t)(RANGES * MIB)); /* warm */
	free(buf);
	dvar_ahead__tune(1, MIB);
	assert_null(dvar_ahead_start(ranges(f), RANGES));
	dvar_ahead__tune(0, 0); /* 16 MiB at least: these are 8 */
	drop(f);
	assert_null(dvar_ahead_start(ranges(f), RANGES));
	assert_null(dvar_ahead_start(NULL, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(window_and_order),
		cmocka_unit_test(stop_while_waiting),
		cmocka_unit_test(not_started),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
