/*
 * tests/unit/format/test_format_map.c - dvar_reader_map: a raw slice maps to
 * exactly its bytes (whole variables and single slices, any thread count,
 * page-aligned, alive after the reader is freed), checksums are checked on
 * request, and what cannot be mapped (lz4 chunks, chunks out of order,
 * several slices, a short data file) is refused saying why.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

#define ROWS 1000
#define COLS 37 /* 148000 bytes of float32: 36 whole chunks of 4 KiB and a short one */

typedef struct {
	char *dir, *ck;
	float *w;          /* "w": [ROWS, COLS] float32, whole */
	int32_t *s;        /* "s": [10, 1000] int32 in two row slices */
} fixture;

static void write_fixture(fixture *f)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.chunk_size = 4096;
	o.compress = DVAR_COMPRESS_NONE;
	o.threads = 4;
	/* Page-aligned as an export is: the offsets below count whole pages. */
	o.flags = DVAR_WRITE_NO_FSYNC | DVAR_WRITE_PAGE_ALIGN;
	dvar_writer *w;
	dvar_shape ws, ss, es, cs;
	dvar_shape_init(&ws, 2, (int64_t[]){ ROWS, COLS });
	dvar_shape_init(&ss, 2, (int64_t[]){ 10, 1000 });
	dvar_shape_init(&es, 2, (int64_t[]){ 0, 3 });
	dvar_shape_init(&cs, 0, NULL);
	dvar_slice top, bottom;
	dvar_slice_full(&top, &ss);
	dvar_slice_full(&bottom, &ss);
	top.length[0] = 3;
	bottom.start[0] = 3;
	bottom.length[0] = 7;
	double scalar = 2.5;

	assert_int_equal(dvar_writer_open(&w, f->ck, &o), DVAR_OK);
	/* A small variable first, so that "w" does not start at offset 0. */
	assert_int_equal(dvar_writer_add(w, "c", DVAR_FLOAT64, &cs, NULL, &scalar), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "w", DVAR_FLOAT32, &ws, NULL, f->w), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "s", DVAR_INT32, &ss, &top, f->s), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "s", DVAR_INT32, &ss, &bottom, f->s + 3 * 1000), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "e", DVAR_INT8, &es, NULL, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	f->dir = tu_mkdtemp();
	f->ck = tu_path(f->dir, "ck");
	f->w = malloc(ROWS * COLS * sizeof(float));
	f->s = malloc(10 * 1000 * sizeof(int32_t));
	tu_fill_random(f->w, ROWS * COLS * sizeof(float), 5);
	tu_fill_random(f->s, 10 * 1000 * sizeof(int32_t), 6);
	write_fixture(f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	tu_rmtree(f->dir);
	free(f->dir);
	free(f->ck);
	free(f->w);
	free(f->s);
	free(f);
	return 0;
}

static size_t find(dvar_reader *r, const char *name)
{
	size_t i;
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	return i;
}

static void test_format_map__whole_variable(void **state)
{
	fixture *f = *state;
	dvar_reader *r;
	dvar_mapping m, mv;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	size_t i = find(r, "w");
	assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, 0, &m), DVAR_OK);
	assert_int_equal(m.size, ROWS * COLS * sizeof(float));
	assert_non_null(m.data);
	assert_int_equal((uintptr_t)m.data % 4096, 0);
	assert_memory_equal(m.data, f->w, m.size);
	/* Verified, and slice 0 is the same slice. */
	assert_int_equal(dvar_reader_map(r, i, 0, DVAR_MAP_VERIFY, &mv), DVAR_OK);
	assert_int_equal(mv.size, m.size);
	assert_memory_equal(mv.data, f->w, mv.size);
	assert_true(dvar_reader_bytes_read(r) >= mv.size);
	dvar_reader_unmap(&mv);
	assert_null(mv.data);
	dvar_reader_unmap(&mv); /* zeroed: a no-op */
	dvar_reader_unmap(NULL);
	/* The mapping outlives the reader. */
	dvar_reader_free(r);
	assert_memory_equal(m.data, f->w, m.size);
	dvar_reader_unmap(&m);
}

static void test_format_map__scalar_and_empty(void **state)
{
	fixture *f = *state;
	dvar_reader *r;
	dvar_mapping m;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_map(r, find(r, "c"), DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m), DVAR_OK);
	assert_int_equal(m.size, 8);
	assert_true(*(const double *)m.data == 2.5);
	dvar_reader_unmap(&m);
	assert_int_equal(dvar_reader_map(r, find(r, "e"), DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m), DVAR_OK);
	assert_int_equal(m.size, 0);
	assert_null(m.data);
	dvar_reader_unmap(&m);
	dvar_reader_free(r);
}

static void test_format_map__slices(void **state)
{
	fixture *f = *state;
	dvar_reader *r;
	dvar_mapping m;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	size_t i = find(r, "s");
	assert_int_equal(dvar_reader_map(r, i, 0, DVAR_MAP_VERIFY, &m), DVAR_OK);
	assert_int_equal(m.size, 3 * 1000 * 4);
	assert_memory_equal(m.data, f->s, m.size);
	dvar_reader_unmap(&m);
	assert_int_equal(dvar_reader_map(r, i, 1, 0, &m), DVAR_OK);
	assert_int_equal(m.size, 7 * 1000 * 4);
	assert_memory_equal(m.data, f->s + 3000, m.size);
	dvar_reader_unmap(&m);
	assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, 0, &m), DVAR_ENOTSUPP);
	tu_assert_error_contains("cannot map variable 's' whole: it is saved as 2 slices");
	assert_null(m.data);
	assert_int_equal(dvar_reader_map(r, i, 2, 0, &m), DVAR_EINVAL);
	tu_assert_error_contains("has 2 slices, not 3");
	assert_int_equal(dvar_reader_map(r, 99, 0, 0, &m), DVAR_EINVAL);
	assert_int_equal(dvar_reader_map(r, i, 0, 0x80, &m), DVAR_EINVAL);
	assert_int_equal(dvar_reader_map(r, i, 0, 0, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_reader_map(NULL, 0, 0, 0, &m), DVAR_EINVAL);
	dvar_reader_free(r);
}

static void test_format_map__compressed_is_refused(void **state)
{
	fixture *f = *state;
	char *path = tu_path(f->dir, "lz4");
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.chunk_size = 4096;
	o.compress = DVAR_COMPRESS_LZ4;
	o.flags = DVAR_WRITE_NO_FSYNC;
	dvar_shape zs;
	dvar_shape_init(&zs, 1, (int64_t[]){ 100000 });
	uint8_t *z = calloc(1, 100000);
	dvar_writer *w;
	assert_int_equal(dvar_writer_open(&w, path, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "z", DVAR_UINT8, &zs, NULL, z), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	dvar_reader *r;
	dvar_mapping m;
	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_map(r, 0, DVAR_MAP_WHOLE, 0, &m), DVAR_ENOTSUPP);
	tu_assert_error_contains("cannot map variable 'z' slice -: chunk 0 of 25 is lz4-compressed");
	dvar_reader_free(r);
	free(z);
	free(path);
}

/* Index rewriting: swap the offsets of chunks 0 and 1 of "w" (and their bytes). */
typedef struct {
	dvar_bytes keys[64], vals[64];
	size_t n;
} kv_list;

static int collect(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
	kv_list *l = ud;
	assert_true(l->n < 64);
	memset(&l->keys[l->n], 0, sizeof(dvar_bytes));
	memset(&l->vals[l->n], 0, sizeof(dvar_bytes));
	assert_int_equal(dvar_bytes_put(&l->keys[l->n], key, klen), DVAR_OK);
	assert_int_equal(dvar_bytes_put(&l->vals[l->n], val, vlen), DVAR_OK);
	l->n++;
	return DVAR_OK;
}

static void test_format_map__chunks_out_of_order(void **state)
{
	fixture *f = *state;
	char *index = tu_path(f->ck, "index");
	char *data = tu_path(f->ck, "data-00000-of-00001");
	kv_list l = { .n = 0 };
	assert_int_equal(dvar_index_scan(index, collect, &l), DVAR_OK);
	dvar_bytes key = { 0 };
	assert_int_equal(dvar_key_slice(&key, "w", 0), DVAR_OK);
	uint64_t off0 = 0, off1 = 0;
	for (size_t k = 0; k < l.n; k++) {
		if (l.keys[k].len != key.len || memcmp(l.keys[k].data, key.data, key.len))
			continue;
		dvar_slice_entry se;
		assert_int_equal(dvar_slice_entry_decode(&se, l.vals[k].data, l.vals[k].len, "w"), DVAR_OK);
		off0 = se.chunks[0].offset;
		off1 = se.chunks[1].offset;
		se.chunks[0].offset = off1;
		se.chunks[1].offset = off0;
		free(l.vals[k].data);
		memset(&l.vals[k], 0, sizeof(dvar_bytes));
		assert_int_equal(dvar_slice_entry_encode(&l.vals[k], &se), DVAR_OK);
		dvar_slice_entry_clear(&se);
	}
	assert_int_equal(off1, off0 + 4096);
	free(key.data);
	assert_int_equal(unlink(index), 0);
	dvar_index_builder *b;
	assert_int_equal(dvar_index_builder_open(&b, index), DVAR_OK);
	for (size_t k = 0; k < l.n; k++) {
		assert_int_equal(dvar_index_builder_add(b, l.keys[k].data, l.keys[k].len, l.vals[k].data,
		                                        l.vals[k].len), DVAR_OK);
		free(l.keys[k].data);
		free(l.vals[k].data);
	}
	assert_int_equal(dvar_index_builder_finish(b, 0), DVAR_OK);
	dvar_index_builder_free(b);
	/* Swap the two chunks' bytes so that every checksum still holds. */
	unsigned char a[4096], c[4096];
	int fd = open(data, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, a, 4096, (off_t)off0), 4096);
	assert_int_equal(pread(fd, c, 4096, (off_t)off1), 4096);
	assert_int_equal(pwrite(fd, c, 4096, (off_t)off0), 4096);
	assert_int_equal(pwrite(fd, a, 4096, (off_t)off1), 4096);
	close(fd);

	dvar_reader *r;
	dvar_mapping m;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	size_t i = find(r, "w");
	assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, 0, &m), DVAR_ENOTSUPP);
	tu_assert_error_contains("its chunks are not contiguous");
	tu_assert_error_contains("chunk 1 is at offset");
	/* Reading does not care where chunks lie. */
	float *got = malloc(ROWS * COLS * sizeof(float));
	assert_int_equal(dvar_reader_read(r, i, NULL, got, ROWS * COLS * sizeof(float)), DVAR_OK);
	assert_memory_equal(got, f->w, ROWS * COLS * sizeof(float));
	free(got);
	dvar_reader_free(r);
	free(index);
	free(data);
}

static void test_format_map__verify_finds_a_flipped_byte(void **state)
{
	fixture *f = *state;
	char *data = tu_path(f->ck, "data-00000-of-00001");
	dvar_reader *r;
	dvar_mapping m;
	/* Byte 5 of chunk 3 of "w": "c" takes the first 4096 bytes, "w" follows. */
	int fd = open(data, O_RDWR);
	assert_true(fd >= 0);
	unsigned char b;
	off_t at = 4096 + 3 * 4096 + 5;
	assert_int_equal(pread(fd, &b, 1, at), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	close(fd);

	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	size_t i = find(r, "w");
	/* Unverified: the bytes as they are. */
	assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, 0, &m), DVAR_OK);
	assert_int_equal(((const unsigned char *)m.data)[3 * 4096 + 5],
	                 ((const unsigned char *)f->w)[3 * 4096 + 5] ^ 0x10);
	dvar_reader_unmap(&m);
	assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m), DVAR_ECORRUPT);
	tu_assert_error_contains("variable 'w' slice -:- chunk 3");
	tu_assert_error_contains("checksum mismatch in block 0");
	assert_null(m.data);
	dvar_reader_free(r);
	free(data);
}

static void test_format_map__truncated_data_file(void **state)
{
	fixture *f = *state;
	char *data = tu_path(f->ck, "data-00000-of-00001");
	assert_int_equal(truncate(data, 4096 + 10 * 4096), 0);
	dvar_reader *r;
	dvar_mapping m;
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_map(r, find(r, "w"), DVAR_MAP_WHOLE, 0, &m), DVAR_ECORRUPT);
	tu_assert_error_contains("data file is truncated");
	/* "c" lies wholly before the cut. */
	assert_int_equal(dvar_reader_map(r, find(r, "c"), DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m), DVAR_OK);
	dvar_reader_unmap(&m);
	assert_int_equal(unlink(data), 0);
	dvar_reader_free(r);
	assert_int_equal(dvar_reader_open(&r, f->ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_map(r, find(r, "c"), DVAR_MAP_WHOLE, 0, &m), DVAR_ECORRUPT);
	tu_assert_error_contains("data file is missing");
	dvar_reader_free(r);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_map__whole_variable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_map__scalar_and_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_map__slices, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_map__compressed_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_map__chunks_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_map__verify_finds_a_flipped_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_map__truncated_data_file, setup, teardown),
	};
	return cmocka_run_group_tests_name("format/map", tests, NULL, NULL);
}
