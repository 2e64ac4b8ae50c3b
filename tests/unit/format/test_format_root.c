/*
 * tests/unit/format/test_format_root.c - checkpoint roots: the pointer file,
 * keep-last-N retention, resolving a root to its latest checkpoint, listing;
 * and crash safety: a child process killed at each point of a save leaves
 * the previous checkpoint and the pointer file intact and readable.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

#define N 300000 /* float32 elements per variable: several chunks */

static float value_at(int64_t step, int i)
{
	return (float)step * 1000.0f + (float)(i % 977);
}

/* Step `step` saved into root; with as_dir, the values of step `values`
 * written straight to root/ckpt-<step>, which the pointer file then does not list. */
static int write_step(const char *root, int64_t step, int keep, int as_dir, int64_t values)
{
	float *v = malloc(N * sizeof(float));
	for (int i = 0; i < N; i++)
		v[i] = value_at(values, i);
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.chunk_size = 65536;
	o.compress = DVAR_COMPRESS_NONE; /* sizes below are exact */
	o.keep_last = keep;
	dvar_writer *w;
	const int64_t dims[1] = { N };
	dvar_shape shape;
	dvar_shape_init(&shape, 1, dims);
	char name[32];
	snprintf(name, sizeof(name), "ckpt-%lld", (long long)step);
	char *dir = tu_path(root, name);
	int rc = as_dir ? dvar_writer_open(&w, dir, &o) : dvar_writer_open_step(&w, root, step, &o);
	free(dir);
	if (!rc)
		rc = dvar_writer_add(w, "v", DVAR_FLOAT32, &shape, NULL, v);
	if (!rc)
		rc = dvar_writer_commit(w);
	dvar_writer_free(w);
	free(v);
	return rc;
}

static int save_step(const char *root, int64_t step, int keep)
{
	return write_step(root, step, keep, 0, step);
}

/* Open path (a root or a checkpoint) and check every value belongs to step. */
static void check_step(const char *path, int64_t step)
{
	dvar_reader *r;
	if (dvar_reader_open(&r, path, NULL))
		fail_msg("open %s: %s", path, dvar_error_last()->message);
	float *v = malloc(N * sizeof(float));
	assert_int_equal(dvar_reader_read(r, 0, NULL, v, N * sizeof(float)), DVAR_OK);
	for (int i = 0; i < N; i++)
		if (v[i] != value_at(step, i))
			fail_msg("%s: element %d is %g, expected %g", path, i, v[i], value_at(step, i));
	char name[32];
	snprintf(name, sizeof(name), "ckpt-%lld", (long long)step);
	assert_non_null(strstr(dvar_reader_path(r), name));
	dvar_reader_free(r);
	free(v);
}

static char *read_pointer(const char *root)
{
	char *p = tu_path(root, "checkpoint"), *text;
	size_t len;
	assert_int_equal(dvar_fs_read_file(p, &text, &len, 1 << 20), DVAR_OK);
	free(p);
	return text;
}

static void test_format_root__latest_and_retention(void **state)
{
	const char *dir = *state;
	for (int64_t s = 1; s <= 4; s++)
		assert_int_equal(save_step(dir, s * 100, 2), DVAR_OK);
	char *text = read_pointer(dir);
	assert_string_equal(text, "model_checkpoint_path: \"ckpt-400\"\n"
	                          "all_model_checkpoint_paths: \"ckpt-300\"\n"
	                          "all_model_checkpoint_paths: \"ckpt-400\"\n");
	free(text);
	check_step(dir, 400);
	char *old = tu_path(dir, "ckpt-200");
	assert_false(dvar_fs_exists(old));
	free(old);

	dvar_root_list *l;
	dvar_root_entry e;
	assert_int_equal(dvar_root_list_open(&l, dir), DVAR_OK);
	assert_int_equal(dvar_root_list_count(l), 2);
	assert_int_equal(dvar_root_list_get(l, 0, &e), DVAR_OK);
	assert_string_equal(e.name, "ckpt-300");
	assert_int_equal(e.step, 300);
	assert_false(e.is_latest);
	assert_true(e.is_kept);
	assert_true(e.bytes >= N * sizeof(float));
	assert_int_equal(dvar_root_list_get(l, 1, &e), DVAR_OK);
	assert_string_equal(e.name, "ckpt-400");
	assert_true(e.is_latest);
	assert_int_equal(dvar_root_list_get(l, 2, &e), DVAR_EINVAL);
	dvar_root_list_free(l);

	/* The same step twice is refused; the existing one is untouched. */
	assert_int_equal(save_step(dir, 400, 2), DVAR_EEXISTS);
	tu_assert_error_contains("ckpt-400' already exists");
	check_step(dir, 400);
}

/*
 * A checkpoint the pointer file does not list is what a save left that
 * failed after its commit's rename and before the pointer file: a new save
 * of that step replaces it and is published, where a listed one is refused
 * (latest_and_retention). Also in a root without a pointer file yet.
 */
static void test_format_root__unlisted_step_saved_again(void **state)
{
	const char *dir = *state;
	assert_int_equal(save_step(dir, 100, 0), DVAR_OK);
	assert_int_equal(write_step(dir, 200, 0, 1, 999), DVAR_OK);
	char *text = read_pointer(dir);
	assert_null(strstr(text, "ckpt-200"));
	free(text);
	assert_int_equal(save_step(dir, 200, 0), DVAR_OK);
	check_step(dir, 200);
	char *ck = tu_path(dir, "ckpt-200");
	check_step(ck, 200);
	free(ck);
	text = read_pointer(dir);
	assert_string_equal(text, "model_checkpoint_path: \"ckpt-200\"\n"
	                          "all_model_checkpoint_paths: \"ckpt-100\"\n"
	                          "all_model_checkpoint_paths: \"ckpt-200\"\n");
	free(text);
	char *hidden = tu_path(dir, ".ckpt-200.deleting");
	assert_false(dvar_fs_exists(hidden));
	free(hidden);

	char *fresh = tu_path(dir, "fresh");
	assert_int_equal(dvar_fs_mkdirs(fresh), DVAR_OK);
	assert_int_equal(write_step(fresh, 5, 0, 1, 999), DVAR_OK);
	assert_int_equal(save_step(fresh, 5, 0), DVAR_OK);
	check_step(fresh, 5);
	free(fresh);
}

static void test_format_root__bad_pointer(void **state)
{
	const char *dir = *state;
	assert_int_equal(save_step(dir, 1, 0), DVAR_OK);
	char *p = tu_path(dir, "checkpoint");
	FILE *fp = fopen(p, "w");
	fputs("model_checkpoint_path: ckpt-1\n", fp);
	fclose(fp);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, dir, NULL), DVAR_ECORRUPT);
	tu_assert_error_contains("line 1: model_checkpoint_path is not a quoted path");
	fp = fopen(p, "w");
	fputs("model_checkpoint_path: \"ckpt-9\"\n", fp);
	fclose(fp);
	assert_int_equal(dvar_reader_open(&r, dir, NULL), DVAR_ENOTFOUND);
	tu_assert_error_contains("its latest checkpoint 'ckpt-9' (named by its checkpoint file) does "
	                         "not exist; it holds ckpt-1: give one");
	/* TensorFlow's own fields are accepted. */
	fp = fopen(p, "w");
	fputs("model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n"
	      "all_model_checkpoint_timestamps: 1700000000.5\nlast_preserved_timestamp: 1.0\n", fp);
	fclose(fp);
	check_step(dir, 1);
	free(p);
}

static const char *crash_point;
static int crash_after;

static void crash_hook(const char *point)
{
	if (strcmp(point, crash_point) == 0 && --crash_after <= 0)
		raise(SIGKILL);
}

/* Kill a save of step 2 at `point` (its n-th passage) and check what survives. */
static void crash_at(const char *root, const char *point, int n, int64_t expect_latest)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		crash_point = point;
		crash_after = n;
		dvar__fault_hook = crash_hook;
		save_step(root, 2, 1);
		_exit(0); /* not reached when the point is hit */
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("the save never reached fault point %s", point);
	check_step(root, expect_latest);
	char *one = tu_path(root, "ckpt-1");
	check_step(one, 1);
	free(one);
	dvar_root_list *l;
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	for (size_t i = 0; i < dvar_root_list_count(l); i++) {
		dvar_root_entry e;
		dvar_root_list_get(l, i, &e);
		char *dir = tu_path(root, e.name);
		check_step(dir, e.step); /* whatever is listed is whole */
		free(dir);
	}
	dvar_root_list_free(l);
}

static void test_format_root__crash_during_save(void **state)
{
	const char *dir = *state;
	static const struct {
		const char *point;
		int n;
		int64_t latest;
	} points[] = {
		{ "chunk-written", 1, 1 }, { "chunk-written", 3, 1 }, { "data-synced", 1, 1 },
		{ "index-written", 1, 1 }, { "renamed", 1, 1 }, { "before-pointer", 1, 1 },
		{ "atomic-before-rename", 1, 1 }, { "pointer-written", 1, 2 },
	};
	for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
		char name[64];
		snprintf(name, sizeof(name), "root%zu", i);
		char *root = tu_path(dir, name);
		assert_int_equal(save_step(root, 1, 1), DVAR_OK);
		crash_at(root, points[i].point, points[i].n, points[i].latest);
		free(root);
	}
}

/* One save into a root at a time: a second writer is refused while the
 * first holds the root's lock, and gets it once the first commits, is
 * freed or dies. */
static void test_format_root__one_save_at_a_time(void **state)
{
	const char *dir = *state;
	char *root = tu_path(dir, "root");
	dvar_writer *a, *b;
	float x = 1;
	dvar_shape s = { 0 };
	char holder[64];

	assert_int_equal(dvar_writer_open_step(&a, root, 1, NULL), DVAR_OK);
	assert_int_equal(dvar_writer_open_step(&b, root, 2, NULL), DVAR_EBUSY);
	snprintf(holder, sizeof holder, "pid %ld on host", (long)getpid());
	tu_assert_error_contains("is being saved into by another writer");
	tu_assert_error_contains(holder);
	assert_int_equal(dvar_writer_add(a, "x", DVAR_FLOAT32, &s, NULL, &x), DVAR_OK);
	assert_int_equal(dvar_writer_commit(a), DVAR_OK);
	/* Committed: the lock is free, though a is not freed yet. */
	assert_int_equal(dvar_writer_open_step(&b, root, 2, NULL), DVAR_OK);
	dvar_writer_free(a);
	dvar_writer_free(b); /* abandoned: frees the lock too */
	assert_int_equal(dvar_writer_open_step(&b, root, 2, NULL), DVAR_OK);
	dvar_writer_free(b);
	/* A process that dies holding it. */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dvar_writer *c;
		_exit(dvar_writer_open_step(&c, root, 3, NULL) == DVAR_OK ? (raise(SIGKILL), 0) : 1);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(dvar_writer_open_step(&b, root, 3, NULL), DVAR_OK);
	dvar_writer_free(b);
	free(root);
}

/* A reader of a checkpoint that retention deletes, or that newer ones
 * follow, goes on reading its values: it holds its files open. So it does
 * when the name comes back as another checkpoint (a root started over) and
 * its first read is a large one with O_DIRECT, forced here. */
#define BIG (1 << 20) /* float32: 4 MiB, big enough for an O_DIRECT read */

static void test_format_root__reader_outlives_deletion(void **state)
{
	const char *dir = *state;
	char *root = tu_path(dir, "root"), *ck1 = tu_path(root, "ckpt-1");
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_shape s = { .rank = 1, .dims = { BIG } };
	float *v = malloc(BIG * sizeof *v), *got = dvar_page_alloc(BIG * sizeof *got, 0);
	dvar_reader *r;
	dvar_mapping m;
	size_t i;

	assert_non_null(v);
	assert_non_null(got);
	o.keep_last = 1;
	o.compress = DVAR_COMPRESS_NONE;
	for (int64_t step = 1; step <= 4; step++) {
		dvar_writer *w;
		for (int k = 0; k < BIG; k++)
			v[k] = (float)(step * 2000000 + k);
		if (step == 4) /* the root started over: ckpt-1 again, other values */
			assert_int_equal(dvar_writer_open(&w, ck1, &o), DVAR_OK);
		else
			assert_int_equal(dvar_writer_open_step(&w, root, step, &o), DVAR_OK);
		assert_int_equal(dvar_writer_add(w, "v", DVAR_FLOAT32, &s, NULL, v), DVAR_OK);
		assert_int_equal(dvar_writer_commit(w), DVAR_OK);
		dvar_writer_free(w);
		if (step == 1) {
			assert_int_equal(dvar_reader_open(&r, ck1, NULL), DVAR_OK);
			assert_int_equal(dvar_reader_find(r, "v", &i), DVAR_OK);
			assert_int_equal(dvar_reader_map(r, i, DVAR_MAP_WHOLE, 0, &m), DVAR_OK);
		}
		if (step == 3) /* ckpt-1 is gone from the root, not from its reader */
			assert_false(dvar_fs_exists(ck1));
	}
	dvar_reader__direct(DVAR_DIRECT_ALWAYS);
	assert_int_equal(dvar_reader_read(r, i, NULL, got, BIG * sizeof *got), DVAR_OK);
	dvar_reader__direct(DVAR_DIRECT_AUTO);
	assert_true(dvar_reader__bytes_via(r, DVAR_VIA_DIRECT) > 0);
	for (int k = 0; k < BIG; k++)
		assert_true(got[k] == (float)(2000000 + k) && ((const float *)m.data)[k] == got[k]);
	dvar_reader_unmap(&m);
	dvar_reader_free(r);
	free(v);
	free(got);
	free(ck1);
	free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_root__latest_and_retention, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_root__unlisted_step_saved_again, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_root__bad_pointer, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_root__crash_during_save, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_root__one_save_at_a_time, tu_setup_dir,
		                                tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_root__reader_outlives_deletion, tu_setup_dir,
		                                tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/root", tests, NULL, NULL);
}
