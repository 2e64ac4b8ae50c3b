/*
 * tests/testutil.c - see testutil.h.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dvar/common.h"
#include "dvar/core.h"
#include "dvar/runtime.h"

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

dvar_strategy *tu_strategy(int replicas, int timeout_ms)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;

	o.replicas = replicas;
	o.timeout_ms = timeout_ms;
	assert_int_equal(dvar_strategy_create(&s, &o), DVAR_OK);
	assert_non_null(s);
	return s;
}

void tu_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

int tu_threads_settled(void)
{
	int n = thread_count();

	for (int k = 0; k < 20; k++) {
		tu_sleep_ms(20);
		int now = thread_count();
		if (now == n)
			break;
		n = now;
	}
	return n;
}

int tu_threads_reach(int n)
{
	for (int k = 0; k < 200 && thread_count() != n; k++)
		tu_sleep_ms(10);
	return thread_count() == n;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st; (void)flag; (void)ftw;
	remove(path);
	return 0;
}

unsigned char *tu_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long n = -1;
	if (f && fseek(f, 0, SEEK_END) == 0)
		n = ftell(f);
	if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
	    fread(buf, 1, (size_t)n, f) == (size_t)n) {
		fclose(f);
		*len = (size_t)n;
		return buf;
	}
	int err = errno;
	if (f)
		fclose(f);
	free(buf);
	fail_msg("read %s: %s", path, strerror(err));
	return NULL;
}

void tu_flip_byte(const char *path, uint64_t off)
{
	FILE *f = fopen(path, "r+b");
	int c;
	if (!f || fseek(f, (long)off, SEEK_SET) != 0 || (c = fgetc(f)) == EOF ||
	    fseek(f, (long)off, SEEK_SET) != 0 || fputc(c ^ 0x40, f) == EOF || fflush(f) != 0 ||
	    fsync(fileno(f)) != 0)
		fail_msg("flip byte %llu of %s: %s", (unsigned long long)off, path, strerror(errno));
	fclose(f);
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

uint16_t tu_f32_to_f16(float f)
{
	uint32_t x, m, sign, h, rem;
	int32_t e;

	memcpy(&x, &f, sizeof x);
	sign = (x >> 16) & 0x8000u;
	m = x & 0x7fffffu;
	if (((x >> 23) & 0xffu) == 0xffu)
		return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
	e = (int32_t)((x >> 23) & 0xffu) - 127 + 15;
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) {
		uint32_t shift;

		if (e < -10)
			return (uint16_t)sign;
		m |= 0x800000u;
		shift = (uint32_t)(14 - e);
		h = m >> shift;
		rem = m & ((1u << shift) - 1);
		if (rem > (1u << (shift - 1)) || (rem == (1u << (shift - 1)) && (h & 1)))
			h++;
		return (uint16_t)(sign | h);
	}
	h = ((uint32_t)e << 10) | (m >> 13);
	rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; /* a carry into the exponent is right, up to infinity */
	return (uint16_t)(sign | h);
}

uint16_t tu_f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof x);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

float tu_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
	float f;

	if (e == 0)
		return (sign ? -1.0f : 1.0f) * (float)m / 16777216.0f;
	if (e == 31)
		x = sign | 0x7f800000u | (m << 13);
	else
		x = sign | ((e - 15 + 127) << 23) | (m << 13);
	memcpy(&f, &x, sizeof f);
	return f;
}

float tu_bf16_to_f32(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;

	memcpy(&f, &x, sizeof f);
	return f;
}

void tu_put(int dtype, void *buf, size_t i, double x)
{
	unsigned char *p = (unsigned char *)buf + i * dvar_dtype_size(dtype);
	uint64_t v;

	switch (dtype) {
	case DVAR_FLOAT32: {
		float f = (float)x;
		memcpy(p, &f, sizeof f);
		return;
	}
	case DVAR_FLOAT64:
		memcpy(p, &x, sizeof x);
		return;
	case DVAR_FLOAT16:
	case DVAR_BFLOAT16: {
		uint16_t h = dtype == DVAR_FLOAT16 ? tu_f32_to_f16((float)x) : tu_f32_to_bf16((float)x);
		memcpy(p, &h, sizeof h);
		return;
	}
	case DVAR_BOOL:
		*p = x != 0;
		return;
	}
	v = x >= 9223372036854775808.0 ? (uint64_t)x : (uint64_t)(int64_t)x;
	switch (dtype) {
	case DVAR_UINT8:
	case DVAR_INT8:
		*p = (uint8_t)v;
		break;
	case DVAR_UINT16:
	case DVAR_INT16: {
		uint16_t w = (uint16_t)v;
		memcpy(p, &w, sizeof w);
		break;
	}
	case DVAR_UINT32:
	case DVAR_INT32: {
		uint32_t w = (uint32_t)v;
		memcpy(p, &w, sizeof w);
		break;
	}
	case DVAR_UINT64:
	case DVAR_INT64:
		memcpy(p, &v, sizeof v);
		break;
	default:
		fail_msg("tu_put: unknown dtype %d", dtype);
	}
}

double tu_get(int dtype, const void *buf, size_t i)
{
	double d;

	assert_int_equal(dvar_dtype_to_f64(&d, dtype,
	                                   (const unsigned char *)buf + i * dvar_dtype_size(dtype), 1),
	                 DVAR_OK);
	return d;
}

void tu_list_dir(const char *dir, char *buf, size_t cap)
{
	char names[64][256];
	size_t n = 0, used = 0;
	DIR *d = opendir(dir);
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d)) && n < 64)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			snprintf(names[n++], sizeof(names[0]), "%s", e->d_name);
	closedir(d);
	qsort(names, n, sizeof(names[0]), (int (*)(const void *, const void *))strcmp);
	buf[0] = '\0';
	for (size_t i = 0; i < n && used < cap; i++)
		used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? " " : "", names[i]);
}

void tu_assert_listing(const char *dir, const char *want)
{
	char got[4096];

	tu_list_dir(dir, got, sizeof(got));
	assert_string_equal(got, want);
}
