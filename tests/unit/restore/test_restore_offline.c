/*
 * tests/unit/restore/test_restore_offline.c - dvar_reshard and dvar_export
 * as library calls: reshard N -> M for N, M in 1..8 over every dtype (values,
 * layouts, attributes and digests), many shards, the options' errors; export
 * to dvar, safetensors (checked against the format's specification byte for
 * byte), TensorFlow and npy, with the name filters; round trips through each
 * format and back with values and digests unchanged; cancellation at every
 * piece and a failed write (RLIMIT_FSIZE) leaving nothing behind.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "restore_tu.h"
#include "dvar/dvar.h"
#include "restore/restore.h"

static const int all_dtypes[] = {
	DVAR_FLOAT32, DVAR_FLOAT64, DVAR_INT32, DVAR_UINT8, DVAR_INT16, DVAR_INT8, DVAR_INT64,
	DVAR_BOOL, DVAR_BFLOAT16, DVAR_UINT16, DVAR_FLOAT16, DVAR_UINT32, DVAR_UINT64,
};
#define NUM_DTYPES (sizeof(all_dtypes) / sizeof(all_dtypes[0]))

/* Write vars as a checkpoint at dir, each as `shards` div shards. */
static void write_ckpt(const char *dir, const tu_array *vars, size_t n, int64_t shards,
                       uint64_t chunk_size)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;

	wo.chunk_size = chunk_size;
	wo.flags = DVAR_WRITE_NO_FSYNC;
	assert_int_equal(dvar_writer_open(&w, dir, &wo), DVAR_OK);
	for (size_t i = 0; i < n; i++) {
		const tu_array *v = &vars[i];
		int64_t *offs = NULL, k = 0;
		assert_int_equal(dvar_shard_layout(v->name, &v->shape, shards, &offs, &k), DVAR_OK);
		uint64_t row = v->shape.rank && v->shape.dims[0] ? v->bytes / (uint64_t)v->shape.dims[0] : 0;
		for (int64_t s = 0; s < k; s++) {
			dvar_slice sl;
			dvar_shard_slice(&v->shape, offs, s, &sl);
			assert_int_equal(dvar_writer_add(w, v->name, v->dtype, &v->shape, k > 1 ? &sl : NULL,
			                                 (const char *)v->data + (uint64_t)offs[s] * row),
			                 DVAR_OK);
		}
		assert_int_equal(dvar_set_shard_attrs(w, v->name, k), DVAR_OK);
		assert_int_equal(dvar_writer_set_attr(w, v->name, "note", "kept"), DVAR_OK);
		free(offs);
	}
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
}

static size_t num_slices(const char *path, const char *name)
{
	dvar_reader *r = NULL;
	dvar_var_info info;
	size_t i;

	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, i, &info), DVAR_OK);
	dvar_reader_free(r);
	return info.num_slices;
}

static const char *attr(dvar_reader *r, const char *name, const char *key)
{
	size_t i;
	const char *value = NULL;

	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	if (dvar_reader_var_attr(r, i, key, &value) != DVAR_OK)
		return NULL;
	return value;
}

/* dir holds exactly what names says (sorted, joined by spaces): no output, no temporary files. */
static void assert_dir_holds(const char *dir, const char *names)
{
	char got[4096];

	tu_list_dir(dir, got, sizeof(got));
	assert_string_equal(got, names);
}

/* --------------------------------------------------------------- reshard */

static void test_reshard_every_n_to_m(void **state)
{
	const char *dir = *state;
	tu_array vars[NUM_DTYPES];
	static const int64_t dims[] = { 13, 5 };

	for (size_t d = 0; d < NUM_DTYPES; d++) {
		char name[32];
		snprintf(name, sizeof(name), "v/%s", dvar_dtype_name(all_dtypes[d]));
		tu_array_make(&vars[d], name, all_dtypes[d], 2, dims, d + 1);
	}
	for (int n = 1; n <= 8; n++) {
		char src[64];
		snprintf(src, sizeof(src), "n%d", n);
		char *in = tu_path(dir, src);
		write_ckpt(in, vars, NUM_DTYPES, n, 4096);
		for (int m = 1; m <= 8; m++) {
			dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
			char dst[64];
			snprintf(dst, sizeof(dst), "n%d-m%d", n, m);
			char *out = tu_path(dir, dst);
			/* --var for the odd ones (every variable), the count for the even. */
			dvar_shard_count counts[NUM_DTYPES];
			if (m % 2) {
				for (size_t d = 0; d < NUM_DTYPES; d++)
					counts[d] = (dvar_shard_count){ vars[d].name, m };
				ro.vars = counts;
				ro.num_vars = NUM_DTYPES;
			} else {
				ro.shards = m;
			}
			ro.compress = (n + m) % 2 ? DVAR_COMPRESS_LZ4 : DVAR_COMPRESS_NONE;
			ro.chunk_size = 4096;
			assert_int_equal(dvar_reshard(in, out, &ro), DVAR_OK);
			tu_assert_ckpt_holds(out, vars, NUM_DTYPES);
			dvar_reader *a = NULL, *b = NULL;
			assert_int_equal(dvar_reader_open(&a, in, NULL), DVAR_OK);
			assert_int_equal(dvar_reader_open(&b, out, NULL), DVAR_OK);
			for (size_t d = 0; d < NUM_DTYPES; d++) {
				/* A plain variable keeps its one slice under a count for sharded ones. */
				size_t want = (m % 2 || n > 1) ? (size_t)m : 1;
				assert_int_equal(num_slices(out, vars[d].name), want);
				const char *kind = attr(b, vars[d].name, DVAR_STORE_ATTR_KIND);
				if (want > 1)
					assert_string_equal(kind, DVAR_KIND_SHARDED);
				else if (n > 1)
					assert_string_equal(kind, DVAR_KIND_PLAIN);
				assert_string_equal(attr(b, vars[d].name, "note"), "kept");
				uint32_t ca, cb, want_crc = dvar_crc32c_extend(0, vars[d].data, vars[d].bytes);
				size_t ia, ib;
				assert_int_equal(dvar_reader_find(a, vars[d].name, &ia), DVAR_OK);
				assert_int_equal(dvar_reader_find(b, vars[d].name, &ib), DVAR_OK);
				assert_int_equal(dvar_reader_digest(a, ia, &ca), DVAR_OK);
				assert_int_equal(dvar_reader_digest(b, ib, &cb), DVAR_OK);
				assert_int_equal(ca, want_crc);
				assert_int_equal(cb, want_crc);
			}
			dvar_reader_free(a);
			dvar_reader_free(b);
			tu_rmtree(out);
			free(out);
		}
		tu_rmtree(in);
		free(in);
	}
	tu_arrays_free(vars, NUM_DTYPES);
}

/* Many shards: one slice each, in row order, values exact. */
static void test_reshard_many_shards(void **state)
{
	const char *dir = *state;
	static const int64_t dims[] = { 20000, 3 };
	tu_array v;
	dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
	char *in = tu_path(dir, "in"), *out = tu_path(dir, "out"), *back = tu_path(dir, "back");

	tu_array_make(&v, "emb", DVAR_FLOAT32, 2, dims, 7);
	write_ckpt(in, &v, 1, 2, 0);
	ro.shards = 16000;
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_OK);
	assert_int_equal(num_slices(out, "emb"), 16000);
	tu_assert_ckpt_holds(out, &v, 1);
	ro.shards = 3;
	assert_int_equal(dvar_reshard(out, back, &ro), DVAR_OK);
	assert_int_equal(num_slices(back, "emb"), 3);
	tu_assert_ckpt_holds(back, &v, 1);
	tu_arrays_free(&v, 1);
	free(in);
	free(out);
	free(back);
}

static void test_reshard_errors(void **state)
{
	const char *dir = *state;
	static const int64_t dims[] = { 6, 2 };
	tu_array v;
	dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
	char *in = tu_path(dir, "in"), *out = tu_path(dir, "out");
	
	tu_array_make(&v, "w", DVAR_INT32, 2, dims, 3);
	write_ckpt(in, &v, 1, 2, 0);

	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_EINVAL);
	tu_assert_error_contains("nothing to do");
	ro.shards = 2;
	ro.partitioner = "fixed:2";
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_EINVAL);
	tu_assert_error_contains("give one of them");
	ro.partitioner = NULL;
	ro.shards = DVAR_MAX_SHARDS + 1;
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_EINVAL);
	tu_assert_error_contains("1 to 65536");
	ro.shards = 0;
	dvar_shard_count missing = { "nope", 2 };
	ro.vars = &missing;
	ro.num_vars = 1;
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_ENOTFOUND);
	tu_assert_error_contains("'nope' not found");
	dvar_shard_count too_many = { "w", 7 };
	ro.vars = &too_many;
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_EINVAL);
	tu_assert_error_contains("has 6 rows");
	ro.version = 99;
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_EINVAL);
	tu_assert_error_contains("dvar_reshard_options: version 99 is not one");
	assert_dir_holds(dir, "in");

	ro = (dvar_reshard_options)DVAR_RESHARD_OPTIONS_INIT;
	ro.partitioner = "fixed:4";
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_OK);
	assert_int_equal(num_slices(out, "w"), 4);
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_EEXISTS);
	tu_assert_error_contains(out);
	tu_arrays_free(&v, 1);
	free(in);
	free(out);
}

static void take_note(void *userdata, const char *message)
{
	char *notes = userdata;
	size_t used = strlen(notes);
	snprintf(notes + used, 4096 - used, "%s\n", message);
}

/* A mirrored variable cut into shards becomes a sharded one (as dvar_save
 * writes it), with a note; into one shard it stays as it was. */
static void test_reshard_replicated(void **state)
{
	const char *dir = *state;
	static const int64_t dims[] = { 6, 2 };
	char *in = tu_path(dir, "in"), *out = tu_path(dir, "out"), *one = tu_path(dir, "one");
	char notes[4096] = "";
	dvar_writer *w = NULL;
	tu_array v;

	tu_array_make(&v, "m", DVAR_FLOAT32, 2, dims, 9);
	assert_int_equal(dvar_writer_open(&w, in, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "m", v.dtype, &v.shape, NULL, v.data), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "m", DVAR_STORE_ATTR_KIND, DVAR_KIND_MIRRORED),
	                 DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "m", DVAR_STORE_ATTR_SYNCHRONIZATION,
	                                      DVAR_SYNC_NAME_ON_WRITE), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "m", DVAR_STORE_ATTR_AGGREGATION,
	                                      DVAR_AGG_NAME_NONE), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "m", "note", "kept"), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);

	dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
	dvar_shard_count three = { "m", 3 };
	ro.vars = &three;
	ro.num_vars = 1;
	ro.cb.note = take_note;
	ro.cb.note_userdata = notes;
	assert_int_equal(dvar_reshard(in, out, &ro), DVAR_OK);
	assert_non_null(strstr(notes, "variable 'm' becomes a sharded variable of 3 shards"));
	dvar_reader *r = NULL;
	assert_int_equal(dvar_reader_open(&r, out, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_var_num_attrs(r, 0), 4);
	assert_string_equal(attr(r, "m", DVAR_STORE_ATTR_KIND), DVAR_KIND_SHARDED);
	assert_string_equal(attr(r, "m", DVAR_SHARDING_ATTR_SHARDS), "3");
	assert_string_equal(attr(r, "m", "note"), "kept");
	assert_null(attr(r, "m", DVAR_STORE_ATTR_SYNCHRONIZATION));
	dvar_reader_free(r);
	tu_assert_ckpt_holds(out, &v, 1);

	three.shards = 1;
	assert_int_equal(dvar_reshard(in, one, &ro), DVAR_OK);
	assert_int_equal(dvar_reader_open(&r, one, NULL), DVAR_OK);
	assert_string_equal(attr(r, "m", DVAR_STORE_ATTR_KIND), DVAR_KIND_MIRRORED);
	assert_string_equal(attr(r, "m", DVAR_STORE_ATTR_AGGREGATION), DVAR_AGG_NAME_NONE);
	dvar_reader_free(r);
	tu_arrays_free(&v, 1);
	free(in);
	free(out);
	free(one);
}

/* --------------------------------------------------------------- export */

/* The safetensors file at path, parsed as the specification says. */
static void check_safetensors(const char *path, const tu_array *vars, size_t n)
{
	FILE *f = fopen(path, "rb");
	unsigned char n8[8];

	assert_non_null(f);
	assert_int_equal(fread(n8, 1, 8, f), 8);
	uint64_t hlen = 0;
	for (int b = 0; b < 8; b++)
		hlen |= (uint64_t)n8[b] << (8 * b);
	/* The header is padded with spaces so that the data begins 8-aligned. */
	assert_int_equal((8 + hlen) % 8, 0);
	char *hdr = malloc(hlen + 1);
	assert_int_equal(fread(hdr, 1, hlen, f), hlen);
	hdr[hlen] = '\0';
	assert_true(hdr[0] == '{');
	size_t end = hlen;
	while (end && hdr[end - 1] == ' ')
		end--;
	assert_true(hdr[end - 1] == '}');
	assert_non_null(strstr(hdr, "\"__metadata__\":{\"format\":\"pt\"}"));
	uint64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		char want[4096], dims[128] = "";
		size_t used = 0;
		for (int d = 0; d < vars[i].shape.rank; d++)
			used += (size_t)snprintf(dims + used, sizeof(dims) - used, "%s%lld", d ? "," : "",
			                         (long long)vars[i].shape.dims[d]);
		snprintf(want, sizeof(want), "\"%.64s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%llu,%llu]}",
		         vars[i].name, dvar_st_dtype_name(vars[i].dtype), dims, (unsigned long long)at,
		         (unsigned long long)(at + vars[i].bytes));
		if (!strstr(hdr, want))
			fail_msg("header %s lacks %s", hdr, want);
		void *got = malloc(vars[i].bytes + 1);
		assert_int_equal(fread(got, 1, vars[i].bytes, f), vars[i].bytes);
		assert_memory_equal(got, vars[i].data, vars[i].bytes);
		free(got);
		at += vars[i].bytes;
	}
	assert_int_equal(fgetc(f), EOF);
	free(hdr);
	fclose(f);
}

/* Variables named so that name-sorted order is also the order written. */
static void make_export_vars(tu_array *vars)
{
	static const int64_t d2[] = { 9, 4 }, d1[] = { 5 };
	for (size_t d = 0; d < NUM_DTYPES; d++) {
		char name[32];
		snprintf(name, sizeof(name), "v%02zu", d);
		tu_array_make(&vars[d], name, all_dtypes[d], d % 3 ? 2 : (d % 2 ? 1 : 0), d % 3 ? d2 : d1,
		          d + 11);
	}
}

static void test_export_formats(void **state)
{
	const char *dir = *state;
	tu_array vars[NUM_DTYPES];
	char *in = tu_path(dir, "in");

	make_export_vars(vars);
	write_ckpt(in, vars, NUM_DTYPES, 3, 4096);

	/* dvar: one mappable slice per variable, the layout gone. */
	dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;
	char *out = tu_path(dir, "serve");
	assert_int_equal(dvar_export(in, out, &eo), DVAR_OK);
	tu_assert_ckpt_holds(out, vars, NUM_DTYPES);
	dvar_reader *r = NULL;
	assert_int_equal(dvar_reader_open(&r, out, NULL), DVAR_OK);
	for (size_t i = 0; i < NUM_DTYPES; i++) {
		dvar_mapping m = { 0 };
		assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, DVAR_MAP_VERIFY, &m), DVAR_OK);
		dvar_reader_unmap(&m);
		assert_null(attr(r, vars[i].name, DVAR_SHARDING_ATTR_SHARDS));
	}
	dvar_reader_free(r);
	free(out);

	/* safetensors, by the name. */
	out = tu_path(dir, "model.safetensors");
	assert_int_equal(dvar_export(in, out, &eo), DVAR_OK);
	check_safetensors(out, vars, NUM_DTYPES);
	free(out);

	/* TensorFlow, merged and with its shards kept. */
	eo.format = DVAR_EXPORT_TF;
	out = tu_path(dir, "tf/model.ckpt");
	assert_int_equal(dvar_export(in, out, &eo), DVAR_OK);
	tu_assert_ckpt_holds(out, vars, NUM_DTYPES);
	free(out);
	eo.flags = DVAR_EXPORT_KEEP_SHARDS;
	out = tu_path(dir, "tf/kept.ckpt");
	assert_int_equal(dvar_export(in, out, &eo), DVAR_OK);
	tu_assert_ckpt_holds(out, vars, NUM_DTYPES);
	assert_int_equal(num_slices(out, vars[1].name), 3);
	free(out);

	/* npy: a file per variable and the manifest; bfloat16 widened. */
	eo.format = DVAR_EXPORT_NPY;
	eo.flags = 0;
	out = tu_path(dir, "arrays");
	assert_int_equal(dvar_export(in, out, &eo), DVAR_OK);
	for (size_t i = 0; i < NUM_DTYPES; i++) {
		char file[80], hdr[DVAR_NPY_HEADER_MAX];
		size_t hlen;
		snprintf(file, sizeof(file), "%.64s.npy", vars[i].name);
		char *p = tu_path(out, file);
		FILE *f = fopen(p, "rb");
		assert_non_null(f);
		int bf = vars[i].dtype == DVAR_BFLOAT16;
		assert_int_equal(dvar_npy_header(hdr, sizeof(hdr), &hlen, bf ? DVAR_FLOAT32 : vars[i].dtype,
		                                 &vars[i].shape), DVAR_OK);
		char *got = malloc(hlen + 2 * vars[i].bytes + 1);
		size_t want_bytes = hlen + (bf ? 2 : 1) * vars[i].bytes;
		assert_int_equal(fread(got, 1, want_bytes + 1, f), want_bytes);
		assert_memory_equal(got, hdr, hlen);
		if (!bf) {
			assert_memory_equal(got + hlen, vars[i].data, vars[i].bytes);
		} else {
			/* float32 bits whose upper half is the bfloat16's, the lower zero. */
			for (size_t k = 0; k < vars[i].bytes / 2; k++) {
				uint16_t bf, wide[2];
				memcpy(&bf, vars[i].data + 2 * k, 2);
				memcpy(wide, got + hlen + 4 * k, 4);
				assert_int_equal(wide[0], 0);
				assert_int_equal(wide[1], bf);
			}
		}
		free(got);
		fclose(f);
		free(p);
	}
	char *manifest = tu_path(out, "manifest.json");
	char text[8192];
	FILE *f = fopen(manifest, "rb");
	assert_non_null(f);
	text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
	fclose(f);
	assert_non_null(strstr(text, "\"v00\":{\"file\":\"v00.npy\",\"dtype\":\"float32\",\"shape\":[]}"));
	free(manifest);
	free(out);

	/* DVAR with a .safetensors name is a contradiction, not a directory. */
	eo.format = DVAR_EXPORT_DVAR;
	out = tu_path(dir, "x.safetensors");
	assert_int_equal(dvar_export(in, out, &eo), DVAR_EINVAL);
	tu_assert_error_contains("ends in .safetensors");
	free(out);
	tu_arrays_free(vars, NUM_DTYPES);
	free(in);
}

static void test_export_names(void **state)
{
	const char *dir = *state;
	static const int64_t d1[] = { 3 };
	static const char *const names[] = {
		"dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
		"dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
		"tf1/w", "tf1/w/Adam", "tf1/w/Adam_1", "tf1/w/Momentum", "tf1/Adamant",
		"step",
	};
	enum { N = sizeof(names) / sizeof(names[0]) };
	tu_array vars[N];
	char *in = tu_path(dir, "in");

	for (size_t i = 0; i < N; i++)
		tu_array_make(&vars[i], names[i], DVAR_FLOAT32, 1, d1, i);
	write_ckpt(in, vars, N, 1, 0);

	dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;
	eo.flags = DVAR_EXPORT_DROP_OPTIMIZER | DVAR_EXPORT_SHORT_NAMES;
	static const char *const drop[] = { "step" };
	eo.drop_prefixes = drop;
	eo.num_drop_prefixes = 1;
	char *out = tu_path(dir, "out");
	assert_int_equal(dvar_export(in, out, &eo), DVAR_OK);
	dvar_reader *r = NULL;
	assert_int_equal(dvar_reader_open(&r, out, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_num_vars(r), 3);
	size_t i;
	assert_int_equal(dvar_reader_find(r, "dense/kernel", &i), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, "tf1/w", &i), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, "tf1/Adamant", &i), DVAR_OK);
	dvar_reader_free(r);
	free(out);

	/* A prefix no variable has is an error, as an unknown name is. */
	static const char *const unknown[] = { "nope/" };
	eo.drop_prefixes = unknown;
	out = tu_path(dir, "out2");
	assert_int_equal(dvar_export(in, out, &eo), DVAR_ENOTFOUND);
	tu_assert_error_contains("'nope/'");
	assert_false(access(out, F_OK) == 0);
	free(out);
	tu_arrays_free(vars, N);
	free(in);
}

/* Every variable's digest in the checkpoint at path, by name into crcs (in vars' order). */
static void digests(const char *path, const tu_array *vars, size_t n, uint32_t *crcs)
{
	dvar_reader *r = NULL;
	size_t i;

	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	for (size_t k = 0; k < n; k++) {
		assert_int_equal(dvar_reader_find(r, vars[k].name, &i), DVAR_OK);
		assert_int_equal(dvar_reader_digest(r, i, &crcs[k]), DVAR_OK);
	}
	dvar_reader_free(r);
}

/* dvar -> safetensors -> dvar, dvar -> npy -> dvar, dvar -> TF -> dvar: the
 * values and the digests come back identical. */
static void test_round_trips(void **state)
{
	const char *dir = *state;
	tu_array vars[NUM_DTYPES];
	uint32_t want[NUM_DTYPES], got[NUM_DTYPES];
	dvar_import_options io = DVAR_IMPORT_OPTIONS_INIT;
	char *in = tu_path(dir, "in");

	make_export_vars(vars);
	write_ckpt(in, vars, NUM_DTYPES, 4, 4096);
	for (size_t k = 0; k < NUM_DTYPES; k++)
		want[k] = dvar_crc32c_extend(0, vars[k].data, vars[k].bytes);
	digests(in, vars, NUM_DTYPES, got);
	assert_memory_equal(got, want, sizeof(want));

	dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;
	char *st = tu_path(dir, "m.safetensors"), *back = tu_path(dir, "from-st");
	assert_int_equal(dvar_export(in, st, &eo), DVAR_OK);
	dvar_import_source src = { st, NULL };
	assert_int_equal(dvar_import(back, &src, 1, &io), DVAR_OK);
	tu_assert_ckpt_holds(back, vars, NUM_DTYPES);
	digests(back, vars, NUM_DTYPES, got);
	assert_memory_equal(got, want, sizeof(want));

	/* npy has no bfloat16: it comes back as float32, the rest as they were. */
	eo.format = DVAR_EXPORT_NPY;
	char *npy = tu_path(dir, "npy"), *back2 = tu_path(dir, "from-npy");
	assert_int_equal(dvar_export(in, npy, &eo), DVAR_OK);
	dvar_import_source srcs[NUM_DTYPES];
	char *paths[NUM_DTYPES];
	size_t n = 0;
	for (size_t k = 0; k < NUM_DTYPES; k++) {
		char file[128];
		snprintf(file, sizeof(file), "%.64s.npy", vars[k].name);
		paths[k] = tu_path(npy, file);
		if (vars[k].dtype != DVAR_BFLOAT16)
			srcs[n++] = (dvar_import_source){ paths[k], vars[k].name };
	}
	assert_int_equal(dvar_import(back2, srcs, n, &io), DVAR_OK);
	tu_array kept[NUM_DTYPES];
	uint32_t kept_crc[NUM_DTYPES];
	size_t m = 0;
	for (size_t k = 0; k < NUM_DTYPES; k++)
		if (vars[k].dtype != DVAR_BFLOAT16) {
			kept_crc[m] = want[k];
			kept[m++] = vars[k];
		}
	tu_assert_ckpt_holds(back2, kept, m);
	digests(back2, kept, m, got);
	assert_memory_equal(got, kept_crc, m * sizeof(uint32_t));

	/* TensorFlow, its shards kept as slices, back through a reshard. */
	eo.format = DVAR_EXPORT_TF;
	eo.flags = DVAR_EXPORT_KEEP_SHARDS;
	char *tf = tu_path(dir, "tf/model"), *back3 = tu_path(dir, "from-tf");
	assert_int_equal(dvar_export(in, tf, &eo), DVAR_OK);
	digests(tf, vars, NUM_DTYPES, got);
	assert_memory_equal(got, want, sizeof(want));
	dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
	ro.shards = 2;
	assert_int_equal(dvar_reshard(tf, back3, &ro), DVAR_OK);
	tu_assert_ckpt_holds(back3, vars, NUM_DTYPES);
	digests(back3, vars, NUM_DTYPES, got);
	assert_memory_equal(got, want, sizeof(want));

	for (size_t k = 0; k < NUM_DTYPES; k++)
		free(paths[k]);
	free(st);
	free(back);
	free(npy);
	free(back2);
	free(tf);
	free(back3);
	free(in);
	tu_arrays_free(vars, NUM_DTYPES);
}

/* ----------------------------------------------------- cancel and failure */

typedef struct {
	int calls, cancel_at;
	volatile sig_atomic_t flag;
} canceller;

static void cancel_progress(void *ud, uint64_t done, uint64_t total)
{
	canceller *c = ud;
	(void)done;
	(void)total;
	if (++c->calls == c->cancel_at)
		c->flag = 1;
}

static void test_cancel_leaves_nothing(void **state)
{
	const char *dir = *state;
	enum { N = 6 };
	tu_array vars[N];
	static const int64_t d2[] = { 40, 8 };
	char *in = tu_path(dir, "in");
	
	for (int i = 0; i < N; i++) {
		char name[8];
		snprintf(name, sizeof(name), "v%d", i);
		tu_array_make(&vars[i], name, DVAR_INT64, 2, d2, (uint64_t)i);
	}
	write_ckpt(in, vars, N, 2, 0);
	static const dvar_export_format formats[] = { DVAR_EXPORT_DVAR, DVAR_EXPORT_SAFETENSORS,
	                                               DVAR_EXPORT_TF, DVAR_EXPORT_NPY };
	for (int at = 1; at <= N; at++) {
		canceller c = { 0, at, 0 };
		dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
		ro.shards = 3;
		ro.cb.progress = cancel_progress;
		ro.cb.progress_userdata = &c;
		ro.cb.cancel = &c.flag;
		char *out = tu_path(dir, "out");
		assert_int_equal(dvar_reshard(in, out, &ro), DVAR_ECANCELED);
		assert_dir_holds(dir, "in");
		for (size_t k = 0; k < 4; k++) {
			dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;
			c = (canceller){ 0, at, 0 };
			eo.format = formats[k];
			eo.flags = formats[k] == DVAR_EXPORT_TF ? DVAR_EXPORT_KEEP_SHARDS : 0;
			eo.cb = ro.cb;
			assert_int_equal(dvar_export(in, out, &eo), DVAR_ECANCELED);
			assert_dir_holds(dir, "in");
		}
		free(out);
	}
	tu_arrays_free(vars, N);
	free(in);
}

static void test_failed_write_leaves_nothing(void **state)
{
	const char *dir = *state;
	static const int64_t d2[] = { 512, 256 };
	tu_array v;
	char *in = tu_path(dir, "in");
		struct rlimit old, small;

	tu_array_make(&v, "big", DVAR_FLOAT64, 2, d2, 5); /* 1 MiB */
	write_ckpt(in, &v, 1, 2, 0);
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small = old;
	small.rlim_cur = 256 << 10;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	static const dvar_export_format formats[] = { DVAR_EXPORT_DVAR, DVAR_EXPORT_SAFETENSORS,
	                                               DVAR_EXPORT_TF, DVAR_EXPORT_NPY };
	char *out = tu_path(dir, "out");
	for (size_t k = 0; k < 4; k++) {
		dvar_export_options eo = DVAR_EXPORT_OPTIONS_INIT;
		eo.format = formats[k];
		eo.flags = formats[k] == DVAR_EXPORT_TF ? DVAR_EXPORT_KEEP_SHARDS : 0;
		int rc = dvar_export(in, out, &eo);
		assert_int_not_equal(rc, DVAR_OK);
		assert_null(strstr(dvar_error_last()->message, ".tmp"));
		assert_dir_holds(dir, "in");
	}
	dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
	ro.shards = 3;
	ro.compress = DVAR_COMPRESS_NONE;
	assert_int_not_equal(dvar_reshard(in, out, &ro), DVAR_OK);
	assert_dir_holds(dir, "in");
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	free(out);
	tu_arrays_free(&v, 1);
	free(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reshard_every_n_to_m, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_reshard_many_shards, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_reshard_errors, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_reshard_replicated, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_export_formats, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_export_names, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_round_trips, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_cancel_leaves_nothing, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_failed_write_leaves_nothing, tu_setup_dir,
		                                tu_teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
