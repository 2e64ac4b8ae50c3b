/*
 * tests/unit/format/test_format_auto.c - DVAR_COMPRESS_AUTO decides per
 * chunk from what the save measures: values read back bit for bit
 * whatever it decided (dense, zero, row-sparse and element-sparse data,
 * one and several threads, a fast and a slowed compressor), and a
 * compressor slower than the writes is switched off for most of the save.
 * The slowdown is the writer's test knob, not the machine's load, so
 * nothing here depends on timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

#define CHUNK (64u << 10)
#define CHUNKS 64
#define BYTES ((size_t)CHUNK * CHUNKS)

enum { DENSE, ZEROS, ROWS, ELEMENTS, KINDS };

static void fill(unsigned char *p, size_t n, int kind, uint64_t seed)
{
	tu_fill_random(p, n, seed);
	if (kind == ZEROS)
		memset(p, 0, n);
	for (size_t i = 0; kind == ROWS && i < n; i += 512)
		if ((i / 512) % 2)
			memset(p + i, 0, n - i < 512 ? n - i : 512);
	for (size_t i = 0; kind == ELEMENTS && i < n; i += 8)
		memset(p + i, 0, 4);
}

static void save(const char *ck, dvar_compress mode, int threads, const void *big,
                 const void *small)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.compress = mode;
	o.chunk_size = CHUNK;
	o.threads = threads;
	o.flags = DVAR_WRITE_NO_FSYNC;
	dvar_writer *w;
	dvar_shape bs, ss;
	dvar_shape_init(&bs, 2, (int64_t[]){ (int64_t)(BYTES / 512), 128 });
	dvar_shape_init(&ss, 1, (int64_t[]){ 1000 });
	assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "small", DVAR_FLOAT32, &ss, NULL, small), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "big", DVAR_FLOAT32, &bs, NULL, big), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
}

/* Reads both back and compares; the number of lz4 chunks of "big". */
static size_t check(const char *ck, const void *big, const void *small)
{
	dvar_reader *r;
	size_t i, lz4 = 0;
	void *got = malloc(BYTES);
	assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, "small", &i), DVAR_OK);
	assert_int_equal(dvar_reader_read(r, i, NULL, got, 4000), DVAR_OK);
	assert_memory_equal(got, small, 4000);
	assert_int_equal(dvar_reader_find(r, "big", &i), DVAR_OK);
	assert_int_equal(dvar_reader_read(r, i, NULL, got, BYTES), DVAR_OK);
	assert_memory_equal(got, big, BYTES);
	const dvar_slice_entry *s = &dvar_reader_entry(r, i)->slices[0];
	assert_int_equal(s->num_chunks, CHUNKS);
	for (size_t c = 0; c < s->num_chunks; c++)
		lz4 += s->chunks[c].codec == DVAR_CODEC_LZ4;
	uint64_t bad = 1;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
	free(got);
	return lz4;
}

static void test_format_auto__every_decision_round_trips(void **state)
{
	const char *dir = *state;
	unsigned char *big = malloc(BYTES), small[4000];
	static const unsigned delays[] = { 0, 3000 };
	static const int threads[] = { 1, 3 };
	for (int kind = 0; kind < KINDS; kind++) {
		fill(big, BYTES, kind, 40 + kind);
		fill(small, sizeof(small), kind, 50 + kind);
		for (size_t d = 0; d < 2; d++)
			for (size_t t = 0; t < 2; t++) {
				char ck[128];
				snprintf(ck, sizeof(ck), "%s/auto-%d-%zu-%zu", dir, kind, d, t);
				dvar__lz4_delay_us = delays[d];
				save(ck, DVAR_COMPRESS_AUTO, threads[t], big, small);
				dvar__lz4_delay_us = 0;
				size_t lz4 = check(ck, big, small);
				/* Dense floats never compress by 10%. */
				if (kind == DENSE)
					assert_int_equal(lz4, 0);
			}
	}
	free(big);
}

static void test_format_auto__slow_compressor_switched_off(void **state)
{
	const char *dir = *state;
	unsigned char *big = malloc(BYTES), small[4000];
	char ck[128];
	fill(big, BYTES, ROWS, 7);
	fill(small, sizeof(small), ROWS, 8);
	/* Every chunk is worth compressing by its bytes. */
	snprintf(ck, sizeof(ck), "%s/lz4", dir);
	save(ck, DVAR_COMPRESS_LZ4, 2, big, small);
	assert_int_equal(check(ck, big, small), CHUNKS);
	/* 20 ms per 64 KiB chunk (3 MB/s): slower than any write. AUTO compresses
	 * the first chunks (the sample is not slowed), then times raw writes and
	 * tries lz4 again only once in a while. */
	snprintf(ck, sizeof(ck), "%s/auto-slow", dir);
	dvar__lz4_delay_us = 20000;
	save(ck, DVAR_COMPRESS_AUTO, 2, big, small);
	dvar__lz4_delay_us = 0;
	assert_true(check(ck, big, small) <= CHUNKS / 4);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_auto__every_decision_round_trips,
		                                tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_auto__slow_compressor_switched_off,
		                                tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
