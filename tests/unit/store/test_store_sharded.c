/*
 * Sharded variables in checkpoints: each shard saved once, by its owner, as
 * a slice of the full variable; restored into any shard count (and into
 * plain variables, and back), under any worker count. Runs alone and under
 * mpirun; --save DIR and --restore DIR check across worker counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "store_tu.h"

static const int dtypes[] = { DVAR_FLOAT32, DVAR_INT64, DVAR_BFLOAT16, DVAR_UINT8, DVAR_BOOL };
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

/* The value of element i of variable k: exact in every dtype above. */
static double value_of(int dtype, int k, size_t i)
{
	if (dtype == DVAR_BOOL)
		return (double)((i * 7 + (size_t)k) % 3 == 0);
	if (dtype == DVAR_UINT8)
		return (double)((i * 13 + (size_t)k) % 251);
	return (double)((int64_t)(i % 97) - 40 + k);
}

static void *full_value(int dtype, int k, const dvar_shape *shape)
{
	uint64_t n = 0;
	unsigned char *buf;

	assert_int_equal(dvar_shape_num_elements(shape, &n), DVAR_OK);
	buf = malloc(n * dvar_dtype_size(dtype) + 1);
	assert_non_null(buf);
	for (uint64_t i = 0; i < n; i++)
		tu_put(dtype, buf, i, value_of(dtype, k, i));
	return buf;
}

static dvar_shape shape2(int64_t rows, int64_t cols)
{
	dvar_shape s = { 0 };

	s.rank = 2;
	s.dims[0] = rows;
	s.dims[1] = cols;
	return s;
}

static dvar_sharded_variable *make_sharded(dvar_strategy *s, const char *name, int dtype,
                                           dvar_shape shape, int64_t shards, const void *init)
{
	dvar_partitioner p = DVAR_PARTITIONER_FIXED_INIT(shards);
	dvar_sharded_variable_spec spec = DVAR_SHARDED_VARIABLE_SPEC_INIT;
	dvar_sharded_variable *v = NULL;

	spec.name = name;
	spec.dtype = dtype;
	spec.shape = shape;
	spec.partitioner = &p;
	spec.initial_value = init;
	assert_int_equal(dvar_sharded_variable_create(&v, s, &spec), DVAR_OK);
	return v;
}

/* The full value of v, assembled from every owner (collective). */
static void *read_full(dvar_sharded_variable *v)
{
	dvar_subscript all = { .kind = DVAR_SUBSCRIPT_ELLIPSIS };
	dvar_shape out;
	uint64_t bytes = 0;
	void *buf;

	assert_int_equal(dvar_shape_num_bytes(dvar_sharded_variable_shape(v),
	                                      dvar_sharded_variable_dtype(v), &bytes),
	                 DVAR_OK);
	buf = malloc(bytes + 1);
	assert_non_null(buf);
	assert_int_equal(dvar_sharded_variable_read(v, &all, 1, buf, bytes, &out), DVAR_OK);
	return buf;
}

static size_t nbytes_of(int dtype, const dvar_shape *shape)
{
	uint64_t b = 0;

	assert_int_equal(dvar_shape_num_bytes(shape, dtype, &b), DVAR_OK);
	return (size_t)b;
}

static dvar_write_options quick(void)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;

	o.flags = DVAR_WRITE_NO_FSYNC;
	o.compress = DVAR_COMPRESS_NONE;
	o.chunk_size = 4096;
	return o;
}

/* Save sharded[0..n) (plus vars) as step. */
static int save_sharded(dvar_strategy *s, const char *root, int64_t step,
                        dvar_sharded_variable **sharded, size_t n, dvar_variable **vars,
                        size_t nv, int async)
{
	dvar_write_options wo = quick();
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	int rc;

	so.write = &wo;
	so.sharded = sharded;
	so.num_sharded = n;
	if (!async)
		return dvar_save(s, root, step, vars, nv, &so);
	rc = dvar_save_async(s, root, step, vars, nv, &so);
	return rc == DVAR_OK ? dvar_save_wait(s) : rc;
}

static int restore_sharded(dvar_strategy *s, const char *path, dvar_sharded_variable **sharded,
                           size_t n, dvar_variable **vars, size_t nv)
{
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;

	ro.sharded = sharded;
	ro.num_sharded = n;
	return dvar_restore(s, path, vars, nv, &ro);
}

/* ---------------------------------------------------------------- what is on disk */

static const char *attr(dvar_reader *r, size_t i, const char *key)
{
	const char *v = NULL;

	return dvar_reader_var_attr(r, i, key, &v) == DVAR_OK ? v : "";
}

/* The checkpoint holds 'name' as `shards` slices of the div layout, with the
 * attributes, and the full value want. */
static void check_saved(const char *path, const char *name, int dtype, dvar_shape shape,
                        int64_t shards, const void *want)
{
	dvar_reader *r = NULL;
	dvar_var_info info;
	size_t i, bytes = nbytes_of(dtype, &shape);
	void *got = malloc(bytes + 1);
	int64_t offsets[16], n = 0;
	char count[24];

	assert_int_equal(dvar_reader_open(&r, path, NULL), DVAR_OK);
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, i, &info), DVAR_OK);
	assert_int_equal(info.dtype, dtype);
	assert_true(dvar_shape_equal(&info.shape, &shape));
	assert_int_equal(dvar_div_layout(shape.dims[0], shards, offsets, &n), DVAR_OK);
	if (n == 1) {
		assert_int_equal(info.num_slices, 1);
		assert_string_equal(attr(r, i, DVAR_STORE_ATTR_KIND), "plain");
		assert_string_equal(attr(r, i, DVAR_SHARDING_ATTR_SHARDS), "");
	} else {
		assert_int_equal(info.num_slices, (size_t)n);
		for (int64_t k = 0; k < n; k++) {
			dvar_slice sl;
			int found = 0;

			/* The saved slices, in whatever order: each a div shard. */
			for (size_t j = 0; j < info.num_slices; j++) {
				assert_int_equal(dvar_reader_var_slice(r, i, j, &sl), DVAR_OK);
				found += sl.start[0] == offsets[k] && sl.length[0] == offsets[k + 1] - offsets[k];
			}
			assert_int_equal(found, 1);
		}
		snprintf(count, sizeof count, "%lld", (long long)n);
		assert_string_equal(attr(r, i, DVAR_STORE_ATTR_KIND), "sharded");
		assert_string_equal(attr(r, i, DVAR_SHARDING_ATTR_SHARDS), count);
		assert_string_equal(attr(r, i, DVAR_SHARDING_ATTR_LAYOUT), "div");
	}
	assert_int_equal(dvar_reader_read(r, i, NULL, got, bytes), DVAR_OK);
	assert_memory_equal(got, want, bytes);
	free(got);
	dvar_reader_free(r);
}

/* ---------------------------------------------------------------- the tests */

/* 13 x 5 in 4 shards of every dtype class, and one that stays one shard. */
static void test_sharded__save_and_reshard_on_restore(void **state)
{
	stu_topo t;
	char *root, *path;
	dvar_shape shape = shape2(13, 5), shape1 = { 1, { 10 } };
	dvar_sharded_variable *saved[NDTYPES + 1];
	void *want[NDTYPES + 1];
	char names[NDTYPES + 1][16];

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	for (size_t d = 0; d < NDTYPES; d++) {
		snprintf(names[d], sizeof names[d], "emb%zu", d);
		want[d] = full_value(dtypes[d], (int)d, &shape);
		saved[d] = make_sharded(t.s, names[d], dtypes[d], shape, 4, want[d]);
	}
	snprintf(names[NDTYPES], sizeof names[NDTYPES], "small");
	want[NDTYPES] = full_value(DVAR_INT64, 9, &shape1);
	saved[NDTYPES] = make_sharded(t.s, "small", DVAR_INT64, shape1, 1, want[NDTYPES]);
	assert_int_equal(save_sharded(t.s, root, 1, saved, NDTYPES + 1, NULL, 0, 0), DVAR_OK);
	/* The same bytes asynchronously. */
	assert_int_equal(save_sharded(t.s, root, 2, saved, NDTYPES + 1, NULL, 0, 1), DVAR_OK);

	stu_sum_over_workers(t.s, 0);
	for (int step = 1; step <= 2; step++) {
		char name[16];

		snprintf(name, sizeof name, "ckpt-%d", step);
		path = tu_path(root, name);
		for (size_t d = 0; d < NDTYPES; d++)
			check_saved(path, names[d], dtypes[d], shape, 4, want[d]);
		check_saved(path, "small", DVAR_INT64, shape1, 1, want[NDTYPES]);
		free(path);
	}

	/* Into every shard count from 1 to 8, and into a plain variable. */
	path = tu_path(root, "ckpt-1");
	for (int64_t m = 1; m <= 8; m++) {
		dvar_sharded_variable *into[NDTYPES];

		for (size_t d = 0; d < NDTYPES; d++)
			into[d] = make_sharded(t.s, names[d], dtypes[d], shape, m, NULL);
		assert_int_equal(restore_sharded(t.s, path, into, NDTYPES, NULL, 0), DVAR_OK);
		for (size_t d = 0; d < NDTYPES; d++) {
			void *got = read_full(into[d]);

			assert_int_equal(dvar_sharded_variable_num_shards(into[d]), m);
			assert_memory_equal(got, want[d], nbytes_of(dtypes[d], &shape));
			free(got);
			dvar_sharded_variable_free(into[d]);
		}
	}
	{
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
		dvar_variable *plain = NULL;
		size_t bytes = nbytes_of(DVAR_FLOAT32, &shape);
		void *got = malloc(bytes);

		spec.name = names[0];
		spec.dtype = DVAR_FLOAT32;
		spec.shape = shape;
		assert_int_equal(dvar_variable_create(&plain, t.s, &spec), DVAR_OK);
		assert_int_equal(dvar_restore(t.s, path, &plain, 1, NULL), DVAR_OK);
		assert_int_equal(dvar_variable_read_local(plain, 0, got, bytes), DVAR_OK);
		assert_memory_equal(got, want[0], bytes);
		free(got);
		dvar_variable_free(plain);
	}
	free(path);

	for (size_t d = 0; d <= NDTYPES; d++) {
		dvar_sharded_variable_free(saved[d]);
		free(want[d]);
	}
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* A mirrored variable's checkpoint into a sharded one, and the odd shapes. */
static void test_sharded__plain_into_sharded(void **state)
{
	stu_topo t;
	char *root;
	dvar_shape shapes[] = { shape2(10, 3), shape2(1, 7), shape2(7, 2) };
	const int64_t counts[] = { 3, 8, 8 };

	(void)state;
	assert_int_equal(stu_topo_open(&t, 2), DVAR_OK);
	root = stu_shared_dir(t.s);
	for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
		dvar_variable *plain = NULL;
		dvar_sharded_variable *into;
		void *want = full_value(DVAR_FLOAT64, (int)c, &shapes[c]), *got;

		spec.name = "w";
		spec.dtype = DVAR_FLOAT64;
		spec.shape = shapes[c];
		spec.initial_value = want;
		assert_int_equal(dvar_variable_create(&plain, t.s, &spec), DVAR_OK);
		assert_int_equal(dvar_save(t.s, root, (int64_t)c, &plain, 1, NULL), DVAR_OK);
		into = make_sharded(t.s, "w", DVAR_FLOAT64, shapes[c], counts[c], NULL);
		assert_int_equal(restore_sharded(t.s, root, &into, 1, NULL, 0), DVAR_OK);
		got = read_full(into);
		assert_memory_equal(got, want, nbytes_of(DVAR_FLOAT64, &shapes[c]));
		free(got);
		free(want);
		dvar_sharded_variable_free(into);
		dvar_variable_free(plain);
	}
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

static void test_sharded__errors(void **state)
{
	stu_topo t;
	char *root, *path;
	dvar_shape shape = shape2(13, 5);
	dvar_sharded_variable *v, *wrong;
	void *want, *got;

	(void)state;
	assert_int_equal(stu_topo_open(&t, 1), DVAR_OK);
	root = stu_shared_dir(t.s);
	want = full_value(DVAR_FLOAT32, 1, &shape);
	v = make_sharded(t.s, "emb", DVAR_FLOAT32, shape, 3, want);
	assert_int_equal(save_sharded(t.s, root, 1, &v, 1, NULL, 0, 0), DVAR_OK);

	/* Another full shape: refused before anything changes. */
	wrong = make_sharded(t.s, "emb", DVAR_FLOAT32, shape2(14, 5), 2, NULL);
	assert_int_equal(restore_sharded(t.s, root, &wrong, 1, NULL, 0), DVAR_ESHAPE);
	tu_assert_error_contains("'emb': checkpoint '");
	tu_assert_error_contains("holds float32 [13,5], the variable is float32 [14,5]");
	dvar_sharded_variable_free(wrong);

	/* A checkpoint holding only some of the rows. */
	if (t.worker == 0) {
		dvar_write_options wo = quick();
		dvar_writer *w = NULL;
		dvar_slice part = { 2, { 0, 0 }, { 5, 5 } };

		path = tu_path(root, "partial");
		assert_int_equal(dvar_writer_open(&w, path, &wo), DVAR_OK);
		assert_int_equal(dvar_writer_add(w, "emb", DVAR_FLOAT32, &shape, &part, want), DVAR_OK);
		assert_int_equal(dvar_writer_commit(w), DVAR_OK);
		dvar_writer_free(w);
		free(path);
	}
	stu_sum_over_workers(t.s, 0);
	path = tu_path(root, "partial");
	assert_int_equal(dvar_sharded_variable_assign(v, want), DVAR_OK);
	assert_int_equal(restore_sharded(t.s, path, &v, 1, NULL, 0), DVAR_ENOTFOUND);
	tu_assert_error_contains("Does not have sufficient slices for partitioned tensor emb to "
	                         "restore in slice_spec: 5,4:-");
	got = read_full(v); /* unchanged */
	assert_memory_equal(got, want, nbytes_of(DVAR_FLOAT32, &shape));
	free(got);
	free(path);

	/* NULL entries and lists. */
	{
		dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
		dvar_sharded_variable *none = NULL;

		so.num_sharded = 1;
		assert_int_equal(dvar_save(t.s, root, 5, NULL, 0, &so), DVAR_EINVAL);
		tu_assert_error_contains("1 sharded variables but sharded is NULL");
		so.sharded = &none;
		assert_int_equal(dvar_save(t.s, root, 5, NULL, 0, &so), DVAR_EINVAL);
		tu_assert_error_contains("sharded variable #0 is NULL");
	}
	dvar_sharded_variable_free(v);
	free(want);
	stu_drop_shared_dir(t.s, root);
	dvar_strategy_free(t.s);
}

/* ---------------------------------------------------------------- across worker counts */

#define ACROSS_SHARDS 5

static int main_save(const char *root)
{
	stu_topo t;
	dvar_shape shape = shape2(13, 5);
	void *want = full_value(DVAR_INT32, 3, &shape);
	dvar_sharded_variable *v;
	int rc;

	if (stu_topo_open(&t, 1) != DVAR_OK)
		return 1;
	if (t.worker == 0)
		tu_rmtree(root); /* an earlier run's */
	stu_sum_over_workers(t.s, 0);
	v = make_sharded(t.s, "emb", DVAR_INT32, shape, ACROSS_SHARDS, want);
	rc = save_sharded(t.s, root, 1, &v, 1, NULL, 0, 0);
	dvar_sharded_variable_free(v);
	dvar_strategy_free(t.s);
	free(want);
	if (rc != DVAR_OK)
		fprintf(stderr, "save: %s\n", dvar_error_last()->message);
	return rc != DVAR_OK;
}

static int main_restore(const char *root)
{
	stu_topo t;
	dvar_shape shape = shape2(13, 5);
	void *want = full_value(DVAR_INT32, 3, &shape);
	int bad = 0;

	if (stu_topo_open(&t, 1) != DVAR_OK)
		return 1;
	check_saved(root, "emb", DVAR_INT32, shape, ACROSS_SHARDS, want);
	for (int64_t m = 1; m <= 8; m++) {
		dvar_sharded_variable *v = make_sharded(t.s, "emb", DVAR_INT32, shape, m, NULL);
		void *got;

		if (restore_sharded(t.s, root, &v, 1, NULL, 0) != DVAR_OK) {
			fprintf(stderr, "restore into %lld shards: %s\n", (long long)m,
			        dvar_error_last()->message);
			bad++;
		}
		got = read_full(v);
		bad += memcmp(got, want, nbytes_of(DVAR_INT32, &shape)) != 0;
		free(got);
		dvar_sharded_variable_free(v);
	}
	dvar_strategy_free(t.s);
	free(want);
	return bad != 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sharded__save_and_reshard_on_restore),
		cmocka_unit_test(test_sharded__plain_into_sharded),
		cmocka_unit_test(test_sharded__errors),
	};

	if (argc == 3 && strcmp(argv[1], "--save") == 0)
		return main_save(argv[2]);
	if (argc == 3 && strcmp(argv[1], "--restore") == 0)
		return main_restore(argv[2]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
