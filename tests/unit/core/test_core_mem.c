/*
 * tests/unit/core/test_core_mem.c - core/mem.c: dvar_page_alloc's
 * alignment and zeroing, and dvar_copy_stream equal to memcpy at every
 * alignment of source and destination and every tail length, leaving the
 * bytes around the destination alone.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"

static void test_core_mem__page_alloc(void **state)
{
	static const size_t sizes[] = { 0, 1, 4095, 4096, (2u << 20) - 1, 2u << 20, (5u << 20) + 3 };

	(void)state;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		unsigned char *p = dvar_page_alloc(sizes[i], 1);
		size_t align = sizes[i] >= (2u << 20) ? 2u << 20 : 4096;

		assert_non_null(p);
		assert_int_equal((uintptr_t)p % align, 0);
		for (size_t k = 0; k < sizes[i]; k++)
			if (p[k])
				fail_msg("size %zu: byte %zu is %d, not zero", sizes[i], k, p[k]);
		free(p);
	}
}

static void test_core_mem__copy_stream(void **state)
{
	size_t cap = (1u << 20) + 256;
	unsigned char *src = malloc(cap), *dst = malloc(cap + 64), *want = malloc(cap + 64);
	uint64_t rng = 11;

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	assert_non_null(want);
	tu_fill_random(src, cap, 3);
	for (int i = 0; i < 3000; i++) {
		/* Short ones (all-memcpy), every tail below 64, and the long loop. */
		size_t n = i < 200 ? (size_t)i : i % 7 ? tu_rand(&rng) % 5000 : tu_rand(&rng) % (1u << 20);
		size_t so = tu_rand(&rng) % 64, dof = tu_rand(&rng) % 64;

		memset(dst, 0xa5, cap + 64);
		memset(want, 0xa5, cap + 64);
		memcpy(want + dof, src + so, n);
		dvar_copy_stream(dst + dof, src + so, n);
		if (memcmp(dst, want, cap + 64) != 0)
			fail_msg("n %zu, source offset %zu, destination offset %zu: differs", n, so, dof);
	}
	free(src);
	free(dst);
	free(want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_mem__page_alloc),
		cmocka_unit_test(test_core_mem__copy_stream),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
