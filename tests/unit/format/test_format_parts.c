/*
 * tests/unit/format/test_format_parts.c - checkpoints written by several
 * parts into one staging directory and committed by a chief: parts in
 * threads and in forked processes read back exactly and verify; every
 * validation failure at commit leaves no checkpoint and the pointer file as
 * it was; abort removes the staging directory; a part or the chief killed
 * mid-save leaves the previous checkpoint the latest; damaged or hostile part
 * entries give DVAR_ECORRUPT.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

#define NP 3
#define EMB_ROWS 30 /* 10 rows per part */
#define EMB_COLS 16
#define BIG (NP * 12000) /* float32, 12000 per part: 3 chunks of 16 KiB each */

static float emb_at(int r, int c) { return (float)(r * 100 + c) + 0.5f; }
static float big_at(int i) { return (float)i * 0.25f - 17.0f; }
static double mirrored_at(int i) { return i * 1.5 - 3.0; }
static int32_t split_at(int r, int c) { return r * 6 + c - 20; }
static const int64_t counter_value = INT64_C(123456789012);

/* How a part departs from the good plan, to make commit fail. */
enum { GOOD, OVERLAP, DTYPE, SHAPE, ATTR };

static int keep_last; /* for the saves that follow */
static uint32_t write_flags = DVAR_WRITE_NO_FSYNC;

static dvar_write_options options(void)
{
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.keep_last = keep_last;
	o.chunk_size = 16384;
	o.compress = DVAR_COMPRESS_NONE;
	o.threads = 2;
	o.flags = write_flags;
	return o;
}

static int add_emb(dvar_writer *w, int first, int rows, int total_rows)
{
	float *v = malloc((size_t)rows * EMB_COLS * sizeof(float));
	for (int i = 0; i < rows * EMB_COLS; i++)
		v[i] = emb_at(first + i / EMB_COLS, i % EMB_COLS);
	dvar_shape s;
	dvar_shape_init(&s, 2, (int64_t[]){ total_rows, EMB_COLS });
	dvar_slice sl = { 2, { first, 0 }, { rows, EMB_COLS } };
	int rc = dvar_writer_add(w, "emb", DVAR_FLOAT32, &s, &sl, v);
	free(v);
	return rc;
}

/*
 * Write part p of a save: dir mode when step < 0 (where is the checkpoint),
 * else root mode (where is the root). The chief's writer comes back in keep;
 * the others are freed after finishing.
 */
static int write_part(const char *where, int64_t step, const char *token, int p, int variant,
                      dvar_writer **keep, void **blob, size_t *len)
{
	dvar_write_options o = options();
	dvar_writer *w;
	dvar_shape s;
	int rc = step < 0 ? dvar_writer_open_part(&w, where, token, p, NP, &o)
	                  : dvar_writer_open_step_part(&w, where, step, token, p, NP, &o);
	if (rc)
		return rc;
	int first = variant == OVERLAP && p == 1 ? 5 : p * 10;
	rc = add_emb(w, first, 10, variant == SHAPE && p == 2 ? EMB_ROWS + 1 : EMB_ROWS);
	if (!rc)
		rc = dvar_writer_set_attr(w, "emb", "kind", variant == ATTR && p == 1 ? "mirrored" : "sharded");
	if (!rc)
		rc = dvar_writer_set_attr(w, "emb", "partitioning", "rows:3");

	float *big = malloc(12000 * sizeof(float));
	for (int i = 0; i < 12000; i++)
		big[i] = big_at(p * 12000 + i);
	dvar_shape_init(&s, 1, (int64_t[]){ BIG });
	dvar_slice bs = { 1, { p * 12000 }, { 12000 } };
	if (!rc)
		rc = dvar_writer_add(w, "big", DVAR_FLOAT32, &s, &bs, big);
	free(big);

	if (p == 0 || (variant == DTYPE && p == 2)) {
		double m[7];
		for (int i = 0; i < 7; i++)
			m[i] = mirrored_at(i);
		dvar_shape_init(&s, 1, (int64_t[]){ 7 });
		if (!rc)
			rc = p == 0 ? dvar_writer_add(w, "mirrored", DVAR_FLOAT64, &s, NULL, m)
			            : dvar_writer_add(w, "mirrored", DVAR_FLOAT32, &s, NULL, m);
		if (!rc)
			rc = dvar_writer_set_attr(w, "mirrored", "kind", "mirrored");
		if (!rc)
			rc = dvar_writer_set_attr(w, "mirrored", "synchronization", "ON_WRITE");
		if (!rc)
			rc = dvar_writer_set_attr(w, "mirrored", "aggregation", "NONE");
	}
	if (p == 0 || p == 1) {
		int c0 = p == 0 ? 0 : 2, nc = p == 0 ? 2 : 4;
		int32_t v[8 * 4];
		for (int i = 0; i < 8 * nc; i++)
			v[i] = split_at(i / nc, c0 + i % nc);
		dvar_shape_init(&s, 2, (int64_t[]){ 8, 6 });
		dvar_slice sl = { 2, { 0, c0 }, { 8, nc } };
		if (!rc)
			rc = dvar_writer_add(w, "split2d", DVAR_INT32, &s, &sl, v);
	}
	if (p == 2) {
		dvar_shape_init(&s, 0, NULL);
		if (!rc)
			rc = dvar_writer_add(w, "counter", DVAR_INT64, &s, NULL, &counter_value);
		if (!rc)
			rc = dvar_writer_set_attr(w, "counter", "kind", "sync_on_read");
		if (!rc)
			rc = dvar_writer_set_attr(w, "counter", "aggregation", "SUM");
		if (!rc)
			rc = dvar_writer_set_attr(w, "counter", "synchronization", "ON_READ");
	}
	if (!rc)
		rc = dvar_writer_finish_part(w, blob, len);
	if (!rc && keep)
		*keep = w;
	else
		dvar_writer_free(w);
	return rc;
}

static void read_named(dvar_reader *r, const char *name, void *out, size_t bytes)
{
	size_t i;
	if (dvar_reader_find(r, name, &i) || dvar_reader_read(r, i, NULL, out, bytes))
		fail_msg("reading %s: %s", name, dvar_error_last()->message);
}

static void expect_attr(dvar_reader *r, const char *name, const char *key, const char *want)
{
	size_t i;
	const char *got;
	assert_int_equal(dvar_reader_find(r, name, &i), DVAR_OK);
	if (dvar_reader_var_attr(r, i, key, &got))
		fail_msg("%s.%s: %s", name, key, dvar_error_last()->message);
	assert_string_equal(got, want);
}

static int header_visit(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
	(void)key;
	assert_int_equal(klen, 0);
	assert_int_equal(dvar_header_decode(ud, val, vlen), DVAR_OK);
	return 1; /* stop after the header */
}

static void read_header(const char *ck, dvar_header *h)
{
	char *index = tu_path(ck, "index");
	memset(h, 0, sizeof(*h));
	dvar_index_scan(index, header_visit, h);
	free(index);
	assert_int_not_equal(h->num_files, 0);
}

/* Everything the good plan wrote, value for value, from a checkpoint (or root). */
static void check_good(const char *path)
{
	dvar_reader *r;
	if (dvar_reader_open(&r, path, NULL))
		fail_msg("open %s: %s", path, dvar_error_last()->message);
	assert_int_equal(dvar_reader_num_vars(r), 5);

	float *emb = malloc(EMB_ROWS * EMB_COLS * sizeof(float)), want_emb[EMB_ROWS * EMB_COLS];
	for (int i = 0; i < EMB_ROWS * EMB_COLS; i++)
		want_emb[i] = emb_at(i / EMB_COLS, i % EMB_COLS);
	read_named(r, "emb", emb, EMB_ROWS * EMB_COLS * sizeof(float));
	assert_memory_equal(emb, want_emb, sizeof(want_emb));
	free(emb);

	float *big = malloc(BIG * sizeof(float)), *want_big = malloc(BIG * sizeof(float));
	for (int i = 0; i < BIG; i++)
		want_big[i] = big_at(i);
	read_named(r, "big", big, BIG * sizeof(float));
	assert_memory_equal(big, want_big, BIG * sizeof(float));
	/* A read across the boundary of parts 0 and 1. */
	size_t bi;
	dvar_slice across = { 1, { 11990 }, { 20 } };
	assert_int_equal(dvar_reader_find(r, "big", &bi), DVAR_OK);
	assert_int_equal(dvar_reader_read(r, bi, &across, big, 20 * sizeof(float)), DVAR_OK);
	assert_memory_equal(big, want_big + 11990, 20 * sizeof(float));
	free(big);
	free(want_big);

	double m[7], want_m[7];
	for (int i = 0; i < 7; i++)
		want_m[i] = mirrored_at(i);
	read_named(r, "mirrored", m, sizeof(m));
	assert_memory_equal(m, want_m, sizeof(m));

	int32_t sp[48], want_sp[48];
	for (int i = 0; i < 48; i++)
		want_sp[i] = split_at(i / 6, i % 6);
	read_named(r, "split2d", sp, sizeof(sp));
	assert_memory_equal(sp, want_sp, sizeof(sp));

	int64_t c;
	read_named(r, "counter", &c, sizeof(c));
	assert_true(c == counter_value);

	/* Slices keep their data files: part p's slices are in file p. */
	dvar_var_info info;
	size_t i;
	assert_int_equal(dvar_reader_find(r, "big", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var(r, i, &info), DVAR_OK);
	assert_int_equal(info.num_slices, NP);
	assert_int_equal(info.num_chunks, NP * 3);

	expect_attr(r, "emb", "kind", "sharded");
	expect_attr(r, "emb", "partitioning", "rows:3");
	expect_attr(r, "mirrored", "kind", "mirrored");
	expect_attr(r, "mirrored", "synchronization", "ON_WRITE");
	expect_attr(r, "mirrored", "aggregation", "NONE");
	expect_attr(r, "counter", "aggregation", "SUM");
	assert_int_equal(dvar_reader_find(r, "counter", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var_num_attrs(r, i), 3);
	const char *k, *v;
	/* In key order. */
	assert_int_equal(dvar_reader_var_attr_at(r, i, 0, &k, &v), DVAR_OK);
	assert_string_equal(k, "aggregation");
	assert_string_equal(v, "SUM");
	assert_int_equal(dvar_reader_var_attr_at(r, i, 1, &k, &v), DVAR_OK);
	assert_string_equal(k, "kind");
	assert_int_equal(dvar_reader_var_attr_at(r, i, 2, &k, &v), DVAR_OK);
	assert_string_equal(k, "synchronization");
	assert_string_equal(v, "ON_READ");
	assert_int_equal(dvar_reader_var_attr_at(r, i, 3, &k, &v), DVAR_EINVAL);
	assert_int_equal(dvar_reader_var_attr(r, i, "partitioning", &v), DVAR_ENOTFOUND);
	tu_assert_error_contains("variable 'counter' has no attribute 'partitioning'");
	assert_int_equal(dvar_reader_find(r, "big", &i), DVAR_OK);
	assert_int_equal(dvar_reader_var_num_attrs(r, i), 0);

	uint64_t bad;
	assert_int_equal(dvar_reader_verify(r, NULL, NULL, &bad), DVAR_OK);
	assert_int_equal(bad, 0);

	/* The header lists the three data files with their sizes. */
	dvar_header h;
	read_header(dvar_reader_path(r), &h);
	/* Its small slices are packed off page boundaries: version 4. */
	assert_int_equal(h.version, DVAR_FORMAT_PACKED);
	assert_int_equal(h.min_reader, DVAR_FORMAT_PACKED);
	assert_int_equal(h.num_files, NP);
	for (uint32_t f = 0; f < NP; f++) {
		char name[32];
		struct stat st;
		dvar_data_file_name(name, sizeof(name), f, NP);
		char *p = tu_path(dvar_reader_path(r), name);
		assert_int_equal(stat(p, &st), 0);
		assert_int_equal(h.file_sizes[f], st.st_size);
		assert_true(st.st_size >= 12000 * 4);
		free(p);
	}
	dvar_header_clear(&h);
	dvar_reader_free(r);
}

/* The staging directory of a save under root. */
static char *staging_of(const char *root, int64_t step, const char *token)
{
	char name[128];
	snprintf(name, sizeof(name), ".ckpt-%lld.dvartmp-%s", (long long)step, token);
	return tu_path(root, name);
}

/* ---------------------------------------------------------------- threads */

typedef struct {
	const char *dir;
	int part, rc;
	void *blob;
	size_t len;
	dvar_writer *w;
} part_job;

static void *part_thread(void *arg)
{
	part_job *j = arg;
	j->rc = write_part(j->dir, -1, "cafe01", j->part, GOOD, j->part == 0 ? &j->w : NULL,
	                   &j->blob, &j->len);
	return NULL;
}

static void test_format_parts__threads(void **state)
{
	const char *dir = *state;
	char *ck = tu_path(dir, "ck");
	part_job jobs[NP];
	pthread_t t[NP];
	for (int p = 0; p < NP; p++) {
		jobs[p] = (part_job){ ck, p, 0, NULL, 0, NULL };
		assert_int_equal(pthread_create(&t[p], NULL, part_thread, &jobs[p]), 0);
	}
	for (int p = 0; p < NP; p++) {
		pthread_join(t[p], NULL);
		if (jobs[p].rc)
			fail_msg("part %d failed: %d", p, jobs[p].rc);
	}
	char *staging = tu_path(dir, ".ck.dvartmp-cafe01");
	assert_true(dvar_fs_is_dir(staging));
	assert_false(dvar_fs_exists(ck));
	/* Entries in any order. */
	const void *blobs[NP] = { jobs[2].blob, jobs[0].blob, jobs[1].blob };
	size_t lens[NP] = { jobs[2].len, jobs[0].len, jobs[1].len };
	if (dvar_writer_commit_parts(jobs[0].w, blobs, lens, NP))
		fail_msg("commit: %s", dvar_error_last()->message);
	assert_false(dvar_fs_exists(staging));
	/* Only free is left. */
	assert_int_equal(dvar_writer_commit_parts(jobs[0].w, blobs, lens, NP), DVAR_EINVAL);
	assert_int_equal(dvar_writer_add(jobs[0].w, "x", DVAR_FLOAT32, &(dvar_shape){ 0 }, NULL, lens),
	                 DVAR_EINVAL);
	dvar_writer_free(jobs[0].w);
	for (int p = 0; p < NP; p++)
		dvar_free(jobs[p].blob);
	check_good(ck);
	free(staging);
	free(ck);
}

/* ---------------------------------------------------------------- processes */

static void save_blob(const char *dir, int p, const void *blob, size_t len)
{
	char name[32], tmp[40];
	snprintf(name, sizeof(name), "blob-%d", p);
	snprintf(tmp, sizeof(tmp), "blob-%d.tmp", p);
	char *path = tu_path(dir, name), *tpath = tu_path(dir, tmp);
	FILE *f = fopen(tpath, "wb");
	if (!f || fwrite(blob, 1, len, f) != len || fclose(f) != 0 || rename(tpath, path) != 0)
		_exit(3);
	free(path);
	free(tpath);
}

static void *load_blob(const char *dir, int p, size_t *len)
{
	char name[32], *text;
	snprintf(name, sizeof(name), "blob-%d", p);
	char *path = tu_path(dir, name);
	assert_int_equal(dvar_fs_read_file(path, &text, len, 1 << 24), DVAR_OK);
	free(path);
	return text;
}

static const char *crash_point;

static void crash_hook(const char *point)
{
	if (crash_point && strcmp(point, crash_point) == 0)
		raise(SIGKILL);
}

/* Fork a process that writes part p of step's save and leaves its entries in dir/blob-p. */
static pid_t fork_part(const char *dir, const char *root, int64_t step, const char *token, int p,
                       int variant, const char *kill_at)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		void *blob;
		size_t len;
		crash_point = kill_at;
		dvar__fault_hook = crash_hook;
		if (write_part(root, step, token, p, variant, NULL, &blob, &len))
			_exit(2);
		save_blob(dir, p, blob, len);
		_exit(0);
	}
	return pid;
}

static int wait_exit(pid_t pid)
{
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		return -WTERMSIG(status);
	return WEXITSTATUS(status);
}

static int save_single(const char *root, int64_t step)
{
	dvar_write_options o = options();
	dvar_writer *w;
	dvar_shape s;
	float v[5] = { 1, 2, 3, 4, (float)step };
	dvar_shape_init(&s, 1, (int64_t[]){ 5 });
	int rc = dvar_writer_open_step(&w, root, step, &o);
	if (!rc)
		rc = dvar_writer_add(w, "old", DVAR_FLOAT32, &s, NULL, v);
	if (!rc)
		rc = dvar_writer_commit(w);
	dvar_writer_free(w);
	return rc;
}

static char *read_pointer(const char *root)
{
	char *p = tu_path(root, "checkpoint"), *text;
	size_t len;
	assert_int_equal(dvar_fs_read_file(p, &text, &len, 1 << 20), DVAR_OK);
	free(p);
	return text;
}

/* The root's latest is still step 1, with its pointer file as it was. */
static void check_untouched(const char *root, const char *pointer_before, int64_t step)
{
	char *text = read_pointer(root);
	assert_string_equal(text, pointer_before);
	free(text);
	char name[32];
	snprintf(name, sizeof(name), "ckpt-%lld", (long long)step);
	char *ck = tu_path(root, name);
	assert_false(dvar_fs_exists(ck));
	free(ck);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, root, NULL), DVAR_OK);
	assert_non_null(strstr(dvar_reader_path(r), "ckpt-1"));
	float v[5];
	read_named(r, "old", v, sizeof(v));
	assert_true(v[4] == 1.0f);
	dvar_reader_free(r);
}

static void test_format_parts__processes(void **state)
{
	const char *dir = *state;
	char *root = tu_path(dir, "root");
	assert_int_equal(save_single(root, 1), DVAR_OK);
	pid_t kids[NP];
	for (int p = 1; p < NP; p++)
		kids[p] = fork_part(dir, root, 2, "f00d", p, GOOD, NULL);
	/* This process is part 0 and the chief. */
	dvar_writer *chief;
	void *blobs[NP];
	size_t lens[NP];
	assert_int_equal(write_part(root, 2, "f00d", 0, GOOD, &chief, &blobs[0], &lens[0]), DVAR_OK);
	for (int p = 1; p < NP; p++) {
		assert_int_equal(wait_exit(kids[p]), 0);
		blobs[p] = load_blob(dir, p, &lens[p]);
	}
	if (dvar_writer_commit_parts(chief, (const void *const *)blobs, lens, NP))
		fail_msg("commit: %s", dvar_error_last()->message);
	dvar_writer_free(chief);
	dvar_free(blobs[0]); /* the chief's entries; the others are load_blob's */
	for (int p = 1; p < NP; p++)
		free(blobs[p]);
	char *text = read_pointer(root);
	assert_string_equal(text, "model_checkpoint_path: \"ckpt-2\"\n"
	                          "all_model_checkpoint_paths: \"ckpt-1\"\n"
	                          "all_model_checkpoint_paths: \"ckpt-2\"\n");
	free(text);
	check_good(root);
	char *staging = staging_of(root, 2, "f00d");
	assert_false(dvar_fs_exists(staging));
	free(staging);

	/* The chief applies keep_last, with fsync this time. */
	keep_last = 1;
	write_flags = 0;
	dvar_writer *w3;
	void *b3[NP];
	size_t l3[NP];
	for (int p = NP - 1; p >= 0; p--)
		assert_int_equal(write_part(root, 3, "f00d", p, GOOD, p ? NULL : &w3, &b3[p], &l3[p]), DVAR_OK);
	keep_last = 0;
	write_flags = DVAR_WRITE_NO_FSYNC;
	assert_int_equal(dvar_writer_commit_parts(w3, (const void *const *)b3, l3, NP), DVAR_OK);
	dvar_writer_free(w3);
	for (int p = 0; p < NP; p++)
		free(b3[p]);
	text = read_pointer(root);
	assert_string_equal(text, "model_checkpoint_path: \"ckpt-3\"\n"
	                          "all_model_checkpoint_paths: \"ckpt-3\"\n");
	free(text);
	char *two = tu_path(root, "ckpt-2"), *one = tu_path(root, "ckpt-1");
	assert_false(dvar_fs_exists(two));
	assert_false(dvar_fs_exists(one));
	check_good(root);
	free(two);
	free(one);
	free(root);
}

/* ---------------------------------------------------------------- failures */

typedef struct {
	char *dir, *root, *pointer;
	dvar_writer *chief;
	void *blobs[NP];
	size_t lens[NP];
	char token[32];
} failing;

/* Start a save of step 2 whose parts run the given variant, all finished. */
static void start(failing *f, const char *dir, const char *token, int variant)
{
	memset(f, 0, sizeof(*f));
	f->dir = tu_path(dir, token);
	f->root = tu_path(f->dir, "root");
	snprintf(f->token, sizeof(f->token), "%s", token);
	assert_int_equal(mkdir(f->dir, 0777), 0);
	assert_int_equal(save_single(f->root, 1), DVAR_OK);
	f->pointer = read_pointer(f->root);
	for (int p = NP - 1; p >= 0; p--)
		if (write_part(f->root, 2, token, p, variant, p == 0 ? &f->chief : NULL, &f->blobs[p],
		               &f->lens[p]))
			fail_msg("part %d: %s", p, dvar_error_last()->message);
}

/* Commit with entries `order` (n of them) must fail with code and say what. */
static void expect_failure(failing *f, const int *order, int n, int code, const char *what)
{
	const void *blobs[8];
	size_t lens[8];
	for (int i = 0; i < n; i++) {
		blobs[i] = f->blobs[order[i]];
		lens[i] = f->lens[order[i]];
	}
	int rc = dvar_writer_commit_parts(f->chief, blobs, lens, n);
	if (rc != code)
		fail_msg("expected %d, got %d: %s", code, rc, dvar_error_last()->message);
	tu_assert_error_contains("checkpoint '");
	tu_assert_error_contains("ckpt-2' not committed");
	tu_assert_error_contains(what);
	dvar_writer_free(f->chief);
	f->chief = NULL;
	check_untouched(f->root, f->pointer, 2);
	/* The staging directory waits for abort; abort is idempotent. */
	char *staging = staging_of(f->root, 2, f->token);
	assert_true(dvar_fs_is_dir(staging));
	assert_int_equal(dvar_writer_abort_step_parts(f->root, 2, f->token), DVAR_OK);
	assert_false(dvar_fs_exists(staging));
	assert_int_equal(dvar_writer_abort_step_parts(f->root, 2, f->token), DVAR_OK);
	check_untouched(f->root, f->pointer, 2);
	free(staging);
	for (int p = 0; p < NP; p++)
		dvar_free(f->blobs[p]);
	free(f->dir);
	free(f->root);
	free(f->pointer);
}

static const int all[NP] = { 0, 1, 2 };

static void test_format_parts__missing_part(void **state)
{
	failing f;
	start(&f, *state, "missing", GOOD);
	expect_failure(&f, (int[]){ 0, 2 }, 2, DVAR_EINVAL, "part 1 of 3 is missing (2 part entries given)");
}

static void test_format_parts__duplicate_part(void **state)
{
	failing f;
	start(&f, *state, "dup", GOOD);
	expect_failure(&f, (int[]){ 0, 1, 1 }, 3, DVAR_EINVAL, "part 1 is given twice (part entries #2)");
}

static void test_format_parts__overlap(void **state)
{
	failing f;
	start(&f, *state, "overlap", OVERLAP);
	expect_failure(&f, all, NP, DVAR_ESHAPE,
	               "variable 'emb': slice 5,10:- of part 1 overlaps slice 0,10:- of part 0");
}

static void test_format_parts__dtype_disagrees(void **state)
{
	failing f;
	start(&f, *state, "dtype", DTYPE);
	expect_failure(&f, all, NP, DVAR_ESHAPE,
	               "variable 'mirrored' is float64 [7] in part 0 but float32 [7] in part 2");
}

static void test_format_parts__shape_disagrees(void **state)
{
	failing f;
	start(&f, *state, "shape", SHAPE);
	expect_failure(&f, all, NP, DVAR_ESHAPE,
	               "variable 'emb' is float32 [30,16] in part 0 but float32 [31,16] in part 2");
}

static void test_format_parts__attrs_disagree(void **state)
{
	failing f;
	start(&f, *state, "attrs", ATTR);
	expect_failure(&f, all, NP, DVAR_EINVAL, "variable 'emb' has different attributes in parts 0 and 1");
}

static void test_format_parts__truncated_entries(void **state)
{
	failing f;
	start(&f, *state, "trunc", GOOD);
	f.lens[1] -= 5;
	expect_failure(&f, all, NP, DVAR_ECORRUPT, "part entries #1: part entries are damaged: checksum");
}

static void test_format_parts__flipped_entries(void **state)
{
	failing f;
	start(&f, *state, "flip", GOOD);
	((unsigned char *)f.blobs[2])[f.lens[2] / 2] ^= 0x10;
	expect_failure(&f, all, NP, DVAR_ECORRUPT, "part entries #2: part entries are damaged: checksum");
}

static void test_format_parts__short_data_file(void **state)
{
	failing f;
	start(&f, *state, "short", GOOD);
	char *staging = staging_of(f.root, 2, "short");
	char *data = tu_path(staging, "data-00001-of-00003");
	struct stat st;
	assert_int_equal(stat(data, &st), 0);
	assert_int_equal(truncate(data, st.st_size - 4096), 0);
	char want[256];
	snprintf(want, sizeof(want), "data-00001-of-00003' has %lld bytes; part 1 wrote %lld",
	         (long long)st.st_size - 4096, (long long)st.st_size);
	expect_failure(&f, all, NP, DVAR_ECORRUPT, want);
	free(data);
	free(staging);
}

static void test_format_parts__missing_data_file(void **state)
{
	failing f;
	start(&f, *state, "nofile", GOOD);
	char *staging = staging_of(f.root, 2, "nofile");
	char *data = tu_path(staging, "data-00002-of-00003");
	assert_int_equal(unlink(data), 0);
	expect_failure(&f, all, NP, DVAR_ENOTFOUND, "data-00002-of-00003' of part 2: No such file");
	free(data);
	free(staging);
}

static void test_format_parts__stray_file(void **state)
{
	failing f;
	start(&f, *state, "stray", GOOD);
	char *staging = staging_of(f.root, 2, "stray");
	char *junk = tu_path(staging, "data-00003-of-00004");
	FILE *fp = fopen(junk, "w");
	fclose(fp);
	expect_failure(&f, all, NP, DVAR_EINVAL, "holds 'data-00003-of-00004', which no part of this save wrote");
	free(junk);
	free(staging);
}

static void test_format_parts__foreign_entries(void **state)
{
	failing f;
	start(&f, *state, "mine", GOOD);
	char *other = tu_path(f.dir, "other");
	void *blob;
	size_t len;
	assert_int_equal(write_part(other, -1, "theirs", 1, GOOD, NULL, &blob, &len), DVAR_OK);
	dvar_free(f.blobs[1]);
	f.blobs[1] = blob;
	f.lens[1] = len;
	expect_failure(&f, all, NP, DVAR_EINVAL, "part entries #1 belong to another save (part 1 of 3, "
	               "token 'theirs'); this save has 3 parts, token 'mine'");
	free(other);
}

static void test_format_parts__misuse(void **state)
{
	const char *dir = *state;
	char *ck = tu_path(dir, "ck");
	dvar_write_options o = options();
	dvar_writer *w, *w2;
	static const char *bad_tokens[] = { "", "has space", "dot.dot", "slash/x",
	                                    "0123456789012345678901234567890123456789012345678901234567890123456789" };
	for (size_t i = 0; i < sizeof(bad_tokens) / sizeof(bad_tokens[0]); i++) {
		assert_int_equal(dvar_writer_open_part(&w, ck, bad_tokens[i], 0, 2, &o), DVAR_EINVAL);
		tu_assert_error_contains("must be 1 to 64 characters of [A-Za-z0-9_-]");
		assert_int_equal(dvar_writer_abort_parts(ck, bad_tokens[i]), DVAR_EINVAL);
	}
	assert_int_equal(dvar_writer_open_part(&w, ck, "t", 2, 2, &o), DVAR_EINVAL);
	assert_int_equal(dvar_writer_open_part(&w, ck, "t", -1, 2, &o), DVAR_EINVAL);
	assert_int_equal(dvar_writer_open_part(&w, ck, "t", 0, 0, &o), DVAR_EINVAL);
	assert_int_equal(dvar_writer_open_part(&w, ck, "t", 0, 100000, &o), DVAR_EINVAL);
	/* The same part twice. */
	assert_int_equal(dvar_writer_open_part(&w, ck, "t", 1, 2, &o), DVAR_OK);
	assert_int_equal(dvar_writer_open_part(&w2, ck, "t", 1, 2, &o), DVAR_EEXISTS);
	tu_assert_error_contains("part 1 of this save was opened already");
	/* A part writer of several commits through its chief only. */
	assert_int_equal(dvar_writer_commit(w), DVAR_EINVAL);
	tu_assert_error_contains("dvar_writer_commit_parts");
	void *blob;
	size_t len;
	assert_int_equal(dvar_writer_commit_parts(w, NULL, NULL, 0), DVAR_EINVAL);
	tu_assert_error_contains("must call dvar_writer_finish_part first");
	float x = 1;
	dvar_shape s = { 0 };
	assert_int_equal(dvar_writer_add(w, "x", DVAR_FLOAT32, &s, NULL, &x), DVAR_OK);
	assert_int_equal(dvar_writer_set_attr(w, "y", "kind", "plain"), DVAR_ENOTFOUND);
	tu_assert_error_contains("variable 'y' has not been added");
	assert_int_equal(dvar_writer_finish_part(w, &blob, &len), DVAR_OK);
	void *again = &x;
	assert_int_equal(dvar_writer_finish_part(w, &again, &len), DVAR_EINVAL);
	assert_null(again);
	assert_int_equal(dvar_writer_add(w, "z", DVAR_FLOAT32, &s, NULL, &x), DVAR_EINVAL);
	tu_assert_error_contains("already finished");
	/* A non-chief part freed after finishing leaves the staging directory. */
	dvar_writer_free(w);
	char *staging = tu_path(dir, ".ck.dvartmp-t");
	char *data = tu_path(staging, "data-00001-of-00002");
	assert_true(dvar_fs_exists(data));
	assert_int_equal(dvar_writer_abort_parts(ck, "t"), DVAR_OK);
	assert_false(dvar_fs_exists(staging));
	assert_false(dvar_fs_exists(ck));
	/* Open refuses an existing checkpoint. */
	assert_int_equal(mkdir(ck, 0777), 0);
	assert_int_equal(dvar_writer_open_part(&w, ck, "t", 0, 2, &o), DVAR_EEXISTS);
	dvar_free(blob);
	free(data);
	free(staging);
	free(ck);
}

/* One part of one: the part API commits like dvar_writer_commit. */
static void test_format_parts__one_part(void **state)
{
	const char *dir = *state;
	char *ck = tu_path(dir, "ck");
	dvar_write_options o = options();
	dvar_writer *w;
	int32_t v[3] = { 7, 8, 9 }, got[3];
	dvar_shape s;
	dvar_shape_init(&s, 1, (int64_t[]){ 3 });
	assert_int_equal(dvar_writer_open_part(&w, ck, "solo", 0, 1, &o), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "v", DVAR_INT32, &s, NULL, v), DVAR_OK);
	void *blob;
	size_t len;
	assert_int_equal(dvar_writer_finish_part(w, &blob, &len), DVAR_OK);
	const void *b = blob;
	assert_int_equal(dvar_writer_commit_parts(w, &b, &len, 1), DVAR_OK);
	dvar_writer_free(w);
	dvar_free(blob);
	dvar_reader *r;
	assert_int_equal(dvar_reader_open(&r, ck, NULL), DVAR_OK);
	read_named(r, "v", got, sizeof(got));
	assert_memory_equal(got, v, sizeof(v));
	dvar_reader_free(r);
	char *data = tu_path(ck, "data-00000-of-00001");
	assert_true(dvar_fs_exists(data));
	free(data);
	free(ck);
}

/* ---------------------------------------------------------------- crashes */

/* A part process killed before its entries exist: nothing is committed. */
static void test_format_parts__part_killed(void **state)
{
	const char *dir = *state;
	static const char *points[] = { "chunk-written", "data-synced" };
	for (size_t k = 0; k < 2; k++) {
		char name[32], token[32];
		snprintf(name, sizeof(name), "root%zu", k);
		snprintf(token, sizeof(token), "kill%zu", k);
		char *root = tu_path(dir, name);
		assert_int_equal(save_single(root, 1), DVAR_OK);
		char *pointer = read_pointer(root);
		pid_t kid = fork_part(dir, root, 2, token, 1, GOOD, points[k]);
		dvar_writer *chief;
		void *blobs[NP] = { NULL };
		size_t lens[NP] = { 0 };
		assert_int_equal(write_part(root, 2, token, 0, GOOD, &chief, &blobs[0], &lens[0]), DVAR_OK);
		assert_int_equal(write_part(root, 2, token, 2, GOOD, NULL, &blobs[2], &lens[2]), DVAR_OK);
		assert_int_equal(wait_exit(kid), -SIGKILL);
		/* The chief has no entries from part 1: it cannot commit. */
		const void *have[2] = { blobs[0], blobs[2] };
		size_t have_lens[2] = { lens[0], lens[2] };
		assert_int_equal(dvar_writer_commit_parts(chief, have, have_lens, 2), DVAR_EINVAL);
		tu_assert_error_contains("part 1 of 3 is missing");
		dvar_writer_free(chief);
		check_untouched(root, pointer, 2);
		assert_int_equal(dvar_writer_abort_step_parts(root, 2, token), DVAR_OK);
		char *staging = staging_of(root, 2, token);
		assert_false(dvar_fs_exists(staging));
		check_untouched(root, pointer, 2);
		free(staging);
		dvar_free(blobs[0]);
		dvar_free(blobs[2]);
		free(pointer);
		free(root);
	}
}

/* The chief killed at each point of its commit. */
static void test_format_parts__chief_killed(void **state)
{
	const char *dir = *state;
	static const struct {
		const char *point;
		int committed, latest2;
	} points[] = {
		{ "data-synced", 0, 0 }, { "index-written", 0, 0 }, { "renamed", 1, 0 },
		{ "before-pointer", 1, 0 }, { "pointer-written", 1, 1 },
	};
	for (size_t k = 0; k < sizeof(points) / sizeof(points[0]); k++) {
		char name[32], token[32];
		snprintf(name, sizeof(name), "croot%zu", k);
		snprintf(token, sizeof(token), "chief%zu", k);
		char *root = tu_path(dir, name);
		assert_int_equal(save_single(root, 1), DVAR_OK);
		char *pointer = read_pointer(root);
		void *blobs[NP];
		size_t lens[NP];
		for (int p = 1; p < NP; p++)
			assert_int_equal(write_part(root, 2, token, p, GOOD, NULL, &blobs[p], &lens[p]), DVAR_OK);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			dvar_writer *chief;
			crash_point = points[k].point;
			dvar__fault_hook = crash_hook;
			if (write_part(root, 2, token, 0, GOOD, &chief, &blobs[0], &lens[0]))
				_exit(2);
			dvar_writer_commit_parts(chief, (const void *const *)blobs, lens, NP);
			_exit(0);
		}
		assert_int_equal(wait_exit(pid), -SIGKILL);
		char *ck = tu_path(root, "ckpt-2");
		if (!points[k].committed) {
			check_untouched(root, pointer, 2);
		} else {
			check_good(ck); /* whatever is there is whole */
			if (points[k].latest2) {
				check_good(root);
			} else {
				char *text = read_pointer(root);
				assert_string_equal(text, pointer);
				free(text);
			}
		}
		free(ck);
		assert_int_equal(dvar_writer_abort_step_parts(root, 2, token), DVAR_OK);
		for (int p = 1; p < NP; p++)
			dvar_free(blobs[p]);
		free(pointer);
		free(root);
	}
}

/* ---------------------------------------------------------------- hostile entries */

static void test_format_parts__hostile_entries(void **state)
{
	const char *dir = *state;
	char *ck = tu_path(dir, "ck");
	void *blob;
	size_t len;
	assert_int_equal(write_part(ck, -1, "h", 2, GOOD, NULL, &blob, &len), DVAR_OK);
	dvar_part p;
	assert_int_equal(dvar_part_decode(&p, blob, len), DVAR_OK);
	assert_int_equal(p.part, 2);
	assert_int_equal(p.nparts, NP);
	assert_string_equal(p.token, "h");
	assert_int_equal(p.num_vars, 3);
	assert_string_equal(p.vars[0].name, "big");
	assert_string_equal(p.vars[1].name, "counter");
	assert_string_equal(p.vars[2].name, "emb");
	assert_int_equal(p.vars[2].num_attrs, 2);
	dvar_part_clear(&p);

	/* Every single-byte change and every truncation, checksum made right again:
	 * decoding fails cleanly or yields something self-consistent. */
	unsigned char *m = malloc(len);
	for (size_t i = 0; i + 4 < len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			memcpy(m, blob, len);
			m[i] ^= (unsigned char)(1u << bit);
			uint32_t crc = dvar_crc32c(m, len - 4);
			memcpy(m + len - 4, &crc, 4); /* little-endian host */
			int rc = dvar_part_decode(&p, m, len);
			assert_true(rc == DVAR_OK || rc == DVAR_ECORRUPT || rc == DVAR_EVERSION);
			dvar_part_clear(&p);
		}
	}
	for (size_t n = 0; n < len; n++) {
		memcpy(m, blob, n);
		if (n >= 4) {
			uint32_t crc = dvar_crc32c(m, n - 4);
			memcpy(m + n - 4, &crc, 4);
		}
		assert_int_equal(dvar_part_decode(&p, m, n), DVAR_ECORRUPT);
	}
	free(m);
	dvar_free(blob);

	/* Made by hand: a slice in another part's file, a chunk beyond the file. */
	dvar_slice_entry se = { 0 };
	dvar_chunk c = { 0, 8, 0, DVAR_CODEC_RAW, 0 };
	uint32_t bcrc = 0;
	se.slice.rank = 1;
	se.slice.length[0] = 2;
	se.file = 1;
	se.raw_bytes = 8;
	se.chunk_size = 4096;
	se.num_chunks = 1;
	se.chunks = &c;
	se.num_block_crcs = 1;
	se.block_crcs = &bcrc;
	dvar_var_entry v = { 0 };
	v.name = "v";
	v.dtype = DVAR_FLOAT32;
	v.shape.rank = 1;
	v.shape.dims[0] = 2;
	v.num_slices = 1;
	v.slices = &se;
	v.raw_bytes = 8;
	v.stored_bytes = 8;
	dvar_var_entry *vp = &v;
	dvar_part hp = { 0, 2, "tok", 0, NULL, 4096, 1, NULL };
	dvar_bytes b = { 0 };
	assert_int_equal(dvar_part_encode(&b, &hp, &vp), DVAR_OK);
	assert_int_equal(dvar_part_decode(&p, b.data, b.len), DVAR_ECORRUPT);
	tu_assert_error_contains("part 0 entries: variable 'v' slice #0 is in data file 1");
	se.file = 0;
	hp.file_size = 0;
	b.len = 0;
	assert_int_equal(dvar_part_encode(&b, &hp, &vp), DVAR_OK);
	assert_int_equal(dvar_part_decode(&p, b.data, b.len), DVAR_ECORRUPT);
	tu_assert_error_contains("chunk 0 lies beyond the data file's 0 bytes");
	/* Byte counts that do not add up. */
	hp.file_size = 4096;
	v.raw_bytes = 12;
	b.len = 0;
	assert_int_equal(dvar_part_encode(&b, &hp, &vp), DVAR_OK);
	assert_int_equal(dvar_part_decode(&p, b.data, b.len), DVAR_ECORRUPT);
	tu_assert_error_contains("part 0 entry of variable 'v': byte counts do not add up");
	/* The same, right. */
	v.raw_bytes = 8;
	b.len = 0;
	assert_int_equal(dvar_part_encode(&b, &hp, &vp), DVAR_OK);
	assert_int_equal(dvar_part_decode(&p, b.data, b.len), DVAR_OK);
	dvar_part_clear(&p);
	/* A variable count of 2^40 must fail before anything is allocated. */
	b.len = 0;
	dvar_bytes_put(&b, DVAR_PART_MAGIC, 4);
	dvar_bytes_put_u32(&b, DVAR_PART_VERSION);
	dvar_bytes_put_varint(&b, 0);
	dvar_bytes_put_varint(&b, 1);
	dvar_bytes_put_varint(&b, 1);
	dvar_bytes_put(&b, "t", 1);
	dvar_bytes_put_varint(&b, 0); /* data file size */
	dvar_bytes_put_varint(&b, 0); /* no chain */
	dvar_bytes_put_varint(&b, UINT64_C(1) << 40);
	dvar_bytes_put_u32(&b, dvar_crc32c(b.data, b.len));
	assert_int_equal(dvar_part_decode(&p, b.data, b.len), DVAR_ECORRUPT);
	tu_assert_error_contains("truncated or malformed");
	/* Another version of the encoding. */
	b.len = 0;
	dvar_bytes_put(&b, DVAR_PART_MAGIC, 4);
	dvar_bytes_put_u32(&b, 9);
	dvar_bytes_put_varint(&b, 0);
	dvar_bytes_put_u32(&b, dvar_crc32c(b.data, b.len));
	assert_int_equal(dvar_part_decode(&p, b.data, b.len), DVAR_EVERSION);
	free(b.data);
	assert_int_equal(dvar_part_decode(&p, NULL, 0), DVAR_ECORRUPT);
	free(ck);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_parts__threads, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__processes, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__missing_part, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__duplicate_part, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__overlap, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__dtype_disagrees, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__shape_disagrees, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__attrs_disagree, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__truncated_entries, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__flipped_entries, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__short_data_file, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__missing_data_file, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__stray_file, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__foreign_entries, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__misuse, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__one_part, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__part_killed, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__chief_killed, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_parts__hostile_entries, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/parts", tests, NULL, NULL);
}
