/*
 * tests/unit/restore/test_restore_diff.c - dvar_diff as a library call:
 * equal checkpoints; values that differ (count, first index and bytes, max
 * abs diff) read in one piece or many; NaN and -0.0 equal by default and
 * not bitwise; atol and rtol as doubles with B the reference; integers
 * exact; dtype and shape mismatches; variables only in one side; excluded
 * prefixes and TensorFlow's bookkeeping; attributes (layout ones left out);
 * string tensors; short names and their clash; the refused options; a
 * missing checkpoint; a corrupt chunk and a cancellation, after which the
 * report holds what was compared before.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

/* One variable a test writes: dims (rank of them), its bytes, and up to two
 * attributes as key, value pairs (NULL ends them). */
typedef struct {
	const char *name;
	int dtype;
	int rank;
	int64_t dims[2];
	const void *data;
	const char *attrs[7];
} var;

static void write_ckpt(const char *dir, const var *vars, size_t n)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;

	wo.chunk_size = 4096;
	wo.flags = DVAR_WRITE_NO_FSYNC;
	assert_int_equal(dvar_writer_open(&w, dir, &wo), DVAR_OK);
	for (size_t i = 0; i < n; i++) {
		dvar_shape s;
		assert_int_equal(dvar_shape_init(&s, vars[i].rank, vars[i].dims), DVAR_OK);
		assert_int_equal(dvar_writer_add(w, vars[i].name, vars[i].dtype, &s, NULL, vars[i].data),
		                 DVAR_OK);
		for (int k = 0; vars[i].attrs[k]; k += 2)
			assert_int_equal(dvar_writer_set_attr(w, vars[i].name, vars[i].attrs[k],
			                                      vars[i].attrs[k + 1]), DVAR_OK);
	}
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
}

/* dvar_diff of a and b under the directory state, which must succeed. */
static dvar_diff_report *diff_ok(void **state, const char *a, const char *b,
                                 const dvar_diff_options *o)
{
	char *pa = tu_path(*state, a), *pb = tu_path(*state, b);
	dvar_diff_report *rep = NULL;

	if (dvar_diff(&rep, pa, pb, o) != DVAR_OK)
		fail_msg("diff %s %s: %s", a, b, dvar_error_last()->message);
	assert_non_null(rep);
	free(pa);
	free(pb);
	return rep;
}

/* The report's variable named name. */
static dvar_var_diff var_of(const dvar_diff_report *rep, const char *name)
{
	dvar_var_diff v;

	for (size_t i = 0; i < dvar_diff_report_num_vars(rep); i++) {
		assert_int_equal(dvar_diff_report_var(rep, i, &v), DVAR_OK);
		if (strcmp(v.name, name) == 0)
			return v;
	}
	fail_msg("no variable '%s' in the report", name);
	return v;
}

static float f32_at(const void *p)
{
	float x;
	memcpy(&x, p, sizeof(x));
	return x;
}

/* ---------------------------------------------------------------- values */

/* "w": float32 [4, 50], k / 2 at flat index k but a NaN at 3 and 0.0 at 100. */
static void fill_w(float *w)
{
	for (int k = 0; k < 200; k++)
		w[k] = (float)k / 2;
	w[3] = NAN;
	w[100] = 0.0f;
}

/* B's "w": 57 up by 2, 199 down by 0.25, another NaN at 3, -0.0 at 100. */
static void write_w_pair(const char *dir)
{
	static float wa[200], wb[200];
	fill_w(wa);
	fill_w(wb);
	wb[57] += 2.0f;
	wb[199] -= 0.25f;
	uint32_t bits;
	memcpy(&bits, &wb[3], 4);
	bits ^= 1;
	memcpy(&wb[3], &bits, 4);
	wb[100] = -0.0f;
	var a = { "w", DVAR_FLOAT32, 2, { 4, 50 }, wa, { NULL } };
	var b = { "w", DVAR_FLOAT32, 2, { 4, 50 }, wb, { NULL } };
	char *pa = tu_path(dir, "a"), *pb = tu_path(dir, "b");
	write_ckpt(pa, &a, 1);
	write_ckpt(pb, &b, 1);
	free(pa);
	free(pb);
}

static void test_restore_diff__equal(void **state)
{
	static const int64_t ints[5] = { 1, 2, 3, -4, 1LL << 62 };
	static const unsigned char bools[3] = { 1, 0, 1 };
	static float w[200];
	fill_w(w);
	var vars[] = {
		{ "b", DVAR_BOOL, 1, { 3 }, bools, { NULL } },
		{ "i", DVAR_INT64, 1, { 5 }, ints, { "note", "x", NULL } },
		{ "w", DVAR_FLOAT32, 2, { 4, 50 }, w, { NULL } },
	};
	char *a = tu_path(*state, "a"), *b = tu_path(*state, "b");
	write_ckpt(a, vars, 3);
	write_ckpt(b, vars, 3);

	dvar_diff_report *rep = diff_ok(state, "a", "b", NULL);
	assert_true(dvar_diff_report_identical(rep));
	assert_string_equal(dvar_diff_report_path(rep, DVAR_DIFF_A), a);
	assert_string_equal(dvar_diff_report_path(rep, DVAR_DIFF_B), b);
	assert_null(dvar_diff_report_path(rep, (dvar_diff_side)2));
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_A), 0);
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_B), 0);
	assert_null(dvar_diff_report_only_in(rep, DVAR_DIFF_A, 0));
	assert_int_equal(dvar_diff_report_num_excluded(rep), 0);
	/* In A's order: by name. */
	assert_int_equal(dvar_diff_report_num_vars(rep), 3);
	static const char *const names[] = { "b", "i", "w" };
	static const uint64_t elems[] = { 3, 5, 200 };
	for (size_t i = 0; i < 3; i++) {
		dvar_var_diff v;
		assert_int_equal(dvar_diff_report_var(rep, i, &v), DVAR_OK);
		assert_string_equal(v.name, names[i]);
		assert_int_equal(v.status, DVAR_DIFF_EQUAL);
		assert_int_equal(v.dtype_a, vars[i].dtype);
		assert_int_equal(v.dtype_b, vars[i].dtype);
		assert_int_equal(v.shape_a.rank, vars[i].rank);
		assert_true(dvar_shape_equal(&v.shape_a, &v.shape_b));
		assert_int_equal(v.num_elements, elems[i]);
		assert_int_equal(v.num_different, 0);
		assert_true(v.max_abs_diff == 0);
		assert_false(v.has_first);
		assert_null(v.first_a);
		assert_int_equal(v.num_attrs, 0);
	}
	dvar_var_diff v;
	assert_int_equal(dvar_diff_report_var(rep, 3, &v), DVAR_EINVAL);
	dvar_diff_report_free(rep);
	dvar_diff_report_free(NULL);
	free(a);
	free(b);
}

/* The first difference of "w" in A vs B: index 57, 28.5 vs 30.5. */
static void assert_first_57(const dvar_var_diff *v)
{
	assert_true(v->has_first);
	assert_int_equal(v->first_index, 57);
	assert_int_equal(v->first_a_len, 4);
	assert_int_equal(v->first_b_len, 4);
	assert_true(f32_at(v->first_a) == 28.5f);
	assert_true(f32_at(v->first_b) == 30.5f);
}

static void test_restore_diff__values_differ(void **state)
{
	write_w_pair(*state);
	/* One piece, seven elements a piece, one element a piece: the same report. */
	static const uint64_t pieces[] = { 0, 7 * 24, 1 };
	for (size_t p = 0; p < 3; p++) {
		dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;
		o.piece_bytes = pieces[p];
		dvar_diff_report *rep = diff_ok(state, "a", "b", &o);
		assert_false(dvar_diff_report_identical(rep));
		dvar_var_diff v = var_of(rep, "w");
		/* NaN vs NaN (other bits) and 0.0 vs -0.0 are equal. */
		assert_int_equal(v.status, DVAR_DIFF_VALUES_DIFFER);
		assert_int_equal(v.num_elements, 200);
		assert_int_equal(v.num_different, 2);
		assert_true(v.max_abs_diff == 2.0);
		assert_first_57(&v);
		dvar_diff_report_free(rep);
	}
}

static void test_restore_diff__bitwise(void **state)
{
	dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;

	write_w_pair(*state);
	o.flags = DVAR_DIFF_BITWISE;
	dvar_diff_report *rep = diff_ok(state, "a", "b", &o);
	dvar_var_diff v = var_of(rep, "w");
	/* Now the NaN payload and the sign of zero count, the NaN first. */
	assert_int_equal(v.num_different, 4);
	assert_true(v.has_first);
	assert_int_equal(v.first_index, 3);
	assert_true(isnan(f32_at(v.first_a)) && isnan(f32_at(v.first_b)));
	assert_memory_not_equal(v.first_a, v.first_b, 4);
	/* NaNs are left out of the largest difference; |0 - -0| is 0. */
	assert_true(v.max_abs_diff == 2.0);
	dvar_diff_report_free(rep);
}

static void test_restore_diff__tolerances(void **state)
{
	/* |a - b| is 1 for both; B is the reference: rtol 0.1 accepts 100 vs 101
	 * (1 <= 10.1) but not 10 vs 9 (1 > 0.9; with A as the reference 1 <= 1). */
	static const double fa[3] = { 100, 10, NAN }, fb[3] = { 101, 9, 1 };
	static const int64_t ia[3] = { 1LL << 60, (1LL << 60) + 1, 5 };
	static const int64_t ib[3] = { (1LL << 60) + 1, (1LL << 60) + 1, 6 };
	var a[] = { { "f", DVAR_FLOAT64, 1, { 3 }, fa, { NULL } },
	            { "i", DVAR_INT64, 1, { 3 }, ia, { NULL } } };
	var b[] = { { "f", DVAR_FLOAT64, 1, { 3 }, fb, { NULL } },
	            { "i", DVAR_INT64, 1, { 3 }, ib, { NULL } } };
	char *pa = tu_path(*state, "a"), *pb = tu_path(*state, "b");
	write_ckpt(pa, a, 2);
	write_ckpt(pb, b, 2);
	static const struct {
		double atol, rtol;
		uint64_t f_diff, f_first, i_diff, i_first;
	} cases[] = {
		/* Integers exactly: 2^60 vs 2^60 + 1 differs. */
		{ -1, -1, 3, 0, 2, 0 },
		{ -1, 0.1, 2, 1, 1, 2 },
		{ 1, -1, 1, 2, 0, 0 },
		{ 0.5, 0.005, 2, 1, 1, 2 },
		/* A NaN against a number differs whatever the tolerance. */
		{ 1e9, 1e9, 1, 2, 0, 0 },
		/* As doubles 2^60 + 1 rounds to 2^60: a zero tolerance takes them as equal. */
		{ 0, -1, 3, 0, 1, 2 },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;
		o.atol = cases[c].atol;
		o.rtol = cases[c].rtol;
		dvar_diff_report *rep = diff_ok(state, "a", "b", &o);
		dvar_var_diff f = var_of(rep, "f"), i = var_of(rep, "i");
		assert_int_equal(f.num_different, cases[c].f_diff);
		assert_int_equal(f.first_index, cases[c].f_first);
		assert_true(f.max_abs_diff == 1.0);
		assert_int_equal(i.num_different, cases[c].i_diff);
		assert_int_equal(i.has_first, cases[c].i_diff != 0);
		if (i.has_first) {
			int64_t x, y;
			memcpy(&x, i.first_a, 8);
			memcpy(&y, i.first_b, 8);
			assert_true(x == ia[cases[c].i_first] && y == ib[cases[c].i_first]);
		}
		assert_true(i.max_abs_diff == 1.0);
		assert_int_equal(i.status, cases[c].i_diff ? DVAR_DIFF_VALUES_DIFFER : DVAR_DIFF_EQUAL);
		dvar_diff_report_free(rep);
	}
	free(pa);
	free(pb);
}

/* ---------------------------------------------------------------- names */

static void test_restore_diff__mismatches_and_only(void **state)
{
	static const int32_t i32[4] = { 1, 2, 3, 4 };
	static const int64_t i64[4] = { 1, 2, 3, 4 };
	static const float z6[6];
	var a[] = {
		{ "dt", DVAR_INT32, 1, { 4 }, i32, { NULL } },
		{ "only_a", DVAR_FLOAT32, 1, { 1 }, z6, { NULL } },
		{ "opt/m", DVAR_FLOAT32, 1, { 2 }, z6, { NULL } },
		{ "sh", DVAR_FLOAT32, 2, { 2, 3 }, z6, { NULL } },
		{ "zz_only_a", DVAR_FLOAT32, 1, { 1 }, z6, { NULL } },
	};
	var b[] = {
		{ "dt", DVAR_INT64, 1, { 4 }, i64, { NULL } },
		{ "only_b", DVAR_FLOAT32, 1, { 1 }, z6, { NULL } },
		{ "opt/m", DVAR_FLOAT32, 1, { 2 }, i32, { NULL } },
		{ "sh", DVAR_FLOAT32, 2, { 3, 2 }, z6, { NULL } },
	};
	char *pa = tu_path(*state, "a"), *pb = tu_path(*state, "b");
	write_ckpt(pa, a, 5);
	write_ckpt(pb, b, 4);

	dvar_diff_report *rep = diff_ok(state, "a", "b", NULL);
	assert_false(dvar_diff_report_identical(rep));
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_A), 2);
	assert_string_equal(dvar_diff_report_only_in(rep, DVAR_DIFF_A, 0), "only_a");
	assert_string_equal(dvar_diff_report_only_in(rep, DVAR_DIFF_A, 1), "zz_only_a");
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_B), 1);
	assert_string_equal(dvar_diff_report_only_in(rep, DVAR_DIFF_B, 0), "only_b");
	assert_int_equal(dvar_diff_report_num_vars(rep), 3);
	dvar_var_diff v = var_of(rep, "dt");
	assert_int_equal(v.status, DVAR_DIFF_DTYPE_DIFFERS);
	assert_int_equal(v.dtype_a, DVAR_INT32);
	assert_int_equal(v.dtype_b, DVAR_INT64);
	assert_int_equal(v.num_elements, 0);
	assert_false(v.has_first);
	v = var_of(rep, "sh");
	assert_int_equal(v.status, DVAR_DIFF_SHAPE_DIFFERS);
	assert_true(v.shape_a.dims[0] == 2 && v.shape_a.dims[1] == 3);
	assert_true(v.shape_b.dims[0] == 3 && v.shape_b.dims[1] == 2);
	assert_int_equal(v.num_elements, 0);
	v = var_of(rep, "opt/m");
	assert_int_equal(v.status, DVAR_DIFF_VALUES_DIFFER);
	assert_int_equal(v.num_different, 2);
	dvar_diff_report_free(rep);

	/* Excluded on both sides, by prefix: they count, and leave the lists. */
	dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;
	static const char *const prefixes[] = { "opt/", "only_", "dt" };
	o.exclude_prefixes = prefixes;
	o.num_exclude_prefixes = 3;
	rep = diff_ok(state, "a", "b", &o);
	assert_int_equal(dvar_diff_report_num_excluded(rep), 3 + 3);
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_A), 1);
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_B), 0);
	assert_int_equal(dvar_diff_report_num_vars(rep), 1);
	assert_string_equal(var_of(rep, "sh").name, "sh");
	dvar_diff_report_free(rep);
	free(pa);
	free(pb);
}

static void test_restore_diff__attributes(void **state)
{
	static const float x[2];
	var a[] = {
		{ "kinds", DVAR_FLOAT32, 1, { 2 }, x, { "kind", "mirrored", NULL } },
		{ "layout", DVAR_FLOAT32, 1, { 2 }, x,
		  { "kind", "sharded", "shards", "2", "layout", "div", NULL } },
		{ "none", DVAR_FLOAT32, 1, { 2 }, x, { NULL } },
		{ "w", DVAR_FLOAT32, 1, { 2 }, x, { "k", "1", "only_a", "x", NULL } },
	};
	var b[] = {
		{ "kinds", DVAR_FLOAT32, 1, { 2 }, x, { "kind", "sharded", NULL } },
		{ "layout", DVAR_FLOAT32, 1, { 2 }, x, { "kind", "plain", NULL } },
		{ "none", DVAR_FLOAT32, 1, { 2 }, x, { "k", "1", NULL } },
		{ "w", DVAR_FLOAT32, 1, { 2 }, x, { "k", "2", "only_b", "y", NULL } },
	};
	char *pa = tu_path(*state, "a"), *pb = tu_path(*state, "b");
	write_ckpt(pa, a, 4);
	write_ckpt(pb, b, 4);

	dvar_diff_report *rep = diff_ok(state, "a", "b", NULL);
	assert_false(dvar_diff_report_identical(rep));
	/* Mirrored vs sharded is not storage: it counts. */
	dvar_var_diff v = var_of(rep, "kinds");
	assert_int_equal(v.status, DVAR_DIFF_EQUAL);
	assert_int_equal(v.num_attrs, 1);
	const char *key, *va, *vb;
	assert_int_equal(dvar_diff_report_attr_at(rep, 0, 0, &key, &va, &vb), DVAR_OK);
	assert_string_equal(key, "kind");
	assert_string_equal(va, "mirrored");
	assert_string_equal(vb, "sharded");
	/* shards, layout and kind sharded vs plain are how rows are stored. */
	assert_int_equal(var_of(rep, "layout").num_attrs, 0);
	/* A side without attributes says nothing. */
	assert_int_equal(var_of(rep, "none").num_attrs, 0);
	/* Key order; NULL for a side without the key. */
	v = var_of(rep, "w");
	assert_int_equal(v.num_attrs, 3);
	static const char *const want[3][3] = {
		{ "k", "1", "2" }, { "only_a", "x", NULL }, { "only_b", NULL, "y" }
	};
	for (size_t k = 0; k < 3; k++) {
		assert_int_equal(dvar_diff_report_attr_at(rep, 3, k, &key, &va, &vb), DVAR_OK);
		assert_string_equal(key, want[k][0]);
		if (want[k][1])
			assert_string_equal(va, want[k][1]);
		else
			assert_null(va);
		if (want[k][2])
			assert_string_equal(vb, want[k][2]);
		else
			assert_null(vb);
	}
	assert_int_equal(dvar_diff_report_attr_at(rep, 3, 3, &key, &va, &vb), DVAR_EINVAL);
	dvar_diff_report_free(rep);

	dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;
	o.flags = DVAR_DIFF_NO_ATTRS;
	rep = diff_ok(state, "a", "b", &o);
	assert_true(dvar_diff_report_identical(rep));
	dvar_diff_report_free(rep);
	free(pa);
	free(pb);
}

/* ------------------------------------------------------------ TensorFlow */

static void write_tf_strings(const char *prefix, const char *second)
{
	static const float one = 1.0f;
	dvar_tf_writer *w = NULL;
	dvar_shape s;
	int64_t n = 3;
	char bytes[32];
	uint64_t lens[3] = { 5, strlen(second), 0 };

	assert_int_equal(dvar_tf_writer_open(&w, prefix, NULL), DVAR_OK);
	snprintf(bytes, sizeof(bytes), "hello%s", second);
	assert_int_equal(dvar_shape_init(&s, 1, &n), DVAR_OK);
	assert_int_equal(dvar_tf_writer_add_strings(w, "s", &s, lens, bytes), DVAR_OK);
	assert_int_equal(dvar_tf_writer_add_strings(w, "_CHECKPOINTABLE_OBJECT_GRAPH", &s, lens,
	                                            bytes), DVAR_OK);
	assert_int_equal(dvar_shape_init(&s, 0, NULL), DVAR_OK);
	assert_int_equal(dvar_tf_writer_add(w, "x/.ATTRIBUTES/VARIABLE_VALUE", DVAR_FLOAT32, &s,
	                                    NULL, &one), DVAR_OK);
	assert_int_equal(dvar_tf_writer_add(w, "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
	                                    DVAR_FLOAT32, &s, NULL, &one), DVAR_OK);
	assert_int_equal(dvar_tf_writer_commit(w), DVAR_OK);
	dvar_tf_writer_free(w);
}

static void test_restore_diff__strings_and_short_names(void **state)
{
	static const float one = 1.0f;
	char *ta = tu_path(*state, "ta"), *tb = tu_path(*state, "tb");
	assert_int_equal(mkdir(ta, 0755) | mkdir(tb, 0755), 0);
	char *pa = tu_path(ta, "ckpt"), *pb = tu_path(tb, "ckpt");
	write_tf_strings(pa, "world");
	write_tf_strings(pb, "worlds");

	/* Element by element, byte for byte: the second string differs. */
	dvar_diff_report *rep = diff_ok(state, "ta/ckpt", "tb/ckpt", NULL);
	dvar_var_diff v = var_of(rep, "s");
	assert_int_equal(v.status, DVAR_DIFF_VALUES_DIFFER);
	assert_int_equal(v.dtype_a, DVAR_DTYPE_STRING);
	assert_int_equal(v.num_elements, 3);
	assert_int_equal(v.num_different, 1);
	assert_true(v.max_abs_diff == 0);
	assert_true(v.has_first);
	assert_int_equal(v.first_index, 1);
	assert_int_equal(v.first_a_len, 5);
	assert_int_equal(v.first_b_len, 6);
	assert_memory_equal(v.first_a, "world", 5);
	assert_memory_equal(v.first_b, "worlds", 6);
	dvar_diff_report_free(rep);

	/* A dvar checkpoint of the same values under short names. */
	var mine[] = { { "x", DVAR_FLOAT32, 0, { 0 }, &one, { NULL } } };
	char *pm = tu_path(*state, "mine");
	write_ckpt(pm, mine, 1);
	dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;
	o.flags = DVAR_DIFF_SHORT_NAMES | DVAR_DIFF_SKIP_TF_BOOKKEEPING;
	rep = diff_ok(state, "ta/ckpt", "mine", &o);
	assert_true(dvar_diff_report_identical(rep));
	/* The object graph, save_counter and the string tensor "s". */
	assert_int_equal(dvar_diff_report_num_excluded(rep), 3);
	assert_int_equal(dvar_diff_report_num_vars(rep), 1);
	assert_string_equal(var_of(rep, "x").name, "x");
	dvar_diff_report_free(rep);
	o.flags = 0;
	rep = diff_ok(state, "ta/ckpt", "mine", &o);
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_A), 4);
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_B), 1);
	dvar_diff_report_free(rep);

	/* Two variables of one side with the same short name. */
	var clash[] = { { "a", DVAR_FLOAT32, 0, { 0 }, &one, { NULL } },
	                { "a/.ATTRIBUTES/VARIABLE_VALUE", DVAR_FLOAT32, 0, { 0 }, &one, { NULL } } };
	char *pc = tu_path(*state, "clash");
	write_ckpt(pc, clash, 2);
	o.flags = DVAR_DIFF_SHORT_NAMES;
	dvar_diff_report *none = (dvar_diff_report *)&o;
	assert_int_equal(dvar_diff(&none, pm, pc, &o), DVAR_EINVAL);
	assert_null(none);
	tu_assert_error_contains("'a' is the short name of both");
	tu_assert_error_contains("in B");
	free(ta);
	free(tb);
	free(pa);
	free(pb);
	free(pm);
	free(pc);
}

/* ---------------------------------------------------------------- errors */

static void test_restore_diff__refused(void **state)
{
	dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;
	dvar_diff_report *rep = NULL;
	char *a = tu_path(*state, "a");

	write_w_pair(*state);
	o.flags = DVAR_DIFF_BITWISE;
	o.atol = 0.5;
	assert_int_equal(dvar_diff(&rep, a, a, &o), DVAR_EINVAL);
	assert_null(rep);
	tu_assert_error_contains("cannot go with a tolerance");
	o.atol = -1;
	o.rtol = 0;
	assert_int_equal(dvar_diff(&rep, a, a, &o), DVAR_EINVAL);
	tu_assert_error_contains("cannot go with a tolerance");
	o = (dvar_diff_options)DVAR_DIFF_OPTIONS_INIT;
	o.rtol = NAN;
	assert_int_equal(dvar_diff(&rep, a, a, &o), DVAR_EINVAL);
	tu_assert_error_contains("finite");
	o.rtol = INFINITY;
	assert_int_equal(dvar_diff(&rep, a, a, &o), DVAR_EINVAL);
	o = (dvar_diff_options)DVAR_DIFF_OPTIONS_INIT;
	o.num_exclude_prefixes = 1;
	assert_int_equal(dvar_diff(&rep, a, a, &o), DVAR_EINVAL);
	tu_assert_error_contains("exclude_prefixes is NULL");
	o = (dvar_diff_options)DVAR_DIFF_OPTIONS_INIT;
	o.version = 99;
	assert_int_equal(dvar_diff(&rep, a, a, &o), DVAR_EINVAL);
	assert_int_equal(dvar_diff(NULL, a, a, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_diff(&rep, NULL, a, NULL), DVAR_EINVAL);
	assert_null(rep);

	/* The defaults, as dvar_diff_options_init gives them. */
	dvar_diff_options init;
	memset(&init, 0xff, sizeof(init));
	assert_int_equal(dvar_diff_options_init(&init, DVAR_DIFF_OPTIONS_VERSION), DVAR_OK);
	assert_int_equal(init.version, DVAR_DIFF_OPTIONS_VERSION);
	assert_true(init.atol < 0 && init.rtol < 0);
	assert_int_equal(init.flags, 0);
	assert_int_equal(init.piece_bytes, 0);
	assert_null(init.cb.progress);
	assert_int_equal(dvar_diff_options_init(&init, 2), DVAR_EINVAL);

	/* A missing checkpoint: nothing to report. */
	char *missing = tu_path(*state, "nothing");
	rep = (dvar_diff_report *)&o;
	assert_int_equal(dvar_diff(&rep, a, missing, NULL), DVAR_ENOTFOUND);
	assert_null(rep);
	tu_assert_error_contains("nothing");
	free(missing);
	free(a);
}

/* Flip a byte of the first chunk of variable name in the checkpoint at dir. */
static void corrupt(const char *dir, const char *name)
{
	dvar_reader *r = NULL;
	size_t i;

	assert_int_equal(dvar_reader_open(&r, dir, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	uint64_t at = dvar_reader_entry(r, i)->slices[0].chunks[0].offset;
	dvar_reader_free(r);
	char *data = tu_path(dir, "data-00000-of-00001");
	FILE *f = fopen(data, "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
	int c = fgetc(f);
	assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
	fputc(c ^ 0xff, f);
	fclose(f);
	free(data);
}

/* What the progress callback saw. */
typedef struct {
	uint64_t calls, done, total;
	volatile sig_atomic_t *cancel; /* set at the first call when not NULL */
} seen;

static void on_progress(void *userdata, uint64_t done, uint64_t total)
{
	seen *s = userdata;
	assert_true(done > s->done && done <= total);
	s->calls++;
	s->done = done;
	s->total = total;
	if (s->cancel)
		*s->cancel = 1;
}

static void test_restore_diff__partial_report(void **state)
{
	static int32_t x[1000], y[1000];
	for (int k = 0; k < 1000; k++)
		x[k] = y[k] = k;
	y[10] = -1;
	var a[] = { { "a", DVAR_INT32, 1, { 1000 }, x, { NULL } },
	            { "b", DVAR_INT32, 1, { 1000 }, x, { NULL } },
	            { "c", DVAR_INT32, 1, { 1000 }, x, { NULL } } };
	var b[] = { { "a", DVAR_INT32, 1, { 1000 }, y, { NULL } },
	            { "b", DVAR_INT32, 1, { 1000 }, x, { NULL } },
	            { "c", DVAR_INT32, 1, { 1000 }, x, { NULL } },
	            { "d", DVAR_INT32, 1, { 1000 }, x, { NULL } } };
	char *pa = tu_path(*state, "a"), *pb = tu_path(*state, "b");
	write_ckpt(pa, a, 3);
	write_ckpt(pb, b, 4);

	/* Progress: the bytes of both sides, after every piece. */
	dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;
	seen s = { 0 };
	o.piece_bytes = 100 * (2 * 4 + 2 * 8);
	o.cb.progress = on_progress;
	o.cb.progress_userdata = &s;
	dvar_diff_report *rep = diff_ok(state, "a", "b", &o);
	assert_int_equal(s.calls, 30);
	assert_int_equal(s.total, 3 * 2 * 4000);
	assert_int_equal(s.done, s.total);
	dvar_diff_report_free(rep);

	/* A corrupt chunk of "b": "a" is in the report, with the only-in lists. */
	corrupt(pb, "b");
	assert_int_equal(dvar_diff(&rep, pa, pb, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("'b'");
	tu_assert_error_contains("checksum");
	assert_non_null(rep);
	assert_int_equal(dvar_diff_report_num_vars(rep), 1);
	dvar_var_diff v = var_of(rep, "a");
	assert_int_equal(v.num_different, 1);
	assert_int_equal(v.first_index, 10);
	assert_int_equal(dvar_diff_report_num_only_in(rep, DVAR_DIFF_B), 1);
	assert_string_equal(dvar_diff_report_only_in(rep, DVAR_DIFF_B, 0), "d");
	dvar_diff_report_free(rep);

	/* Cancelled at the first piece: the lists, no variable. */
	volatile sig_atomic_t stop = 0;
	s = (seen){ .cancel = &stop };
	o.cb.cancel = &stop;
	assert_int_equal(dvar_diff(&rep, pa, pa, &o), DVAR_ECANCELED);
	assert_int_equal(s.calls, 1);
	assert_non_null(rep);
	assert_int_equal(dvar_diff_report_num_vars(rep), 0);
	dvar_diff_report_free(rep);
	free(pa);
	free(pb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_restore_diff__equal, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_diff__values_differ, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_diff__bitwise, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_diff__tolerances, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_diff__mismatches_and_only, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_diff__attributes, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_diff__strings_and_short_names, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_diff__refused, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_restore_diff__partial_report, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("restore/diff", tests, NULL, NULL);
}
