/*
 * tests/unit/restore/test_restore_import.c - dvar_import: .npy files of
 * every dtype and many shapes (scalars and empty arrays too), .npz archives
 * with stored and deflated members (written here with zlib, plain and with
 * numpy's ZIP64 records) and their damage (CRC, deflate data, methods,
 * encryption, truncation), safetensors files of every dtype the format
 * shares with dvar (BF16 and F16 too) and the format's rules, shards with
 * their attributes, names, steps, and cancellation and a failed write
 * leaving nothing behind. Values are read back with dvar_reader_read and
 * compared with the source bytes.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

#include "restore_tu.h"
#include "dvar/dvar.h"
#include "restore/restore.h"

static const int npy_dtypes[] = {
	DVAR_BOOL, DVAR_INT8, DVAR_INT16, DVAR_INT32, DVAR_INT64, DVAR_UINT8, DVAR_UINT16,
	DVAR_UINT32, DVAR_UINT64, DVAR_FLOAT16, DVAR_FLOAT32, DVAR_FLOAT64,
};
#define NUM_NPY_DTYPES (sizeof(npy_dtypes) / sizeof(npy_dtypes[0]))


/* A growable byte buffer. */
typedef struct {
	unsigned char *p;
	size_t n, cap;
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void put_le(bytes *b, uint64_t v, int width)
{
	unsigned char x[8];
	for (int k = 0; k < width; k++)
		x[k] = (unsigned char)(v >> (8 * k));
	put(b, x, (size_t)width);
}

/* The .npy file of a: dvar_npy_header's header, then the bytes. */
static bytes npy_of(const tu_array *a)
{
	unsigned char h[DVAR_NPY_HEADER_MAX];
	size_t len;
	bytes b = { 0 };

	assert_int_equal(dvar_npy_header(h, sizeof(h), &len, a->dtype, &a->shape), DVAR_OK);
	put(&b, h, len);
	put(&b, a->data, (size_t)a->bytes);
	return b;
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static char *write_npy(const char *dir, const char *file, const tu_array *a)
{
	char *path = tu_path(dir, file);
	bytes b = npy_of(a);
	write_file(path, b.p, b.n);
	free(b.p);
	return path;
}

/* ------------------------------------------------------------ zip files */

typedef struct {
	const char *name;
	const void *data;
	size_t len;
} zmember;

/*
 * A zip archive of the members, each stored (method 0) or deflated (8).
 * zip64: every size and offset in ZIP64 extras, and the ZIP64 end records
 * (numpy forces ZIP64 extras; big archives need the records). *central: the
 * offset of the central directory, for tests that damage it.
 */
static bytes zip_of(const zmember *m, size_t n, int method, int zip64, size_t *central)
{
	bytes out = { 0 }, cd = { 0 };

	for (size_t i = 0; i < n; i++) {
		uint32_t crc = (uint32_t)crc32(0, m[i].data, (uInt)m[i].len);
		unsigned char *packed = (unsigned char *)m[i].data;
		size_t csize = m[i].len;
		if (method == 8) {
			z_stream z;
			memset(&z, 0, sizeof(z));
			assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8,
			                              Z_DEFAULT_STRATEGY), Z_OK);
			csize = deflateBound(&z, (uLong)m[i].len);
			packed = malloc(csize);
			assert_non_null(packed);
			z.next_in = (unsigned char *)m[i].data;
			z.avail_in = (uInt)m[i].len;
			z.next_out = packed;
			z.avail_out = (uInt)csize;
			assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
			csize = z.total_out;
			deflateEnd(&z);
		}
		size_t nlen = strlen(m[i].name), header = out.n;
		uint64_t big = 0xFFFFFFFFu;
		/* Local header. */
		put_le(&out, 0x04034b50u, 4);
		put_le(&out, zip64 ? 45 : 20, 2);
		put_le(&out, 0, 2);
		put_le(&out, (uint64_t)method, 2);
		put_le(&out, 0, 4); /* time, date */
		put_le(&out, crc, 4);
		put_le(&out, zip64 ? big : csize, 4);
		put_le(&out, zip64 ? big : m[i].len, 4);
		put_le(&out, nlen, 2);
		put_le(&out, zip64 ? 20 : 0, 2);
		put(&out, m[i].name, nlen);
		if (zip64) {
			put_le(&out, 1, 2);
			put_le(&out, 16, 2);
			put_le(&out, m[i].len, 8);
			put_le(&out, csize, 8);
		}
		put(&out, packed, csize);
		if (packed != m[i].data)
			free(packed);
		/* Central directory entry. */
		put_le(&cd, 0x02014b50u, 4);
		put_le(&cd, 0x0314, 2);
		put_le(&cd, zip64 ? 45 : 20, 2);
		put_le(&cd, 0, 2);
		put_le(&cd, (uint64_t)method, 2);
		put_le(&cd, 0, 4);
		put_le(&cd, crc, 4);
		put_le(&cd, zip64 ? big : csize, 4);
		put_le(&cd, zip64 ? big : m[i].len, 4);
		put_le(&cd, nlen, 2);
		put_le(&cd, zip64 ? 28 : 0, 2);
		put_le(&cd, 0, 2); /* comment */
		put_le(&cd, 0, 2); /* disk */
		put_le(&cd, 0, 2); /* internal attributes */
		put_le(&cd, 0, 4); /* external attributes */
		put_le(&cd, zip64 ? big : header, 4);
		put(&cd, m[i].name, nlen);
		if (zip64) {
			put_le(&cd, 1, 2);
			put_le(&cd, 24, 2);
			put_le(&cd, m[i].len, 8);
			put_le(&cd, csize, 8);
			put_le(&cd, header, 8);
		}
	}
	size_t cd_offset = out.n;
	put(&out, cd.p, cd.n);
	if (zip64) {
		size_t end64 = out.n;
		put_le(&out, 0x06064b50u, 4);
		put_le(&out, 44, 8);
		put_le(&out, 45, 2);
		put_le(&out, 45, 2);
		put_le(&out, 0, 4);
		put_le(&out, 0, 4);
		put_le(&out, n, 8);
		put_le(&out, n, 8);
		put_le(&out, cd.n, 8);
		put_le(&out, cd_offset, 8);
		put_le(&out, 0x07064b50u, 4);
		put_le(&out, 0, 4);
		put_le(&out, end64, 8);
		put_le(&out, 1, 4);
	}
	put_le(&out, 0x06054b50u, 4);
	put_le(&out, 0, 2);
	put_le(&out, 0, 2);
	put_le(&out, zip64 ? 0xFFFF : n, 2);
	put_le(&out, zip64 ? 0xFFFF : n, 2);
	put_le(&out, zip64 ? 0xFFFFFFFFu : cd.n, 4);
	put_le(&out, zip64 ? 0xFFFFFFFFu : cd_offset, 4);
	put_le(&out, 0, 2);
	free(cd.p);
	if (central)
		*central = cd_offset;
	return out;
}

/* ------------------------------------------------------- safetensors */

/* A safetensors file: the header JSON padded with spaces to 8 bytes, then data. */
static void write_st(const char *path, const char *json, const void *data, size_t len)
{
	bytes b = { 0 };
	size_t hlen = strlen(json), pad = (8 - hlen % 8) % 8;

	put_le(&b, hlen + pad, 8);
	put(&b, json, hlen);
	put(&b, "        ", pad);
	put(&b, data, len);
	write_file(path, b.p, b.n);
	free(b.p);
}

/* ------------------------------------------------------------ checking */

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* Notes an import reports, one a line. */
typedef struct {
	char text[4096];
} notes;

static void take_note(void *userdata, const char *message)
{
	notes *n = userdata;
	size_t used = strlen(n->text);
	snprintf(n->text + used, sizeof(n->text) - used, "%s\n", message);
}

/* ---------------------------------------------------------------- .npy */

static void test_npy_every_dtype_and_shape(void **state)
{
	const char *dir = *state;
	static const int64_t dims[][3] = { { 0 }, { 5 }, { 3, 4 }, { 2, 0, 3 }, { 0 }, { 4, 1, 3 } };
	static const int ranks[] = { 0, 1, 2, 3, 1, 3 };
	enum { NSHAPES = sizeof(ranks) / sizeof(ranks[0]) };
	tu_array a[NUM_NPY_DTYPES * NSHAPES];
	dvar_import_source srcs[NUM_NPY_DTYPES * NSHAPES];
	char *paths[NUM_NPY_DTYPES * NSHAPES], file[64];
	size_t n = 0;

	for (size_t t = 0; t < NUM_NPY_DTYPES; t++)
		for (int s = 0; s < NSHAPES; s++, n++) {
			snprintf(file, sizeof(file), "%s_%d.npy", dvar_dtype_name(npy_dtypes[t]), s);
			/* Half named by the caller, half after their file. */
			char name[96];
			snprintf(name, sizeof(name), "%s/%d", dvar_dtype_name(npy_dtypes[t]), s);
			tu_array_make(&a[n], s % 2 ? name : file, npy_dtypes[t], ranks[s], dims[s], n + 1);
			if (s % 2 == 0)
				a[n].name[strlen(a[n].name) - 4] = '\0';
			paths[n] = write_npy(dir, file, &a[n]);
			srcs[n].path = paths[n];
			srcs[n].name = s % 2 ? a[n].name : NULL;
		}
	char *out = tu_path(dir, "ckpt");
	dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
	o.compress = DVAR_COMPRESS_LZ4;
	assert_int_equal(dvar_import(out, srcs, n, &o), DVAR_OK);
	tu_assert_ckpt_holds(out, a, n);
	/* NULL options are the defaults: a plain checkpoint at out. */
	char *out2 = tu_path(dir, "ckpt2");
	assert_int_equal(dvar_import(out2, srcs, 3, NULL), DVAR_OK);
	tu_assert_ckpt_holds(out2, a, 3);
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	tu_arrays_free(a, n);
	free(out);
	free(out2);
}

/* dvar_import of the one file at path as "x" must fail with code and message. */
static void assert_import_fails(const char *dir, const char *path, int code, const char *message)
{
	dvar_import_source src = { path, "x" };
	char *out = tu_path(dir, "failed");

	assert_int_equal(dvar_import(out, &src, 1, NULL), code);
	tu_assert_error_contains(message);
	tu_assert_error_contains(path);
	assert_false(exists(out));
	free(out);
}

/* A version 1.0 .npy file with this header dict, then ndata zero bytes. */
static void write_npy_dict(const char *path, const char *dict, size_t ndata)
{
	bytes b = { 0 };
	size_t n = strlen(dict), pad = (64 - (10 + n + 1) % 64) % 64;

	put(&b, "\x93NUMPY\x01\x00", 8);
	put_le(&b, n + pad + 1, 2);
	put(&b, dict, n);
	for (size_t i = 0; i < pad; i++)
		put(&b, " ", 1);
	put(&b, "\n", 1);
	for (size_t i = 0; i < ndata; i++)
		put(&b, "", 1);
	write_file(path, b.p, b.n);
	free(b.p);
}

static void test_npy_errors(void **state)
{
	const char *dir = *state;
	char *path = tu_path(dir, "bad.npy");
	static const struct {
		const char *raw; /* the file's bytes; NULL: dict and ndata */
		size_t len;
		const char *dict;
		size_t ndata;
		int code;
		const char *message;
	} cases[] = {
		{ "GIF89a", 6, NULL, 0, DVAR_ECORRUPT,
		  "not a .npy, .npz or .safetensors file (bad magic)" },
		{ "\x93NUMPY\x01", 7, NULL, 0, DVAR_ECORRUPT, "truncated .npy header" },
		{ "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4',", 25, NULL, 0, DVAR_ECORRUPT,
		  "truncated .npy header: it claims 118 bytes" },
		{ "\x93NUMPY\x09\x00\x04\x00{}  ", 14, NULL, 0, DVAR_ENOTSUPP,
		  "unsupported .npy format version 9.0" },
		{ NULL, 0, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4,
		  DVAR_ENOTSUPP, "dtype '>f4' is not little-endian" },
		{ NULL, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 1), }", 8,
		  DVAR_ENOTSUPP, "Fortran-order arrays are not supported" },
		{ NULL, 0, "{'descr': '<V2', 'fortran_order': False, 'shape': (1,), }", 2,
		  DVAR_ENOTSUPP, "bfloat16 cannot come from .npy" },
		{ NULL, 0, "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8,
		  DVAR_ENOTSUPP, "object arrays ('|O') cannot be imported" },
		{ NULL, 0, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4,
		  DVAR_ENOTSUPP, "structured dtypes are not supported" },
		{ NULL, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 4,
		  DVAR_ECORRUPT, "data is truncated: shape [3] of float32 needs 12 bytes, the file "
		                 "holds 4" },
		{ NULL, 0, "{'descr': '<f4', 'fortran': False, 'shape': (3,), }", 12, DVAR_ECORRUPT,
		  "bad .npy header: unknown key 'fortran'" },
		{ NULL, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
		  4, DVAR_ENOTSUPP, "rank 9 is above dvar's maximum of 8" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (cases[i].raw)
			write_file(path, cases[i].raw, cases[i].len);
		else
			write_npy_dict(path, cases[i].dict, cases[i].ndata);
		assert_import_fails(dir, path, cases[i].code, cases[i].message);
	}
	char *missing = tu_path(dir, "nope.npy");
	assert_import_fails(dir, missing, DVAR_ENOTFOUND, "No such file or directory");
	write_file(path, "", 0);
	assert_import_fails(dir, path, DVAR_ECORRUPT, "is empty");
	free(missing);
	free(path);
}

static void test_npy_trailing_bytes_are_noted(void **state)
{
	const char *dir = *state;
	int64_t dims[1] = { 4 };
	tu_array a;
	notes got = { "" };
	char want[512];

	tu_array_make(&a, "t", DVAR_INT32, 1, dims, 7);
	bytes b = npy_of(&a);
	put(&b, "junk!", 5);
	char *path = tu_path(dir, "t.npy"), *out = tu_path(dir, "ckpt");
	write_file(path, b.p, b.n);
	dvar_import_source src = { path, NULL };
	dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
	o.cb.note = take_note;
	o.cb.note_userdata = &got;
	assert_int_equal(dvar_import(out, &src, 1, &o), DVAR_OK);
	snprintf(want, sizeof(want), "'%s' has 5 bytes after the array data; they are ignored\n",
	         path);
	assert_string_equal(got.text, want);
	tu_assert_ckpt_holds(out, &a, 1);
	free(b.p);
	free(path);
	free(out);
	tu_arrays_free(&a, 1);
}

/* ---------------------------------------------------------------- .npz */

/* Arrays a[0..n) as the members "<name>.npy" of an archive, plus a text member. */
static char *write_npz(const char *dir, const char *file, const tu_array *a, size_t n, int method,
                       int zip64)
{
	zmember m[8];
	bytes npy[8];
	char names[8][128];

	assert_true(n < 8);
	for (size_t i = 0; i < n; i++) {
		npy[i] = npy_of(&a[i]);
		snprintf(names[i], sizeof(names[i]), "%.96s.npy", a[i].name);
		m[i] = (zmember){ names[i], npy[i].p, npy[i].n };
	}
	m[n] = (zmember){ "README.txt", "not an array", 12 };
	bytes zip = zip_of(m, n + 1, method, zip64, NULL);
	char *path = tu_path(dir, file);
	write_file(path, zip.p, zip.n);
	free(zip.p);
	for (size_t i = 0; i < n; i++)
		free(npy[i].p);
	return path;
}

static void test_npz_stored_and_deflated(void **state)
{
	const char *dir = *state;
	static const int64_t d2[2] = { 300, 700 }, d1[1] = { 0 };
	tu_array a[3], want[12];
	size_t nw = 0;
	dvar_import_source srcs[4];
	char *paths[4];
	notes got = { "" };

	tu_array_make(&a[0], "emb", DVAR_FLOAT32, 2, d2, 11); /* 840,000 bytes: many pieces of input */
	tu_array_make(&a[1], "step", DVAR_INT64, 0, d1, 12);
	tu_array_make(&a[2], "empty", DVAR_UINT16, 1, d1, 13);
	/* Compressible data, so that deflate has something to do. */
	memset(a[0].data, 0, 400000);
	for (int v = 0; v < 4; v++) {
		int method = v % 2 ? 8 : 0, zip64 = v / 2;
		char file[32], prefix[32];
		snprintf(file, sizeof(file), "a%d.npz", v);
		snprintf(prefix, sizeof(prefix), "m%d%s", method, zip64 ? "z" : "");
		paths[v] = write_npz(dir, file, a, 3, method, zip64);
		/* The first archive under its own names, the others under a prefix. */
		srcs[v].path = paths[v];
		srcs[v].name = v ? strdup(prefix) : NULL;
		for (int k = 0; k < 3; k++) {
			want[nw] = a[k];
			if (v)
				snprintf(want[nw].name, sizeof(want[nw].name), "%.8s/%.60s", prefix, a[k].name);
			nw++;
		}
	}
	char *out = tu_path(dir, "ckpt");
	dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
	o.cb.note = take_note;
	o.cb.note_userdata = &got;
	o.chunk_size = 64 << 10;
	assert_int_equal(dvar_import(out, srcs, 4, &o), DVAR_OK);
	tu_assert_ckpt_holds(out, want, nw);
	assert_non_null(strstr(got.text, "member 'README.txt' left out: not a .npy file"));
	for (int v = 0; v < 4; v++) {
		free(paths[v]);
		free((char *)srcs[v].name);
	}
	free(out);
	tu_arrays_free(a, 3);
}

/* The archive's bytes with the byte at off xor x (off = the size: its first
 * half; beyond: as they are), imported: must fail with code and message. */
static void assert_damaged_npz(const char *dir, const bytes *zip, size_t off, unsigned x,
                               int code, const char *message)
{
	char *path = tu_path(dir, "bad.npz");
	unsigned char *copy = malloc(zip->n);

	assert_non_null(copy);
	memcpy(copy, zip->p, zip->n);
	if (off < zip->n)
		copy[off] ^= (unsigned char)x;
	write_file(path, copy, off == zip->n ? zip->n / 2 : zip->n);
	assert_import_fails(dir, path, code, message);
	free(copy);
	free(path);
}

static void test_npz_damage(void **state)
{
	const char *dir = *state;
	static const int64_t d[1] = { 20000 };
	tu_array a;
	size_t central;

	tu_array_make(&a, "w", DVAR_FLOAT32, 1, d, 21);
	bytes npy = npy_of(&a);
	zmember m = { "w.npy", npy.p, npy.n };
	for (int method = 0; method <= 8; method += 8) {
		bytes zip = zip_of(&m, 1, method, 0, &central);
		size_t data = 30 + strlen(m.name);
		/* A flipped data byte: the member's CRC-32 fails (or, deflated, its data may). */
		assert_damaged_npz(dir, &zip, data + 1000, 0x10, DVAR_ECORRUPT,
		                   method ? "member 'w.npy'" : "member 'w.npy' fails its CRC-32");
		/* The central directory's CRC-32 wrong: found once the member is read. */
		assert_damaged_npz(dir, &zip, central + 16, 0x01, DVAR_ECORRUPT,
		                   "member 'w.npy' fails its CRC-32 check");
		/* Encrypted, and compressed with bzip2 (method 12). */
		assert_damaged_npz(dir, &zip, central + 8, 0x01, DVAR_ENOTSUPP,
		                   "member 'w.npy' is encrypted");
		assert_damaged_npz(dir, &zip, central + 10, (unsigned)method ^ 12, DVAR_ENOTSUPP,
		                   "member 'w.npy' is compressed with zip method 12");
		/* Half the file: no end of central directory record. */
		assert_damaged_npz(dir, &zip, zip.n, 0, DVAR_ECORRUPT,
		                   "no end of central directory record");
		/* The local header moved: the directory points at data. */
		assert_damaged_npz(dir, &zip, central + 42, 0x04, DVAR_ECORRUPT,
		                   "member 'w.npy' has no local header");
		free(zip.p);
	}
	/* A member whose .npy header is bad names the archive and the member. */
	npy.p[0] = 'X';
	bytes zip = zip_of(&m, 1, 0, 0, NULL);
	assert_damaged_npz(dir, &zip, zip.n + 1, 0, DVAR_ECORRUPT,
	                   "member 'w.npy': not a .npy file (bad magic)");
	free(zip.p);
	free(npy.p);
	tu_arrays_free(&a, 1);
}

/* ---------------------------------------------------------- safetensors */

static void test_safetensors_every_dtype(void **state)
{
	const char *dir = *state;
	static const int st_dtypes[] = {
		DVAR_FLOAT32, DVAR_FLOAT64, DVAR_FLOAT16, DVAR_BFLOAT16, DVAR_INT8, DVAR_INT16,
		DVAR_INT32, DVAR_INT64, DVAR_UINT8, DVAR_UINT16, DVAR_UINT32, DVAR_UINT64, DVAR_BOOL,
	};
	enum { N = sizeof(st_dtypes) / sizeof(st_dtypes[0]) };
	static const int64_t dims[3] = { 3, 2, 5 };
	tu_array a[N + 1];
	bytes data = { 0 };
	char json[8192];
	size_t used = 0, offset[N + 1];

	/* The data in reverse order of the header, which lists them by dtype. */
	for (int k = 0; k < N; k++) {
		char name[32];
		snprintf(name, sizeof(name), "t/%s", dvar_st_dtype_name(st_dtypes[k]));
		tu_array_make(&a[k], name, st_dtypes[k], k % 4, dims, 100 + (uint64_t)k);
	}
	tu_array_make(&a[N], "caf\xc3\xa9 \"q\"", DVAR_FLOAT32, 0, dims, 99);
	for (int k = N; k >= 0; k--) {
		offset[k] = data.n;
		put(&data, a[k].data, (size_t)a[k].bytes);
	}
	used += (size_t)snprintf(json, sizeof(json), "{\"__metadata__\": {\"format\": \"pt\"}");
	for (int k = 0; k <= N; k++) {
		char shape[64] = "";
		size_t su = 0;
		for (int d = 0; d < a[k].shape.rank; d++)
			su += (size_t)snprintf(shape + su, sizeof(shape) - su, "%s%lld", d ? "," : "",
			                       (long long)a[k].shape.dims[d]);
		used += (size_t)snprintf(json + used, sizeof(json) - used,
		                         ",\n \"%s\":{\"dtype\":\"%s\",\"shape\":[%s],"
		                         "\"data_offsets\":[%zu,%zu]}",
		                         k < N ? a[k].name : "caf\\u00e9 \\\"q\\\"",
		                         dvar_st_dtype_name(a[k].dtype), shape, offset[k],
		                         offset[k] + (size_t)a[k].bytes);
	}
	snprintf(json + used, sizeof(json) - used, "}");
	char *path = tu_path(dir, "m.safetensors"), *out = tu_path(dir, "ckpt");
	write_st(path, json, data.p, data.n);
	dvar_import_source src = { path, NULL };
	assert_int_equal(dvar_import(out, &src, 1, NULL), DVAR_OK);
	tu_assert_ckpt_holds(out, a, N + 1);
	/* Under a prefix. */
	char *out2 = tu_path(dir, "ckpt2");
	src.name = "model";
	assert_int_equal(dvar_import(out2, &src, 1, NULL), DVAR_OK);
	for (int k = 0; k <= N; k++) {
		char name[96];
		snprintf(name, sizeof(name), "model/%.80s", a[k].name);
		snprintf(a[k].name, sizeof(a[k].name), "%s", name);
	}
	tu_assert_ckpt_holds(out2, a, N + 1);
	free(data.p);
	free(path);
	free(out);
	free(out2);
	tu_arrays_free(a, N + 1);
}

static void test_safetensors_errors(void **state)
{
	const char *dir = *state;
	char *path = tu_path(dir, "bad.safetensors");
	unsigned char data[64] = { 0 };
	static const struct {
		const char *json;
		int code;
		const char *message;
	} cases[] = {
		{ "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", DVAR_ENOTSUPP,
		  "tensor 'w' has dtype F8_E4M3, which dvar cannot hold" },
		{ "{\"c\":{\"dtype\":\"C64\",\"shape\":[],\"data_offsets\":[0,8]}}", DVAR_ENOTSUPP,
		  "tensor 'c' has dtype C64" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", DVAR_ECORRUPT,
		  "tensor 'w': shape [4] of F32 takes 16 bytes, its data_offsets hold 12" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[20],\"data_offsets\":[0,80]}}", DVAR_ECORRUPT,
		  "tensor 'w': data_offsets [0, 80] lie outside the 64 bytes of data" },
		{ "{\"a\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]},"
		  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[12,16]}}", DVAR_ECORRUPT,
		  "tensors 'a' and 'b' share bytes of the data" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", DVAR_ECORRUPT,
		  "run backwards" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", DVAR_ECORRUPT,
		  "expected a whole number" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
		  DVAR_ECORRUPT, "tensor 'w': unknown key 'x'" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", DVAR_ECORRUPT,
		  "tensor 'w' lacks \"data_offsets\"" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", DVAR_ECORRUPT,
		  "bad safetensors header" },
		{ "{\"w\\q\":{}}", DVAR_ECORRUPT, "bad escape" },
		{ "{\"\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", DVAR_ECORRUPT,
		  "at byte 9: a tensor with an empty name" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
		  DVAR_ENOTSUPP, "rank 9 is above dvar's maximum of 8" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_st(path, cases[i].json, data, sizeof(data));
		assert_import_fails(dir, path, cases[i].code, cases[i].message);
	}
	/* A header length beyond the file. */
	unsigned char head[12] = { 0x40, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ' };
	write_file(path, head, sizeof(head));
	assert_import_fails(dir, path, DVAR_ECORRUPT, "truncated safetensors header: it claims 64");
	free(path);
}

/* ---------------------------------------------------------------- shards */

static void test_shards(void **state)
{
	const char *dir = *state;
	static const int64_t d10[2] = { 10, 3 }, d7[2] = { 7, 2 }, d0[1] = { 0 };
	tu_array a[3];
	dvar_import_source srcs[3];
	char *paths[3];
	notes got = { "" };
	const char *names[3] = { "a", "b", "s" };

	tu_array_make(&a[0], names[0], DVAR_FLOAT32, 2, d10, 31);
	tu_array_make(&a[1], names[1], DVAR_INT16, 2, d7, 32);
	tu_array_make(&a[2], names[2], DVAR_FLOAT64, 0, d0, 33);
	for (int k = 0; k < 3; k++) {
		char file[16];
		snprintf(file, sizeof(file), "%s.npy", names[k]);
		paths[k] = write_npy(dir, file, &a[k]);
		srcs[k] = (dvar_import_source){ paths[k], NULL };
	}
	dvar_shard_count counts[3] = { { "a", 4 }, { "b", 8 }, { "s", 2 } };
	dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
	o.shards = counts;
	o.num_shards = 3;
	o.cb.note = take_note;
	o.cb.note_userdata = &got;
	o.chunk_size = 4096;
	char *out = tu_path(dir, "ckpt");
	assert_int_equal(dvar_import(out, srcs, 3, &o), DVAR_OK);
	assert_string_equal(got.text, "variable 'b' has 7 rows: 7 shards, not 8\n"
	                              "variable 's' is a scalar: 1 shard, not 2\n");
	tu_assert_ckpt_holds(out, a, 3);

	dvar_reader *r = NULL;
	dvar_var_info v;
	dvar_slice sl;
	const char *value;
	size_t i;
	static const int64_t a_starts[5] = { 0, 3, 6, 8, 10 };
	assert_int_equal(dvar_reader_open(&r, out, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, "a", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, i, &v), DVAR_OK);
	assert_int_equal(v.num_slices, 4);
	for (size_t j = 0; j < 4; j++) {
		assert_int_equal(dvar_reader_var_slice(r, i, j, &sl), DVAR_OK);
		assert_int_equal(sl.start[0], a_starts[j]);
		assert_int_equal(sl.length[0], a_starts[j + 1] - a_starts[j]);
		assert_int_equal(sl.start[1], 0);
		assert_int_equal(sl.length[1], 3);
	}
	assert_int_equal(dvar_reader_var_attr(r, i, DVAR_STORE_ATTR_KIND, &value), DVAR_OK);
	assert_string_equal(value, DVAR_KIND_SHARDED);
	assert_int_equal(dvar_reader_var_attr(r, i, DVAR_SHARDING_ATTR_SHARDS, &value), DVAR_OK);
	assert_string_equal(value, "4");
	assert_int_equal(dvar_reader_var_attr(r, i, DVAR_SHARDING_ATTR_LAYOUT, &value), DVAR_OK);
	assert_string_equal(value, DVAR_LAYOUT_DIV);
	assert_int_equal(dvar_reader_find(r, "b", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, i, &v), DVAR_OK);
	assert_int_equal(v.num_slices, 7);
	assert_int_equal(dvar_reader_var_attr(r, i, DVAR_SHARDING_ATTR_SHARDS, &value), DVAR_OK);
	assert_string_equal(value, "7");
	/* The scalar is one plain entry, without layout attributes. */
	assert_int_equal(dvar_reader_find(r, "s", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, i, &v), DVAR_OK);
	assert_int_equal(v.num_slices, 1);
	assert_int_equal(dvar_reader_var_num_attrs(r, i), 0);
	dvar_reader_free(r);

	/* A count naming no array, or one given twice, fails before anything is written. */
	char *out2 = tu_path(dir, "ckpt2");
	dvar_shard_count bad[2] = { { "nope", 2 }, { "a", 2 } };
	o.shards = bad;
	o.num_shards = 1;
	assert_int_equal(dvar_import(out2, srcs, 3, &o), DVAR_EINVAL);
	tu_assert_error_contains("shard count for 'nope': no array of that name is imported");
	bad[0].name = "a";
	o.num_shards = 2;
	assert_int_equal(dvar_import(out2, srcs, 3, &o), DVAR_EINVAL);
	tu_assert_error_contains("shard count for 'a' given twice");
	bad[0].shards = DVAR_MAX_SHARDS + 1;
	o.num_shards = 1;
	assert_int_equal(dvar_import(out2, srcs, 3, &o), DVAR_EINVAL);
	assert_false(exists(out2));
	for (int k = 0; k < 3; k++)
		free(paths[k]);
	free(out);
	free(out2);
	tu_arrays_free(a, 3);
}

/* ---------------------------------------------------- names and steps */

static void test_names_and_steps(void **state)
{
	const char *dir = *state;
	static const int64_t d[1] = { 6 };
	tu_array a;
	char listing[1024];

	tu_array_make(&a, "w", DVAR_UINT8, 1, d, 41);
	char *path = write_npy(dir, "w.npy", &a);
	char *root = tu_path(dir, "root");
	dvar_import_source srcs[2] = { { path, "w" }, { path, "w" } };
	dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;

	/* Two arrays of one name. */
	assert_int_equal(dvar_import(root, srcs, 2, &o), DVAR_EINVAL);
	tu_assert_error_contains("two arrays are named 'w'");
	/* A name the writer cannot take fails before a root is made. */
	char longname[1100];
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	srcs[0].name = longname;
	o.step = 3;
	assert_int_equal(dvar_import(root, srcs, 1, &o), DVAR_EINVAL);
	tu_assert_error_contains("a variable's name takes 1 to 1024");
	tu_list_dir(dir, listing, sizeof(listing));
	assert_string_equal(listing, "w.npy");
	/* Steps under a root, the latest kept. */
	srcs[0].name = "w";
	for (int64_t step = 1; step <= 3; step++) {
		o.step = step;
		o.keep_last = 2;
		assert_int_equal(dvar_import(root, srcs, 1, &o), DVAR_OK);
	}
	tu_list_dir(root, listing, sizeof(listing));
	/* The root's save lock stays, as its pointer file does. */
	assert_string_equal(listing, ".dvar-lock checkpoint ckpt-2 ckpt-3");
	tu_assert_ckpt_holds(root, &a, 1);
	/* Without a step, out must not exist. */
	o.step = -1;
	o.keep_last = 0;
	assert_int_equal(dvar_import(root, srcs, 1, &o), DVAR_EEXISTS);
	/* Options from another version. */
	o.version = 99;
	assert_int_equal(dvar_import(root, srcs, 1, &o), DVAR_EINVAL);
	tu_assert_error_contains("dvar_import_options: version 99");
	free(path);
	free(root);
	tu_arrays_free(&a, 1);
}

/* ------------------------------------------------ failing and cancelling */

typedef struct {
	volatile sig_atomic_t cancel;
	int calls;
} canceller;

static void cancel_after_first(void *userdata, uint64_t done, uint64_t total)
{
	canceller *c = userdata;
	(void)done;
	(void)total;
	c->calls++;
	c->cancel = 1;
}

static void test_cancel_leaves_nothing(void **state)
{
	const char *dir = *state;
	static const int64_t d[2] = { 64, 1024 };
	tu_array a[3];
	dvar_import_source srcs[3];
	char *paths[3], listing[1024];

	for (int k = 0; k < 3; k++) {
		char file[16];
		snprintf(file, sizeof(file), "c%d.npy", k);
		tu_array_make(&a[k], file, DVAR_FLOAT32, 2, d, 50 + (uint64_t)k);
		paths[k] = write_npy(dir, file, &a[k]);
		srcs[k] = (dvar_import_source){ paths[k], NULL };
	}
	for (int64_t step = -1; step <= 0; step++) {
		canceller c = { 0, 0 };
		dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
		o.step = step;
		o.cb.progress = cancel_after_first;
		o.cb.progress_userdata = &c;
		o.cb.cancel = &c.cancel;
		char *out = tu_path(dir, "out");
		assert_int_equal(dvar_import(out, srcs, 3, &o), DVAR_ECANCELED);
		tu_assert_error_contains("cancelled");
		assert_int_equal(c.calls, 1);
		tu_list_dir(dir, listing, sizeof(listing));
		assert_string_equal(listing, "c0.npy c1.npy c2.npy");
		free(out);
	}
	for (int k = 0; k < 3; k++)
		free(paths[k]);
	tu_arrays_free(a, 3);
}

static void test_failed_write_leaves_nothing(void **state)
{
	const char *dir = *state;
	static const int64_t d[1] = { 1 << 20 };
	tu_array a;
	char listing[1024];
	struct rlimit old, small;

	tu_array_make(&a, "big", DVAR_FLOAT32, 1, d, 61); /* 4 MiB, random: lz4 cannot shrink it */
	char *path = write_npy(dir, "big.npy", &a), *out = tu_path(dir, "out");
	dvar_import_source src = { path, NULL };
	dvar_import_options o = DVAR_IMPORT_OPTIONS_INIT;
	o.compress = DVAR_COMPRESS_NONE;

	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small = old;
	small.rlim_cur = 1 << 20;
	void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	int rc = dvar_import(out, &src, 1, &o);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, was);
	assert_int_not_equal(rc, DVAR_OK);
	tu_assert_error_contains("File too large");
	tu_list_dir(dir, listing, sizeof(listing));
	assert_string_equal(listing, "big.npy");
	free(path);
	free(out);
	tu_arrays_free(&a, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_npy_every_dtype_and_shape, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_npy_errors, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_npy_trailing_bytes_are_noted, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_npz_stored_and_deflated, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_npz_damage, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_safetensors_every_dtype, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_safetensors_errors, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_shards, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_names_and_steps, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_cancel_leaves_nothing, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_failed_write_leaves_nothing, tu_setup_dir,
		                                tu_teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
