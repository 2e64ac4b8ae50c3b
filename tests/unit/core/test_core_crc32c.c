/*
 * tests/unit/core/test_core_crc32c.c - CRC-32C: known vectors, the SSE4.2,
 * folding and table paths against each other and a bitwise reference, extending,
 * and dvar_crc32c_combine against the CRC of the concatenation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"

/* One bit at a time, straight from the definition. */
static uint32_t crc_bitwise(uint32_t crc, const unsigned char *p, size_t len)
{
	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
	}
	return ~crc;
}

/* Every implementation this machine has, for the vectors. */
static void check_all(const void *buf, size_t len, uint32_t want)
{
	uint32_t hw = 0;

	assert_int_equal(dvar_crc32c(buf, len), want);
	assert_int_equal(dvar_crc32c__table(0, buf, len), want);
	assert_int_equal(crc_bitwise(0, buf, len), want);
	for (int level = 1; level <= 3; level++)
		if (dvar_crc32c__hw(level, 0, buf, len, &hw) == DVAR_OK)
			assert_int_equal(hw, want);
}

static void test_core_crc32c__vectors(void **state)
{
	unsigned char b[32];
	float f;

	(void)state;
	check_all("123456789", 9, 0xe3069283u);
	check_all("", 0, 0);
	f = 1.0f;
	check_all(&f, 4, 0xdd54c4abu);
	f = 0.0f;
	check_all(&f, 4, 0x48674bc7u);
	f = 2.0f;
	check_all(&f, 4, 0x091c567bu);
	f = 0.5f;
	check_all(&f, 4, 0x26973e52u);
	/* RFC 3720 (iSCSI) B.4 */
	memset(b, 0, sizeof b);
	check_all(b, sizeof b, 0x8a9136aau);
	memset(b, 0xff, sizeof b);
	check_all(b, sizeof b, 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	check_all(b, sizeof b, 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	check_all(b, sizeof b, 0x113fdb5cu);
}

static void test_core_crc32c__hw_matches_table(void **state)
{
	size_t cap = 10000 + 64;
	unsigned char *buf = malloc(cap);
	uint64_t rng = 42;
	uint32_t hw;
	int have[4] = { 0 };

	(void)state;
	assert_non_null(buf);
	tu_fill_random(buf, cap, 7);
	for (int level = 1; level <= 3; level++)
		if (!(have[level] = dvar_crc32c__hw(level, 0, "", 0, &hw) == DVAR_OK))
			print_message("no %s here: its path is not compared\n",
			              level == 1   ? "SSE4.2"
			              : level == 2 ? "AVX-512 VPCLMULQDQ"
			                           : "AVX2 VPCLMULQDQ");
	for (int i = 0; i < 2000; i++) {
		size_t len = i < 64 ? (size_t)i : tu_rand(&rng) % 10001;
		size_t off = tu_rand(&rng) % 17;
		uint32_t seed = i % 3 ? (uint32_t)tu_rand(&rng) : 0;
		uint32_t want = dvar_crc32c__table(seed, buf + off, len);

		if (i % 16 == 0)
			assert_int_equal(crc_bitwise(seed, buf + off, len), want);
		assert_int_equal(dvar_crc32c_extend(seed, buf + off, len), want);
		for (int level = 1; level <= 3; level++) {
			if (!have[level])
				continue;
			assert_int_equal(dvar_crc32c__hw(level, seed, buf + off, len, &hw), DVAR_OK);
			if (hw != want)
				fail_msg("level %d len %zu off %zu seed %08x: hw %08x table %08x", level,
				         len, off, seed, hw, want);
		}
	}
	free(buf);
}

/* Lengths that reach the 3 x 8 KiB and 3 x 256 B interleaved loops, the
 * 256-byte folding from 1 KiB on, and every tail behind them. */
static void test_core_crc32c__long_buffers(void **state)
{
	static const size_t lens[] = { 767, 768, 769, 775, 1023, 1024, 1025, 1279, 1280, 1536,
	                               24575, 24576, 24577, 24576 + 768 + 7, 49152 + 100, 100003,
	                               (1u << 20) + 13 };
	size_t cap = (1u << 20) + 64;
	unsigned char *buf = malloc(cap);

	(void)state;
	assert_non_null(buf);
	tu_fill_random(buf, cap, 99);
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		for (size_t off = 0; off < 9; off += 3) {
			uint32_t want = crc_bitwise(0, buf + off, lens[i]);
			uint32_t hw;
			assert_int_equal(dvar_crc32c__table(0, buf + off, lens[i]), want);
			assert_int_equal(dvar_crc32c(buf + off, lens[i]), want);
			for (int level = 1; level <= 3; level++)
				if (dvar_crc32c__hw(level, 0, buf + off, lens[i], &hw) == DVAR_OK)
					assert_int_equal(hw, want);
		}
	}
	free(buf);
}

static void test_core_crc32c__extend(void **state)
{
	unsigned char buf[5000];
	uint64_t rng = 5;

	(void)state;
	tu_fill_random(buf, sizeof buf, 11);
	for (int i = 0; i < 200; i++) {
		size_t len = tu_rand(&rng) % sizeof buf;
		size_t cut = len ? tu_rand(&rng) % (len + 1) : 0;
		uint32_t whole = dvar_crc32c(buf, len);
		uint32_t parts = dvar_crc32c_extend(dvar_crc32c(buf, cut), buf + cut, len - cut);
		assert_int_equal(parts, whole);
		assert_int_equal(dvar_crc32c_extend(whole, buf, 0), whole);
	}
}

static void test_core_crc32c__combine(void **state)
{
	size_t cap = (1u << 20) + 4096;
	unsigned char *buf = malloc(cap);
	uint64_t rng = 3;

	(void)state;
	assert_non_null(buf);
	tu_fill_random(buf, cap, 1234);
	/* every small length, both sides */
	for (size_t a = 0; a < 70; a++) {
		for (size_t b = 0; b < 70; b++) {
			uint32_t ca = dvar_crc32c(buf, a), cb = dvar_crc32c(buf + a, b);
			assert_int_equal(dvar_crc32c_combine(ca, cb, b), dvar_crc32c(buf, a + b));
		}
	}
	/* and random large ones, 64 KiB blocks included */
	for (int i = 0; i < 200; i++) {
		size_t a = tu_rand(&rng) % 70000, b;
		uint32_t ca, cb;
		switch (i % 4) {
		case 0: b = 65536; break;
		case 1: b = 0; break;
		case 2: b = tu_rand(&rng) % (cap - a); break;
		default: b = tu_rand(&rng) % 300; break;
		}
		ca = dvar_crc32c(buf, a);
		cb = dvar_crc32c(buf + a, b);
		assert_int_equal(dvar_crc32c_combine(ca, cb, b), dvar_crc32c(buf, a + b));
	}
	/* A chain of 64 KiB blocks folded one by one gives the whole CRC. */
	{
		uint32_t acc = 0;
		size_t done = 0;
		while (done + 65536 <= cap) {
			acc = dvar_crc32c_combine(acc, dvar_crc32c(buf + done, 65536), 65536);
			done += 65536;
		}
		assert_int_equal(acc, dvar_crc32c(buf, done));
	}
	free(buf);
}

/* Combining zero bytes is the identity; combining over n zero bytes equals
 * extending with them, for lengths too big to hold in memory that way. */
static void test_core_crc32c__combine_zeros(void **state)
{
	static unsigned char zeros[1 << 16];
	uint32_t c = dvar_crc32c("123456789", 9);
	uint32_t z = dvar_crc32c(zeros, sizeof zeros), ext = c;

	(void)state;
	assert_int_equal(dvar_crc32c_combine(c, 0, 0), c);
	assert_int_equal(dvar_crc32c_combine(0, c, 9), c);
	for (int i = 0; i < 64; i++)
		ext = dvar_crc32c_extend(ext, zeros, sizeof zeros);
	/* 64 x 64 KiB zeros = 4 MiB; fold z with itself to 4 MiB */
	for (int i = 0; i < 6; i++)
		z = dvar_crc32c_combine(z, z, (uint64_t)sizeof zeros << i);
	assert_int_equal(dvar_crc32c_combine(c, z, (uint64_t)64 * sizeof zeros), ext);
	/* Huge lengths run in bounded time and stay consistent:
	 * (A || Z1) || Z2 == A || (Z1 || Z2) with 2^40 and 2^50 "byte" shifts. */
	{
		uint32_t x = dvar_crc32c_combine(dvar_crc32c_combine(c, 0, 1ull << 40), 0, 1ull << 50);
		uint32_t y = dvar_crc32c_combine(c, 0, (1ull << 40) + (1ull << 50));
		assert_int_equal(x, y);
		assert_int_equal(dvar_crc32c_combine(dvar_crc32c_combine(c, 0, UINT64_MAX - 5), 0, 5),
		                 dvar_crc32c_combine(c, 0, UINT64_MAX));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_crc32c__vectors),
		cmocka_unit_test(test_core_crc32c__hw_matches_table),
		cmocka_unit_test(test_core_crc32c__long_buffers),
		cmocka_unit_test(test_core_crc32c__extend),
		cmocka_unit_test(test_core_crc32c__combine),
		cmocka_unit_test(test_core_crc32c__combine_zeros),
	};
	return cmocka_run_group_tests_name("core/crc32c", tests, NULL, NULL);
}
