/*
 * tests/unit/format/test_format_campaign.c - a whole-file corruption
 * campaign. A checkpoint of several variables (raw and lz4 chunks, two data
 * files written by two parts) is damaged one way at a time: every byte of
 * the index flipped, a sample of data bytes flipped, the index and the data
 * files cut at many lengths. After each, every variable is read whole and in
 * a slice: each read must give the right values or an error; a read that
 * succeeds with other values is a silent corruption, and there must be none.
 * The counts are printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"

#define NV 4

typedef struct {
	const char *name;
	int dtype;
	int64_t rows, cols;
	int part;
} var_def;

static const var_def defs[NV] = {
	{ "dense", DVAR_FLOAT32, 512, 64, 0 },    /* random: raw chunks */
	{ "sparse", DVAR_INT32, 1024, 32, 1 },    /* mostly zeros: lz4 chunks */
	{ "half", DVAR_BFLOAT16, 100, 3, 0 },
	{ "step", DVAR_INT64, 1, 1, 1 },
};

typedef struct {
	unsigned char *want[NV];
	size_t bytes[NV];
	long right, errors, wrong;
} campaign;

static size_t bytes_of(const var_def *d)
{
	return (size_t)(d->rows * d->cols) * dvar_dtype_size(d->dtype);
}

static void write_checkpoint(const char *ck, campaign *c)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w[2];
	void *blob[2];
	size_t len[2];

	o.chunk_size = 16384;
	o.compress = DVAR_COMPRESS_LZ4;
	for (int k = 0; k < NV; k++) {
		c->bytes[k] = bytes_of(&defs[k]);
		c->want[k] = calloc(1, c->bytes[k]);
		assert_non_null(c->want[k]);
		if (k == 1)
			for (size_t i = 0; i < c->bytes[k] / 4; i += 37)
				((int32_t *)c->want[k])[i] = (int32_t)i;
		else
			tu_fill_random(c->want[k], c->bytes[k], (uint64_t)k + 1);
	}
	for (int p = 0; p < 2; p++) {
		assert_int_equal(dvar_writer_open_part(&w[p], ck, "campaign", p, 2, &o), DVAR_OK);
		for (int k = 0; k < NV; k++) {
			dvar_shape s = { .rank = 2, .dims = { defs[k].rows, defs[k].cols } };
			if (defs[k].part == p)
				assert_int_equal(dvar_writer_add(w[p], defs[k].name, defs[k].dtype, &s, NULL,
				                                 c->want[k]),
				                 DVAR_OK);
		}
		assert_int_equal(dvar_writer_finish_part(w[p], &blob[p], &len[p]), DVAR_OK);
	}
	assert_int_equal(dvar_writer_commit_parts(w[0], (const void *const *)blob, len, 2), DVAR_OK);
	for (int p = 0; p < 2; p++) {
		dvar_writer_free(w[p]);
		dvar_free(blob[p]);
	}
}

/* Every variable, whole and rows [1, 3), as the damaged checkpoint gives it. */
static void read_all(const char *ck, campaign *c)
{
	dvar_reader *r;

	if (dvar_reader_open(&r, ck, NULL) != DVAR_OK) {
		c->errors++;
		return;
	}
	for (int k = 0; k < NV; k++) {
		const var_def *d = &defs[k];
		size_t i, row = (size_t)d->cols * dvar_dtype_size(d->dtype);
		unsigned char *got = malloc(c->bytes[k]);
		dvar_slice sl = { .rank = 2, .start = { 1, 0 }, .length = { 2, d->cols } };

		assert_non_null(got);
		if (dvar_reader_find(r, d->name, &i) != DVAR_OK) {
			c->errors++;
		} else {
			if (dvar_reader_read(r, i, NULL, got, c->bytes[k]) != DVAR_OK)
				c->errors++;
			else if (memcmp(got, c->want[k], c->bytes[k]) != 0)
				c->wrong++;
			else
				c->right++;
			if (d->rows >= 3) {
				if (dvar_reader_read(r, i, &sl, got, 2 * row) != DVAR_OK)
					c->errors++;
				else if (memcmp(got, c->want[k] + row, 2 * row) != 0)
					c->wrong++;
				else
					c->right++;
			}
		}
		free(got);
	}
	dvar_reader_free(r);
}

static void spill(const char *path, const unsigned char *buf, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, n, f), n);
	fclose(f);
}

static void test_format_campaign__no_silent_corruption(void **state)
{
	const char *dir = *state;
	char *ck = tu_path(dir, "ck"), *index = tu_path(ck, "index");
	char *files[2] = { tu_path(ck, "data-00000-of-00002"), tu_path(ck, "data-00001-of-00002") };
	campaign c = { 0 };
	long index_flips = 0, data_flips = 0, cuts = 0;
	uint64_t seed = 12345;
	size_t n;

	write_checkpoint(ck, &c);
	read_all(ck, &c);
	assert_int_equal(c.errors + c.wrong, 0); /* the undamaged checkpoint reads right */

	/* Every byte of the index. */
	unsigned char *ix = tu_slurp(index, &n);
	for (size_t at = 0; at < n; at++) {
		ix[at] ^= 0xff;
		spill(index, ix, n);
		read_all(ck, &c);
		ix[at] ^= 0xff;
		index_flips++;
	}
	/* The index cut short. */
	for (size_t keep = 0; keep < n; keep += 7) {
		spill(index, ix, keep);
		read_all(ck, &c);
		cuts++;
	}
	spill(index, ix, n);
	free(ix);

	/* A sample of data bytes, one at a time. */
	for (int f = 0; f < 2; f++) {
		unsigned char *d = tu_slurp(files[f], &n);
		for (int t = 0; t < 300; t++) {
			size_t at = (size_t)(tu_rand(&seed) % n);
			unsigned char x = (unsigned char)(1 + tu_rand(&seed) % 255);
			d[at] ^= x;
			spill(files[f], d, n);
			read_all(ck, &c);
			d[at] ^= x;
			data_flips++;
		}
		spill(files[f], d, n);
		free(d);
	}
	/* The data files cut short. */
	for (int f = 0; f < 2; f++) {
		unsigned char *d = tu_slurp(files[f], &n);
		for (size_t keep = 0; keep < n; keep += n / 40 + 1) {
			spill(files[f], d, keep);
			read_all(ck, &c);
			cuts++;
		}
		spill(files[f], d, n);
		free(d);
	}
	printf("campaign: %ld index bytes flipped, %ld data bytes flipped, %ld cuts: "
	       "%ld reads right, %ld errors, %ld silently wrong\n",
	       index_flips, data_flips, cuts, c.right, c.errors, c.wrong);
	assert_int_equal(c.wrong, 0);
	for (int k = 0; k < NV; k++)
		free(c.want[k]);
	free(files[0]);
	free(files[1]);
	free(index);
	free(ck);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_campaign__no_silent_corruption, tu_setup_dir,
		                                tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/campaign", tests, NULL, NULL);
}
