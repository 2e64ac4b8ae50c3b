/*
 * tests/unit/format/test_format_delta.c - delta checkpoints at the format's
 * level: a chain of deltas (unchanged variables, row patches in several
 * pieces, variables rewritten, added and dropped) reads back, slice by
 * random slice, exactly as the values it stands for; the header and the
 * chain on disk; verify over every link; a missing, replaced or damaged
 * base refused by name; every writer error; part writers; mapping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "format/format.h"

#define ROWS 100
#define COLS 4

typedef struct {
	float emb[ROWS * COLS];
	double bias[7];
	int64_t step;
	float fresh[3];
} state;

static void fill_state(state *st, uint64_t seed)
{
	for (size_t i = 0; i < ROWS * COLS; i++)
		st->emb[i] = (float)(i % 97) + (float)seed;
	for (int i = 0; i < 7; i++)
		st->bias[i] = i * 0.5 + (double)seed;
	st->step = (int64_t)seed;
	for (int i = 0; i < 3; i++)
		st->fresh[i] = (float)(i + 1) * 10.0f;
}

static dvar_shape shape2(int64_t a, int64_t b)
{
	dvar_shape s = { .rank = 2, .dims = { a, b } };
	return s;
}

static dvar_shape shape1(int64_t a)
{
	dvar_shape s = { .rank = 1, .dims = { a } };
	return s;
}

static const dvar_shape scalar = { .rank = 0 };

/* ckpt-1: emb in two slices, bias, step, and "gone". */
static void write_full(const char *dir, const char *name, const state *st, int compress)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w;
	dvar_shape se = shape2(ROWS, COLS), sb = shape1(7);
	dvar_slice top = { .rank = 2, .start = { 0, 0 }, .length = { 50, COLS } };
	dvar_slice bottom = { .rank = 2, .start = { 50, 0 }, .length = { 50, COLS } };
	char *ck = tu_path(dir, name);
	const int32_t gone[2] = { 1, 2 };
	dvar_shape sg = shape1(2);

	o.compress = compress;
	assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "emb", DVAR_FLOAT32, &se, &top, st->emb), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "emb", DVAR_FLOAT32, &se, &bottom, st->emb + 50 * COLS),
	                 DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "bias", DVAR_FLOAT64, &sb, NULL, st->bias), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "step", DVAR_INT64, &scalar, NULL, &st->step), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "gone", DVAR_INT32, &sg, NULL, gone), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "emb", "kind", "sharded"), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	free(ck);
}

/* Replace rows[0..n) of st->emb with values of their own; n rows of data in out. */
static void change_rows(state *st, const int64_t *rows, size_t n, float tag, float *out)
{
	for (size_t k = 0; k < n; k++)
		for (int c = 0; c < COLS; c++) {
			float x = tag + (float)rows[k] * 0.25f + (float)c;
			st->emb[rows[k] * COLS + c] = x;
			out[k * COLS + c] = x;
		}
}

/* A delta over base: emb patched at rows (split at row 50 into two
 * pieces), bias unchanged or patched at bias_row (< 0: unchanged), step
 * rewritten, "fresh" added, "gone" dropped. */
static void write_delta(const char *dir, const char *name, const char *base, state *st,
                        const int64_t *rows, size_t n, float tag, int bias_row, int compress)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w;
	dvar_shape se = shape2(ROWS, COLS), sb = shape1(7), sf = shape1(3);
	char *ck = tu_path(dir, name);
	float *data = malloc((n ? n : 1) * COLS * sizeof(float));
	size_t split = 0;

	assert_non_null(data);
	while (split < n && rows[split] < 50)
		split++;
	change_rows(st, rows, n, tag, data);
	st->step += 1;
	o.compress = compress;
	assert_int_equal(dvar_writer_open(&w, ck, &o), DVAR_OK);
	assert_int_equal(dvar_writer_set_base(w, base), DVAR_OK);
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, rows, split, data), DVAR_OK);
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, rows + split, n - split,
	                                      data + split * COLS),
	                 DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "emb", "kind", "sharded"), DVAR_OK);
	if (bias_row < 0) {
		assert_int_equal(dvar_writer_add_unchanged(w, "bias", DVAR_FLOAT64, &sb), DVAR_OK);
	} else {
		int64_t r = bias_row;
		st->bias[bias_row] = -1.5 * (bias_row + 1);
		assert_int_equal(dvar_writer_add_rows(w, "bias", DVAR_FLOAT64, &sb, &r, 1,
		                                      &st->bias[bias_row]),
		                 DVAR_OK);
	}
	assert_int_equal(dvar_writer_add(w, "step", DVAR_INT64, &scalar, NULL, &st->step), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "fresh", DVAR_FLOAT32, &sf, NULL, st->fresh), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	free(data);
	free(ck);
}

static void expect_var(dvar_reader *r, const char *name, const void *want, size_t bytes)
{
	size_t i;
	void *got = malloc(bytes ? bytes : 1);

	assert_non_null(got);
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	if (dvar_reader_read(r, i, NULL, got, bytes) != DVAR_OK)
		fail_msg("reading %s: %s", name, dvar_error_last()->message);
	assert_memory_equal(got, want, bytes);
	free(got);
}

/* Random boxes of emb against the values it stands for. */
static void expect_emb_boxes(dvar_reader *r, const state *st, uint64_t seed)
{
	size_t i;
	float got[ROWS * COLS];

	assert_int_equal(dvar_reader_find(r, "emb", &i), DVAR_OK);
	for (int t = 0; t < 200; t++) {
		dvar_slice b = { .rank = 2 };
		b.start[0] = (int64_t)(tu_rand(&seed) % ROWS);
		b.length[0] = 1 + (int64_t)(tu_rand(&seed) % (uint64_t)(ROWS - b.start[0]));
		b.start[1] = (int64_t)(tu_rand(&seed) % COLS);
		b.length[1] = 1 + (int64_t)(tu_rand(&seed) % (uint64_t)(COLS - b.start[1]));
		size_t n = (size_t)(b.length[0] * b.length[1]);
		if (dvar_reader_read(r, i, &b, got, n * sizeof(float)) != DVAR_OK)
			fail_msg("box %d: %s", t, dvar_error_last()->message);
		for (int64_t y = 0; y < b.length[0]; y++)
			for (int64_t x = 0; x < b.length[1]; x++) {
				float want = st->emb[(b.start[0] + y) * COLS + b.start[1] + x];
				float g = got[y * b.length[1] + x];
				if (g != want)
					fail_msg("box %d [%lld+%lld, %lld+%lld] at (%lld, %lld): %g, expected %g", t,
					         (long long)b.start[0], (long long)b.length[0],
					         (long long)b.start[1], (long long)b.length[1],
					         (long long)(b.start[0] + y), (long long)(b.start[1] + x), g, want);
			}
	}
}

static void expect_state(const char *dir, const char *name, const state *st, int has_gone)
{
	char *ck = tu_path(dir, name);
	dvar_reader *r;
	size_t i;

	if (dvar_reader_open(&r, ck, NULL) != DVAR_OK)
		fail_msg("open %s: %s", name, dvar_error_last()->message);
	expect_var(r, "emb", st->emb, sizeof st->emb);
	expect_var(r, "bias", st->bias, sizeof st->bias);
	expect_var(r, "step", &st->step, sizeof st->step);
	expect_emb_boxes(r, st, 42);
	assert_int_equal(dvar_reader_find(r, "gone", &i), has_gone ? DVAR_OK : DVAR_ENOTFOUND);
	if (!has_gone)
		expect_var(r, "fresh", st->fresh, sizeof st->fresh);
	dvar_reader_free(r);
	free(ck);
}

static const int64_t rows2[] = { 3, 10, 49, 50, 60, 99 };
static const int64_t rows3[] = { 0, 3, 4, 98 };

/* ckpt-1 full, ckpt-2 a delta over it, ckpt-3 a delta over ckpt-2. */
static void make_chain(const char *dir, state *s1, state *s2, state *s3, int compress)
{
	fill_state(s1, 1);
	write_full(dir, "ckpt-1", s1, compress);
	*s2 = *s1;
	write_delta(dir, "ckpt-2", "ckpt-1", s2, rows2, 6, 1000.0f, -1, compress);
	*s3 = *s2;
	write_delta(dir, "ckpt-3", "ckpt-2", s3, rows3, 4, 2000.0f, 5, compress);
}

static void test_format_delta__chain_reads(void **state_)
{
	const char *dir = *state_;
	state s1, s2, s3;

	for (int compress = 0; compress < 2; compress++) {
		char sub[32];
		snprintf(sub, sizeof sub, "c%d", compress);
		char *d = tu_path(dir, sub);
		make_chain(d, &s1, &s2, &s3, compress ? DVAR_COMPRESS_LZ4 : DVAR_COMPRESS_NONE);
		expect_state(d, "ckpt-1", &s1, 1);
		expect_state(d, "ckpt-2", &s2, 0);
		expect_state(d, "ckpt-3", &s3, 0);
		free(d);
	}
}

static void test_format_delta__header_and_links(void **state_)
{
	const char *dir = *state_;
	state s1, s2, s3;
	dvar_header h;
	uint32_t crc1, crc2, crc3;
	char *c1 = tu_path(dir, "ckpt-1"), *c2 = tu_path(dir, "ckpt-2"), *c3 = tu_path(dir, "ckpt-3");

	make_chain(dir, &s1, &s2, &s3, DVAR_COMPRESS_NONE);
	/* Small variables are packed: version 4, full or delta, for readers of 4
	 * (test_format_pack: versions 2 and 3 when nothing is packed). */
	assert_int_equal(dvar_link_peek(c1, &h, &crc1), DVAR_OK);
	assert_int_equal(h.version, DVAR_FORMAT_PACKED);
	assert_int_equal(h.min_reader, DVAR_FORMAT_PACKED);
	assert_int_equal(h.chain_len, 0);
	dvar_header_clear(&h);
	assert_int_equal(dvar_link_peek(c2, &h, &crc2), DVAR_OK);
	assert_int_equal(h.version, DVAR_FORMAT_PACKED);
	assert_int_equal(h.min_reader, DVAR_FORMAT_PACKED);
	assert_int_equal(h.chain_len, 1);
	assert_string_equal(h.chain[0].name, "ckpt-1");
	assert_int_equal(h.chain[0].index_crc, crc1);
	dvar_header_clear(&h);
	assert_int_equal(dvar_link_peek(c3, &h, &crc3), DVAR_OK);
	assert_int_equal(h.chain_len, 2);
	assert_string_equal(h.chain[0].name, "ckpt-2");
	assert_int_equal(h.chain[0].index_crc, crc2);
	assert_string_equal(h.chain[1].name, "ckpt-1");
	assert_int_equal(h.chain[1].index_crc, crc1);
	dvar_header_clear(&h);

	dvar_reader *r;
	dvar_link_info li;
	dvar_var_delta vd;
	dvar_var_info vi;
	size_t i;
	assert_int_equal(dvar_reader_open(&r, c3, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_links(r), 3);
	assert_int_equal(dvar_reader_link(r, 0, &li), DVAR_OK);
	assert_string_equal(li.path, c3);
	assert_int_equal(li.is_delta, 1);
	assert_int_equal(li.vars_patched, 2); /* emb and bias */
	assert_int_equal(li.vars_whole, 2);   /* step and fresh */
	assert_int_equal(li.vars_unchanged, 0);
	assert_int_equal(dvar_reader_link(r, 1, &li), DVAR_OK);
	assert_string_equal(li.path, c2);
	assert_int_equal(li.vars_unchanged, 1); /* bias */
	assert_int_equal(dvar_reader_link(r, 2, &li), DVAR_OK);
	assert_string_equal(li.path, c1);
	assert_int_equal(li.is_delta, 0);
	assert_int_equal(li.vars_whole, 4);
	assert_int_equal(dvar_reader_link(r, 3, &li), DVAR_EINVAL);
	/* emb: 4 rows patched here (ids and rows); described as saved in full below. */
	assert_int_equal(dvar_reader_find(r, "emb", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var_delta(r, i, &vd), DVAR_OK);
	assert_int_equal(vd.kind, DVAR_DELTA_PATCHED);
	assert_int_equal(vd.rows, 4);
	assert_int_equal(vd.raw_bytes, 4 * 8 + 4 * COLS * 4);
	assert_int_equal(dvar_reader_var(r, i, &vi), DVAR_OK);
	assert_int_equal(vi.num_slices, 2);
	assert_int_equal(vi.raw_bytes, sizeof s1.emb);
	{
		const char *kind;
		assert_int_equal(dvar_reader_var_attr(r, i, "kind", &kind), DVAR_OK);
		assert_string_equal(kind, "sharded");
	}
	assert_int_equal(dvar_reader_find(r, "step", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var_delta(r, i, &vd), DVAR_OK);
	assert_int_equal(vd.kind, DVAR_DELTA_FULL);
	/* Every link verified: no bad chunk. */
	uint64_t bad = 99;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
	free(c1);
	free(c2);
	free(c3);
}

typedef struct {
	int n;
	char file[512];
} bad_log;

static void log_bad(void *ud, const dvar_bad_chunk *b)
{
	bad_log *l = ud;
	if (l->n++ == 0)
		snprintf(l->file, sizeof l->file, "%s", b->file);
}

/* A base that is damaged, missing or replaced is refused by name, never read as if whole. */
static void test_format_delta__broken_base(void **state_)
{
	const char *dir = *state_;
	state s1, s2, s3;
	char *c1 = tu_path(dir, "ckpt-1"), *c3 = tu_path(dir, "ckpt-3");
	char *data1 = tu_path(c1, "data-00000-of-00001"), *moved = tu_path(dir, "elsewhere");
	dvar_reader *r;
	size_t i;
	float got[ROWS * COLS];

	make_chain(dir, &s1, &s2, &s3, DVAR_COMPRESS_NONE);
	/* A flipped byte in the full checkpoint's data: verify of the newest
	 * delta names that file; reading emb fails there. */
	tu_flip_byte(data1, 100);
	assert_int_equal(dvar_reader_open(&r, c3, NULL), DVAR_OK);
	bad_log log = { 0 };
	uint64_t bad = 0;
	assert_int_equal(dvar_reader_verify(r, log_bad, &log, &bad), DVAR_OK);
	assert_int_equal(bad, 1);
	assert_string_equal(log.file, data1);
	assert_int_equal(dvar_reader_find(r, "emb", &i), DVAR_OK);
	assert_int_equal(dvar_reader_read(r, i, NULL, got, sizeof got), DVAR_ECORRUPT);
	tu_assert_error_contains(data1);
	dvar_reader_free(r);
	tu_flip_byte(data1, 100);

	/* Missing. */
	assert_int_equal(rename(c1, moved), 0);
	assert_int_equal(dvar_reader_open(&r, c3, NULL), DVAR_ENOTFOUND);
	tu_assert_error_contains("it is a delta over");
	tu_assert_error_contains("ckpt-1', which is missing");
	assert_int_equal(rename(moved, c1), 0);

	/* Replaced by another checkpoint of the same name. */
	tu_rmtree(c1);
	fill_state(&s1, 7);
	write_full(dir, "ckpt-1", &s1, DVAR_COMPRESS_NONE);
	assert_int_equal(dvar_reader_open(&r, c3, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("not the checkpoint it was written over");
	free(c1);
	free(c3);
	free(data1);
	free(moved);
}

static void test_format_delta__writer_errors(void **state_)
{
	const char *dir = *state_;
	state s1;
	dvar_writer *w;
	dvar_shape se = shape2(ROWS, COLS), bad = shape2(ROWS, COLS + 1), sb = shape1(7);
	float row[2 * COLS] = { 0 };
	int64_t r2[2] = { 5, 3 }, r1[1] = { 1 }, rbig[1] = { ROWS }, rmid[2] = { 20, 40 };
	char *ck = tu_path(dir, "ckpt-2"), *other = tu_path(dir, "sub");
	char *foreign = tu_path(other, "ckpt-9");

	fill_state(&s1, 1);
	write_full(dir, "ckpt-1", &s1, DVAR_COMPRESS_NONE);
	write_full(other, "ckpt-9", &s1, DVAR_COMPRESS_NONE);
	assert_int_equal(dvar_writer_open(&w, ck, NULL), DVAR_OK);
	/* No base yet. */
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, r1, 1, row), DVAR_EINVAL);
	tu_assert_error_contains("has no base");
	assert_int_equal(dvar_writer_add_unchanged(w, "bias", DVAR_FLOAT64, &sb), DVAR_EINVAL);
	/* Bases elsewhere, itself, missing. */
	assert_int_equal(dvar_writer_set_base(w, foreign), DVAR_EINVAL);
	tu_assert_error_contains("must be in the directory of");
	assert_int_equal(dvar_writer_set_base(w, "ckpt-2"), DVAR_EINVAL);
	assert_int_equal(dvar_writer_set_base(w, "ckpt-5"), DVAR_ENOTFOUND);
	tu_assert_error_contains("ckpt-5");
	assert_int_equal(dvar_writer_set_base(w, "ckpt-1"), DVAR_OK);
	assert_int_equal(dvar_writer_set_base(w, "ckpt-1"), DVAR_EINVAL);
	/* Rows out of order, out of range; a variable the base lacks or has otherwise. */
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, r2, 2, row), DVAR_EINVAL);
	tu_assert_error_contains("not above the row before it");
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, rbig, 1, row), DVAR_EINVAL);
	tu_assert_error_contains("outside its rows");
	assert_int_equal(dvar_writer_add_rows(w, "nope", DVAR_FLOAT32, &se, r1, 1, row), DVAR_ENOTFOUND);
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &bad, r1, 1, row), DVAR_ESHAPE);
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT64, &se, r1, 1, row), DVAR_ESHAPE);
	assert_int_equal(dvar_writer_add_rows(w, "step", DVAR_INT64, &scalar, NULL, 0, NULL),
	                 DVAR_EINVAL);
	tu_assert_error_contains("a scalar has no rows");
	/* Pieces that interleave; then one variable in two ways. */
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, rmid, 2, row), DVAR_OK);
	int64_t inside[1] = { 30 };
	assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, inside, 1, row), DVAR_ESHAPE);
	tu_assert_error_contains("overlap rows 20..40");
	assert_int_equal(dvar_writer_add_unchanged(w, "emb", DVAR_FLOAT32, &se), DVAR_EINVAL);
	tu_assert_error_contains("was added as changed rows");
	assert_int_equal(dvar_writer_add(w, "emb", DVAR_FLOAT32, &se, NULL, s1.emb), DVAR_EINVAL);
	assert_int_equal(dvar_writer_add_unchanged(w, "bias", DVAR_FLOAT64, &sb), DVAR_OK);
	assert_int_equal(dvar_writer_add_unchanged(w, "bias", DVAR_FLOAT64, &sb), DVAR_EINVAL);
	/* Still committable, and reads as the base with rows 20 and 40 zeroed. */
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	for (int c = 0; c < COLS; c++)
		s1.emb[20 * COLS + c] = s1.emb[40 * COLS + c] = 0;
	{
		dvar_reader *r;
		assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
		expect_var(r, "emb", s1.emb, sizeof s1.emb);
		expect_var(r, "bias", s1.bias, sizeof s1.bias);
		assert_int_equal(dvar_reader_num_vars(r), 2);
		dvar_reader_free(r);
	}
	/* set_base after an add. */
	char *ck3 = tu_path(dir, "ckpt-3");
	assert_int_equal(dvar_writer_open(&w, ck3, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "x", DVAR_FLOAT32, &sb, NULL, s1.emb), DVAR_OK);
	assert_int_equal(dvar_writer_set_base(w, "ckpt-1"), DVAR_EINVAL);
	dvar_writer_free(w);
	free(ck3);
	free(ck);
	free(foreign);
	free(other);
}

/* Two part writers each patch their own rows of one variable. */
static void test_format_delta__parts(void **state_)
{
	const char *dir = *state_;
	state s1, s2;
	dvar_writer *w[2];
	dvar_shape se = shape2(ROWS, COLS), sb = shape1(7);
	char *ck = tu_path(dir, "ckpt-2");
	const int64_t mine[2][2] = { { 1, 2 }, { 70, 80 } };
	float data[2][2 * COLS];
	void *blob[2];
	size_t len[2];

	fill_state(&s1, 1);
	write_full(dir, "ckpt-1", &s1, DVAR_COMPRESS_NONE);
	s2 = s1;
	for (int p = 0; p < 2; p++) {
		change_rows(&s2, mine[p], 2, 500.0f * (p + 1), data[p]);
		assert_int_equal(dvar_writer_open_part(&w[p], ck, "tok", p, 2, NULL), DVAR_OK);
		assert_int_equal(dvar_writer_set_base(w[p], "ckpt-1"), DVAR_OK);
		assert_int_equal(dvar_writer_add_rows(w[p], "emb", DVAR_FLOAT32, &se, mine[p], 2, data[p]),
		                 DVAR_OK);
		assert_int_equal(dvar_writer_set_attr(w[p], "emb", "kind", "sharded"), DVAR_OK);
		if (p == 0)
			assert_int_equal(dvar_writer_add_unchanged(w[p], "bias", DVAR_FLOAT64, &sb), DVAR_OK);
		assert_int_equal(dvar_writer_finish_part(w[p], &blob[p], &len[p]), DVAR_OK);
	}
	assert_int_equal(dvar_writer_commit_parts(w[0], (const void *const *)blob, len, 2), DVAR_OK);
	for (int p = 0; p < 2; p++) {
		dvar_writer_free(w[p]);
		dvar_free(blob[p]);
	}
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
	expect_var(r, "emb", s2.emb, sizeof s2.emb);
	expect_var(r, "bias", s2.bias, sizeof s2.bias);
	expect_emb_boxes(r, &s2, 7);
	dvar_reader_free(r);

	/* A part over another base (or none) is refused at commit. */
	char *ck3 = tu_path(dir, "ckpt-3");
	assert_int_equal(dvar_writer_open_part(&w[0], ck3, "tok3", 0, 2, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_open_part(&w[1], ck3, "tok3", 1, 2, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_set_base(w[0], "ckpt-2"), DVAR_OK);
	assert_int_equal(dvar_writer_set_base(w[1], "ckpt-1"), DVAR_OK);
	for (int p = 0; p < 2; p++)
		assert_int_equal(dvar_writer_finish_part(w[p], &blob[p], &len[p]), DVAR_OK);
	assert_int_equal(dvar_writer_commit_parts(w[0], (const void *const *)blob, len, 2), DVAR_EINVAL);
	tu_assert_error_contains("part 1 wrote a delta over ckpt-1, part 0 a delta over ckpt-2");
	for (int p = 0; p < 2; p++) {
		dvar_writer_free(w[p]);
		dvar_free(blob[p]);
	}
	assert_int_equal(dvar_writer_abort_parts(ck3, "tok3"), DVAR_OK);
	free(ck3);
	free(ck);
}

/* An unchanged variable maps where its value is saved; a patched one cannot map. */
static void test_format_delta__map(void **state_)
{
	const char *dir = *state_;
	state s1, s2, s3;
	char *c2 = tu_path(dir, "ckpt-2"), *c3 = tu_path(dir, "ckpt-3");
	dvar_reader *r;
	dvar_mapping m = { 0 };
	size_t i;

	make_chain(dir, &s1, &s2, &s3, DVAR_COMPRESS_NONE);
	assert_int_equal(dvar_reader_open(&r, c2, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, "bias", &i), DVAR_OK);
	assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m), DVAR_OK);
	assert_int_equal(m.size, sizeof s2.bias);
	assert_memory_equal(m.data, s2.bias, sizeof s2.bias);
	dvar_reader_unmap(&m);
	assert_int_equal(dvar_reader_find(r, "emb", &i), DVAR_OK);
	assert_int_equal(dvar_reader_map(r, i, 0, 0, &m), DVAR_ENOTSUPP);
	tu_assert_error_contains("holds only its changed rows");
	dvar_reader_free(r);
	/* bias is patched in ckpt-3. */
	assert_int_equal(dvar_reader_open(&r, c3, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, "bias", &i), DVAR_OK);
	assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, 0, &m), DVAR_ENOTSUPP);
	dvar_reader_free(r);
	free(c2);
	free(c3);
}

/* Save step into root, a delta over base (NULL: full), keeping the last 2. */
static void save_step(const char *root, int64_t step, const char *base, const state *st)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_shape se = shape2(ROWS, COLS);
	dvar_writer *w;
	int64_t row = step;

	o.keep_last = 2;
	assert_int_equal(dvar_writer_open_step(&w, root, step, &o), DVAR_OK);
	if (base) {
		assert_int_equal(dvar_writer_set_base(w, base), DVAR_OK);
		assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, &row, 1,
		                                      st->emb + step * COLS),
		                 DVAR_OK);
	} else {
		assert_int_equal(dvar_writer_add(w, "emb", DVAR_FLOAT32, &se, NULL, st->emb), DVAR_OK);
	}
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
}

static int exists_in(const char *root, const char *name)
{
	char *p = tu_path(root, name);
	int e = dvar_fs_exists(p);
	free(p);
	return e;
}

/* Keep-N never deletes a checkpoint that a kept delta is written over. */
static void test_format_delta__retention(void **state_)
{
	const char *root = *state_;
	state st;
	dvar_root_list *l;
	dvar_root_entry e;

	fill_state(&st, 3);
	save_step(root, 1, NULL, &st);
	save_step(root, 2, "ckpt-1", &st);
	save_step(root, 3, "ckpt-2", &st);
	/* ckpt-3 needs ckpt-2 and ckpt-1: all stay, listed as kept. */
	assert_true(exists_in(root, "ckpt-1") && exists_in(root, "ckpt-2"));
	save_step(root, 4, NULL, &st);
	assert_true(exists_in(root, "ckpt-1") && exists_in(root, "ckpt-2") &&
	            exists_in(root, "ckpt-3"));
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	assert_int_equal(dvar_root_list_count(l), 4);
	assert_int_equal(dvar_root_list_get(l, 0, &e), DVAR_OK);
	assert_string_equal(e.name, "ckpt-1");
	assert_null(e.base);
	assert_true(e.is_kept);
	assert_int_equal(dvar_root_list_get(l, 2, &e), DVAR_OK);
	assert_string_equal(e.name, "ckpt-3");
	assert_string_equal(e.base, "ckpt-2");
	dvar_root_list_free(l);
	/* ckpt-5 over the full ckpt-4: the last two need nothing older. */
	save_step(root, 5, "ckpt-4", &st);
	assert_false(exists_in(root, "ckpt-1") || exists_in(root, "ckpt-2") ||
	             exists_in(root, "ckpt-3"));
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, root, NULL), DVAR_OK);
	expect_var(r, "emb", st.emb, sizeof st.emb);
	assert_int_equal(dvar_reader_num_links(r), 2);
	dvar_reader_free(r);
}

/*
 * A delta committed into the root but never published (its save failed
 * before the pointer) goes with the checkpoint it is written over when
 * retention deletes that one: left behind, it would list and not open.
 */
static void test_format_delta__retention_orphans(void **state_)
{
	const char *root = *state_;
	dvar_shape se = shape2(ROWS, COLS);
	int64_t row = 0;
	state st;
	dvar_writer *w;
	dvar_root_list *l;
	dvar_root_entry e;

	fill_state(&st, 5);
	save_step(root, 1, NULL, &st);
	save_step(root, 2, "ckpt-1", &st);
	/* ckpt-7 over ckpt-2, ckpt-9 over ckpt-7, and the full ckpt-8, unlisted. */
	char *c7 = tu_path(root, "ckpt-7"), *c8 = tu_path(root, "ckpt-8"), *c9 = tu_path(root, "ckpt-9");
	const char *deltas[][2] = { { c7, "ckpt-2" }, { c9, "ckpt-7" } };
	for (int k = 0; k < 2; k++) {
		assert_int_equal(dvar_writer_open(&w, deltas[k][0], NULL), DVAR_OK);
		assert_int_equal(dvar_writer_set_base(w, deltas[k][1]), DVAR_OK);
		assert_int_equal(dvar_writer_add_rows(w, "emb", DVAR_FLOAT32, &se, &row, 1, st.emb),
		                 DVAR_OK);
		assert_int_equal(dvar_writer_commit(w), DVAR_OK);
		dvar_writer_free(w);
	}
	assert_int_equal(dvar_writer_open(&w, c8, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "emb", DVAR_FLOAT32, &se, NULL, st.emb), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	/* ckpt-3 full keeps ckpt-2 and ckpt-1 (2 needs 1): ckpt-7 and 9 stay too. */
	save_step(root, 3, NULL, &st);
	assert_true(exists_in(root, "ckpt-1") && exists_in(root, "ckpt-7") &&
	            exists_in(root, "ckpt-9"));
	/* ckpt-4 over ckpt-3: ckpt-1 and ckpt-2 go, and ckpt-7 and ckpt-9 with
	 * them; the full ckpt-8 opens without them and stays. */
	save_step(root, 4, "ckpt-3", &st);
	assert_false(exists_in(root, "ckpt-1") || exists_in(root, "ckpt-2") ||
	             exists_in(root, "ckpt-7") || exists_in(root, "ckpt-9"));
	assert_true(exists_in(root, "ckpt-8"));
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	assert_int_equal(dvar_root_list_count(l), 3);
	for (size_t i = 0; i < 3; i++) {
		dvar_reader *r;
		char *p;
		assert_int_equal(dvar_root_list_get(l, i, &e), DVAR_OK);
		p = tu_path(root, e.name);
		assert_int_equal(dvar_reader_open(&r, p, NULL), DVAR_OK);
		dvar_reader_free(r);
		free(p);
	}
	dvar_root_list_free(l);
	free(c7);
	free(c8);
	free(c9);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_delta__chain_reads, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_delta__header_and_links, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_delta__broken_base, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_delta__writer_errors, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_delta__parts, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_delta__map, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_delta__retention, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_delta__retention_orphans, tu_setup_dir,
		                                tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/delta", tests, NULL, NULL);
}
