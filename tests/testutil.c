/*
 * tests/testutil.c - see testutil.h.
 */
#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dvar/common.h"

char *tu_mkdtemp(void)
{
	const char *base = getenv("TMPDIR");
	char *path = tu_path(base && *base ? base : "/tmp", "dvar-test-XXXXXX");
	if (!mkdtemp(path))
		fail_msg("mkdtemp %s failed", path);
	return path;
}

int tu_setup_dir(void **state)
{
	*state = tu_mkdtemp();
	return 0;
}

int tu_teardown_dir(void **state)
{
	tu_rmtree(*state);
	free(*state);
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st; (void)flag; (void)ftw;
	remove(path);
	return 0;
}

void tu_rmtree(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *tu_path(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = malloc(n);
	assert_non_null(p);
	snprintf(p, n, "%s/%s", a, b);
	return p;
}

uint64_t tu_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void tu_fill_random(void *buf, size_t len, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t s = seed;
	while (len >= 8) {
		uint64_t v = tu_rand(&s);
		memcpy(p, &v, 8);
		p += 8;
		len -= 8;
	}
	if (len) {
		uint64_t v = tu_rand(&s);
		memcpy(p, &v, len);
	}
}

void tu_assert_error_contains_(const char *needle, const char *file, int line)
{
	const dvar_error *e = dvar_error_last();
	if (!strstr(e->message, needle)) {
		print_error("%s:%d: error message \"%s\" does not contain \"%s\"\n",
		            file, line, e->message, needle);
		_fail(file, line);
	}
}
