/*
 * tests/unit/format/test_format_pack.c - small slices are packed back to
 * back in their data file instead of a page each: thousands of small
 * variables read back bit for bit and take about their raw bytes on disk;
 * small and large mixed, raw and lz4, streamed, several threads and several
 * data files; big slices stay page-aligned and mappable, small ones map
 * too; a flipped byte in a packed chunk is found by reads and by verify.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

#define MANY 5000
#define ELEMS 64

static dvar_write_options opts(dvar_compress c, int threads)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.compress = c;
	o.threads = threads;
	o.flags = DVAR_WRITE_NO_FSYNC;
	return o;
}

static uint64_t file_bytes(const char *dir, const char *name)
{
	char *p = tu_path(dir, name);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	free(p);
	return (uint64_t)st.st_size;
}

static void name_of(char *buf, size_t cap, int k)
{
	snprintf(buf, cap, "layer_%04d/bias", k);
}

/* Every chunk of variable i: at least DVAR_PACK_ALIGN-aligned, page-aligned
 * when its slice is large (or all are); the number of chunks seen. */
static size_t check_offsets(dvar_reader *r, size_t i, int all_aligned)
{
	const dvar_var_entry *v = dvar_reader_entry(r, i);
	size_t n = 0;
	for (size_t j = 0; j < v->num_slices; j++) {
		const dvar_slice_entry *s = &v->slices[j];
		int big = all_aligned || s->raw_bytes >= DVAR_PACK_MAX;
		for (size_t c = 0; c < s->num_chunks; c++, n++)
			assert_int_equal(s->chunks[c].offset % (big ? DVAR_ALIGN : DVAR_PACK_ALIGN), 0);
	}
	return n;
}

static void test_format_pack__many_small_variables(void **state)
{
	const char *dir = *state;
	static const dvar_compress modes[] = { DVAR_COMPRESS_NONE, DVAR_COMPRESS_AUTO };
	float *vals = malloc(MANY * ELEMS * sizeof(float));
	tu_fill_random(vals, MANY * ELEMS * sizeof(float), 11);
	dvar_shape shape;
	dvar_shape_init(&shape, 1, (int64_t[]){ ELEMS });
	for (size_t m = 0; m < 2; m++) {
		char ck[64], name[64];
		snprintf(ck, sizeof(ck), "%s/many-%zu", dir, m);
		dvar_write_options o = opts(modes[m], 2);
		dvar_writer *w;
		assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
		for (int k = 0; k < MANY; k++) {
			name_of(name, sizeof(name), k);
			assert_int_equal(dvar_writer_add(w, name, DVAR_FLOAT32, &shape, NULL,
			                                 vals + (size_t)k * ELEMS), DVAR_OK);
		}
		assert_int_equal(dvar_writer_commit(w), DVAR_OK);
		dvar_writer_free(w);

		/* Random floats do not compress: about their raw bytes either way. */
		uint64_t raw = (uint64_t)MANY * ELEMS * sizeof(float);
		uint64_t data = file_bytes(ck, "data-00000-of-00001");
		assert_true(data >= raw);
		assert_true(data * 10 <= raw * 11);

		dvar_reader *r;
		float got[ELEMS];
		assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
		assert_int_equal(dvar_reader_num_vars(r), MANY);
		for (int k = 0; k < MANY; k++) {
			size_t i;
			name_of(name, sizeof(name), k);
			assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
			assert_int_equal(check_offsets(r, i, 0), 1);
			assert_int_equal(dvar_reader_read(r, i, NULL, got, sizeof(got)), DVAR_OK);
			assert_memory_equal(got, vals + (size_t)k * ELEMS, sizeof(got));
		}
		uint64_t bad = 1;
		assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
		assert_int_equal(bad, 0);
		dvar_reader_free(r);
	}
	free(vals);
}

/* Runs of zeros between random words: lz4 saves a lot. */
static void fill_sparse(void *p, size_t n, uint64_t seed)
{
	tu_fill_random(p, n, seed);
	for (size_t i = 0; i < n; i += 256)
		if ((i / 256) % 2)
			memset((unsigned char *)p + i, 0, n - i < 256 ? n - i : 256);
}

typedef struct {
	const char *name;
	int64_t rows, cols;
	int sparse;
	int streamed;
} spec;

/* Small and large, tiny chunks (small slices of several chunks), raw and
 * compressible, added whole or streamed in odd pieces; one slice just
 * under the packing threshold once the pack block is nearly full. */
static const spec mixed[] = {
	{ "scalar", 0, 0, 0, 0 },       { "big/w", 300, 257, 0, 0 },
	{ "b1", 1, 17, 1, 0 },          { "emb", 700, 64, 1, 0 },
	{ "b2", 3, 1000, 0, 1 },        { "near", 250, 64, 0, 0 },
	{ "zeros", 100, 100, 1, 1 },    { "b3", 2, 3, 0, 0 },
	{ "big/stream", 129, 511, 1, 1 }, { "last", 1, 1, 0, 0 },
};
#define NUM_MIXED (sizeof(mixed) / sizeof(mixed[0]))

static void add_spec(dvar_writer *w, const spec *s, const float *v)
{
	dvar_shape shape;
	if (s->rows)
		dvar_shape_init(&shape, 2, (int64_t[]){ s->rows, s->cols });
	else
		dvar_shape_init(&shape, 0, NULL);
	size_t bytes = (s->rows ? (size_t)(s->rows * s->cols) : 1) * sizeof(float);
	if (!s->streamed) {
		assert_int_equal(dvar_writer_add(w, s->name, DVAR_FLOAT32, &shape, NULL, v), DVAR_OK);
		return;
	}
	assert_int_equal(dvar_writer_begin_slice(w, s->name, DVAR_FLOAT32, &shape, NULL), DVAR_OK);
	for (size_t at = 0, piece = 1000; at < bytes; at += piece)
		assert_int_equal(dvar_writer_write(w, (const char *)v + at,
		                                   bytes - at < piece ? bytes - at : piece), DVAR_OK);
	assert_int_equal(dvar_writer_end_slice(w), DVAR_OK);
}

static float *spec_values(const spec *s, uint64_t seed, size_t *bytes)
{
	*bytes = (s->rows ? (size_t)(s->rows * s->cols) : 1) * sizeof(float);
	float *v = malloc(*bytes);
	if (s->sparse)
		fill_sparse(v, *bytes, seed);
	else
		tu_fill_random(v, *bytes, seed);
	return v;
}

static void check_mixed(const char *ck, float **vals, int aligned)
{
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
	for (size_t k = 0; k < NUM_MIXED; k++) {
		size_t i, bytes = (mixed[k].rows ? (size_t)(mixed[k].rows * mixed[k].cols) : 1) * 4;
		assert_int_equal(dvar_reader_find(r, mixed[k].name, &i), DVAR_OK);
		check_offsets(r, i, aligned);
		void *got = malloc(bytes);
		assert_int_equal(dvar_reader_read(r, i, NULL, got, bytes), DVAR_OK);
		assert_memory_equal(got, vals[k], bytes);
		free(got);
	}
	uint64_t bad = 1;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
}

static void test_format_pack__mixed_sizes_modes_threads(void **state)
{
	const char *dir = *state;
	float *vals[NUM_MIXED];
	for (size_t k = 0; k < NUM_MIXED; k++) {
		size_t bytes;
		vals[k] = spec_values(&mixed[k], 100 + k, &bytes);
	}
	static const dvar_compress modes[] = { DVAR_COMPRESS_NONE, DVAR_COMPRESS_LZ4,
	                                       DVAR_COMPRESS_AUTO };
	static const int threads[] = { 1, 4 };
	static const uint64_t chunks[] = { 4096, 0 };
	for (size_t m = 0; m < 3; m++)
		for (size_t t = 0; t < 2; t++)
			for (size_t c = 0; c < 2; c++)
				for (int aligned = 0; aligned < 2; aligned++) {
					char ck[128];
					snprintf(ck, sizeof(ck), "%s/mixed-%zu-%zu-%zu-%d", dir, m, t, c, aligned);
					dvar_write_options o = opts(modes[m], threads[t]);
					o.chunk_size = chunks[c];
					if (aligned)
						o.flags |= DVAR_WRITE_PAGE_ALIGN;
					dvar_writer *w;
					assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
					/* Fill most of a pack block so that "near" cannot fit after it. */
					float *fill = malloc(60000);
					tu_fill_random(fill, 60000, 9);
					dvar_shape fs;
					dvar_shape_init(&fs, 1, (int64_t[]){ 15000 });
					for (int k = 0; k < 17; k++) {
						char name[32];
						snprintf(name, sizeof(name), "fill%02d", k);
						assert_int_equal(dvar_writer_add(w, name, DVAR_FLOAT32, &fs, NULL, fill),
						                 DVAR_OK);
					}
					free(fill);
					for (size_t k = 0; k < NUM_MIXED; k++)
						add_spec(w, &mixed[k], vals[k]);
					assert_int_equal(dvar_writer_commit(w), DVAR_OK);
					dvar_writer_free(w);
					/* Data files stay whole pages long. */
					assert_int_equal(file_bytes(ck, "data-00000-of-00001") % DVAR_ALIGN, 0);
					check_mixed(ck, vals, aligned);
				}
	for (size_t k = 0; k < NUM_MIXED; k++)
		free(vals[k]);
}

/* Three parts, each its own data file, in one process. */
static void test_format_pack__several_data_files(void **state)
{
	const char *dir = *state;
	char ck[128];
	snprintf(ck, sizeof(ck), "%s/parts", dir);
	enum { NP = 3, PER = 300 };
	int32_t *vals = malloc(NP * PER * 10 * sizeof(int32_t));
	tu_fill_random(vals, NP * PER * 10 * sizeof(int32_t), 3);
	dvar_writer *w[NP];
	void *blobs[NP];
	size_t lens[NP];
	dvar_shape shape;
	dvar_shape_init(&shape, 1, (int64_t[]){ 10 });
	for (int p = 0; p < NP; p++) {
		dvar_write_options o = opts(p == 1 ? DVAR_COMPRESS_LZ4 : DVAR_COMPRESS_NONE, 2);
		assert_int_equal(dvar_writer_open_part(&w[p], ck, "packtest", p, NP, &o), DVAR_OK);
		for (int k = 0; k < PER; k++) {
			char name[32];
			snprintf(name, sizeof(name), "p%d/v%03d", p, k);
			assert_int_equal(dvar_writer_add(w[p], name, DVAR_INT32, &shape, NULL,
			                                 vals + (size_t)(p * PER + k) * 10), DVAR_OK);
		}
		assert_int_equal(dvar_writer_finish_part(w[p], &blobs[p], &lens[p]), DVAR_OK);
	}
	assert_int_equal(dvar_writer_commit_parts(w[0], (const void *const *)blobs, lens, NP), DVAR_OK);
	for (int p = 0; p < NP; p++) {
		free(blobs[p]);
		dvar_writer_free(w[p]);
	}
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
	for (int p = 0; p < NP; p++) {
		char file[32];
		snprintf(file, sizeof(file), "data-%05d-of-%05d", p, NP);
		/* 300 x 40 bytes, 64 apart: 19200 bytes in five pages, not 300 pages. */
		assert_int_equal(file_bytes(ck, file), 5 * DVAR_ALIGN);
		for (int k = 0; k < PER; k++) {
			char name[32];
			int32_t got[10];
			size_t i;
			snprintf(name, sizeof(name), "p%d/v%03d", p, k);
			assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
			assert_int_equal(dvar_reader_entry(r, i)->slices[0].file, (uint32_t)p);
			assert_int_equal(dvar_reader_read(r, i, NULL, got, sizeof(got)), DVAR_OK);
			assert_memory_equal(got, vals + (size_t)(p * PER + k) * 10, sizeof(got));
		}
	}
	dvar_reader_free(r);
	free(vals);
}

/* A small packed slice maps (its page is rounded down), dtype-aligned; a big one page-aligned. */
static void test_format_pack__map(void **state)
{
	const char *dir = *state;
	char ck[128];
	snprintf(ck, sizeof(ck), "%s/map", dir);
	dvar_write_options o = opts(DVAR_COMPRESS_NONE, 2);
	dvar_writer *w;
	double small[3][5];
	float *big = malloc(100000 * sizeof(float));
	tu_fill_random(small, sizeof(small), 1);
	tu_fill_random(big, 100000 * sizeof(float), 2);
	dvar_shape ss, bs;
	dvar_shape_init(&ss, 1, (int64_t[]){ 5 });
	dvar_shape_init(&bs, 1, (int64_t[]){ 100000 });
	assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
	for (int k = 0; k < 3; k++) {
		char name[8];
		snprintf(name, sizeof(name), "s%d", k);
		assert_int_equal(dvar_writer_add(w, name, DVAR_FLOAT64, &ss, NULL, small[k]), DVAR_OK);
	}
	assert_int_equal(dvar_writer_add(w, "big", DVAR_FLOAT32, &bs, NULL, big), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	dvar_reader *r;
	dvar_mapping m;
	size_t i;
	assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
	for (int k = 0; k < 3; k++) {
		char name[8];
		snprintf(name, sizeof(name), "s%d", k);
		assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
		assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m), DVAR_OK);
		assert_int_equal(m.size, sizeof(small[k]));
		assert_int_equal((uintptr_t)m.data % DVAR_PACK_ALIGN, 0);
		assert_memory_equal(m.data, small[k], m.size);
		dvar_reader_unmap(&m);
	}
	assert_int_equal(dvar_reader_find(r, "big", &i), DVAR_OK);
	assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m), DVAR_OK);
	assert_int_equal((uintptr_t)m.data % DVAR_ALIGN, 0);
	assert_memory_equal(m.data, big, m.size);
	dvar_reader_unmap(&m);
	dvar_reader_free(r);
	free(big);
}

static void count_bad(void *ud, const dvar_bad_chunk *bad)
{
	(void)bad;
	(*(int *)ud)++;
}

/* A flipped byte inside a packed chunk, raw or lz4: reads and verify see it,
 * and only that variable is bad. */
static void test_format_pack__flipped_byte_found(void **state)
{
	const char *dir = *state;
	for (int lz4 = 0; lz4 < 2; lz4++) {
		char ck[128];
		snprintf(ck, sizeof(ck), "%s/flip-%d", dir, lz4);
		dvar_write_options o = opts(lz4 ? DVAR_COMPRESS_LZ4 : DVAR_COMPRESS_NONE, 2);
		dvar_writer *w;
		float v[4][300];
		for (int k = 0; k < 4; k++)
			fill_sparse(v[k], sizeof(v[k]), 20 + k);
		dvar_shape shape;
		dvar_shape_init(&shape, 1, (int64_t[]){ 300 });
		assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
		for (int k = 0; k < 4; k++) {
			char name[8];
			snprintf(name, sizeof(name), "v%d", k);
			assert_int_equal(dvar_writer_add(w, name, DVAR_FLOAT32, &shape, NULL, v[k]), DVAR_OK);
		}
		assert_int_equal(dvar_writer_commit(w), DVAR_OK);
		dvar_writer_free(w);

		dvar_reader *r;
		size_t i;
		assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
		assert_int_equal(dvar_reader_find(r, "v2", &i), DVAR_OK);
		const dvar_chunk *c = &dvar_reader_entry(r, i)->slices[0].chunks[0];
		assert_int_equal(c->codec, lz4 ? DVAR_CODEC_LZ4 : DVAR_CODEC_RAW);
		assert_true(c->offset > 0 && c->offset % DVAR_ALIGN != 0); /* packed after v0, v1 */
		off_t at = (off_t)(c->offset + c->stored / 2);
		dvar_reader_free(r);

		char *data = tu_path(ck, "data-00000-of-00001");
		int fd = open(data, O_RDWR);
		assert_true(fd >= 0);
		unsigned char b;
		assert_int_equal(pread(fd, &b, 1, at), 1);
		b ^= 0x21;
		assert_int_equal(pwrite(fd, &b, 1, at), 1);
		close(fd);
		free(data);

		float got[300];
		assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
		assert_int_equal(dvar_reader_find(r, "v2", &i), DVAR_OK);
		assert_int_equal(dvar_reader_read(r, i, NULL, got, sizeof(got)), DVAR_ECORRUPT);
		tu_assert_error_contains("variable 'v2'");
		for (int k = 0; k < 4; k++) {
			char name[8];
			snprintf(name, sizeof(name), "v%d", k);
			assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
			if (k == 2)
				continue;
			assert_int_equal(dvar_reader_read(r, i, NULL, got, sizeof(got)), DVAR_OK);
			assert_memory_equal(got, v[k], sizeof(got));
		}
		int seen = 0;
		uint64_t bad = 0;
		assert_int_equal(dvar_reader_verify(r, count_bad, &seen, &bad), DVAR_OK);
		assert_int_equal(bad, 1);
		assert_int_equal(seen, 1);
		dvar_reader_free(r);
	}
}

/* The index says the oldest reader that reads it: a page-aligned full
 * checkpoint is version 2 (readers of 1 on), a page-aligned delta 3; a
 * chunk off a page anywhere (packed), full or delta, makes it 4, which
 * readers before packing refuse (DVAR_EVERSION) instead of calling its
 * offset damage. */
static void expect_version(const char *dir, const char *name, uint32_t version,
                           uint32_t min_reader, size_t chain_len)
{
	char *ck = tu_path(dir, name);
	dvar_header h;
	uint32_t crc;
	uint64_t bad = 1;
	dvar_reader *r;
	assert_int_equal(dvar_link_peek(ck, &h, &crc), DVAR_OK);
	assert_int_equal(h.version, version);
	assert_int_equal(h.min_reader, min_reader);
	assert_int_equal(h.chain_len, chain_len);
	dvar_header_clear(&h);
	assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
	free(ck);
}

static void write_version_case(const char *dir, const char *name, const char *base,
                               unsigned flags, const float *x)
{
	dvar_write_options o = opts(DVAR_COMPRESS_NONE, 1);
	dvar_writer *w;
	dvar_shape big = { .rank = 2, .dims = { 64, 1024 } }; /* 256 KiB: never packed */
	dvar_shape small = { .rank = 1, .dims = { ELEMS } };
	const int64_t rows[2] = { 3, 40 };
	char *ck = tu_path(dir, name);

	o.flags |= flags;
	assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
	if (base) {
		assert_int_equal(dvar_writer_set_base(w, base), DVAR_OK);
		assert_int_equal(dvar_writer_add_rows(w, "big", DVAR_FLOAT32, &big, rows, 2, x), DVAR_OK);
	} else {
		assert_int_equal(dvar_writer_add(w, "big", DVAR_FLOAT32, &big, NULL, x), DVAR_OK);
	}
	/* Two, so that one of them lies off a page when packed. */
	if (!(flags & DVAR_WRITE_PAGE_ALIGN) || !base) {
		assert_int_equal(dvar_writer_add(w, "small", DVAR_FLOAT32, &small, NULL, x), DVAR_OK);
		assert_int_equal(dvar_writer_add(w, "small2", DVAR_FLOAT32, &small, NULL, x), DVAR_OK);
	}
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	free(ck);
}

static void test_format_pack__versions(void **state)
{
	const char *dir = *state;
	float *x = calloc(64 * 1024, sizeof *x);
	char *aligned = tu_path(dir, "aligned");

	assert_non_null(x);
	for (int i = 0; i < 64 * 1024; i++)
		x[i] = (float)i;
	write_version_case(dir, "aligned", NULL, DVAR_WRITE_PAGE_ALIGN, x);
	expect_version(dir, "aligned", DVAR_FORMAT_FULL, DVAR_FORMAT_MIN_READER, 0);
	write_version_case(dir, "packed", NULL, 0, x);
	expect_version(dir, "packed", DVAR_FORMAT_PACKED, DVAR_FORMAT_PACKED, 0);
	/* A delta whose row patch is big enough to stay page-aligned, and one
	 * whose patch (two rows, 8 KiB) is packed. */
	write_version_case(dir, "delta-aligned", aligned, DVAR_WRITE_PAGE_ALIGN, x);
	expect_version(dir, "delta-aligned", DVAR_FORMAT_DELTA, DVAR_FORMAT_DELTA, 1);
	write_version_case(dir, "delta-packed", aligned, 0, x);
	expect_version(dir, "delta-packed", DVAR_FORMAT_PACKED, DVAR_FORMAT_PACKED, 1);
	free(aligned);
	free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_pack__many_small_variables, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_pack__mixed_sizes_modes_threads, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_pack__several_data_files, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_pack__map, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_pack__versions, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_pack__flipped_byte_found, tu_setup_dir,
		                                tu_teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
