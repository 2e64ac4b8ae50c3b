/*
 * tests/unit/format/test_format_tmp.c - temporary names (format/fsutil.c,
 * docs/FORMAT.md "Temporary names"): made and recognised by one rule, left
 * by writers killed before committing, listed by dvar_root_list with their
 * size and whether their writer runs, and swept by the next writer into the
 * same place only when their writer is gone from this host; a writer that
 * fails or is freed uncommitted leaves none.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

/* This host as temporary names carry it. */
static void this_host(char host[DVAR_TMP_HOST_MAX + 1])
{
	char tag[DVAR_TMP_TAG_MAX + 1], name[DVAR_TMP_TAG_MAX + 16];
	dvar_tmp_info t;
	dvar_tmp_tag(tag);
	snprintf(name, sizeof(name), ".x" DVAR_TMP_MARK "%s", tag);
	assert_int_equal(dvar_tmp_parse(name, &t), 1);
	snprintf(host, DVAR_TMP_HOST_MAX + 1, "%s", t.host);
}

static void test_format_tmp__names(void **state)
{
	(void)state;
	char *name, host[DVAR_TMP_HOST_MAX + 1];
	dvar_tmp_info t;
	this_host(host);
	assert_true(host[0]);
	assert_int_equal(strspn(host, DVAR_TOKEN_CHARS), strlen(host));
	/* A new name: a hidden sibling naming its target, this host and pid. */
	assert_int_equal(dvar_tmp_name("some/dir/ckpt-100", NULL, &name), DVAR_OK);
	assert_int_equal(strncmp(name, "some/dir/.ckpt-100" DVAR_TMP_MARK, 27), 0);
	assert_int_equal(dvar_tmp_parse(strrchr(name, '/') + 1, &t), 1);
	assert_int_equal(t.target_len, strlen("ckpt-100"));
	assert_string_equal(t.host, host);
	assert_int_equal(t.pid, (long)getpid());
	assert_int_equal(dvar_tmp_writer_alive(&t), 1);
	char *again;
	assert_int_equal(dvar_tmp_name("some/dir/ckpt-100", NULL, &again), DVAR_OK);
	assert_string_not_equal(name, again); /* random: two writers never share one */
	free(again);
	free(name);
	/* A name without a directory; a given tag (a part token). */
	assert_int_equal(dvar_tmp_name("model.ckpt.index", "tok", &name), DVAR_OK);
	assert_string_equal(name, ".model.ckpt.index" DVAR_TMP_MARK "tok");
	assert_int_equal(dvar_tmp_parse(name, &t), 1);
	assert_int_equal(t.target_len, strlen("model.ckpt.index"));
	assert_string_equal(t.host, "");
	assert_int_equal(t.pid, 0);
	assert_int_equal(dvar_tmp_writer_alive(&t), -1);
	free(name);
	/* Hosts with '-' are read from the right. */
	assert_int_equal(dvar_tmp_parse(".c" DVAR_TMP_MARK "gpu-node-7-4242-abcdefghij12", &t), 1);
	assert_string_equal(t.host, "gpu-node-7");
	assert_int_equal(t.pid, 4242);
	assert_int_equal(dvar_tmp_writer_alive(&t), -1); /* another host */
	/* A tag that is not <host>-<pid>-<random>: a temporary name, writer unknown. */
	const char *unknown[] = { ".c.dvartmp-4242-abcdefghij12", ".c.dvartmp-h-x42-abcdefghij12",
		                  ".c.dvartmp-h-42-ABCDEFGHIJ12", ".c.dvartmp-h-42-abc",
		                  ".c.dvartmp-h--abcdefghij12", ".c.dvartmp-h-0-abcdefghij12" };
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		assert_int_equal(dvar_tmp_parse(unknown[i], &t), 1);
		assert_int_equal(t.pid, 0);
		assert_string_equal(t.host, "");
	}
	/* Not temporary names. */
	const char *others[] = { "ckpt-1", "c.dvartmp-h-42-abcdefghij12", "..dvartmp-h-42-abcdefghij12",
		                 ".c.dvartmp-", ".c.dvartmp-a.b", ".ckpt-1.tmp-1234-0",
		                 ".ckpt-1.deleting", ".c.dvartmp-" /* 65 bytes: */
		                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		if (dvar_tmp_parse(others[i], &t))
			fail_msg("'%s' read as a temporary name", others[i]);
	/* The last mark counts: a target may hold one. */
	assert_int_equal(dvar_tmp_parse(".a.dvartmp-b.dvartmp-t", &t), 1);
	assert_int_equal(t.target_len, strlen("a.dvartmp-b"));
}

#define LEFT_FLOATS 600000

static int writes_and_dies(const char *root, int tf)
{
	/* More than the TensorBundle writer's 1 MiB buffer, so some reaches its file. */
	dvar_shape sh;
	dvar_shape_init(&sh, 1, (int64_t[]){ LEFT_FLOATS });
	static float v[LEFT_FLOATS];
	if (tf) {
		char *prefix = tu_path(root, "model.ckpt-3");
		dvar_tf_writer *w;
		if (dvar_tf_writer_open(&w, prefix, NULL) || dvar_tf_writer_add(w, "v", DVAR_FLOAT32, &sh, NULL, v))
			return 2;
		_exit(1); /* no commit, no free: the temporary files stay */
	}
	dvar_writer *w;
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	o.flags = DVAR_WRITE_NO_FSYNC;
	if (dvar_writer_open_step(&w, root, 2, &o) || dvar_writer_add(w, "v", DVAR_FLOAT32, &sh, NULL, v))
		return 2;
	kill(getpid(), SIGKILL);
	return 3;
}

/* A child that writes into root and dies before committing; its pid, reaped
 * unless zombie (then the caller reaps it). */
static pid_t leave_leftover(const char *root, int tf, int zombie)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(writes_and_dies(root, tf));
	siginfo_t info;
	memset(&info, 0, sizeof(info));
	assert_int_equal(waitid(P_PID, (id_t)pid, &info, WEXITED | (zombie ? WNOWAIT : 0)), 0);
	assert_true(tf ? info.si_code == CLD_EXITED && info.si_status == 1
	               : info.si_code == CLD_KILLED && info.si_status == SIGKILL);
	return pid;
}

/* A leftover made by hand: root/name, a directory holding one file of 10 bytes. */
static void make_leftover(const char *root, const char *name)
{
	char *d = tu_path(root, name), *f = tu_path(d, "data");
	assert_int_equal(mkdir(d, 0755), 0);
	FILE *fp = fopen(f, "w");
	assert_non_null(fp);
	fputs("0123456789", fp);
	fclose(fp);
	free(f);
	free(d);
}

static int exists_in(const char *root, const char *name)
{
	char *p = tu_path(root, name);
	struct stat st;
	int yes = lstat(p, &st) == 0;
	free(p);
	return yes;
}

/* The leftover of root whose target is target: its index, or -1. */
static long find_leftover(const dvar_root_list *l, const char *target, dvar_root_leftover *o)
{
	for (size_t i = 0; i < dvar_root_list_num_leftovers(l); i++) {
		assert_int_equal(dvar_root_list_leftover(l, i, o), DVAR_OK);
		if (!strcmp(o->target, target))
			return (long)i;
	}
	return -1;
}

/* Whether the writer of root's leftover for target runs, as listed (there must be one). */
static int writer_alive(const char *root, const char *target)
{
	dvar_root_list *l;
	dvar_root_leftover o;
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	assert_true(find_leftover(l, target, &o) >= 0);
	dvar_root_list_free(l);
	return o.writer_alive;
}

static void test_format_tmp__sweep(void **state)
{
	const char *root = *state;
	char host[DVAR_TMP_HOST_MAX + 1], name[256];
	dvar_root_list *l;
	dvar_root_leftover o;
	this_host(host);
	/* Step 1 committed; a writer of step 2 killed (its staging directory stays). */
	dvar_writer *w;
	dvar_write_options opts = DVAR_WRITE_OPTIONS_INIT;
	opts.flags = DVAR_WRITE_NO_FSYNC;
	dvar_shape sh;
	dvar_shape_init(&sh, 1, (int64_t[]){ 4 });
	const float four[4] = { 1, 2, 3, 4 };
	assert_int_equal(dvar_writer_open_step(&w, root, 1, &opts), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "v", DVAR_FLOAT32, &sh, NULL, four), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	pid_t dead = leave_leftover(root, 0, 0);
	/* Others' leftovers: a running writer (this process; pid 1), another host,
	 * a multi-part save's own token, and a dead writer's pointer file. */
	snprintf(name, sizeof(name), ".ckpt-5" DVAR_TMP_MARK "%s-%ld-aaaaaaaaaaaa", host, (long)getpid());
	make_leftover(root, name);
	snprintf(name, sizeof(name), ".ckpt-6" DVAR_TMP_MARK "%s-1-aaaaaaaaaaaa", host);
	make_leftover(root, name);
	snprintf(name, sizeof(name), ".ckpt-7" DVAR_TMP_MARK "not-%.20s-%ld-aaaaaaaaaaaa", host, (long)dead);
	make_leftover(root, name);
	make_leftover(root, ".ckpt-8" DVAR_TMP_MARK "cafe01");
	snprintf(name, sizeof(name), ".checkpoint" DVAR_TMP_MARK "%s-%ld-bbbbbbbbbbbb", host, (long)dead);
	char *pointer_tmp = tu_path(root, name);
	FILE *fp = fopen(pointer_tmp, "w");
	assert_non_null(fp);
	fputs("model_checkpoint_path: \"ckpt-2\"\n", fp);
	fclose(fp);
	free(pointer_tmp);

	/* The listing shows each, with its writer's state; the checkpoints are unchanged. */
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	assert_int_equal(dvar_root_list_count(l), 1);
	assert_int_equal(dvar_root_list_num_leftovers(l), 6);
	assert_true(find_leftover(l, "ckpt-2", &o) >= 0);
	assert_int_equal(o.pid, dead);
	assert_string_equal(o.host, host);
	assert_int_equal(o.writer_alive, 0);
	assert_true(o.bytes >= LEFT_FLOATS * sizeof(float)); /* its data file */
	assert_true(find_leftover(l, "ckpt-5", &o) >= 0);
	assert_int_equal(o.writer_alive, 1);
	assert_int_equal(o.bytes, 10);
	assert_true(find_leftover(l, "ckpt-6", &o) >= 0);
	assert_int_equal(o.writer_alive, 1);
	assert_true(find_leftover(l, "ckpt-7", &o) >= 0);
	assert_int_equal(o.writer_alive, -1);
	assert_true(find_leftover(l, "ckpt-8", &o) >= 0);
	assert_int_equal(o.writer_alive, -1);
	assert_int_equal(o.pid, 0);
	assert_string_equal(o.host, "");
	assert_true(find_leftover(l, "checkpoint", &o) >= 0);
	assert_int_equal(o.writer_alive, 0);
	assert_int_equal(o.bytes, strlen("model_checkpoint_path: \"ckpt-2\"\n"));
	assert_int_equal(dvar_root_list_leftover(l, 6, &o), DVAR_EINVAL);
	/* Sorted by name. */
	dvar_root_leftover a, b;
	for (size_t i = 1; i < 6; i++) {
		assert_int_equal(dvar_root_list_leftover(l, i - 1, &a), DVAR_OK);
		assert_int_equal(dvar_root_list_leftover(l, i, &b), DVAR_OK);
		assert_true(strcmp(a.name, b.name) < 0);
	}
	dvar_root_list_free(l);

	/* The next writer into the root removes the dead writers' leftovers, and only those. */
	assert_int_equal(dvar_writer_open_step(&w, root, 3, &opts), DVAR_OK);
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	assert_int_equal(dvar_root_list_num_leftovers(l), 5); /* + the new writer's own */
	assert_int_equal(find_leftover(l, "ckpt-2", &o), -1);
	assert_int_equal(find_leftover(l, "checkpoint", &o), -1);
	assert_true(find_leftover(l, "ckpt-3", &o) >= 0);
	assert_int_equal(o.writer_alive, 1);
	for (const char *const *t = (const char *const[]){ "ckpt-5", "ckpt-6", "ckpt-7", "ckpt-8", NULL }; *t; t++)
		assert_true(find_leftover(l, *t, &o) >= 0);
	dvar_root_list_free(l);
	/* Freed uncommitted, a writer removes its own; committed, it leaves none either. */
	dvar_writer_free(w);
	assert_int_equal(dvar_writer_open_step(&w, root, 4, &opts), DVAR_OK);
	assert_int_equal(dvar_writer_add(w, "v", DVAR_FLOAT32, &sh, NULL, four), DVAR_OK);
	assert_int_equal(dvar_writer_commit(w), DVAR_OK);
	dvar_writer_free(w);
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	assert_int_equal(dvar_root_list_num_leftovers(l), 4);
	assert_int_equal(find_leftover(l, "ckpt-3", &o), -1);
	assert_int_equal(dvar_root_list_count(l), 2);
	dvar_root_list_free(l);
	assert_false(exists_in(root, "ckpt-2"));

	/* dvar_writer_open into a directory sweeps it as well. */
	leave_leftover(root, 0, 0);
	char *ck = tu_path(root, "ckpt-9");
	assert_int_equal(dvar_writer_open(&w, ck, &opts), DVAR_OK);
	dvar_writer_free(w);
	free(ck);
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	assert_int_equal(dvar_root_list_num_leftovers(l), 4);
	assert_int_equal(find_leftover(l, "ckpt-2", &o), -1);
	dvar_root_list_free(l);
}

static void *hold(void *fd)
{
	char c;
	return read((int)(intptr_t)fd, &c, 1) < 0 ? NULL : fd; /* until the pipe closes */
}

/* The state letter of pid in /proc/<pid>/stat, or 0. */
static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = '\0';
	const char *end = strrchr(buf, ')');
	return end && end[1] == ' ' ? end[2] : 0;
}

/* A writer that died but is not reaped yet (a zombie: under a container's
 * first process, maybe for good) is gone too; a process whose main thread
 * called pthread_exit shows as a zombie as well, and runs. */
static void test_format_tmp__zombie(void **state)
{
	const char *root = *state;
	char host[DVAR_TMP_HOST_MAX + 1], name[256];
	dvar_root_list *l;
	dvar_writer *w;
	dvar_write_options opts = DVAR_WRITE_OPTIONS_INIT;
	opts.flags = DVAR_WRITE_NO_FSYNC;
	this_host(host);

	/* Its main thread gone, a thread of it still at work. */
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t half = fork();
	assert_true(half >= 0);
	if (half == 0) {
		pthread_t t;
		close(p[1]);
		if (pthread_create(&t, NULL, hold, (void *)(intptr_t)p[0]) != 0)
			_exit(2);
		pthread_exit(NULL);
	}
	close(p[0]);
	for (int i = 0; i < 500 && proc_state(half) != 'Z'; i++)
		usleep(10000);
	assert_int_equal(proc_state(half), 'Z');
	snprintf(name, sizeof(name), ".ckpt-5" DVAR_TMP_MARK "%s-%ld-aaaaaaaaaaaa", host, (long)half);
	make_leftover(root, name);
	assert_int_equal(writer_alive(root, "ckpt-5"), 1);
	assert_int_equal(dvar_writer_open_step(&w, root, 3, &opts), DVAR_OK);
	dvar_writer_free(w);
	assert_true(exists_in(root, name));
	/* Its last thread ends: now a zombie whole, and gone. */
	close(p[1]);
	siginfo_t info;
	memset(&info, 0, sizeof(info));
	assert_int_equal(waitid(P_PID, (id_t)half, &info, WEXITED | WNOWAIT), 0);
	assert_int_equal(writer_alive(root, "ckpt-5"), 0);

	/* A writer killed before its commit, not reaped. */
	pid_t zombie = leave_leftover(root, 0, 1);
	assert_int_equal(kill(zombie, 0), 0); /* what a pid check alone would believe */
	assert_int_equal(writer_alive(root, "ckpt-2"), 0);
	assert_int_equal(dvar_writer_open_step(&w, root, 4, &opts), DVAR_OK);
	dvar_writer_free(w);
	assert_int_equal(dvar_root_list_open(&l, root), DVAR_OK);
	assert_int_equal(dvar_root_list_num_leftovers(l), 0);
	dvar_root_list_free(l);
	int status;
	assert_int_equal(waitpid(zombie, &status, 0), zombie);
	assert_int_equal(waitpid(half, &status, 0), half);
}

static void test_format_tmp__tf_writer(void **state)
{
	const char *dir = *state;
	dvar_root_list *l;
	dvar_root_leftover o;
	/* A TensorBundle writer killed: its two temporary files stay, recognisable. */
	leave_leftover(dir, 1, 0);
	assert_int_equal(dvar_root_list_open(&l, dir), DVAR_OK);
	assert_int_equal(dvar_root_list_num_leftovers(l), 1); /* the index is written at commit */
	assert_true(find_leftover(l, "model.ckpt-3.data-00000-of-00001", &o) >= 0);
	assert_int_equal(o.writer_alive, 0);
	assert_true(o.bytes >= (1u << 20));
	dvar_root_list_free(l);
	/* The next TensorBundle writer there removes them; freed uncommitted, its own go too. */
	char *prefix = tu_path(dir, "model.ckpt-4");
	dvar_tf_writer *w;
	assert_int_equal(dvar_tf_writer_open(&w, prefix, NULL), DVAR_OK);
	assert_int_equal(dvar_root_list_open(&l, dir), DVAR_OK);
	assert_int_equal(dvar_root_list_num_leftovers(l), 1);
	assert_true(find_leftover(l, "model.ckpt-4.data-00000-of-00001", &o) >= 0);
	assert_int_equal(o.writer_alive, 1);
	dvar_root_list_free(l);
	dvar_tf_writer_free(w);
	assert_int_equal(dvar_root_list_open(&l, dir), DVAR_OK);
	assert_int_equal(dvar_root_list_num_leftovers(l), 0);
	dvar_root_list_free(l);
	free(prefix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_tmp__names),
		cmocka_unit_test_setup_teardown(test_format_tmp__sweep, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tmp__zombie, tu_setup_dir, tu_teardown_dir),
		cmocka_unit_test_setup_teardown(test_format_tmp__tf_writer, tu_setup_dir, tu_teardown_dir),
	};
	return cmocka_run_group_tests_name("format/tmp", tests, NULL, NULL);
}
