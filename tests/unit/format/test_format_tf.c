/*
 * tests/unit/format/test_format_tf.c - TensorFlow's TensorBundle read as a
 * dvar checkpoint (format/tf.c, reader.c): every expected vector of
 * tf-behavior.md §4 (masked CRCs, header and entry bytes, slice protos,
 * OrderedCode Signed() and slice keys, string tensors, the worked 291-byte
 * ShardedVariable bundle and the 136-byte embedding index), the real TF
 * checkpoints in fixtures/tf read with exact values, damage (data, index,
 * truncation) detected and named, hostile index bytes fuzzed through the
 * decoders, snappy-compressed index blocks, and locating a bundle (prefix,
 * directory with TF's state file, dvar roots untouched).
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
#include "format/tf.h"

/* ---------------------------------------------------------------- helpers */

static size_t unhex(const char *hex, unsigned char *out, size_t cap)
{
	size_t n = 0;
	for (const char *p = hex; *p;) {
		if (*p == ' ' || *p == '\n' || *p == '|') {
			p++;
			continue;
		}
		unsigned v;
		assert_true(sscanf(p, "%2x", &v) == 1);
		assert_true(n < cap);
		out[n++] = (unsigned char)v;
		p += 2;
	}
	return n;
}

static void expect_bytes(const dvar_bytes *b, const char *hex)
{
	unsigned char want[4096];
	size_t n = unhex(hex, want, sizeof(want));
	if (b->len != n || memcmp(b->data, want, n) != 0) {
		char got[8192] = "";
		for (size_t i = 0; i < b->len && i < 2000; i++)
			sprintf(got + strlen(got), "%02x ", b->data[i]);
		fail_msg("bytes differ: got %s, want %s", got, hex);
	}
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	fclose(f);
}

static void write_text(const char *path, const char *text)
{
	write_file(path, text, strlen(text));
}

static size_t read_file(const char *path, unsigned char **out)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	*out = malloc((size_t)n + 1);
	assert_int_equal(fread(*out, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return (size_t)n;
}

static void copy_file(const char *from, const char *to)
{
	unsigned char *p;
	size_t n = read_file(from, &p);
	write_file(to, p, n);
	free(p);
}

/* fixtures/tf/NAME[/BASE] in the source tree (CMake sets DVAR_SOURCE_DIR). */
static char *fixture(const char *name, const char *base)
{
	const char *src = getenv("DVAR_SOURCE_DIR");
	char *p = NULL;
	assert_non_null(src);
	if (base)
		assert_true(asprintf(&p, "%s/fixtures/tf/%s/%s", src, name, base) > 0);
	else
		assert_true(asprintf(&p, "%s/fixtures/tf/%s", src, name) > 0);
	return p;
}

/* ---------------------------------------------------------------- checksums */

static void test_format_tf__crc_vectors(void **state)
{
	(void)state;
	assert_int_equal(dvar_crc32c("123456789", 9), 0xe3069283u);
	assert_int_equal(dvar_tf_crc_mask(0xe3069283u), 0xc78ab0e5u);
	assert_int_equal(dvar_tf_crc_unmask(0xc78ab0e5u), 0xe3069283u);
	assert_int_equal(dvar_tf_crc_mask(0), 0xa282ead8u);
	assert_int_equal(dvar_tf_crc_unmask(0xa282ead8u), 0);
	static const struct { float f; uint32_t crc, stored; } fv[] = {
		{ 0.0f, 0x48674bc7u, 0x3a117ba6u }, { 1.0f, 0xdd54c4abu, 0x2bdaa581u },
		{ 2.0f, 0x091c567bu, 0x4f78fd10u }, { 3.0f, 0xf60b907fu, 0xc382d6efu },
		{ 0.5f, 0x26973e52u, 0x1f273806u },
	};
	for (size_t i = 0; i < sizeof(fv) / sizeof(fv[0]); i++) {
		assert_int_equal(dvar_crc32c(&fv[i].f, 4), fv[i].crc);
		assert_int_equal(dvar_tf_crc_mask(fv[i].crc), fv[i].stored);
		assert_int_equal(dvar_tf_crc_unmask(fv[i].stored), fv[i].crc);
	}
	static const struct { int32_t v; uint32_t stored; } iv[] = {
		{ 0, 0x3a117ba6u }, { 1, 0x6582151du }, { 2, 0x7310d8d8u }, { 3, 0x287f3f63u },
	};
	for (size_t i = 0; i < sizeof(iv) / sizeof(iv[0]); i++)
		assert_int_equal(dvar_tf_crc_mask(dvar_crc32c(&iv[i].v, 4)), iv[i].stored);
	/* mask and unmask are inverse everywhere */
	uint64_t s = 7;
	for (int i = 0; i < 1000; i++) {
		uint32_t c = (uint32_t)tu_rand(&s);
		assert_int_equal(dvar_tf_crc_unmask(dvar_tf_crc_mask(c)), c);
	}
}

/* ---------------------------------------------------------------- messages */

static void test_format_tf__header_bytes(void **state)
{
	(void)state;
	dvar_tf_header h = { 0 }, d;
	dvar_bytes b = { 0 };
	h.num_shards = 1;
	h.producer = DVAR_TF_BUNDLE_VERSION;
	assert_int_equal(dvar_tf_header_encode(&b, &h), DVAR_OK);
	expect_bytes(&b, "08 01 1a 02 08 01");
	assert_int_equal(dvar_tf_header_decode(&d, b.data, b.len), DVAR_OK);
	assert_int_equal(d.num_shards, 1);
	assert_int_equal(d.endianness, 0);
	assert_int_equal(d.producer, 1);
	assert_int_equal(d.min_consumer, 0);
	assert_int_equal(d.num_bad_consumers, 0);
	assert_int_equal(dvar_tf_header_check(&d, "x"), DVAR_OK);
	dvar_tf_header_clear(&d);
	b.len = 0;
	h.num_shards = 2;
	assert_int_equal(dvar_tf_header_encode(&b, &h), DVAR_OK);
	expect_bytes(&b, "08 02 1a 02 08 01");

	/* Everything set round-trips; bad_consumers are packed. */
	int32_t bad[3] = { 5, -1, 7 };
	dvar_tf_header full = { 3, 1, 4, 2, 3, bad };
	b.len = 0;
	assert_int_equal(dvar_tf_header_encode(&b, &full), DVAR_OK);
	assert_int_equal(dvar_tf_header_decode(&d, b.data, b.len), DVAR_OK);
	assert_int_equal(d.num_shards, 3);
	assert_int_equal(d.endianness, 1);
	assert_int_equal(d.producer, 4);
	assert_int_equal(d.min_consumer, 2);
	assert_int_equal(d.num_bad_consumers, 3);
	assert_memory_equal(d.bad_consumers, bad, sizeof(bad));
	dvar_tf_header_clear(&d);
	/* More bad_consumers than the first allocation holds. */
	int32_t many[9] = { 9, 8, 7, -6, 5, 4, 3, 2, 100000 };
	full.num_bad_consumers = 9;
	full.bad_consumers = many;
	b.len = 0;
	assert_int_equal(dvar_tf_header_encode(&b, &full), DVAR_OK);
	assert_int_equal(dvar_tf_header_decode(&d, b.data, b.len), DVAR_OK);
	assert_int_equal(d.num_bad_consumers, 9);
	assert_memory_equal(d.bad_consumers, many, sizeof(many));
	dvar_tf_header_clear(&d);
	/* Unpacked bad_consumers and unknown fields of every wire type are fine. */
	unsigned char raw[64];
	size_t n = unhex("08 01 1a 06 08 01 18 02 18 03 21 0102030405060708 2d 01020304 32 02 aabb 50 7f",
	                 raw, sizeof(raw));
	assert_int_equal(dvar_tf_header_decode(&d, raw, n), DVAR_OK);
	assert_int_equal(d.num_bad_consumers, 2);
	assert_int_equal(d.bad_consumers[0], 2);
	assert_int_equal(d.bad_consumers[1], 3);
	dvar_tf_header_clear(&d);
	free(b.data);
}

static void test_format_tf__header_check(void **state)
{
	(void)state;
	dvar_tf_header h = { 1, 0, 1, 0, 0, NULL };
	h.min_consumer = 2;
	assert_int_equal(dvar_tf_header_check(&h, "b"), DVAR_EVERSION);
	tu_assert_error_contains("Checkpoint min consumer version 2 above current version 1 for TensorFlow");
	h.min_consumer = 0;
	h.producer = -1;
	assert_int_equal(dvar_tf_header_check(&h, "b"), DVAR_EVERSION);
	tu_assert_error_contains("Checkpoint producer version -1 below min producer 0 supported by TensorFlow");
	h.producer = 1;
	int32_t bad = 1;
	h.num_bad_consumers = 1;
	h.bad_consumers = &bad;
	assert_int_equal(dvar_tf_header_check(&h, "b"), DVAR_EVERSION);
	tu_assert_error_contains("Checkpoint disallows consumer version 1.  Please upgrade TensorFlow: "
	                         "this version is likely buggy.");
	h.num_bad_consumers = 0;
	h.endianness = 1;
	assert_int_equal(dvar_tf_header_check(&h, "b"), DVAR_ENOTSUPP);
	tu_assert_error_contains("big-endian");
	h.endianness = 2;
	assert_int_equal(dvar_tf_header_check(&h, "b"), DVAR_ECORRUPT);
	h.endianness = 0;
	h.num_shards = 0;
	assert_int_equal(dvar_tf_header_check(&h, "b"), DVAR_ECORRUPT);
	h.num_shards = 100001;
	assert_int_equal(dvar_tf_header_check(&h, "b"), DVAR_ECORRUPT);
	h.num_shards = 100000;
	assert_int_equal(dvar_tf_header_check(&h, "b"), DVAR_OK);
}

static void check_entry_roundtrip(const dvar_tf_entry *e, const char *hex)
{
	dvar_bytes b = { 0 };
	dvar_tf_entry d;
	assert_int_equal(dvar_tf_entry_encode(&b, e), DVAR_OK);
	expect_bytes(&b, hex);
	assert_int_equal(dvar_tf_entry_decode(&d, b.data, b.len, "k"), DVAR_OK);
	assert_int_equal(d.dtype, e->dtype);
	assert_true(dvar_shape_equal(&d.shape, &e->shape));
	assert_int_equal(d.shard_id, e->shard_id);
	assert_int_equal(d.offset, e->offset);
	assert_int_equal(d.size, e->size);
	assert_int_equal(d.crc32c, e->crc32c);
	assert_int_equal(d.num_slices, e->num_slices);
	for (size_t i = 0; i < d.num_slices; i++) {
		assert_int_equal(d.slices[i].rank, e->slices[i].rank);
		for (int k = 0; k < d.slices[i].rank; k++) {
			assert_int_equal(d.slices[i].start[k], e->slices[i].start[k]);
			assert_int_equal(d.slices[i].length[k], e->slices[i].length[k]);
		}
	}
	dvar_tf_entry_clear(&d);
	free(b.data);
}

static void test_format_tf__entry_bytes(void **state)
{
	(void)state;
	/* half_plus_two `b` = 2.0: scalar float at offset 4 */
	dvar_tf_entry e = { 0 };
	e.dtype = DVAR_FLOAT32;
	e.offset = 4;
	e.size = 4;
	e.crc32c = 0x4f78fd10u;
	check_entry_roundtrip(&e, "08 01 12 00 20 04 28 04 35 10 fd 78 4f");
	/* my_embedding: float [3,2] at offset 0 */
	memset(&e, 0, sizeof(e));
	e.dtype = DVAR_FLOAT32;
	dvar_shape_init(&e.shape, 2, (int64_t[]){ 3, 2 });
	e.size = 24;
	e.crc32c = 0xf44f371eu;
	check_entry_roundtrip(&e, "08 01 12 08 12 02 08 03 12 02 08 02 28 18 35 1e 37 4f f4");
	/* A zero-size dimension is an empty Dim; shard_id is written when set. */
	memset(&e, 0, sizeof(e));
	e.dtype = DVAR_INT64;
	dvar_shape_init(&e.shape, 2, (int64_t[]){ 0, 5 });
	e.shard_id = 1;
	check_entry_roundtrip(&e, "08 09 12 06 12 00 12 02 08 05 18 01");
	/* The sliced full entry of the worked ShardedVariable bundle (§4.6). */
	dvar_tf_slice sl[4];
	for (int i = 0; i < 4; i++)
		sl[i] = (dvar_tf_slice){ 1, { i }, { 1 } };
	memset(&e, 0, sizeof(e));
	e.dtype = DVAR_INT32;
	dvar_shape_init(&e.shape, 1, (int64_t[]){ 4 });
	e.num_slices = 4;
	e.slices = sl;
	check_entry_roundtrip(&e, "08 03 12 04 12 02 08 04 3a 04 0a 02 10 01 3a 06 0a 04 08 01 10 01 "
	                          "3a 06 0a 04 08 02 10 01 3a 06 0a 04 08 03 10 01");
	/* A full dimension is an empty Extent; a zero length is still written. */
	dvar_tf_slice two = { 2, { 0, 3 }, { -1, 0 } };
	memset(&e, 0, sizeof(e));
	e.dtype = DVAR_FLOAT32;
	dvar_shape_init(&e.shape, 2, (int64_t[]){ 5, 10 });
	e.num_slices = 1;
	e.slices = &two;
	check_entry_roundtrip(&e, "08 01 12 08 12 02 08 05 12 02 08 0a 3a 08 0a 00 0a 04 08 03 10 00");
}

static void test_format_tf__slice_proto_bytes(void **state)
{
	(void)state;
	/* "4 1,1" -> 0a 04 08 01 10 01; "4 0,1" -> 0a 02 10 01; full -> 0a 00 (as field 7 of an entry) */
	static const struct { dvar_tf_slice s; const char *hex; } v[] = {
		{ { 1, { 1 }, { 1 } }, "3a 06 0a 04 08 01 10 01" },
		{ { 1, { 0 }, { 1 } }, "3a 04 0a 02 10 01" },
		{ { 1, { 0 }, { -1 } }, "3a 02 0a 00" },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		dvar_tf_entry e = { 0 };
		e.dtype = DVAR_INT32;
		dvar_shape_init(&e.shape, 1, (int64_t[]){ 4 });
		e.num_slices = 1;
		e.slices = (dvar_tf_slice *)&v[i].s;
		dvar_bytes b = { 0 };
		assert_int_equal(dvar_tf_entry_encode(&b, &e), DVAR_OK);
		/* skip dtype (2 bytes) and shape (6 bytes) */
		dvar_bytes tail = { b.data + 8, b.len - 8, 0 };
		expect_bytes(&tail, v[i].hex);
		free(b.data);
	}
	/* resolve and from: full dimensions as -1 */
	dvar_shape shape;
	dvar_shape_init(&shape, 2, (int64_t[]){ 5, 10 });
	dvar_tf_slice t = { 2, { 0, 1 }, { -1, 9 } }, back;
	dvar_slice s;
	assert_int_equal(dvar_tf_slice_resolve(&t, &shape, &s, "x"), DVAR_OK);
	assert_int_equal(s.start[0], 0);
	assert_int_equal(s.length[0], 5);
	assert_int_equal(s.start[1], 1);
	assert_int_equal(s.length[1], 9);
	dvar_tf_slice_from(&s, &shape, &back);
	assert_memory_equal(&back, &t, sizeof(t));
	t.length[1] = 10;
	assert_int_equal(dvar_tf_slice_resolve(&t, &shape, &s, "x"), DVAR_ECORRUPT);
	t.length[1] = 9;
	t.start[0] = 1; /* full dimension that does not start at 0 */
	assert_int_equal(dvar_tf_slice_resolve(&t, &shape, &s, "x"), DVAR_ECORRUPT);
	t.rank = 1;
	assert_int_equal(dvar_tf_slice_resolve(&t, &shape, &s, "x"), DVAR_ECORRUPT);
}

/* ---------------------------------------------------------------- OrderedCode */

static void test_format_tf__signed_table(void **state)
{
	(void)state;
	static const struct { int64_t v; const char *hex; } rows[] = {
		{ 0, "80" }, { 1, "81" }, { 5, "85" }, { 63, "bf" }, { 64, "c0 40" }, { 100, "c0 64" },
		{ 8191, "df ff" }, { 8192, "e0 20 00" }, { 1000000, "ef 42 40" }, { -1, "7f" },
		{ -2, "7e" }, { -64, "40" }, { -65, "3f bf" },
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		unsigned char want[10], got[10];
		size_t n = unhex(rows[i].hex, want, sizeof(want));
		int len = dvar_tf__signed_encode(rows[i].v, got);
		assert_int_equal(len, (int)n);
		assert_memory_equal(got, want, n);
		int64_t back = 12345;
		assert_int_equal(dvar_tf__signed_decode(want, n, &back), (int)n);
		assert_int_equal(back, rows[i].v);
		/* one byte short fails */
		if (n > 1)
			assert_int_equal(dvar_tf__signed_decode(want, n - 1, &back), -1);
	}
	/* Every length, both signs, and the extremes round-trip. */
	int64_t edge[] = { INT64_MAX, INT64_MIN, INT64_MAX / 2, INT64_MIN / 2, (int64_t)1 << 55,
	                   -((int64_t)1 << 55), ((int64_t)1 << 62) - 1, -((int64_t)1 << 62) };
	for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
		unsigned char buf[10];
		int64_t back;
		int len = dvar_tf__signed_encode(edge[i], buf);
		assert_true(len >= 1 && len <= 10);
		assert_int_equal(dvar_tf__signed_decode(buf, (size_t)len, &back), len);
		assert_true(back == edge[i]);
	}
	uint64_t s = 99;
	unsigned char prev[10];
	int prev_len = 0;
	int64_t prev_v = 0;
	for (int i = 0; i < 20000; i++) {
		int64_t v = (int64_t)tu_rand(&s) >> (tu_rand(&s) % 64);
		unsigned char buf[10];
		int64_t back;
		int len = dvar_tf__signed_encode(v, buf);
		assert_int_equal(dvar_tf__signed_decode(buf, (size_t)len, &back), len);
		assert_true(back == v);
		/* increasing numbers give increasing bytes */
		if (i) {
			size_t m = (size_t)(len < prev_len ? len : prev_len);
			int c = memcmp(prev, buf, m);
			if (!c)
				c = prev_len - len;
			assert_true((prev_v < v && c < 0) || (prev_v > v && c > 0) || (prev_v == v && c == 0));
		}
		memcpy(prev, buf, (size_t)len);
		prev_len = len;
		prev_v = v;
	}
	/* Non-canonical encodings are refused: 64 as 3 bytes, 0 as 2. */
	unsigned char nc1[3] = { 0xe0, 0x00, 0x40 }, nc2[2] = { 0xc0, 0x00 };
	int64_t back;
	assert_int_equal(dvar_tf__signed_decode(nc1, 3, &back), -1);
	assert_int_equal(dvar_tf__signed_decode(nc2, 2, &back), -1);
}

#define K_HEX "73 2f 2e 41 54 54 52 49 42 55 54 45 53 2f 56 41 52 49 41 42 4c 45 5f 56 41 4c 55 45"
static const char full_key[] = "s/.ATTRIBUTES/VARIABLE_VALUE";

static void test_format_tf__slice_keys(void **state)
{
	(void)state;
	static const struct { dvar_tf_slice s; const char *tail; } rows[] = {
		{ { 1, { 0 }, { 1 } }, "01 01 80 81" },
		{ { 1, { 1 }, { 1 } }, "01 01 81 81" },
		{ { 1, { 3 }, { 1 } }, "01 01 83 81" },
		{ { 1, { 0 }, { 2 } }, "01 01 80 82" },
		{ { 1, { 2 }, { 2 } }, "01 01 82 82" },
		{ { 2, { 5, 0 }, { 5, 3 } }, "01 02 85 85 80 83" },
		/* the reference's row "0,5:-" lists 85 85 80 7f: that is start 5, length 5 */
		{ { 2, { 5, 0 }, { 5, -1 } }, "01 02 85 85 80 7f" },
		{ { 2, { 0, 0 }, { 5, -1 } }, "01 02 80 85 80 7f" },
		{ { 1, { 0 }, { -1 } }, "01 01 80 7f" },
		{ { 1, { 64 }, { 1 } }, "01 01 c0 40 81" },
		{ { 1, { 100 }, { 28 } }, "01 01 c0 64 9c" },
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char hex[512];
		snprintf(hex, sizeof(hex), "00 " K_HEX " 00 01 %s", rows[i].tail);
		dvar_bytes b = { 0 };
		assert_int_equal(dvar_tf_slice_key_encode(&b, full_key, strlen(full_key), &rows[i].s), DVAR_OK);
		expect_bytes(&b, hex);
		char *name;
		size_t nl;
		dvar_tf_slice back;
		assert_int_equal(dvar_tf_slice_key_decode(b.data, b.len, &name, &nl, &back), 1);
		assert_int_equal(nl, strlen(full_key));
		assert_string_equal(name, full_key);
		assert_int_equal(back.rank, rows[i].s.rank);
		for (int d = 0; d < back.rank; d++) {
			assert_int_equal(back.start[d], rows[i].s.start[d]);
			assert_int_equal(back.length[d], rows[i].s.length[d]);
		}
		free(name);
		free(b.data);
	}
	/* "0,3" and "-" give different keys */
	dvar_tf_slice a = { 2, { 0, 0 }, { 5, 3 } }, f = { 2, { 0, 0 }, { 5, -1 } };
	dvar_bytes ka = { 0 }, kf = { 0 };
	dvar_tf_slice_key_encode(&ka, full_key, strlen(full_key), &a);
	dvar_tf_slice_key_encode(&kf, full_key, strlen(full_key), &f);
	assert_false(ka.len == kf.len && memcmp(ka.data, kf.data, ka.len) == 0);
	free(ka.data);
	free(kf.data);

	/* String escapes: 00 -> 00 ff, ff -> ff 00; NumIncreasing of bigger ranks */
	const char odd[] = { 'a', 0, 'b', (char)0xff, 'c' };
	dvar_tf_slice r3 = { 3, { 0, 0, 300 }, { -1, -1, 1 } };
	dvar_bytes b = { 0 };
	assert_int_equal(dvar_tf_slice_key_encode(&b, odd, sizeof(odd), &r3), DVAR_OK);
	expect_bytes(&b, "00 61 00 ff 62 ff 00 63 00 01 01 03 80 7f 80 7f c1 2c 81");
	char *name;
	size_t nl;
	dvar_tf_slice back;
	assert_int_equal(dvar_tf_slice_key_decode(b.data, b.len, &name, &nl, &back), 1);
	assert_int_equal(nl, sizeof(odd));
	assert_memory_equal(name, odd, sizeof(odd));
	assert_int_equal(back.start[2], 300);
	free(name);
	free(b.data);

	/* Not a slice key: 0; broken ones: DVAR_ECORRUPT with TF's reason. */
	assert_int_equal(dvar_tf_slice_key_decode("abc", 3, &name, &nl, &back), 0);
	assert_int_equal(dvar_tf_slice_key_decode("", 0, &name, &nl, &back), 0);
	unsigned char bad[64];
	size_t n = unhex("00 61 00 01 00", bad, sizeof(bad));
	assert_int_equal(dvar_tf_slice_key_decode(bad, n, &name, &nl, &back), DVAR_ECORRUPT);
	tu_assert_error_contains("Expecting positive rank of the tensor, got 0");
	n = unhex("00 61 00 01 01 01 80", bad, sizeof(bad));
	assert_int_equal(dvar_tf_slice_key_decode(bad, n, &name, &nl, &back), DVAR_ECORRUPT);
	n = unhex("00 61 00 01 01 01 80 81 00", bad, sizeof(bad));
	assert_int_equal(dvar_tf_slice_key_decode(bad, n, &name, &nl, &back), DVAR_ECORRUPT);
	n = unhex("00 61 00 02 01 01 80 81", bad, sizeof(bad));
	assert_int_equal(dvar_tf_slice_key_decode(bad, n, &name, &nl, &back), DVAR_ECORRUPT);
	n = unhex("00 61 00 01 01 09", bad, sizeof(bad));
	assert_int_equal(dvar_tf_slice_key_decode(bad, n, &name, &nl, &back), DVAR_ECORRUPT);
	n = unhex("00 61 62", bad, sizeof(bad));
	assert_int_equal(dvar_tf_slice_key_decode(bad, n, &name, &nl, &back), DVAR_ECORRUPT);
	assert_null(name);
}

/* ---------------------------------------------------------------- strings */

static void test_format_tf__strings(void **state)
{
	(void)state;
	uint64_t lens[2] = { 5, 5 };
	dvar_bytes b = { 0 };
	uint32_t crc;
	assert_int_equal(dvar_tf_strings_encode(&b, 2, lens, "helloworld", &crc), DVAR_OK);
	expect_bytes(&b, "05 05 b5 6f 99 4f 68 65 6c 6c 6f 77 6f 72 6c 64");
	assert_int_equal(dvar_tf_crc_mask(crc), 0x07d64c1bu);
	uint64_t got[2];
	size_t at;
	assert_int_equal(dvar_tf_strings_decode(b.data, b.len, 2, got, &at, "s"), DVAR_OK);
	assert_int_equal(got[0], 5);
	assert_int_equal(got[1], 5);
	assert_int_equal(at, 6);
	assert_int_equal(dvar_tf_strings_crc(b.data, b.len, 2, got, at), crc);
	/* not the CRC of the stored bytes */
	assert_int_not_equal(dvar_crc32c(b.data, b.len), crc);
	/* A damaged length checksum gives TF's text. */
	b.data[2] ^= 1;
	assert_int_equal(dvar_tf_strings_decode(b.data, b.len, 2, got, &at, "s"), DVAR_ECORRUPT);
	tu_assert_error_contains("The length checksum does not match: expected ");
	b.data[2] ^= 1;
	/* lengths that do not add up */
	assert_int_equal(dvar_tf_strings_decode(b.data, b.len - 1, 2, got, &at, "s"), DVAR_ECORRUPT);
	assert_int_equal(dvar_tf_strings_decode(b.data, b.len, 1, got, &at, "s"), DVAR_ECORRUPT);
	assert_int_equal(dvar_tf_strings_decode(b.data, 3, 2, got, &at, "s"), DVAR_ECORRUPT);
	assert_int_equal(dvar_tf_strings_decode(b.data, 1, 2, got, &at, "s"), DVAR_ECORRUPT);
	free(b.data);
	/* old_string_tensors/foo: `scalar` = ["hello"] (size 10), `string_tensor` = [""] (size 5) */
	b = (dvar_bytes){ 0 };
	lens[0] = 5;
	assert_int_equal(dvar_tf_strings_encode(&b, 1, lens, "hello", NULL), DVAR_OK);
	expect_bytes(&b, "05 d9 c6 9c 43 68 65 6c 6c 6f");
	b.len = 0;
	lens[0] = 0;
	assert_int_equal(dvar_tf_strings_encode(&b, 1, lens, "", NULL), DVAR_OK);
	assert_int_equal(b.len, 5);
	assert_int_equal(b.data[0], 0);
	assert_int_equal(dvar_tf_strings_decode(b.data, b.len, 1, got, &at, "s"), DVAR_OK);
	assert_int_equal(got[0], 0);
	/* No elements: just the checksum of nothing, mask(0). */
	b.len = 0;
	assert_int_equal(dvar_tf_strings_encode(&b, 0, NULL, "", NULL), DVAR_OK);
	expect_bytes(&b, "d8 ea 82 a2");
	assert_int_equal(dvar_tf_strings_decode(b.data, b.len, 0, got, &at, "s"), DVAR_OK);
	free(b.data);
}

/* ---------------------------------------------------------------- bundles on disk */

/* The worked ShardedVariable bundle of §4.6 (fixtures/tf/sharded_variable): its 291-byte index. */
static size_t read_worked(unsigned char **out)
{
	char *path = fixture("sharded_variable", "ckpt-1.index");
	size_t n = read_file(path, out);
	assert_int_equal(n, 291);
	free(path);
	return n;
}

/* The worked bundle as files: DIR/s.index and DIR/s.data-00000-of-00001; returns the prefix. */
static char *write_worked(const char *dir)
{
	char *prefix = tu_path(dir, "s"), *ip = NULL, *dp = dvar_tf_data_path(prefix, 0, 1);
	char *from_dp = fixture("sharded_variable", "ckpt-1.data-00000-of-00001");
	unsigned char *idx;
	size_t n = read_worked(&idx);
	assert_true(asprintf(&ip, "%s.index", prefix) > 0);
	write_file(ip, idx, n);
	copy_file(from_dp, dp);
	free(idx);
	free(from_dp);
	free(ip);
	free(dp);
	return prefix;
}

static dvar_reader *open_ok(const char *path)
{
	dvar_reader *r = NULL;
	if (dvar_reader_open(&r, path, NULL))
		fail_msg("open %s: %s", path, dvar_error_last()->message);
	return r;
}

static size_t find_ok(dvar_reader *r, const char *name)
{
	size_t i;
	if (dvar_reader_find(r, name, &i))
		fail_msg("%s", dvar_error_last()->message);
	return i;
}

static void read_ok(dvar_reader *r, const char *name, const char *slice, void *out, size_t bytes)
{
	size_t i = find_ok(r, name);
	dvar_var_info info;
	dvar_slice s;
	if (dvar_reader_var(r, i, &info) || (slice && dvar_slice_parse(&s, slice, &info.shape)) ||
	    dvar_reader_read(r, i, slice ? &s : NULL, out, bytes))
		fail_msg("reading %s: %s", name, dvar_error_last()->message);
}

static float read_f32(dvar_reader *r, const char *name)
{
	float f;
	read_ok(r, name, NULL, &f, sizeof(f));
	return f;
}

static void verify_ok(dvar_reader *r)
{
	uint64_t bad = 99;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
}

static void test_format_tf__worked_bundle(void **state)
{
	char *prefix = write_worked(*state);
	dvar_reader *r = open_ok(prefix);
	assert_string_equal(dvar_reader_path(r), prefix);
	assert_int_equal(dvar_reader_num_vars(r), 1);
	dvar_var_info info;
	assert_int_equal(dvar_reader_var(r, 0, &info), DVAR_OK);
	assert_string_equal(info.name, full_key);
	assert_int_equal(info.dtype, DVAR_INT32);
	assert_int_equal(info.shape.rank, 1);
	assert_int_equal(info.shape.dims[0], 4);
	assert_int_equal(info.num_slices, 4);
	assert_int_equal(info.num_chunks, 4);
	assert_int_equal(info.raw_bytes, 16);
	assert_int_equal(dvar_reader_var_num_attrs(r, 0), 0);
	for (size_t j = 0; j < 4; j++) {
		dvar_slice s;
		assert_int_equal(dvar_reader_var_slice(r, 0, j, &s), DVAR_OK);
		assert_int_equal(s.start[0], (int64_t)j);
		assert_int_equal(s.length[0], 1);
	}
	int32_t all[4], mid[2];
	read_ok(r, full_key, NULL, all, sizeof(all));
	for (int i = 0; i < 4; i++)
		assert_int_equal(all[i], i);
	read_ok(r, full_key, "1,2", mid, sizeof(mid));
	assert_int_equal(mid[0], 1);
	assert_int_equal(mid[1], 2);
	read_ok(r, full_key, "3,1", mid, 4);
	assert_int_equal(mid[0], 3);
	verify_ok(r);
	/* Not page-aligned: mapping is refused, saying what to do. */
	dvar_mapping m;
	assert_int_equal(dvar_reader_map(r, 0, 0, 0, &m), DVAR_ENOTSUPP);
	tu_assert_error_contains("not page-aligned: export it first");
	dvar_reader_free(r);
	free(prefix);
}

/* A table built from our encoders with LevelDB's builder comes out byte for byte as TF's. */
static void build_table(const char *path, const dvar_bytes *keys, const dvar_bytes *vals, size_t n)
{
	dvar_index_builder *b;
	assert_int_equal(dvar_index_builder_open(&b, path), DVAR_OK);
	for (size_t i = 0; i < n; i++)
		if (dvar_index_builder_add(b, keys[i].data, keys[i].len, vals[i].data, vals[i].len))
			fail_msg("%s", dvar_error_last()->message);
	assert_int_equal(dvar_index_builder_finish(b, 0), DVAR_OK);
	dvar_index_builder_free(b);
}

static void test_format_tf__encoders_make_tf_tables(void **state)
{
	/* §4.6's 291 bytes: header, 4 slice data entries, the full entry. */
	dvar_bytes keys[6] = { { 0 } }, vals[6] = { { 0 } };
	dvar_tf_header h = { 1, 0, 1, 0, 0, NULL };
	assert_int_equal(dvar_tf_header_encode(&vals[0], &h), DVAR_OK);
	static const uint32_t crcs[4] = { 0x3a117ba6u, 0x6582151du, 0x7310d8d8u, 0x287f3f63u };
	dvar_tf_slice sl[4];
	for (int i = 0; i < 4; i++) {
		sl[i] = (dvar_tf_slice){ 1, { i }, { 1 } };
		assert_int_equal(dvar_tf_slice_key_encode(&keys[1 + i], full_key, strlen(full_key), &sl[i]),
		                 DVAR_OK);
		dvar_tf_entry e = { 0 };
		e.dtype = DVAR_INT32;
		dvar_shape_init(&e.shape, 1, (int64_t[]){ 1 });
		e.offset = 4 * i;
		e.size = 4;
		e.crc32c = crcs[i];
		assert_int_equal(dvar_tf_entry_encode(&vals[1 + i], &e), DVAR_OK);
	}
	dvar_tf_entry full = { 0 };
	full.dtype = DVAR_INT32;
	dvar_shape_init(&full.shape, 1, (int64_t[]){ 4 });
	full.num_slices = 4;
	full.slices = sl;
	assert_int_equal(dvar_bytes_put(&keys[5], full_key, strlen(full_key)), DVAR_OK);
	assert_int_equal(dvar_tf_entry_encode(&vals[5], &full), DVAR_OK);
	char *path = tu_path(*state, "worked.index");
	build_table(path, keys, vals, 6);
	unsigned char *got, *worked, want[512];
	size_t n = read_file(path, &got), wn = read_worked(&worked);
	assert_int_equal(n, wn);
	assert_memory_equal(got, worked, n);
	free(worked);
	free(got);
	free(path);
	for (int i = 0; i < 6; i++) {
		free(keys[i].data);
		free(vals[i].data);
	}

	/* embedding.ckpt.index, 136 bytes (§4.2's worked example). */
	dvar_bytes k2[2] = { { 0 } }, v2[2] = { { 0 } };
	assert_int_equal(dvar_tf_header_encode(&v2[0], &h), DVAR_OK);
	assert_int_equal(dvar_bytes_put(&k2[1], "my_embedding", 12), DVAR_OK);
	dvar_tf_entry e = { 0 };
	e.dtype = DVAR_FLOAT32;
	dvar_shape_init(&e.shape, 2, (int64_t[]){ 3, 2 });
	e.size = 24;
	const float emb[6] = { 1, 2, 3, 5, 7, 11 };
	e.crc32c = dvar_tf_crc_mask(dvar_crc32c(emb, sizeof(emb)));
	assert_int_equal(e.crc32c, 0xf44f371eu);
	assert_int_equal(dvar_tf_entry_encode(&v2[1], &e), DVAR_OK);
	path = tu_path(*state, "embedding.ckpt.index");
	build_table(path, k2, v2, 2);
	n = read_file(path, &got);
	assert_int_equal(n, 136);
	wn = unhex("00 00 06 08 01 1a 02 08 01"
	           "00 0c 13 6d 79 5f 65 6d 62 65 64 64 69 6e 67 08 01 12 08 12 02 08 03 12 02 08 02 28 18 35 1e 37 4f f4"
	           "00 00 00 00 01 00 00 00 00 df aa b2 85"
	           "00 00 00 00 01 00 00 00 00 c0 f2 a1 b0"
	           "00 01 02 6e 00 33 00 00 00 00 01 00 00 00 00 2d bf 04 d1"
	           "38 08 45 0e 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
	           "00 00 00 00 00 00 00 00 57 fb 80 8b 24 75 47 db", want, sizeof(want));
	assert_int_equal(wn, 136);
	assert_memory_equal(got, want, n);
	/* ... and equals the real file TF wrote. */
	const char *src = getenv("DVAR_SOURCE_DIR");
	assert_non_null(src);
	char *real = NULL;
	assert_true(asprintf(&real, "%s/fixtures/tf/embedding/embedding.ckpt.index", src) > 0);
	unsigned char *rb;
	size_t rn = read_file(real, &rb);
	assert_int_equal(rn, 136);
	assert_memory_equal(rb, want, 136);
	free(rb);
	free(real);
	free(got);
	free(path);
	for (int i = 0; i < 2; i++) {
		free(k2[i].data);
		free(v2[i].data);
	}
}

/* ---------------------------------------------------------------- the TF fixtures */

static void expect_names(dvar_reader *r, const char *const *names, size_t n)
{
	assert_int_equal(dvar_reader_num_vars(r), n);
	for (size_t i = 0; i < n; i++) {
		dvar_var_info info;
		assert_int_equal(dvar_reader_var(r, i, &info), DVAR_OK);
		assert_string_equal(info.name, names[i]);
	}
}

/* String tensor `name` (a scalar): its bytes, malloc'ed, and their count. */
static unsigned char *read_string(dvar_reader *r, const char *name, uint64_t *len)
{
	size_t i = find_ok(r, name);
	uint64_t lens[1], total = 0;
	if (dvar_reader_read_strings(r, i, lens, 1, NULL, 0, &total))
		fail_msg("%s", dvar_error_last()->message);
	unsigned char *b = malloc(total + 1);
	if (dvar_reader_read_strings(r, i, lens, 1, b, total, &total))
		fail_msg("%s", dvar_error_last()->message);
	assert_int_equal(lens[0], total);
	*len = total;
	return b;
}

static void test_format_tf__fixture_embedding(void **state)
{
	(void)state;
	char *p = fixture("embedding", "embedding.ckpt");
	dvar_reader *r = open_ok(p);
	static const char *const names[] = { "my_embedding" };
	expect_names(r, names, 1);
	dvar_var_info info;
	assert_int_equal(dvar_reader_var(r, 0, &info), DVAR_OK);
	assert_int_equal(info.dtype, DVAR_FLOAT32);
	assert_int_equal(info.shape.rank, 2);
	assert_int_equal(info.shape.dims[0], 3);
	assert_int_equal(info.shape.dims[1], 2);
	float v[6], col[3];
	read_ok(r, "my_embedding", NULL, v, sizeof(v));
	static const float want[6] = { 1, 2, 3, 5, 7, 11 };
	assert_memory_equal(v, want, sizeof(want));
	read_ok(r, "my_embedding", "-:1,1", col, sizeof(col));
	assert_true(col[0] == 2 && col[1] == 5 && col[2] == 11);
	verify_ok(r);
	dvar_reader_free(r);
	free(p);
}

static void test_format_tf__fixture_half_plus_two(void **state)
{
	(void)state;
	char *p = fixture("half_plus_two", "variables");
	dvar_reader *r = open_ok(p);
	static const char *const names[] = { "a", "b", "c" };
	expect_names(r, names, 3);
	assert_true(read_f32(r, "a") == 0.5f);
	assert_true(read_f32(r, "b") == 2.0f);
	assert_true(read_f32(r, "c") == 3.0f);
	verify_ok(r);
	dvar_reader_free(r);
	free(p);
}

static void test_format_tf__fixture_vars_and_arithmetic(void **state)
{
	(void)state;
	char *p = fixture("vars_and_arithmetic", "variables");
	dvar_reader *r = open_ok(p);
	static const char *const names[] = { "_CHECKPOINTABLE_OBJECT_GRAPH",
	                                     "child/z/.ATTRIBUTES/VARIABLE_VALUE",
	                                     "x/.ATTRIBUTES/VARIABLE_VALUE", "y/.ATTRIBUTES/VARIABLE_VALUE" };
	expect_names(r, names, 4);
	assert_true(read_f32(r, "x/.ATTRIBUTES/VARIABLE_VALUE") == 1.0f);
	assert_true(read_f32(r, "y/.ATTRIBUTES/VARIABLE_VALUE") == 2.0f);
	assert_true(read_f32(r, "child/z/.ATTRIBUTES/VARIABLE_VALUE") == 3.0f);
	/* The object graph: a string scalar at offset 12, 256 bytes stored. */
	size_t i = find_ok(r, "_CHECKPOINTABLE_OBJECT_GRAPH");
	dvar_var_info info;
	assert_int_equal(dvar_reader_var(r, i, &info), DVAR_OK);
	assert_int_equal(info.dtype, DVAR_DTYPE_STRING);
	assert_int_equal(info.shape.rank, 0);
	assert_int_equal(info.raw_bytes, 256);
	assert_null(dvar_dtype_name(info.dtype));
	uint64_t len;
	unsigned char *g = read_string(r, "_CHECKPOINTABLE_OBJECT_GRAPH", &len);
	assert_int_equal(len, 256 - 2 - 4); /* a 2-byte varint length and the length checksum */
	assert_int_equal(g[0], 0x0a); /* TrackableObjectGraph.nodes, field 1 */
	g[len] = 0;
	assert_non_null(memmem(g, len, "child/z/.ATTRIBUTES/VARIABLE_VALUE", 34));
	free(g);
	/* A string tensor is not read as values. */
	char buf[256];
	assert_int_equal(dvar_reader_read(r, i, NULL, buf, sizeof(buf)), DVAR_ENOTSUPP);
	tu_assert_error_contains("dvar_reader_read_strings");
	/* Its sizes are checked; a short buffer and a wrong count are DVAR_ESHAPE. */
	uint64_t lens[2], total;
	assert_int_equal(dvar_reader_read_strings(r, i, lens, 2, NULL, 0, &total), DVAR_ESHAPE);
	assert_int_equal(dvar_reader_read_strings(r, i, lens, 1, buf, 10, &total), DVAR_ESHAPE);
	assert_int_equal(total, 250);
	/* read_strings on a numeric tensor: DVAR_EINVAL */
	assert_int_equal(dvar_reader_read_strings(r, find_ok(r, "x/.ATTRIBUTES/VARIABLE_VALUE"), lens, 1,
	                                          NULL, 0, &total), DVAR_EINVAL);
	/* ... and so is the allocating read, which leaves both outputs NULL. */
	uint64_t *al = lens;
	char *ab = buf;
	assert_int_equal(dvar_reader_read_strings_alloc(r, find_ok(r, "x/.ATTRIBUTES/VARIABLE_VALUE"),
	                                                &al, &ab, &total), DVAR_EINVAL);
	assert_null(al);
	assert_null(ab);
	assert_int_equal(dvar_reader_read_strings_alloc(r, i, NULL, &ab, &total), DVAR_EINVAL);
	assert_int_equal(dvar_reader_read_strings_alloc(r, 99999, &al, &ab, &total), DVAR_EINVAL);
	assert_null(al);
	/* Read into allocated buffers, the object graph is the bytes read_strings gives. */
	uint64_t glen;
	g = read_string(r, "_CHECKPOINTABLE_OBJECT_GRAPH", &glen);
	if (dvar_reader_read_strings_alloc(r, i, &al, &ab, &total))
		fail_msg("%s", dvar_error_last()->message);
	assert_int_equal(total, glen);
	assert_int_equal(al[0], glen);
	assert_memory_equal(ab, g, glen);
	assert_int_equal(ab[glen], 0);
	dvar_free(al);
	dvar_free(ab);
	free(g);
	verify_ok(r);
	dvar_reader_free(r);
	free(p);
}

static void test_format_tf__fixture_optimizer_slots(void **state)
{
	(void)state;
	char *p = fixture("optimizer_slots", "variables");
	dvar_reader *r = open_ok(p);
	static const char *const names[] = {
		"_CHECKPOINTABLE_OBJECT_GRAPH",
		"opt/beta_1/.ATTRIBUTES/VARIABLE_VALUE",
		"opt/beta_2/.ATTRIBUTES/VARIABLE_VALUE",
		"opt/decay/.ATTRIBUTES/VARIABLE_VALUE",
		"opt/iter/.ATTRIBUTES/VARIABLE_VALUE",
		"opt/learning_rate/.ATTRIBUTES/VARIABLE_VALUE",
		"v/.ATTRIBUTES/VARIABLE_VALUE",
		"v/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE",
		"v/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE",
	};
	expect_names(r, names, 9);
	/* Adam's defaults, after one step. */
	assert_true(read_f32(r, "opt/beta_1/.ATTRIBUTES/VARIABLE_VALUE") == 0.9f);
	assert_true(read_f32(r, "opt/beta_2/.ATTRIBUTES/VARIABLE_VALUE") == 0.999f);
	assert_true(read_f32(r, "opt/decay/.ATTRIBUTES/VARIABLE_VALUE") == 0.0f);
	assert_true(read_f32(r, "opt/learning_rate/.ATTRIBUTES/VARIABLE_VALUE") == 0.001f);
	int64_t iter;
	dvar_var_info info;
	assert_int_equal(dvar_reader_var(r, find_ok(r, "opt/iter/.ATTRIBUTES/VARIABLE_VALUE"), &info), DVAR_OK);
	assert_int_equal(info.dtype, DVAR_INT64);
	read_ok(r, "opt/iter/.ATTRIBUTES/VARIABLE_VALUE", NULL, &iter, sizeof(iter));
	assert_int_equal(iter, 1);
	/* One Adam step with gradient g = 3: m = (1 - beta_1) g = 0.3, v = (1 - beta_2) g^2 = 0.009,
	 * and the variable moved by lr * m_hat / sqrt(v_hat) = 0.001 (from 5 to 4.999). */
	float m = read_f32(r, "v/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE");
	float vv = read_f32(r, "v/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE");
	float w = read_f32(r, "v/.ATTRIBUTES/VARIABLE_VALUE");
	assert_true(m > 0.2999f && m < 0.3001f);
	assert_true(vv > 0.008999f && vv < 0.009001f);
	assert_true(w > 4.9989f && w < 4.9991f);
	uint64_t len;
	unsigned char *g = read_string(r, "_CHECKPOINTABLE_OBJECT_GRAPH", &len);
	assert_int_equal(len, 774 - 2 - 4);
	assert_non_null(memmem(g, len, "v/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE", 50));
	free(g);
	verify_ok(r);
	dvar_reader_free(r);
	free(p);
}

static void test_format_tf__fixture_two_shards(void **state)
{
	(void)state;
	char *p = fixture("two_shards", "variables");
	dvar_reader *r = open_ok(p);
	static const char *const names[] = { "_CHECKPOINTABLE_OBJECT_GRAPH", "v/.ATTRIBUTES/VARIABLE_VALUE" };
	expect_names(r, names, 2);
	dvar_var_info info;
	assert_int_equal(dvar_reader_var(r, 1, &info), DVAR_OK);
	assert_int_equal(info.shape.rank, 3);
	assert_true(info.shape.dims[0] == 1 && info.shape.dims[1] == 1 && info.shape.dims[2] == 1);
	assert_true(read_f32(r, "v/.ATTRIBUTES/VARIABLE_VALUE") == 1.0f);
	uint64_t len;
	unsigned char *g = read_string(r, "_CHECKPOINTABLE_OBJECT_GRAPH", &len);
	assert_int_equal(len, 120 - 1 - 4);
	free(g);
	/* Where each lives: v in shard 1 at offset 0, the graph in shard 0. */
	uint64_t bad;
	struct { int n; char file[2][4096]; } seen = { 0 };
	(void)seen;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);
	dvar_reader_free(r);
	/* Shard 1 is the one v needs: damage it and v's error names it. */
	char *dir = *state, *copy = tu_path(dir, "variables"), *from, *to;
	for (int f = 0; f < 3; f++) {
		const char *suffix[] = { ".index", ".data-00000-of-00002", ".data-00001-of-00002" };
		assert_true(asprintf(&from, "%s%s", p, suffix[f]) > 0);
		assert_true(asprintf(&to, "%s%s", copy, suffix[f]) > 0);
		copy_file(from, to);
		free(from);
		if (f == 2)
			tu_flip_byte(to, 1);
		free(to);
	}
	r = open_ok(copy);
	float x;
	size_t vi = find_ok(r, "v/.ATTRIBUTES/VARIABLE_VALUE");
	assert_int_equal(dvar_reader_read(r, vi, NULL, &x, 4), DVAR_ECORRUPT);
	tu_assert_error_contains("variables.data-00001-of-00002 at offset 0");
	tu_assert_error_contains("checksum mismatch");
	dvar_reader_free(r);
	free(copy);
	free(p);
}

/* ---------------------------------------------------------------- damage */

typedef struct {
	int count;
	char var[1024], file[4096], message[2048];
} bad_log;

static void on_bad(void *ud, const dvar_bad_chunk *b)
{
	bad_log *l = ud;
	if (!l->count++) {
		snprintf(l->var, sizeof(l->var), "%s", b->var);
		snprintf(l->file, sizeof(l->file), "%s", b->file);
		snprintf(l->message, sizeof(l->message), "%s", b->message);
	}
}

/* A copy of fixture name/base in dir; returns the copy's prefix. */
static char *copy_fixture(const char *dir, const char *name, const char *base, int shards)
{
	char *p = fixture(name, base), *copy = tu_path(dir, base), *from, *to;
	for (int f = -1; f < shards; f++) {
		char suffix[64];
		if (f < 0)
			snprintf(suffix, sizeof(suffix), ".index");
		else
			snprintf(suffix, sizeof(suffix), ".data-%05d-of-%05d", f, shards);
		assert_true(asprintf(&from, "%s%s", p, suffix) > 0);
		assert_true(asprintf(&to, "%s%s", copy, suffix) > 0);
		copy_file(from, to);
		free(from);
		free(to);
	}
	free(p);
	return copy;
}

static void test_format_tf__corrupt_data(void **state)
{
	char *prefix = copy_fixture(*state, "half_plus_two", "variables", 1);
	char *data = dvar_tf_data_path(prefix, 0, 1);
	tu_flip_byte(data, 5); /* inside b (offset 4) */
	dvar_reader *r = open_ok(prefix);
	assert_true(read_f32(r, "a") == 0.5f);
	assert_true(read_f32(r, "c") == 3.0f);
	float f;
	assert_int_equal(dvar_reader_read(r, find_ok(r, "b"), NULL, &f, 4), DVAR_ECORRUPT);
	tu_assert_error_contains("variable 'b'");
	tu_assert_error_contains("variables.data-00000-of-00001 at offset 4");
	tu_assert_error_contains("checksum mismatch: stored 0x091c567b");
	bad_log log = { 0 };
	uint64_t bad;
	assert_int_equal(dvar_reader_verify(r, on_bad, &log, &bad), DVAR_OK);
	assert_int_equal(bad, 1);
	assert_string_equal(log.var, "b");
	assert_string_equal(log.file, data);
	assert_non_null(strstr(log.message, "checksum mismatch"));
	dvar_reader_free(r);

	/* A truncated data file: c (offset 8) is cut; a and b still read. */
	assert_int_equal(truncate(data, 10), 0);
	r = open_ok(prefix);
	assert_true(read_f32(r, "a") == 0.5f);
	assert_int_equal(dvar_reader_read(r, find_ok(r, "c"), NULL, &f, 4), DVAR_ECORRUPT);
	tu_assert_error_contains("variable 'c'");
	tu_assert_error_contains("truncated");
	memset(&log, 0, sizeof(log));
	assert_int_equal(dvar_reader_verify(r, on_bad, &log, &bad), DVAR_OK);
	assert_int_equal(bad, 2); /* b is still damaged, c is cut */
	dvar_reader_free(r);
	/* A missing data file: the index still lists, every read names the file. */
	unlink(data);
	r = open_ok(prefix);
	assert_int_equal(dvar_reader_num_vars(r), 3);
	assert_int_equal(dvar_reader_read(r, find_ok(r, "a"), NULL, &f, 4), DVAR_ECORRUPT);
	tu_assert_error_contains("missing");
	dvar_reader_free(r);
	free(data);
	free(prefix);
}

static void test_format_tf__corrupt_strings(void **state)
{
	char *prefix = copy_fixture(*state, "vars_and_arithmetic", "variables", 1);
	char *data = dvar_tf_data_path(prefix, 0, 1);
	/* The object graph starts at offset 12: 2 length bytes, 4 checksum bytes, then the bytes. */
	tu_flip_byte(data, 12 + 6 + 100);
	dvar_reader *r = open_ok(prefix);
	size_t i = find_ok(r, "_CHECKPOINTABLE_OBJECT_GRAPH");
	uint64_t lens[1], total;
	assert_int_equal(dvar_reader_read_strings(r, i, lens, 1, NULL, 0, &total), DVAR_ECORRUPT);
	tu_assert_error_contains("checksum mismatch");
	tu_assert_error_contains("_CHECKPOINTABLE_OBJECT_GRAPH");
	uint64_t *al;
	char *ab;
	assert_int_equal(dvar_reader_read_strings_alloc(r, i, &al, &ab, &total), DVAR_ECORRUPT);
	tu_assert_error_contains("checksum mismatch");
	assert_null(al);
	assert_null(ab);
	bad_log log = { 0 };
	uint64_t bad;
	assert_int_equal(dvar_reader_verify(r, on_bad, &log, &bad), DVAR_OK);
	assert_int_equal(bad, 1);
	assert_string_equal(log.var, "_CHECKPOINTABLE_OBJECT_GRAPH");
	dvar_reader_free(r);
	tu_flip_byte(data, 12 + 6 + 100);
	tu_flip_byte(data, 12 + 2); /* the length checksum */
	r = open_ok(prefix);
	assert_int_equal(dvar_reader_read_strings(r, i, lens, 1, NULL, 0, &total), DVAR_ECORRUPT);
	tu_assert_error_contains("The length checksum does not match");
	dvar_reader_free(r);
	free(data);
	free(prefix);
}

static void test_format_tf__corrupt_index(void **state)
{
	char *prefix = copy_fixture(*state, "embedding", "embedding.ckpt", 1);
	char *index = NULL;
	assert_true(asprintf(&index, "%s.index", prefix) > 0);
	/* A byte of my_embedding's entry, in the data block: LevelDB's block checksum. */
	tu_flip_byte(index, 30);
	dvar_reader *r = NULL;
	assert_int_equal(dvar_reader_open(&r, prefix, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("block checksum mismatch");
	tu_assert_error_contains("embedding.ckpt.index");
	tu_flip_byte(index, 30);
	/* The footer's magic. */
	tu_flip_byte(index, 135);
	assert_int_equal(dvar_reader_open(&r, prefix, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("bad magic number");
	tu_flip_byte(index, 135);
	/* Truncated. */
	assert_int_equal(truncate(index, 100), 0);
	assert_int_equal(dvar_reader_open(&r, prefix, NULL), DVAR_ECORRUPT);
	assert_int_equal(truncate(index, 20), 0);
	assert_int_equal(dvar_reader_open(&r, prefix, NULL), DVAR_ECORRUPT);
	assert_null(r);
	free(index);
	free(prefix);
}

/* A one-entry-plus-header table at DIR/name.index from raw values; opens it: status. */
static int open_table(const char *dir, const char *name, const dvar_bytes *keys, const dvar_bytes *vals,
                      size_t n)
{
	char *prefix = tu_path(dir, name), *index = NULL;
	assert_true(asprintf(&index, "%s.index", prefix) > 0);
	unlink(index);
	build_table(index, keys, vals, n);
	dvar_reader *r = NULL;
	int rc = dvar_reader_open(&r, prefix, NULL);
	if (rc == DVAR_OK) {
		/* whatever opened must be safe to describe, read (it fails: no data file) and verify */
		for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
			dvar_var_info info;
			assert_int_equal(dvar_reader_var(r, i, &info), DVAR_OK);
			uint64_t bytes;
			if (dvar_dtype_size(info.dtype) && dvar_shape_num_bytes(&info.shape, info.dtype, &bytes) == 0 &&
			    bytes <= 4096) {
				unsigned char buf[4096];
				(void)dvar_reader_read(r, i, NULL, buf, bytes);
			}
		}
		uint64_t bad;
		assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	} else {
		assert_null(r);
	}
	dvar_reader_free(r);
	free(index);
	free(prefix);
	return rc;
}

static void set_hex(dvar_bytes *b, const char *hex)
{
	unsigned char buf[1024];
	size_t n = unhex(hex, buf, sizeof(buf));
	b->len = 0;
	assert_int_equal(dvar_bytes_put(b, buf, n), DVAR_OK);
}

static void test_format_tf__hostile_entries(void **state)
{
	const char *dir = *state;
	dvar_bytes keys[3] = { { 0 } }, vals[3] = { { 0 } };
	set_hex(&vals[0], "08 01 1a 02 08 01");
	assert_int_equal(dvar_bytes_put(&keys[1], "w", 1), DVAR_OK);
	/* The baseline opens. */
	set_hex(&vals[1], "08 01 12 00 20 04 28 04 35 10 fd 78 4f");
	assert_int_equal(open_table(dir, "t", keys, vals, 2), DVAR_OK);
	static const struct { const char *hex; int code; const char *msg; } cases[] = {
		/* TF's size check */
		{ "08 01 12 00 28 08", DVAR_ECORRUPT, "Invalid size in bundle entry: key w; stored size 8; expected size 4" },
		/* a truncated varint, an 11-byte varint, a group, a bad wire type */
		{ "08 01 12 00 28", DVAR_ECORRUPT, "field 5 (size): truncated varint" },
		{ "08 01 12 00 28 ff ff ff ff ff ff ff ff ff ff 01", DVAR_ECORRUPT, "malformed varint" },
		{ "08 01 12 00 28 ff ff ff ff ff ff ff ff ff 7f", DVAR_ECORRUPT, "malformed varint" },
		{ "08 01 12 00 2b", DVAR_ECORRUPT, "group wire type" },
		{ "08 01 12 00 2e", DVAR_ECORRUPT, "invalid wire type" },
		{ "08 01 12 00 00", DVAR_ECORRUPT, "bad field number" },
		/* lengths past the end */
		{ "08 01 12 7f", DVAR_ECORRUPT, "exceeds the" },
		{ "08 01 12 ff ff ff ff 0f", DVAR_ECORRUPT, "exceeds the" },
		{ "08 01 12 04 12 05 08 01", DVAR_ECORRUPT, "exceeds the" },
		/* absurd rank: 9 dimensions */
		{ "08 01 12 12 12 00 12 00 12 00 12 00 12 00 12 00 12 00 12 00 12 00", DVAR_ENOTSUPP, "rank up to 8" },
		/* negative and overflowing dimensions, offsets, sizes */
		{ "08 01 12 0d 12 0b 08 ff ff ff ff ff ff ff ff ff 01", DVAR_ECORRUPT, "negative" },
		{ "08 01 12 00 20 ff ff ff ff ff ff ff ff ff 01 28 04", DVAR_ECORRUPT, "negative" },
		{ "08 01 12 14 12 09 08 ff ff ff ff ff ff ff 3f 12 09 08 ff ff ff ff ff ff ff 3f", DVAR_ECORRUPT, "" },
		/* unknown rank, dtype 0, out of range int32 */
		{ "08 01 12 02 18 01", DVAR_ECORRUPT, "unknown" },
		{ "12 00", DVAR_ECORRUPT, "dtype 0" },
		{ "08 80 80 80 80 10 12 00", DVAR_ECORRUPT, "out of range for int32" },
		/* a shard beyond num_shards, wrong wire type for crc32c */
		{ "08 01 12 00 18 01 28 04", DVAR_ECORRUPT, "shard 1 of a bundle of 1" },
		{ "08 01 12 00 28 04 30 01", DVAR_ECORRUPT, "wire type" },
		{ "08 01 12 00 28 04 35 01 02", DVAR_ECORRUPT, "truncated fixed32" },
		/* a string tensor too small for its element count */
		{ "08 07 12 04 12 02 08 05 28 08", DVAR_ECORRUPT, "Invalid size in bundle entry" },
		/* partitioned: a slice whose data entry is missing; slices outside the shape */
		{ "08 03 12 04 12 02 08 04 3a 04 0a 02 10 01", DVAR_ECORRUPT, "is missing" },
		{ "08 03 12 04 12 02 08 04 3a 06 0a 04 08 04 10 01", DVAR_ECORRUPT, "outside" },
		{ "08 03 12 04 12 02 08 04 3a 04 0a 02 08 01", DVAR_ECORRUPT, "full but starts at 1" },
		{ "08 03 12 04 12 02 08 04 3a 00", DVAR_ECORRUPT, "rank 0" },
		/* unknown fields of every wire type are skipped; a TF dtype dvar lacks is listed */
		{ "08 01 12 00 20 04 28 04 35 10 fd 78 4f 48 01 51 0102030405060708 5a 00 65 01020304", DVAR_OK, NULL },
		{ "08 08 12 00 28 08", DVAR_OK, NULL },
		{ "08 15 12 00 28 13", DVAR_OK, NULL },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		set_hex(&vals[1], cases[c].hex);
		int rc = open_table(dir, "t", keys, vals, 2);
		if (rc != cases[c].code)
			fail_msg("case %zu (%s): status %d, expected %d: %s", c, cases[c].hex, rc, cases[c].code,
			         dvar_error_last()->message);
		if (cases[c].msg && *cases[c].msg && !strstr(dvar_error_last()->message, cases[c].msg))
			fail_msg("case %zu: message '%s' lacks '%s'", c, dvar_error_last()->message, cases[c].msg);
	}
	/* A listed TF dtype dvar cannot read: described, refused by read naming it. */
	set_hex(&vals[1], "08 08 12 04 12 02 08 02 28 10");
	char *prefix = tu_path(dir, "t"), *index = NULL;
	assert_true(asprintf(&index, "%s.index", prefix) > 0);
	unlink(index);
	build_table(index, keys, vals, 2);
	dvar_reader *r = open_ok(prefix);
	dvar_var_info info;
	assert_int_equal(dvar_reader_var(r, 0, &info), DVAR_OK);
	assert_int_equal(info.dtype, 8);
	assert_null(dvar_dtype_name(8));
	unsigned char buf[16];
	assert_int_equal(dvar_reader_read(r, 0, NULL, buf, 16), DVAR_ENOTSUPP);
	tu_assert_error_contains("complex64 (8)");
	uint64_t lens[2], total;
	assert_int_equal(dvar_reader_read_strings(r, 0, lens, 2, NULL, 0, &total), DVAR_EINVAL);
	dvar_reader_free(r);

	/* Header problems: none, big-endian, a too-new min consumer, garbage. */
	set_hex(&vals[1], "08 01 12 00 20 04 28 04 35 10 fd 78 4f");
	set_hex(&vals[0], "08 01 10 01 1a 02 08 01");
	assert_int_equal(open_table(dir, "t", keys, vals, 2), DVAR_ENOTSUPP);
	tu_assert_error_contains("big-endian");
	set_hex(&vals[0], "08 01 1a 04 08 01 10 02");
	assert_int_equal(open_table(dir, "t", keys, vals, 2), DVAR_EVERSION);
	tu_assert_error_contains("Checkpoint min consumer version 2 above current version 1");
	set_hex(&vals[0], "08");
	assert_int_equal(open_table(dir, "t", keys, vals, 2), DVAR_ECORRUPT);
	tu_assert_error_contains("(unable to parse header)");
	assert_int_equal(open_table(dir, "t", keys + 1, vals + 1, 1), DVAR_ECORRUPT);
	tu_assert_error_contains("(failed to seek to header entry)");
	set_hex(&vals[0], "08 01 1a 02 08 01");
	/* A key with a NUL that is not a slice key, and a broken slice key. */
	set_hex(&keys[1], "61 00 62");
	assert_int_equal(open_table(dir, "t", keys, vals, 2), DVAR_ENOTSUPP);
	set_hex(&keys[1], "00 61 00 01 00");
	assert_int_equal(open_table(dir, "t", keys, vals, 2), DVAR_ECORRUPT);
	tu_assert_error_contains("Expecting positive rank");

	/* Partitioned: a slice data entry of the wrong shape, and overlapping slices. */
	dvar_tf_slice s0 = { 1, { 0 }, { 2 } };
	keys[1].len = 0;
	assert_int_equal(dvar_tf_slice_key_encode(&keys[1], "w", 1, &s0), DVAR_OK);
	set_hex(&vals[1], "08 03 12 04 12 02 08 01 28 04"); /* shape [1], the slice is [2] */
	keys[2].len = 0;
	assert_int_equal(dvar_bytes_put(&keys[2], "w", 1), DVAR_OK);
	set_hex(&vals[2], "08 03 12 04 12 02 08 04 3a 04 0a 02 10 02");
	assert_int_equal(open_table(dir, "t", keys, vals, 3), DVAR_ECORRUPT);
	tu_assert_error_contains("the slice needs dtype 3 shape [2]");
	set_hex(&vals[1], "08 03 12 04 12 02 08 02 28 08");
	assert_int_equal(open_table(dir, "t", keys, vals, 3), DVAR_OK);
	set_hex(&vals[2], "08 03 12 04 12 02 08 04 3a 04 0a 02 10 02 3a 04 0a 02 10 02");
	assert_int_equal(open_table(dir, "t", keys, vals, 3), DVAR_ECORRUPT);
	tu_assert_error_contains("twice");
	for (int i = 0; i < 3; i++) {
		free(keys[i].data);
		free(vals[i].data);
	}
	free(index);
	free(prefix);
}

/* Every prefix and random byte flips of valid encodings through every decoder: no crash. */
static void fuzz_one(const unsigned char *p, size_t n)
{
	dvar_tf_header h;
	dvar_tf_entry e;
	if (dvar_tf_header_decode(&h, p, n) == DVAR_OK) {
		(void)dvar_tf_header_check(&h, "fuzz");
		dvar_tf_header_clear(&h);
	}
	if (dvar_tf_entry_decode(&e, p, n, "fuzz") == DVAR_OK) {
		assert_true(e.shape.rank <= DVAR_MAX_RANK);
		for (size_t i = 0; i < e.num_slices; i++) {
			dvar_slice s;
			assert_true(e.slices[i].rank <= DVAR_MAX_RANK);
			(void)dvar_tf_slice_resolve(&e.slices[i], &e.shape, &s, "fuzz");
		}
		dvar_bytes re = { 0 };
		assert_int_equal(dvar_tf_entry_encode(&re, &e), DVAR_OK);
		free(re.data);
		dvar_tf_entry_clear(&e);
	}
	char *name;
	size_t nl;
	dvar_tf_slice sl;
	if (dvar_tf_slice_key_decode(p, n, &name, &nl, &sl) == 1) {
		/* a decoded key encodes back to itself */
		dvar_bytes re = { 0 };
		assert_int_equal(dvar_tf_slice_key_encode(&re, name, nl, &sl), DVAR_OK);
		assert_int_equal(re.len, n);
		assert_memory_equal(re.data, p, n);
		free(re.data);
		free(name);
	}
	uint64_t lens[64];
	size_t at;
	for (uint64_t k = 0; k < 4; k++)
		(void)dvar_tf_strings_decode(p, n, k, lens, &at, "fuzz");
	for (size_t k = 0; k < n; k++) {
		int64_t v;
		(void)dvar_tf__signed_decode(p + k, n - k, &v);
	}
}

static void test_format_tf__fuzz_decoders(void **state)
{
	(void)state;
	static const char *const seeds[] = {
		"08 01 1a 02 08 01",
		"08 02 10 00 1a 08 08 01 10 00 1a 02 05 06",
		"08 01 12 00 20 04 28 04 35 10 fd 78 4f",
		"08 01 12 08 12 02 08 03 12 02 08 02 28 18 35 1e 37 4f f4",
		"08 03 12 04 12 02 08 04 3a 04 0a 02 10 01 3a 06 0a 04 08 01 10 01 3a 06 0a 04 08 02 10 01",
		"08 01 12 08 12 02 08 05 12 02 08 0a 3a 08 0a 00 0a 04 08 03 10 00",
		"00 " K_HEX " 00 01 01 02 85 85 80 7f",
		"00 61 00 ff 62 ff 00 63 00 01 01 03 80 7f 80 7f c1 2c 81",
		"05 05 b5 6f 99 4f 68 65 6c 6c 6f 77 6f 72 6c 64",
		"ff ff ff ff ff ff ff ff ff ff 01 3f bf e0 20 00 ff c0 80",
	};
	uint64_t rs = 2024;
	for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
		unsigned char base[256], buf[256];
		size_t n = unhex(seeds[k], base, sizeof(base));
		for (size_t m = 0; m <= n; m++) {
			/* a fresh allocation of exactly m bytes, so ASan sees any overread */
			unsigned char *p = malloc(m ? m : 1);
			memcpy(p, base, m);
			fuzz_one(p, m);
			free(p);
		}
		for (int it = 0; it < 3000; it++) {
			memcpy(buf, base, n);
			int flips = 1 + (int)(tu_rand(&rs) % 4);
			for (int f = 0; f < flips; f++) {
				size_t at = tu_rand(&rs) % n;
				uint64_t x = tu_rand(&rs);
				buf[at] = x & 1 ? (unsigned char)(x >> 8) : buf[at] ^ (unsigned char)(1u << (x >> 8) % 8);
			}
			size_t m = it % 5 ? n : tu_rand(&rs) % (n + 1);
			unsigned char *p = malloc(m ? m : 1);
			memcpy(p, buf, m);
			fuzz_one(p, m);
			free(p);
		}
	}
	/* Pure garbage. */
	for (int it = 0; it < 20000; it++) {
		unsigned char p[64];
		size_t m = tu_rand(&rs) % sizeof(p);
		tu_fill_random(p, m, tu_rand(&rs));
		fuzz_one(p, m);
	}
	/* Many slices: bounded (100000), refused beyond. */
	size_t n = 100001 * 2 + 4;
	unsigned char *many = malloc(n);
	memcpy(many, "\x08\x01\x12\x00", 4);
	for (size_t i = 4; i < n; i += 2) {
		many[i] = 0x3a;
		many[i + 1] = 0;
	}
	dvar_tf_entry e;
	assert_int_equal(dvar_tf_entry_decode(&e, many, n, "many"), DVAR_ENOTSUPP);
	assert_int_equal(dvar_tf_entry_decode(&e, many, n - 2, "many"), DVAR_OK);
	assert_int_equal(e.num_slices, 100000);
	dvar_tf_entry_clear(&e);
	free(many);
}

/* Random flips of the entry values of the worked bundle, through the whole open path. */
static void test_format_tf__fuzz_open(void **state)
{
	const char *dir = *state;
	/* The table's entries: the header at 6..11, then the five entries; rebuild them from the encoders. */
	dvar_bytes keys[6] = { { 0 } }, vals[6] = { { 0 } };
	dvar_tf_header h = { 1, 0, 1, 0, 0, NULL };
	dvar_tf_header_encode(&vals[0], &h);
	static const uint32_t crcs[4] = { 0x3a117ba6u, 0x6582151du, 0x7310d8d8u, 0x287f3f63u };
	dvar_tf_slice sl[4];
	for (int i = 0; i < 4; i++) {
		sl[i] = (dvar_tf_slice){ 1, { i }, { 1 } };
		dvar_tf_slice_key_encode(&keys[1 + i], full_key, strlen(full_key), &sl[i]);
		dvar_tf_entry e = { 0 };
		e.dtype = DVAR_INT32;
		dvar_shape_init(&e.shape, 1, (int64_t[]){ 1 });
		e.offset = 4 * i;
		e.size = 4;
		e.crc32c = crcs[i];
		dvar_tf_entry_encode(&vals[1 + i], &e);
	}
	dvar_tf_entry full = { 0 };
	full.dtype = DVAR_INT32;
	dvar_shape_init(&full.shape, 1, (int64_t[]){ 4 });
	full.num_slices = 4;
	full.slices = sl;
	dvar_bytes_put(&keys[5], full_key, strlen(full_key));
	dvar_tf_entry_encode(&vals[5], &full);
	char *dp = tu_path(dir, "f.data-00000-of-00001");
	const int32_t data[4] = { 0, 1, 2, 3 };
	write_file(dp, data, sizeof(data));
	assert_int_equal(open_table(dir, "f", keys, vals, 6), DVAR_OK);
	uint64_t rs = 77;
	int opened = 0;
	for (int it = 0; it < 600; it++) {
		int which = 1 + (int)(tu_rand(&rs) % 5);
		dvar_bytes save = { 0 };
		dvar_bytes_put(&save, vals[which].data, vals[which].len);
		size_t at = tu_rand(&rs) % vals[which].len;
		vals[which].data[at] ^= (unsigned char)(1u << (tu_rand(&rs) % 8));
		if (tu_rand(&rs) % 4 == 0)
			vals[which].len = tu_rand(&rs) % (vals[which].len + 1);
		if (open_table(dir, "f", keys, vals, 6) == DVAR_OK)
			opened++;
		vals[which].len = 0;
		dvar_bytes_put(&vals[which], save.data, save.len);
		free(save.data);
	}
	assert_true(opened > 0 && opened < 600);
	for (int i = 0; i < 6; i++) {
		free(keys[i].data);
		free(vals[i].data);
	}
	free(dp);
}

/* ---------------------------------------------------------------- snappy index blocks */

int tu_write_snappy_table(const char *path, const unsigned char *const *keys, const size_t *klens,
                          const unsigned char *const *vals, const size_t *vlens, size_t n);

static uint32_t leveldb_mask(uint32_t crc) { return dvar_tf_crc_mask(crc); } /* the same mask */

static void put_block(dvar_bytes *f, const unsigned char *p, size_t n, unsigned char type)
{
	dvar_bytes_put(f, p, n);
	uint32_t crc = dvar_crc32c_extend(dvar_crc32c(p, n), &type, 1);
	dvar_bytes_put(f, &type, 1);
	dvar_bytes_put_u32(f, leveldb_mask(crc));
}

/*
 * embedding.ckpt.index rebuilt by hand (§4.2) with its data block stored
 * snappy-compressed (trailer type 1), as in TF's mnist fixture (§4.10):
 * literals plus one copy, so that the decompressor does real work.
 * corrupt: a stream whose checksum is right but that does not decompress.
 */
static void write_snappy_embedding(const char *path, int corrupt)
{
	unsigned char raw[64];
	size_t rn = unhex("00 00 06 08 01 1a 02 08 01"
	                  "00 0c 13 6d 79 5f 65 6d 62 65 64 64 69 6e 67 08 01 12 08 12 02 08 03 12 02 08 02 28 18 35 1e 37 4f f4"
	                  "00 00 00 00 01 00 00 00", raw, sizeof(raw));
	assert_int_equal(rn, 51);
	dvar_bytes sn = { 0 }, f = { 0 }, ix = { 0 };
	dvar_bytes_put_varint(&sn, corrupt ? 60 : 51);        /* uncompressed length */
	unsigned char lit1 = (44 - 1) << 2;                    /* literal: bytes 0..43 */
	dvar_bytes_put(&sn, &lit1, 1);
	dvar_bytes_put(&sn, raw, 44);
	static const unsigned char copy[3] = { 0x02 | (3 - 1) << 2, 1, 0 }; /* copy 3 bytes, offset 1: 00 00 00 */
	dvar_bytes_put(&sn, copy, 3);
	unsigned char lit2 = (4 - 1) << 2;                     /* literal: 01 00 00 00 */
	dvar_bytes_put(&sn, &lit2, 1);
	dvar_bytes_put(&sn, raw + 47, 4);
	put_block(&f, sn.data, sn.len, 1);
	uint64_t meta_off = f.len;
	static const unsigned char empty[8] = { 0, 0, 0, 0, 1, 0, 0, 0 };
	put_block(&f, empty, 8, 0);
	uint64_t index_off = f.len;
	/* index block: key "n" -> handle (0, stored size) */
	static const unsigned char ent[3] = { 0, 1, 2 };
	dvar_bytes_put(&ix, ent, 3);
	dvar_bytes_put(&ix, "n", 1);
	dvar_bytes_put_varint(&ix, 0);
	dvar_bytes_put_varint(&ix, sn.len);
	dvar_bytes_put(&ix, empty, 8);
	put_block(&f, ix.data, ix.len, 0);
	dvar_bytes foot = { 0 };
	dvar_bytes_put_varint(&foot, meta_off);
	dvar_bytes_put_varint(&foot, 8);
	dvar_bytes_put_varint(&foot, index_off);
	dvar_bytes_put_varint(&foot, ix.len);
	static const unsigned char zeros[40] = { 0 };
	dvar_bytes_put(&foot, zeros, 40 - foot.len);
	static const unsigned char magic[8] = { 0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb };
	dvar_bytes_put(&foot, magic, 8);
	dvar_bytes_put(&f, foot.data, foot.len);
	write_file(path, f.data, f.len);
	free(sn.data);
	free(f.data);
	free(ix.data);
	free(foot.data);
}

/* The trailer type of the first data block of the table at path (parsing footer and index). */
static int first_block_type(const char *path)
{
	unsigned char *t;
	size_t n = read_file(path, &t);
	const unsigned char *p = t + n - 48, *end = t + n;
	uint64_t v[4];
	for (int i = 0; i < 4; i++) {
		v[i] = 0;
		for (int sh = 0; p < end; sh += 7) {
			unsigned char c = *p++;
			v[i] |= (uint64_t)(c & 0x7f) << sh;
			if (!(c & 0x80))
				break;
		}
	}
	/* index block's first entry: shared=0, non_shared, value_len, key, value = handle */
	p = t + v[2];
	uint64_t ks = p[1];
	p += 3 + ks;
	uint64_t off = 0, size = 0;
	for (int sh = 0;; sh += 7) { unsigned char c = *p++; off |= (uint64_t)(c & 0x7f) << sh; if (!(c & 0x80)) break; }
	for (int sh = 0;; sh += 7) { unsigned char c = *p++; size |= (uint64_t)(c & 0x7f) << sh; if (!(c & 0x80)) break; }
	int type = t[off + size];
	free(t);
	return type;
}

static void test_format_tf__snappy_index(void **state)
{
	const char *dir = *state;
	char *prefix = tu_path(dir, "emb"), *index = NULL;
	assert_true(asprintf(&index, "%s.index", prefix) > 0);
	const float emb[6] = { 1, 2, 3, 5, 7, 11 };
	char *data = dvar_tf_data_path(prefix, 0, 1);
	write_file(data, emb, sizeof(emb));
	write_snappy_embedding(index, 0);
	assert_int_equal(first_block_type(index), 1);
	dvar_reader *r = NULL;
	int rc = dvar_reader_open(&r, prefix, NULL);
#ifdef DVAR_TEST_LEVELDB_SNAPPY
	if (rc)
		fail_msg("%s", dvar_error_last()->message);
	float v[6];
	read_ok(r, "my_embedding", NULL, v, sizeof(v));
	assert_memory_equal(v, emb, sizeof(emb));
	verify_ok(r);
	dvar_reader_free(r);
	/* A snappy stream that lies about its length: LevelDB's text. */
	write_snappy_embedding(index, 1);
	assert_int_equal(dvar_reader_open(&r, prefix, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("corrupted compressed block contents");
#else
	/* A LevelDB built without snappy cannot read it, and says so. */
	assert_int_equal(rc, DVAR_ECORRUPT);
	tu_assert_error_contains("corrupted compressed block contents");
#endif

	/* A table LevelDB itself compressed: 300 Keras-like entries, one block. */
	enum { N = 301 };
	unsigned char *keys[N], *vals[N];
	size_t klens[N], vlens[N];
	dvar_bytes kb[N], vb[N];
	memset(kb, 0, sizeof(kb));
	memset(vb, 0, sizeof(vb));
	dvar_tf_header h = { 1, 0, 1, 0, 0, NULL };
	dvar_tf_header_encode(&vb[0], &h);
	float *all = malloc((N - 1) * sizeof(float));
	for (int i = 1; i < N; i++) {
		char name[128];
		snprintf(name, sizeof(name), "layer_with_weights-%03d/bias/.ATTRIBUTES/VARIABLE_VALUE", i);
		dvar_bytes_put(&kb[i], name, strlen(name));
		all[i - 1] = (float)i * 0.25f;
		dvar_tf_entry e = { 0 };
		e.dtype = DVAR_FLOAT32;
		e.offset = 4 * (i - 1);
		e.size = 4;
		e.crc32c = dvar_tf_crc_mask(dvar_crc32c(&all[i - 1], 4));
		dvar_tf_entry_encode(&vb[i], &e);
	}
	for (int i = 0; i < N; i++) {
		keys[i] = kb[i].data;
		klens[i] = kb[i].len;
		vals[i] = vb[i].data;
		vlens[i] = vb[i].len;
	}
	write_file(data, all, (N - 1) * sizeof(float));
	unlink(index);
	assert_int_equal(tu_write_snappy_table(index, (const unsigned char *const *)keys, klens,
	                                       (const unsigned char *const *)vals, vlens, N), 0);
#ifdef DVAR_TEST_LEVELDB_SNAPPY
	assert_int_equal(first_block_type(index), 1);
	r = open_ok(prefix);
	assert_int_equal(dvar_reader_num_vars(r), N - 1);
	for (int i = 1; i < N; i += 37) {
		char name[128];
		snprintf(name, sizeof(name), "layer_with_weights-%03d/bias/.ATTRIBUTES/VARIABLE_VALUE", i);
		assert_true(read_f32(r, name) == (float)i * 0.25f);
	}
	verify_ok(r);
	dvar_reader_free(r);
#endif
	for (int i = 0; i < N; i++) {
		free(kb[i].data);
		free(vb[i].data);
	}
	free(all);
	free(data);
	free(index);
	free(prefix);
}

/* ---------------------------------------------------------------- locating */

static void test_format_tf__locate(void **state)
{
	const char *dir = *state;
	char *sub = tu_path(dir, "train"), *prefix, *got, *state_path;
	assert_int_equal(mkdir(sub, 0755), 0);
	/* A prefix: path + ".index" is a file. */
	prefix = write_worked(sub);
	assert_int_equal(dvar_tf_locate(prefix, &got), 1);
	assert_string_equal(got, prefix);
	free(got);
	/* A directory of one prefix and no state file: that prefix. */
	assert_int_equal(dvar_tf_locate(sub, &got), 1);
	assert_string_equal(got, prefix);
	free(got);
	/* Not a bundle: 0, nothing set. */
	assert_int_equal(dvar_tf_locate(dir, &got), 0);
	assert_null(got);
	char *missing = tu_path(dir, "nothing-here");
	assert_int_equal(dvar_tf_locate(missing, &got), 0);
	free(missing);
	/* A directory with TF's state file: its latest, relative to the directory. */
	state_path = tu_path(sub, "checkpoint");
	write_text(state_path, "model_checkpoint_path: \"s\"\nall_model_checkpoint_paths: \"s\"\n"
	                       "all_model_checkpoint_timestamps: 1700000000.5\nlast_preserved_timestamp: 1.0\n");
	assert_int_equal(dvar_tf_locate(sub, &got), 1);
	assert_string_equal(got, prefix);
	free(got);
	dvar_reader *r = open_ok(sub);
	assert_string_equal(dvar_reader_path(r), prefix);
	int32_t all[4];
	read_ok(r, full_key, NULL, all, sizeof(all));
	assert_int_equal(all[3], 3);
	dvar_reader_free(r);
	/* Absolute paths, escapes, single quotes. */
	char *text = NULL;
	assert_true(asprintf(&text, "model_checkpoint_path: '%s'\n", prefix) > 0);
	write_text(state_path, text);
	free(text);
	assert_int_equal(dvar_tf_locate(sub, &got), 1);
	assert_string_equal(got, prefix);
	free(got);
	write_text(state_path, "  model_checkpoint_path :  \"\\163\"  # octal s\n");
	assert_int_equal(dvar_tf_locate(sub, &got), 1);
	free(got);
	write_text(state_path, "model_checkpoint_path: \"\\x73\"\n");
	assert_int_equal(dvar_tf_locate(sub, &got), 1);
	free(got);
	/* A state file written elsewhere with absolute paths, moved here: its basename. */
	write_text(state_path, "model_checkpoint_path: \"/some/old/machine/train/s\"\n");
	assert_int_equal(dvar_tf_locate(sub, &got), 1);
	assert_string_equal(got, prefix);
	free(got);
	/* A state file naming a checkpoint that is gone: DVAR_ENOTFOUND saying so. */
	write_text(state_path, "model_checkpoint_path: \"ckpt-7\"\n");
	assert_int_equal(dvar_tf_locate(sub, &got), DVAR_ENOTFOUND);
	tu_assert_error_contains("ckpt-7");
	tu_assert_error_contains("ckpt-7.index");
	tu_assert_error_contains("the directory holds s");
	r = NULL;
	assert_int_equal(dvar_reader_open(&r, sub, NULL), DVAR_ENOTFOUND);
	assert_null(r);
	/* A malformed state file is left to the dvar reader (which reports it). */
	write_text(state_path, "model_checkpoint_path: \"unterminated\n");
	assert_int_equal(dvar_tf_locate(sub, &got), 0);
	assert_int_not_equal(dvar_reader_open(&r, sub, NULL), DVAR_OK);
	free(state_path);

	/* A dvar root uses the same state file; its latest is a directory: still dvar. */
	char *root = tu_path(dir, "root");
	dvar_writer *w;
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.flags = DVAR_WRITE_NO_FSYNC;
	assert_int_equal(dvar_writer_open_step(&w, root, 100, &o), DVAR_OK);
	dvar_shape sh;
	dvar_shape_init(&sh, 1, (int64_t[]){ 2 });
	const float two[2] = { 4, 5 };
	assert_int_equal(dvar_writer_add(w, "w", DVAR_FLOAT32, &sh, NULL, two), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	assert_int_equal(dvar_tf_locate(root, &got), 0);
	char *ck = tu_path(root, "ckpt-100");
	assert_int_equal(dvar_tf_locate(ck, &got), 0);
	r = open_ok(root);
	assert_string_equal(dvar_reader_path(r), ck);
	float back[2];
	read_ok(r, "w", NULL, back, sizeof(back));
	assert_true(back[1] == 5);
	dvar_reader_free(r);
	free(ck);
	free(root);

	/* A fixture directory (a SavedModel's variables/) opens its one prefix. */
	char *fx = fixture("half_plus_two", NULL), *fx_prefix = fixture("half_plus_two", "variables");
	assert_int_equal(dvar_tf_locate(fx, &got), 1);
	assert_string_equal(got, fx_prefix);
	free(got);
	free(fx_prefix);
	free(fx);

	/* Data file names. */
	char *dp = dvar_tf_data_path("m/model.ckpt-46900", 0, 1);
	assert_string_equal(dp, "m/model.ckpt-46900.data-00000-of-00001");
	free(dp);
	dp = dvar_tf_data_path("ckpt", 1, 2);
	assert_string_equal(dp, "ckpt.data-00001-of-00002");
	free(dp);
	free(prefix);
	free(sub);
}

/* The paths people type for a TF checkpoint, and the errors that name what is there. */
static void test_format_tf__locate_typed_paths(void **state)
{
	const char *dir = *state;
	char *got, *text = NULL;
	/* A SavedModel: DIR/00000123/{saved_model.pb, variables/variables.*}. */
	char *saved = tu_path(dir, "saved"), *version = tu_path(saved, "00000123");
	char *vars = tu_path(version, "variables"), *pb = tu_path(version, "saved_model.pb");
	assert_int_equal(mkdir(saved, 0755), 0);
	assert_int_equal(mkdir(version, 0755), 0);
	assert_int_equal(mkdir(vars, 0755), 0);
	write_text(pb, "");
	char *prefix = copy_fixture(vars, "half_plus_two", "variables", 1);
	char *index = NULL;
	assert_true(asprintf(&index, "%s.index", prefix) > 0);
	const char *forms[] = { prefix, index, vars, version };
	for (size_t k = 0; k < sizeof(forms) / sizeof(forms[0]); k++) {
		assert_int_equal(dvar_tf_locate(forms[k], &got), 1);
		assert_string_equal(got, prefix);
		free(got);
		dvar_reader *r = open_ok(forms[k]);
		assert_string_equal(dvar_reader_path(r), prefix);
		assert_true(read_f32(r, "b") == 2.0f);
		dvar_reader_free(r);
	}
	/* The parent of the versions is not a bundle; a file not named .index neither. */
	assert_int_equal(dvar_tf_locate(saved, &got), 0);
	assert_int_equal(dvar_tf_locate(pb, &got), 0);
	assert_null(got);

	/* Several prefixes and no state file: the error names them, by step. */
	char *multi = tu_path(dir, "multi");
	assert_int_equal(mkdir(multi, 0755), 0);
	char *p200 = copy_fixture(multi, "embedding", "embedding.ckpt", 1);
	char *p100 = tu_path(multi, "model.ckpt-100"), *n200 = tu_path(multi, "model.ckpt-200");
	for (int f = 0; f < 2; f++) {
		char *from = NULL, *to = NULL, *to2 = NULL;
		const char *suffix = f ? ".data-00000-of-00001" : ".index";
		assert_true(asprintf(&from, "%s%s", p200, suffix) > 0);
		assert_true(asprintf(&to, "%s%s", p100, suffix) > 0);
		assert_true(asprintf(&to2, "%s%s", n200, suffix) > 0);
		copy_file(from, to);
		assert_int_equal(rename(from, to2), 0);
		free(from);
		free(to);
		free(to2);
	}
	assert_int_equal(dvar_tf_locate(multi, &got), DVAR_EINVAL);
	assert_null(got);
	assert_true(asprintf(&text, "'%s' holds model.ckpt-100 and model.ckpt-200: give one, e.g. "
	                     "'%s/model.ckpt-200'", multi, multi) > 0);
	tu_assert_error_contains(text);
	free(text);
	dvar_reader *r = NULL;
	assert_int_equal(dvar_reader_open(&r, multi, NULL), DVAR_EINVAL);
	tu_assert_error_contains("holds model.ckpt-100 and model.ckpt-200: give one");
	assert_null(r);
	/* Each one by its index file. */
	assert_true(asprintf(&text, "%s.index", p100) > 0);
	r = open_ok(text);
	assert_string_equal(dvar_reader_path(r), p100);
	dvar_reader_free(r);
	free(text);

	/* A dvar root whose pointer names a checkpoint that is gone: dvar's terms, and
	 * the checkpoints it holds. */
	char *root = tu_path(dir, "root");
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.flags = DVAR_WRITE_NO_FSYNC;
	dvar_shape sh;
	dvar_shape_init(&sh, 1, (int64_t[]){ 2 });
	const float two[2] = { 4, 5 };
	for (int64_t step = 1; step <= 3; step++) {
		dvar_writer *w;
		assert_int_equal(dvar_writer_open_step(&w, root, step, &o), DVAR_OK);
		assert_int_equal(dvar_writer_add(w, "w", DVAR_FLOAT32, &sh, NULL, two), DVAR_OK);
		assert_int_equal(dvar_writer_commit(w), DVAR_OK);
		dvar_writer_free(w);
	}
	char *ck3 = tu_path(root, "ckpt-3"), *pointer = tu_path(root, "checkpoint");
	assert_int_equal(dvar_fs_rmtree(ck3), DVAR_OK);
	write_text(pointer, "model_checkpoint_path: \"ckpt-4\"\nall_model_checkpoint_paths: \"ckpt-1\"\n"
	                    "all_model_checkpoint_paths: \"ckpt-2\"\nall_model_checkpoint_paths: \"ckpt-4\"\n");
	assert_int_equal(dvar_tf_locate(root, &got), 0);
	assert_int_equal(dvar_reader_open(&r, root, NULL), DVAR_ENOTFOUND);
	assert_true(asprintf(&text, "root '%s': its latest checkpoint 'ckpt-4' (named by its checkpoint "
	                     "file) does not exist; it holds ckpt-1 and ckpt-2: give one, e.g. "
	                     "'%s/ckpt-2'", root, root) > 0);
	tu_assert_error_contains(text);
	assert_null(strstr(dvar_error_last()->message, ".index"));
	free(text);

	free(ck3);
	free(pointer);
	free(root);
	free(p100);
	free(p200);
	free(n200);
	free(multi);
	free(index);
	free(prefix);
	free(pb);
	free(vars);
	free(version);
	free(saved);
}

/* ---------------------------------------------------------------- partial reads */

#define BIG_ROWS 1000
#define BIG_COLS 256

/* DIR/big: "t", float32 [BIG_ROWS, BIG_COLS], element k = k; returns the prefix. */
static char *write_big(const char *dir, float **values)
{
	char *prefix = tu_path(dir, "big");
	float *v = malloc(sizeof(float) * BIG_ROWS * BIG_COLS);
	assert_non_null(v);
	for (size_t k = 0; k < (size_t)BIG_ROWS * BIG_COLS; k++)
		v[k] = (float)k;
	dvar_shape sh;
	dvar_shape_init(&sh, 2, (int64_t[]){ BIG_ROWS, BIG_COLS });
	dvar_tf_writer *w;
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.flags = DVAR_WRITE_NO_FSYNC;
	assert_int_equal(dvar_tf_writer_open(&w, prefix, &o), DVAR_OK);
	assert_int_equal(dvar_tf_writer_add(w, "t", DVAR_FLOAT32, &sh, NULL, v), DVAR_OK);
	assert_int_equal(dvar_tf_writer_commit(w), DVAR_OK);
	dvar_tf_writer_free(w);
	*values = v;
	return prefix;
}

/* Rows [first, first + n) of "t" into out, through a fresh count of bytes read. */
static int read_rows(dvar_reader *r, int64_t first, int64_t n, float *out, uint64_t *bytes)
{
	dvar_slice sl = { 2, { first, 0 }, { n, BIG_COLS } };
	uint64_t before = dvar_reader_bytes_read(r);
	int rc = dvar_reader_read(r, find_ok(r, "t"), &sl, out, sizeof(float) * (size_t)(n * BIG_COLS));
	if (bytes)
		*bytes = dvar_reader_bytes_read(r) - before;
	return rc;
}

static void test_format_tf__partial_read(void **state)
{
	float *want, *all = malloc(sizeof(float) * BIG_ROWS * BIG_COLS), row[BIG_COLS];
	char *prefix = write_big(*state, &want), *data = dvar_tf_data_path(prefix, 0, 1);
	const size_t row_bytes = sizeof(row);
	uint64_t got;
	assert_non_null(all);
	dvar_reader *r = open_ok(prefix);
	/* One row reads that row's bytes, not the tensor's. */
	assert_int_equal(read_rows(r, 500, 1, row, &got), DVAR_OK);
	assert_int_equal(got, row_bytes);
	assert_memory_equal(row, want + 500 * BIG_COLS, row_bytes);
	/* A column reads the span from its first element to its last. */
	float col[BIG_ROWS];
	dvar_slice sl = { 2, { 0, 7 }, { BIG_ROWS, 1 } };
	uint64_t before = dvar_reader_bytes_read(r);
	assert_int_equal(dvar_reader_read(r, find_ok(r, "t"), &sl, col, sizeof(col)), DVAR_OK);
	assert_int_equal(dvar_reader_bytes_read(r) - before, sizeof(float) * ((BIG_ROWS - 1) * BIG_COLS + 1));
	for (int k = 0; k < BIG_ROWS; k++)
		assert_true(col[k] == want[k * BIG_COLS + 7]);
	/* Whole, and in order in two parts. */
	assert_int_equal(read_rows(r, 0, BIG_ROWS, all, &got), DVAR_OK);
	assert_int_equal(got, sizeof(float) * BIG_ROWS * BIG_COLS);
	assert_memory_equal(all, want, got);
	assert_int_equal(read_rows(r, 0, 400, all, NULL), DVAR_OK);
	assert_int_equal(read_rows(r, 400, BIG_ROWS - 400, all + 400 * BIG_COLS, NULL), DVAR_OK);
	assert_memory_equal(all, want, sizeof(float) * BIG_ROWS * BIG_COLS);
	dvar_reader_free(r);

	/* A damaged byte in row 10: a read of row 500 cannot see it (the CRC covers
	 * the whole tensor); a whole read, parts read in order and verify do. */
	tu_flip_byte(data, 10 * (off_t)row_bytes + 3);
	r = open_ok(prefix);
	assert_int_equal(read_rows(r, 500, 1, row, &got), DVAR_OK);
	assert_int_equal(got, row_bytes);
	assert_memory_equal(row, want + 500 * BIG_COLS, row_bytes);
	assert_int_equal(read_rows(r, 0, BIG_ROWS, all, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("variable 't'");
	tu_assert_error_contains("checksum mismatch");
	assert_int_equal(read_rows(r, 0, 400, all, NULL), DVAR_OK);
	assert_int_equal(read_rows(r, 400, 600, all + 400 * BIG_COLS, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("checksum mismatch");
	tu_assert_error_contains("over the parts read in order");
	/* Parts out of order check nothing, and fail nothing. */
	assert_int_equal(read_rows(r, 400, 600, all + 400 * BIG_COLS, NULL), DVAR_OK);
	assert_int_equal(read_rows(r, 0, 400, all, NULL), DVAR_OK);
	uint64_t bad = 0;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 1);
	dvar_reader_free(r);
	free(data);
	free(prefix);
	free(want);
	free(all);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_tf__crc_vectors),
		cmocka_unit_test(test_format_tf__header_bytes),
		cmocka_unit_test(test_format_tf__header_check),
		cmocka_unit_test(test_format_tf__entry_bytes),
		cmocka_unit_test(test_format_tf__slice_proto_bytes),
		cmocka_unit_test(test_format_tf__signed_table),
		cmocka_unit_test(test_format_tf__slice_keys),
		cmocka_unit_test(test_format_tf__strings),
		cmocka_unit_test_setup_teardown(test_format_tf__worked_bundle, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__encoders_make_tf_tables, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test(test_format_tf__fixture_embedding),
		cmocka_unit_test(test_format_tf__fixture_half_plus_two),
		cmocka_unit_test(test_format_tf__fixture_vars_and_arithmetic),
		cmocka_unit_test(test_format_tf__fixture_optimizer_slots),
		cmocka_unit_test_setup_teardown(test_format_tf__fixture_two_shards, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__corrupt_data, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__corrupt_strings, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__corrupt_index, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__hostile_entries, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test(test_format_tf__fuzz_decoders),
		cmocka_unit_test_setup_teardown(test_format_tf__fuzz_open, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__snappy_index, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__locate, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__locate_typed_paths, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tf__partial_read, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/tf", tests, NULL, NULL);
}
