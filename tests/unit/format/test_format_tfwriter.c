/*
 * tests/unit/format/test_format_tfwriter.c - the TensorBundle writer
 * (dvar_tf_writer_*): the two worked examples of tf-behavior.md come out
 * byte for byte (§4.2's embedding.ckpt, 136 bytes of index; §4.6's
 * ShardedVariable, 291 bytes of index and 16 of data); slice keys and
 * extents as TensorFlow's Python writes them; a string tensor as §4.5
 * encodes ["hello","world"]; the misuses AddSlice and Add
 * refuse (duplicate keys, overlapping slices, dtype or shape disagreements,
 * the empty key); nothing left behind without a commit or after a failed
 * one; a large tensor streamed in pieces checksummed right; an entry of
 * twice the block size or more starting a block of its own; and what was
 * written decodes with tf.c's decoders and reads back through dvar_reader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"
#include "format/tf.h"

/* ---------------------------------------------------------------- helpers */

static char *cat(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 1;
	char *p = malloc(n);
	assert_non_null(p);
	snprintf(p, n, "%s%s", a, b);
	return p;
}

/* Hex text (spaces ignored) to bytes; *len receives the count. */
static unsigned char *unhex(const char *hex, size_t *len)
{
	unsigned char *out = malloc(strlen(hex) / 2 + 1);
	size_t n = 0;
	int hi = -1;
	assert_non_null(out);
	for (const char *p = hex; *p; p++) {
		int v;
		if (*p >= '0' && *p <= '9')
			v = *p - '0';
		else if (*p >= 'a' && *p <= 'f')
			v = *p - 'a' + 10;
		else
			continue;
		if (hi < 0) {
			hi = v;
		} else {
			out[n++] = (unsigned char)(hi << 4 | v);
			hi = -1;
		}
	}
	*len = n;
	return out;
}

/* Fail showing the first differing byte. */
static void assert_bytes(const unsigned char *got, size_t glen, const unsigned char *want,
                         size_t wlen, const char *what)
{
	size_t n = glen < wlen ? glen : wlen;
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i])
			fail_msg("%s: byte %zu is %02x, expected %02x", what, i, got[i], want[i]);
	if (glen != wlen)
		fail_msg("%s: %zu bytes, expected %zu", what, glen, wlen);
}

static void assert_file(const char *path, const unsigned char *want, size_t wlen)
{
	size_t len;
	unsigned char *got = tu_slurp(path, &len);
	assert_bytes(got, len, want, wlen, path);
	free(got);
}

static dvar_shape shape_of(int rank, const int64_t *dims)
{
	dvar_shape s;
	assert_int_equal(dvar_shape_init(&s, rank, dims), DVAR_OK);
	return s;
}

static dvar_slice slice_of(int rank, const int64_t *start, const int64_t *length)
{
	dvar_slice s = { 0 };
	s.rank = rank;
	for (int d = 0; d < rank; d++) {
		s.start[d] = start[d];
		s.length[d] = length[d];
	}
	return s;
}

static dvar_tf_writer *open_writer(const char *prefix)
{
	dvar_tf_writer *w = NULL;
	int rc = dvar_tf_writer_open(&w, prefix, NULL);
	if (rc)
		fail_msg("open %s: %s", prefix, dvar_error_last()->message);
	return w;
}

static void ok(int rc)
{
	if (rc)
		fail_msg("%s", dvar_error_last()->message);
}

/* Every entry of a table, in order. */
typedef struct {
	size_t n;
	char *key[64];
	size_t klen[64];
	unsigned char *val[64];
	size_t vlen[64];
} entries;

static int collect(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
	entries *e = ud;
	assert_true(e->n < 64);
	e->key[e->n] = malloc(klen + 1);
	memcpy(e->key[e->n], key, klen);
	e->key[e->n][klen] = '\0';
	e->klen[e->n] = klen;
	e->val[e->n] = malloc(vlen + 1);
	memcpy(e->val[e->n], val, vlen);
	e->vlen[e->n] = vlen;
	e->n++;
	return DVAR_OK;
}

static void scan(const char *index, entries *e)
{
	memset(e, 0, sizeof(*e));
	ok(dvar_index_scan(index, collect, e));
}

static void entries_free(entries *e)
{
	for (size_t i = 0; i < e->n; i++) {
		free(e->key[i]);
		free(e->val[i]);
	}
}

static uint64_t get_varint(const unsigned char **p)
{
	uint64_t v = 0;
	for (int s = 0;; s += 7) {
		unsigned char b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			return v;
	}
}

/* The data blocks of a table (from its index block): count and handles. */
static size_t data_blocks(const unsigned char *t, size_t len, uint64_t *off, uint64_t *size,
                          size_t cap)
{
	const unsigned char *p = t + len - 48;
	get_varint(&p);
	get_varint(&p);
	uint64_t io = get_varint(&p), is = get_varint(&p);
	const unsigned char *b = t + io;
	uint32_t nr = (uint32_t)b[is - 4] | (uint32_t)b[is - 3] << 8 | (uint32_t)b[is - 2] << 16 |
	              (uint32_t)b[is - 1] << 24;
	const unsigned char *end = b + is - 4 - 4 * (size_t)nr;
	size_t n = 0;
	for (p = b; p < end; n++) {
		uint64_t shared = get_varint(&p), nonshared = get_varint(&p), vlen = get_varint(&p);
		(void)shared;
		p += nonshared;
		const unsigned char *v = p;
		if (n < cap) {
			off[n] = get_varint(&v);
			size[n] = get_varint(&v);
		}
		p += vlen;
	}
	return n;
}

/* ------------------------------------------------------ worked examples */

/* tf-behavior.md §4.2: tensorflow/python/feature_column/testdata/embedding.ckpt.index. */
static const char embedding_index[] =
	"00 00 06 08 01 1a 02 08 01"
	"00 0c 13 6d 79 5f 65 6d 62 65 64 64 69 6e 67"
	"08 01 12 08 12 02 08 03 12 02 08 02 28 18 35 1e 37 4f f4"
	"00 00 00 00 01 00 00 00"
	"00 df aa b2 85"
	"00 00 00 00 01 00 00 00 00 c0 f2 a1 b0"
	"00 01 02 6e 00 33 00 00 00 00 01 00 00 00 00 2d bf 04 d1"
	"38 08 45 0e 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
	"00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 57 fb 80 8b 24 75 47 db";

static void test_format_tfwriter__embedding_example(void **state)
{
	char *prefix = tu_path(*state, "embedding.ckpt");
	dvar_tf_writer *w = open_writer(prefix);
	const int64_t dims[2] = { 3, 2 };
	dvar_shape s = shape_of(2, dims);
	const float v[6] = { 1, 2, 3, 5, 7, 11 };
	ok(dvar_tf_writer_add(w, "my_embedding", DVAR_FLOAT32, &s, NULL, v));
	ok(dvar_tf_writer_commit(w));
	dvar_tf_writer_free(w);

	size_t n;
	unsigned char *want = unhex(embedding_index, &n);
	assert_int_equal(n, 136);
	char *index = cat(prefix, ".index"), *data = cat(prefix, ".data-00000-of-00001");
	assert_file(index, want, n);
	assert_file(data, (const unsigned char *)v, sizeof(v));
	tu_assert_listing(*state, "embedding.ckpt.data-00000-of-00001 embedding.ckpt.index");
	free(want);
	free(index);
	free(data);
	free(prefix);
}

/*
 * tf-behavior.md §4.6: ShardedVariable s, 4 int32 shards [0],[1],[2],[3];
 * its index is fixtures/tf/sharded_variable/ckpt-1.index (CMake sets
 * DVAR_SOURCE_DIR).
 */
static void test_format_tfwriter__sharded_variable_example(void **state)
{
	char *prefix = tu_path(*state, "ckpt");
	dvar_tf_writer *w = open_writer(prefix);
	const int64_t dims[1] = { 4 };
	dvar_shape s = shape_of(1, dims);
	for (int32_t k = 0; k < 4; k++) {
		const int64_t start[1] = { k }, len[1] = { 1 };
		dvar_slice sl = slice_of(1, start, len);
		/* Streamed, a byte at a time for one of them. */
		ok(dvar_tf_writer_begin(w, "s/.ATTRIBUTES/VARIABLE_VALUE", DVAR_INT32, &s, &sl));
		if (k == 2) {
			for (int b = 0; b < 4; b++)
				ok(dvar_tf_writer_write(w, (const char *)&k + b, 1));
		} else {
			ok(dvar_tf_writer_write(w, &k, 4));
		}
		ok(dvar_tf_writer_end(w));
	}
	ok(dvar_tf_writer_commit(w));
	dvar_tf_writer_free(w);

	const char *src = getenv("DVAR_SOURCE_DIR");
	assert_non_null(src);
	char *fixture = cat(src, "/fixtures/tf/sharded_variable/ckpt-1.index");
	size_t n;
	unsigned char *want = tu_slurp(fixture, &n);
	assert_int_equal(n, 291);
	free(fixture);
	const int32_t values[4] = { 0, 1, 2, 3 };
	char *index = cat(prefix, ".index"), *data = cat(prefix, ".data-00000-of-00001");
	assert_file(index, want, n);
	assert_file(data, (const unsigned char *)values, sizeof(values));
	free(want);

	/* The same entries decoded with tf.c's decoders. */
	entries e;
	scan(index, &e);
	assert_int_equal(e.n, 6);
	dvar_tf_header h;
	ok(dvar_tf_header_decode(&h, e.val[0], e.vlen[0]));
	assert_int_equal(h.num_shards, 1);
	assert_int_equal(h.producer, 1);
	dvar_tf_header_clear(&h);
	for (size_t i = 1; i <= 4; i++) {
		char *full = NULL;
		size_t flen;
		dvar_tf_slice ts;
		assert_int_equal(dvar_tf_slice_key_decode(e.key[i], e.klen[i], &full, &flen, &ts), 1);
		assert_string_equal(full, "s/.ATTRIBUTES/VARIABLE_VALUE");
		assert_int_equal(ts.rank, 1);
		assert_int_equal(ts.start[0], (int64_t)i - 1);
		assert_int_equal(ts.length[0], 1);
		free(full);
		dvar_tf_entry en;
		ok(dvar_tf_entry_decode(&en, e.val[i], e.vlen[i], "slice"));
		assert_int_equal(en.dtype, DVAR_INT32);
		assert_int_equal(en.offset, 4 * ((int64_t)i - 1));
		assert_int_equal(en.size, 4);
		assert_int_equal(dvar_tf_crc_unmask(en.crc32c), dvar_crc32c(&values[i - 1], 4));
		dvar_tf_entry_clear(&en);
	}
	dvar_tf_entry full;
	ok(dvar_tf_entry_decode(&full, e.val[5], e.vlen[5], "full"));
	assert_int_equal(full.num_slices, 4);
	assert_int_equal(full.shape.dims[0], 4);
	assert_int_equal(full.size, 0);
	assert_int_equal(full.crc32c, 0);
	dvar_tf_entry_clear(&full);
	entries_free(&e);
	free(index);
	free(data);
	free(prefix);
}

/* ------------------------------------------------------ keys and extents */

/*
 * Rank-2 shards as TensorFlow's Python saves them (every extent explicit,
 * "10 3 0,4:0,3"), a dimension of size 0 as whole, and a scalar, an empty
 * tensor and a full slice as plain entries; then read back through
 * dvar_reader (a TensorBundle prefix opens as a checkpoint).
 */
static void test_format_tfwriter__slices_as_python_writes_them(void **state)
{
	char *prefix = tu_path(*state, "sub/dir/model.ckpt-7");
	dvar_tf_writer *w = open_writer(prefix);
	const int64_t dims[2] = { 10, 3 }, zdims[2] = { 4, 0 }, rows[4] = { 0, 4, 7, 10 };
	dvar_shape s = shape_of(2, dims), z = shape_of(2, zdims), scalar = shape_of(0, NULL);
	float full[30];
	for (int i = 0; i < 30; i++)
		full[i] = (float)i * 0.5f;
	for (int k = 0; k < 3; k++) {
		const int64_t start[2] = { rows[k], 0 }, len[2] = { rows[k + 1] - rows[k], 3 };
		dvar_slice sl = slice_of(2, start, len);
		ok(dvar_tf_writer_add(w, "emb", DVAR_FLOAT32, &s, &sl, full + 3 * rows[k]));
	}
	const int64_t zs[2] = { 1, 0 }, zl[2] = { 2, 0 };
	dvar_slice zsl = slice_of(2, zs, zl);
	ok(dvar_tf_writer_add(w, "z", DVAR_INT8, &z, &zsl, NULL));
	const double pi = 3.25;
	ok(dvar_tf_writer_add(w, "global_step", DVAR_FLOAT64, &scalar, NULL, &pi));
	dvar_slice whole;
	dvar_slice_full(&whole, &s);
	ok(dvar_tf_writer_add(w, "copy", DVAR_FLOAT32, &s, &whole, full));
	const unsigned char flags[3] = { 1, 0, 1 };
	const int64_t bdims[1] = { 3 };
	dvar_shape bs = shape_of(1, bdims);
	ok(dvar_tf_writer_add(w, "flags", DVAR_BOOL, &bs, NULL, flags));
	ok(dvar_tf_writer_commit(w));
	dvar_tf_writer_free(w);

	char *index = cat(prefix, ".index");
	entries e;
	scan(index, &e);
	/* "", 3 emb slices + z's slice (keys start with 00), copy, emb, flags, global_step, z. */
	assert_int_equal(e.n, 10);
	assert_int_equal(e.klen[0], 0);
	size_t kn;
	unsigned char *k0 = unhex("00 65 6d 62 00 01 01 02 80 84 80 83", &kn);
	assert_bytes((unsigned char *)e.key[1], e.klen[1], k0, kn, "emb 0,4:0,3");
	free(k0);
	k0 = unhex("00 65 6d 62 00 01 01 02 84 83 80 83", &kn);
	assert_bytes((unsigned char *)e.key[2], e.klen[2], k0, kn, "emb 4,3:0,3");
	free(k0);
	k0 = unhex("00 65 6d 62 00 01 01 02 87 83 80 83", &kn);
	assert_bytes((unsigned char *)e.key[3], e.klen[3], k0, kn, "emb 7,3:0,3");
	free(k0);
	k0 = unhex("00 7a 00 01 01 02 81 82 80 7f", &kn);
	assert_bytes((unsigned char *)e.key[4], e.klen[4], k0, kn, "z 1,2:-");
	free(k0);
	const char *names[5] = { "copy", "emb", "flags", "global_step", "z" };
	for (int i = 0; i < 5; i++)
		assert_string_equal(e.key[5 + i], names[i]);
	/* emb's full entry: float [10,3], slices 0,4:0,3 4,3:0,3 7,3:0,3. */
	k0 = unhex("08 01 12 08 12 02 08 0a 12 02 08 03"
	           "3a 08 0a 02 10 04 0a 02 10 03"
	           "3a 0a 0a 04 08 04 10 03 0a 02 10 03"
	           "3a 0a 0a 04 08 07 10 03 0a 02 10 03", &kn);
	assert_bytes(e.val[6], e.vlen[6], k0, kn, "emb's full entry");
	free(k0);
	/* z: int8 [4,0] with one slice 1,2:- (an empty Dim for the size 0). */
	k0 = unhex("08 06 12 06 12 02 08 04 12 00 3a 08 0a 04 08 01 10 02 0a 00", &kn);
	assert_bytes(e.val[9], e.vlen[9], k0, kn, "z's full entry");
	free(k0);
	/* z's slice entry: shape [2,0], no bytes, crc mask(0), at offset 120 (after emb). */
	dvar_tf_entry en;
	ok(dvar_tf_entry_decode(&en, e.val[4], e.vlen[4], "z slice"));
	assert_int_equal(en.shape.dims[0], 2);
	assert_int_equal(en.shape.dims[1], 0);
	assert_int_equal(en.size, 0);
	assert_int_equal(en.offset, 120);
	assert_int_equal(en.crc32c, DVAR_TF_MASK_DELTA);
	dvar_tf_entry_clear(&en);
	/* global_step: a scalar (shape present, no dims). */
	ok(dvar_tf_entry_decode(&en, e.val[8], e.vlen[8], "global_step"));
	assert_int_equal(en.shape.rank, 0);
	assert_int_equal(en.dtype, DVAR_FLOAT64);
	assert_int_equal(en.offset, 120);
	assert_int_equal(en.size, 8);
	dvar_tf_entry_clear(&en);
	entries_free(&e);

	/* Read back as a dvar checkpoint. */
	dvar_reader *r = NULL;
	ok(dvar_reader_open(&r, prefix, NULL));
	assert_int_equal(dvar_reader_num_vars(r), 5);
	size_t vi;
	float got[30];
	ok(dvar_reader_find(r, "emb", &vi));
	dvar_var_info info;
	ok(dvar_reader_var(r, vi, &info));
	assert_int_equal(info.num_slices, 3);
	ok(dvar_reader_read(r, vi, NULL, got, sizeof(got)));
	assert_memory_equal(got, full, sizeof(full));
	ok(dvar_reader_find(r, "copy", &vi));
	ok(dvar_reader_read(r, vi, NULL, got, sizeof(got)));
	assert_memory_equal(got, full, sizeof(full));
	double d = 0;
	ok(dvar_reader_find(r, "global_step", &vi));
	ok(dvar_reader_read(r, vi, NULL, &d, sizeof(d)));
	assert_true(d == pi);
	unsigned char fl[3];
	ok(dvar_reader_find(r, "flags", &vi));
	ok(dvar_reader_var(r, vi, &info));
	assert_int_equal(info.dtype, DVAR_BOOL);
	ok(dvar_reader_read(r, vi, NULL, fl, sizeof(fl)));
	assert_memory_equal(fl, flags, 3);
	uint64_t bad = 1;
	ok(dvar_reader_verify(r, NULL, NULL, &bad));
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
	free(index);
	free(prefix);
}

/* §4.5: ["hello","world"] as TensorFlow writes a string tensor, read back. */
static void test_format_tfwriter__string_tensor(void **state)
{
	char *prefix = tu_path(*state, "s");
	dvar_tf_writer *w = open_writer(prefix);
	const int64_t two[1] = { 2 }, none[1] = { 0 };
	dvar_shape s2 = shape_of(1, two), s0 = shape_of(1, none), scalar = shape_of(0, NULL);
	const uint64_t lens[2] = { 5, 5 }, one = 0;
	const float f = 1;
	ok(dvar_tf_writer_add(w, "f", DVAR_FLOAT32, &scalar, NULL, &f));
	ok(dvar_tf_writer_add_strings(w, "words", &s2, lens, "helloworld"));
	ok(dvar_tf_writer_add_strings(w, "empty", &s0, NULL, NULL));
	ok(dvar_tf_writer_add_strings(w, "blank", &scalar, &one, NULL));
	assert_int_equal(dvar_tf_writer_add_strings(w, "words", &s2, lens, "helloworld"), DVAR_EINVAL);
	tu_assert_error_contains("Adding duplicate key: words");
	assert_int_equal(dvar_tf_writer_add_strings(w, "x", &s2, NULL, "helloworld"), DVAR_EINVAL);
	assert_int_equal(dvar_tf_writer_add_strings(w, "x", &s2, lens, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_tf_writer_add_strings(w, "", &s2, lens, "helloworld"), DVAR_EINVAL);
	ok(dvar_tf_writer_commit(w));
	dvar_tf_writer_free(w);

	size_t n, len;
	char *data = cat(prefix, ".data-00000-of-00001"), *index = cat(prefix, ".index");
	unsigned char *got = tu_slurp(data, &len);
	/* f, then words (16 bytes: lengths, their masked CRC, the bytes), then empty (no
	 * lengths: mask(0)) and blank (one length 0: its u32 0 checksummed). */
	unsigned char *words = unhex("0000803f" "0505b56f994f68656c6c6f776f726c64" "d8ea82a2"
	                             "00a67b113a", &n);
	assert_bytes(got, len, words, n, "data file");
	entries e;
	scan(index, &e);
	assert_int_equal(e.n, 5);
	assert_string_equal(e.key[4], "words");
	dvar_tf_entry en;
	ok(dvar_tf_entry_decode(&en, e.val[4], e.vlen[4], "words"));
	assert_int_equal(en.dtype, DVAR_TF_DT_STRING);
	assert_int_equal(en.offset, 4);
	assert_int_equal(en.size, 16);
	assert_int_equal(en.crc32c, 0x07d64c1b);
	dvar_tf_entry_clear(&en);
	entries_free(&e);

	dvar_reader *r = NULL;
	ok(dvar_reader_open(&r, prefix, NULL));
	size_t vi;
	uint64_t rl[2], total = 0;
	char buf[16];
	ok(dvar_reader_find(r, "words", &vi));
	ok(dvar_reader_read_strings(r, vi, rl, 2, buf, sizeof(buf), &total));
	assert_int_equal(total, 10);
	assert_memory_equal(buf, "helloworld", 10);
	/* The same, into buffers the library allocates: a 0 byte after the strings. */
	uint64_t *al = NULL;
	char *ab = NULL;
	ok(dvar_reader_read_strings_alloc(r, vi, &al, &ab, &total));
	assert_int_equal(total, 10);
	assert_int_equal(al[0], 5);
	assert_int_equal(al[1], 5);
	assert_string_equal(ab, "helloworld");
	dvar_free(al);
	dvar_free(ab);
	ok(dvar_reader_find(r, "blank", &vi));
	ok(dvar_reader_read_strings(r, vi, rl, 1, buf, sizeof(buf), &total));
	assert_int_equal(total, 0);
	ok(dvar_reader_read_strings_alloc(r, vi, &al, &ab, NULL));
	assert_int_equal(al[0], 0);
	assert_string_equal(ab, "");
	dvar_free(al);
	dvar_free(ab);
	uint64_t bad = 1;
	ok(dvar_reader_verify(r, NULL, NULL, &bad));
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
	free(words);
	free(got);
	free(data);
	free(index);
	free(prefix);
}

/* ------------------------------------------------------------ misuses */

static void test_format_tfwriter__misuses(void **state)
{
	char *prefix = tu_path(*state, "m");
	dvar_tf_writer *w = open_writer(prefix);
	const int64_t dims[2] = { 4, 2 }, other[2] = { 5, 2 };
	dvar_shape s = shape_of(2, dims), s5 = shape_of(2, other);
	const int32_t v[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	const int64_t r0[2] = { 0, 0 }, r2[2] = { 2, 0 }, r1[2] = { 1, 0 }, l2[2] = { 2, 2 },
	              c0[2] = { 0, 0 }, c1[2] = { 0, 1 }, l40[2] = { 4, 0 }, l41[2] = { 4, 1 };
	dvar_slice top = slice_of(2, r0, l2), bottom = slice_of(2, r2, l2), mid = slice_of(2, r1, l2);

	/* Duplicate plain keys, as TensorFlow words it. */
	ok(dvar_tf_writer_add(w, "a", DVAR_INT32, &s, NULL, v));
	assert_int_equal(dvar_tf_writer_add(w, "a", DVAR_INT32, &s, NULL, v), DVAR_EINVAL);
	tu_assert_error_contains("Adding duplicate key: a");
	/* A slice of a plain key; a plain entry of a sliced key. */
	assert_int_equal(dvar_tf_writer_add(w, "a", DVAR_INT32, &s, &top, v), DVAR_EINVAL);
	tu_assert_error_contains("Adding duplicate key: a");
	ok(dvar_tf_writer_add(w, "p", DVAR_INT32, &s, &top, v));
	assert_int_equal(dvar_tf_writer_add(w, "p", DVAR_INT32, &s, NULL, v), DVAR_EINVAL);
	tu_assert_error_contains("Adding duplicate key: p");
	/* The same slice twice, and one that overlaps. */
	assert_int_equal(dvar_tf_writer_add(w, "p", DVAR_INT32, &s, &top, v), DVAR_EINVAL);
	tu_assert_error_contains("tensor 'p': slice 0,2:- overlaps slice 0,2:- added before");
	assert_int_equal(dvar_tf_writer_add(w, "p", DVAR_INT32, &s, &mid, v), DVAR_EINVAL);
	tu_assert_error_contains("slice 1,2:- overlaps slice 0,2:-");
	/* Dtype or full shape unlike the earlier slices'. */
	assert_int_equal(dvar_tf_writer_add(w, "p", DVAR_FLOAT32, &s, &bottom, v), DVAR_EINVAL);
	tu_assert_error_contains("tensor 'p': its slices were added as int32 [4,2], now one as "
	                         "float32 [4,2]");
	assert_int_equal(dvar_tf_writer_add(w, "p", DVAR_INT32, &s5, &bottom, v), DVAR_EINVAL);
	tu_assert_error_contains("now one as int32 [5,2]");
	/* The empty key, bad dtypes, slices outside the shape, length 0 where TF cannot. */
	assert_int_equal(dvar_tf_writer_add(w, "", DVAR_INT32, &s, NULL, v), DVAR_EINVAL);
	tu_assert_error_contains("must not be empty");
	assert_int_equal(dvar_tf_writer_add(w, "x", DVAR_DTYPE_STRING, &s, NULL, v), DVAR_EINVAL);
	tu_assert_error_contains("string tensors go through dvar_tf_writer_add_strings");
	assert_int_equal(dvar_tf_writer_add(w, "x", 99, &s, NULL, v), DVAR_EINVAL);
	dvar_slice out = slice_of(2, r2, (const int64_t[2]){ 3, 2 });
	assert_int_equal(dvar_tf_writer_add(w, "x", DVAR_INT32, &s, &out, v), DVAR_EINVAL);
	tu_assert_error_contains("tensor 'x'");
	dvar_slice empty = slice_of(2, c0, l40);
	assert_int_equal(dvar_tf_writer_add(w, "x", DVAR_INT32, &s, &empty, v), DVAR_EINVAL);
	tu_assert_error_contains("length 0 in dimension 1 of size 2");
	assert_int_equal(dvar_tf_writer_add(w, "x", DVAR_INT32, &s, NULL, NULL), DVAR_EINVAL);
	tu_assert_error_contains("data is NULL");
	/* A tensor open: nothing else but its bytes and its end. */
	ok(dvar_tf_writer_begin(w, "col", DVAR_INT32, &s, &(dvar_slice){ 2, { 0, 1 }, { 4, 1 } }));
	assert_int_equal(dvar_tf_writer_begin(w, "y", DVAR_INT32, &s, NULL), DVAR_EINVAL);
	tu_assert_error_contains("tensor 'col' is open");
	assert_int_equal(dvar_tf_writer_commit(w), DVAR_EINVAL);
	ok(dvar_tf_writer_write(w, v, 16));
	ok(dvar_tf_writer_end(w));
	assert_int_equal(dvar_tf_writer_end(w), DVAR_EINVAL);
	tu_assert_error_contains("no tensor is open");
	assert_int_equal(dvar_tf_writer_write(w, v, 4), DVAR_EINVAL);
	(void)c1;
	(void)l41;
	/* After every refusal the writer still commits what was added. */
	ok(dvar_tf_writer_commit(w));
	assert_int_equal(dvar_tf_writer_commit(w), DVAR_EINVAL);
	tu_assert_error_contains("already committed");
	dvar_tf_writer_free(w);
	entries e;
	char *index = cat(prefix, ".index");
	scan(index, &e);
	/* "", col's and p's slice keys, a, col, p. */
	assert_int_equal(e.n, 6);
	assert_string_equal(e.key[3], "a");
	assert_string_equal(e.key[4], "col");
	assert_string_equal(e.key[5], "p");
	dvar_tf_entry en;
	ok(dvar_tf_entry_decode(&en, e.val[5], e.vlen[5], "p"));
	assert_int_equal(en.num_slices, 1);
	dvar_tf_entry_clear(&en);
	entries_free(&e);

	/* An existing bundle is never replaced. */
	dvar_tf_writer *w2 = NULL;
	assert_int_equal(dvar_tf_writer_open(&w2, prefix, NULL), DVAR_EEXISTS);
	assert_null(w2);
	char *other_prefix = tu_path(*state, "q");
	char *qdata = cat(other_prefix, ".data-00000-of-00001");
	FILE *f = fopen(qdata, "w");
	fclose(f);
	assert_int_equal(dvar_tf_writer_open(&w2, other_prefix, NULL), DVAR_EEXISTS);
	tu_assert_error_contains("a data file without its index");
	assert_int_equal(dvar_tf_writer_open(&w2, "", NULL), DVAR_EINVAL);
	char *slash = tu_path(*state, "dir/");
	assert_int_equal(dvar_tf_writer_open(&w2, slash, NULL), DVAR_EINVAL);
	free(slash);
	free(qdata);
	free(other_prefix);
	free(index);
	free(prefix);
}

/* Writing too much or too little makes the writer unusable; freeing it leaves nothing. */
static void test_format_tfwriter__bad_byte_counts(void **state)
{
	const int64_t dims[1] = { 4 };
	dvar_shape s = shape_of(1, dims);
	const int32_t v[5] = { 1, 2, 3, 4, 5 };
	for (int k = 0; k < 2; k++) {
		char *prefix = tu_path(*state, "new/deeper/b");
		dvar_tf_writer *w = open_writer(prefix);
		ok(dvar_tf_writer_add(w, "ok", DVAR_INT32, &s, NULL, v));
		ok(dvar_tf_writer_begin(w, "t", DVAR_INT32, &s, NULL));
		if (k == 0) {
			ok(dvar_tf_writer_write(w, v, 12));
			assert_int_equal(dvar_tf_writer_write(w, v, 8), DVAR_EINVAL);
			tu_assert_error_contains("tensor 't': it holds 16 bytes; 12 were written and 8 more "
			                         "were given");
		} else {
			ok(dvar_tf_writer_write(w, v, 12));
			assert_int_equal(dvar_tf_writer_end(w), DVAR_EINVAL);
			tu_assert_error_contains("tensor 't': it holds 16 bytes; only 12 were written");
		}
		assert_int_equal(dvar_tf_writer_add(w, "later", DVAR_INT32, &s, NULL, v), DVAR_EINVAL);
		tu_assert_error_contains("unusable");
		assert_int_equal(dvar_tf_writer_commit(w), DVAR_EINVAL);
		dvar_tf_writer_free(w);
		/* The directories it made are gone too. */
		tu_assert_listing(*state, "");
		free(prefix);
	}
}

/* Free without commit, and a commit that fails at the last rename, leave nothing. */
static const char *fault_at;
static char *fault_index;

static void fault_hook(const char *point)
{
	if (fault_at && strcmp(point, fault_at) == 0) {
		/* Someone else's index appears: the writer's rename must not replace it. */
		FILE *f = fopen(fault_index, "w");
		fputs("theirs", f);
		fclose(f);
	}
}

static void test_format_tfwriter__nothing_left_behind(void **state)
{
	char *prefix = tu_path(*state, "x/ckpt");
	const int64_t dims[1] = { 3 };
	dvar_shape s = shape_of(1, dims);
	const float v[3] = { 1, 2, 3 };

	dvar_tf_writer *w = open_writer(prefix);
	ok(dvar_tf_writer_add(w, "v", DVAR_FLOAT32, &s, NULL, v));
	char *x = tu_path(*state, "x");
	assert_true(dvar_fs_is_dir(x));
	dvar_tf_writer_free(w);
	tu_assert_listing(*state, "");

	/* x exists already: free removes only the files. */
	assert_int_equal(dvar_fs_mkdirs(x), DVAR_OK);
	w = open_writer(prefix);
	ok(dvar_tf_writer_add(w, "v", DVAR_FLOAT32, &s, NULL, v));
	dvar_tf_writer_free(w);
	tu_assert_listing(x, "");

	fault_index = cat(prefix, ".index");
	fault_at = "tf-data-renamed";
	dvar__fault_hook = fault_hook;
	w = open_writer(prefix);
	ok(dvar_tf_writer_add(w, "v", DVAR_FLOAT32, &s, NULL, v));
	assert_int_equal(dvar_tf_writer_commit(w), DVAR_EEXISTS);
	tu_assert_error_contains("not committed");
	dvar_tf_writer_free(w);
	dvar__fault_hook = NULL;
	fault_at = NULL;
	tu_assert_listing(x, "ckpt.index");
	free(fault_index);
	free(x);
	free(prefix);
}

/* ------------------------------------------------------------ large data */

/* A tensor of ~5 MiB in uneven pieces: right bytes and checksum, between two small ones. */
static void test_format_tfwriter__large_tensor_streamed(void **state)
{
	char *prefix = tu_path(*state, "big");
	const int64_t dims[2] = { 1311, 1000 }, one[1] = { 1 };
	dvar_shape s = shape_of(2, dims), s1 = shape_of(1, one);
	size_t n = 1311 * 1000 * 4;
	unsigned char *data = malloc(n);
	tu_fill_random(data, n, 42);
	const uint16_t small = 7;
	dvar_tf_writer *w = open_writer(prefix);
	ok(dvar_tf_writer_add(w, "a", DVAR_UINT16, &s1, NULL, &small));
	ok(dvar_tf_writer_begin(w, "b", DVAR_FLOAT32, &s, NULL));
	static const size_t pieces[] = { 1, 7, 4095, 1u << 20, (1u << 20) + 3, 3u << 20, 12345 };
	size_t at = 0;
	for (size_t k = 0; at < n; k = (k + 1) % 7) {
		size_t len = n - at < pieces[k] ? n - at : pieces[k];
		ok(dvar_tf_writer_write(w, data + at, len));
		at += len;
	}
	ok(dvar_tf_writer_end(w));
	ok(dvar_tf_writer_add(w, "c", DVAR_UINT16, &s1, NULL, &small));
	ok(dvar_tf_writer_commit(w));
	dvar_tf_writer_free(w);

	char *dpath = cat(prefix, ".data-00000-of-00001"), *index = cat(prefix, ".index");
	size_t len;
	unsigned char *got = tu_slurp(dpath, &len);
	assert_int_equal(len, n + 4);
	assert_memory_equal(got + 2, data, n);
	entries e;
	scan(index, &e);
	assert_int_equal(e.n, 4);
	dvar_tf_entry en;
	ok(dvar_tf_entry_decode(&en, e.val[2], e.vlen[2], "b"));
	assert_int_equal(en.offset, 2);
	assert_int_equal(en.size, (int64_t)n);
	assert_int_equal(dvar_tf_crc_unmask(en.crc32c), dvar_crc32c(data, n));
	dvar_tf_entry_clear(&en);
	ok(dvar_tf_entry_decode(&en, e.val[3], e.vlen[3], "c"));
	assert_int_equal(en.offset, (int64_t)n + 2);
	dvar_tf_entry_clear(&en);
	entries_free(&e);
	free(got);
	free(data);
	free(dpath);
	free(index);
	free(prefix);
}

/*
 * TensorFlow's table builder ends the block before an entry of 2 * 256 KiB
 * or more (LevelDB's does not): "a" and the header in block 0, the long key
 * alone in block 1, "c" in block 2.
 */
static void test_format_tfwriter__large_entry_starts_a_block(void **state)
{
	char *prefix = tu_path(*state, "long");
	size_t klen = 2 * DVAR_INDEX_BLOCK_SIZE;
	char *key = malloc(klen + 1);
	memset(key, 'b', klen);
	key[klen] = '\0';
	const int64_t one[1] = { 1 };
	dvar_shape s1 = shape_of(1, one);
	const int8_t x = 5;
	dvar_tf_writer *w = open_writer(prefix);
	ok(dvar_tf_writer_add(w, "a", DVAR_INT8, &s1, NULL, &x));
	ok(dvar_tf_writer_add(w, key, DVAR_INT8, &s1, NULL, &x));
	ok(dvar_tf_writer_add(w, "c", DVAR_INT8, &s1, NULL, &x));
	ok(dvar_tf_writer_commit(w));
	dvar_tf_writer_free(w);
	char *index = cat(prefix, ".index");
	size_t len;
	unsigned char *t = tu_slurp(index, &len);
	uint64_t off[8], size[8];
	assert_int_equal(data_blocks(t, len, off, size, 8), 3);
	assert_int_equal(off[0], 0);
	assert_true(size[0] < 64);                    /* header and "a" */
	assert_true(size[1] > 2 * DVAR_INDEX_BLOCK_SIZE); /* the long key alone */
	assert_true(size[2] < 64);                    /* "c" */
	entries e;
	memset(&e, 0, sizeof(e));
	ok(dvar_index_scan(index, collect, &e));
	assert_int_equal(e.n, 4);
	assert_int_equal(e.klen[2], klen);
	entries_free(&e);
	free(t);
	free(index);
	free(key);
	free(prefix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_tfwriter__embedding_example, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tfwriter__sharded_variable_example,
		                                tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tfwriter__slices_as_python_writes_them,
		                                tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tfwriter__string_tensor, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tfwriter__misuses, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tfwriter__bad_byte_counts, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tfwriter__nothing_left_behind, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tfwriter__large_tensor_streamed,
		                                tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tfwriter__large_entry_starts_a_block,
		                                tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/tfwriter", tests, NULL, NULL);
}
