/*
 * tests/unit/format/test_format_perms.c - reading checkpoints without write
 * access: a root whose files and folders are read-only, read by a user who
 * owns none of it; a root on a read-only file system (a read-only bind
 * mount); a root in another user's private folder, which must fail clearly;
 * a save into a read-only root, which must fail clearly and leave nothing;
 * and the CLI's ls, verify and export reading a read-only root.
 *
 * Root ignores permission bits, so when the test runs as root the reading
 * happens in a child process that has become `nobody` (uid and gid 65534,
 * no supplementary groups); otherwise in a child of this user. Children do
 * not use cmocka's asserts (a failure would return into the parent's test
 * runner): they print what is wrong and exit with the number of problems,
 * or 77 with a reason to skip.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "dvar/dvar.h"
#include "format/format.h"

#define N 300000 /* float32 elements of "a": several chunks */
#define NB 5
#define NOBODY 65534
#define SKIP_STATUS 77

static float a_at(int64_t step, size_t i)
{
	return (float)step * 1000.0f + (float)(i % 977);
}

static int64_t b_at(int64_t step, size_t i)
{
	return step * 1099511627776LL + (int64_t)i;
}

static int save_step(const char *root, int64_t step)
{
	float *a = malloc(N * sizeof *a);
	int64_t b[NB];
	const int64_t da[1] = { N }, db[1] = { NB };
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_shape sa, sb;
	dvar_writer *w = NULL;
	int rc;

	if (!a)
		return DVAR_ENOMEM;
	for (size_t i = 0; i < N; i++)
		a[i] = a_at(step, i);
	for (size_t i = 0; i < NB; i++)
		b[i] = b_at(step, i);
	o.chunk_size = 65536;
	dvar_shape_init(&sa, 1, da);
	dvar_shape_init(&sb, 1, db);
	rc = dvar_writer_open_step(&w, root, step, &o);
	if (!rc)
		rc = dvar_writer_add(w, "a", DVAR_FLOAT32, &sa, NULL, a);
	if (!rc)
		rc = dvar_writer_add(w, "b", DVAR_INT64, &sb, NULL, b);
	if (!rc)
		rc = dvar_writer_commit(w);
	dvar_writer_free(w);
	free(a);
	return rc;
}

/* ------------------------------------------------ in the child processes */

static int problems;

static void problem(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "FAIL: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	problems++;
}

/* Open path, check it is ckpt-<step>, read and verify every variable. */
static void read_all(const char *path, int64_t step)
{
	char want[32];
	dvar_reader *r = NULL;
	float *a = malloc(N * sizeof *a);
	int64_t b[NB];
	uint64_t nbad = 1;
	size_t ia, ib;

	snprintf(want, sizeof want, "ckpt-%lld", (long long)step);
	if (!a || dvar_reader_open(&r, path, NULL) != DVAR_OK) {
		problem("opening %s: %s", path, dvar_error_last()->message);
		free(a);
		return;
	}
	if (!strstr(dvar_reader_path(r), want))
		problem("%s opened %s, not %s", path, dvar_reader_path(r), want);
	if (dvar_reader_find(r, "a", &ia) != DVAR_OK || dvar_reader_find(r, "b", &ib) != DVAR_OK ||
	    dvar_reader_read(r, ia, NULL, a, N * sizeof *a) != DVAR_OK ||
	    dvar_reader_read(r, ib, NULL, b, sizeof b) != DVAR_OK) {
		problem("reading %s: %s", path, dvar_error_last()->message);
	} else {
		for (size_t i = 0; i < N; i++)
			if (a[i] != a_at(step, i)) {
				problem("%s: a[%zu] is %g, not %g", path, i, (double)a[i],
				        (double)a_at(step, i));
				break;
			}
		for (size_t i = 0; i < NB; i++)
			if (b[i] != b_at(step, i))
				problem("%s: b[%zu] is %lld", path, i, (long long)b[i]);
	}
	if (dvar_reader_verify(r, NULL, NULL, &nbad) != DVAR_OK || nbad != 0)
		problem("verifying %s: %s", path, nbad ? "bad chunks" : dvar_error_last()->message);
	dvar_reader_free(r);
	free(a);
}

/* The root's listing: steps 1 and 2, 2 the latest, and `leftovers`. */
static void list_root(const char *root, size_t leftovers)
{
	dvar_root_list *l = NULL;
	dvar_root_entry e;

	if (dvar_root_list_open(&l, root) != DVAR_OK) {
		problem("listing %s: %s", root, dvar_error_last()->message);
		return;
	}
	if (dvar_root_list_count(l) != 2 || dvar_root_list_num_leftovers(l) != leftovers)
		problem("%s lists %zu checkpoints and %zu leftovers, not 2 and %zu", root,
		        dvar_root_list_count(l), dvar_root_list_num_leftovers(l), leftovers);
	else if (dvar_root_list_get(l, 1, &e) != DVAR_OK || e.step != 2 || !e.is_latest)
		problem("%s: ckpt-2 is not the latest", root);
	dvar_root_list_free(l);
}

/* dvar_restore of the root's latest into W = 1 x R = 2, read back. */
static void restore_root(const char *root)
{
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	dvar_strategy *s = NULL;
	dvar_variable *v[2] = { NULL, NULL };
	float *a = malloc(N * sizeof *a);
	int64_t b[NB];

	so.replicas = 2;
	so.workers = 1;
	if (!a || dvar_strategy_create(&s, &so) != DVAR_OK) {
		problem("a strategy: %s", dvar_error_last()->message);
		free(a);
		return;
	}
	for (int k = 0; k < 2; k++) {
		dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;

		spec.name = k ? "b" : "a";
		spec.dtype = k ? DVAR_INT64 : DVAR_FLOAT32;
		spec.shape.rank = 1;
		spec.shape.dims[0] = k ? NB : N;
		if (dvar_variable_create(&v[k], s, &spec) != DVAR_OK)
			problem("variable %s: %s", spec.name, dvar_error_last()->message);
	}
	if (v[0] && v[1]) {
		if (dvar_restore(s, root, v, 2, NULL) != DVAR_OK)
			problem("restoring %s: %s", root, dvar_error_last()->message);
		else if (dvar_variable_read(v[0], NULL, a, N * sizeof *a) != DVAR_OK ||
		         dvar_variable_read(v[1], NULL, b, sizeof b) != DVAR_OK ||
		         a[N - 1] != a_at(2, N - 1) || b[NB - 1] != b_at(2, NB - 1))
			problem("%s does not restore step 2's values", root);
	}
	for (int k = 0; k < 2; k++)
		dvar_variable_free(v[k]);
	dvar_strategy_free(s);
	free(a);
}

/* The leftovers under the root being read (a reader sweeps none). */
static size_t num_leftovers;

/* Everything a reader does with the root: no write access needed. */
static void read_root(const char *root)
{
	char *ckpt1 = tu_path(root, "ckpt-1");

	read_all(root, 2);
	read_all(ckpt1, 1);
	list_root(root, num_leftovers);
	restore_root(root);
	free(ckpt1);
}

/* A save into root fails with DVAR_EIO naming root and errno's text. */
static void save_fails(const char *root, int err)
{
	int rc = save_step(root, 3);

	if (rc == DVAR_OK)
		problem("a save into %s succeeded", root);
	else if (!strstr(dvar_error_last()->message, root) ||
	         !strstr(dvar_error_last()->message, strerror(err)))
		problem("a save into %s failed with '%s', which does not name the root and '%s'",
		        root, dvar_error_last()->message, strerror(err));
	else
		printf("a save into the read-only root: %s\n", dvar_error_last()->message);
}

/* Become an unprivileged user when root: 0, or a reason in why. */
static int drop_privileges(char *why, size_t cap)
{
	if (geteuid() != 0)
		return 0;
	if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0) {
		snprintf(why, cap, "cannot become nobody (uid %d): %s", NOBODY, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Run fn(arg) in a child process, unprivileged when `drop` is set; the
 * number of problems it found (0 when none), or skip() with the child's
 * reason.
 */
static int in_child(int drop, void (*fn)(void *), void *arg)
{
	int fds[2], status = 0;
	char why[512] = "";
	pid_t pid;
	ssize_t n;

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		if (drop && drop_privileges(why, sizeof why) != 0) {
			if (write(fds[1], why, strlen(why)) < 0)
				_exit(SKIP_STATUS + 1);
			_exit(SKIP_STATUS);
		}
		problems = 0;
		fn(arg);
		fflush(NULL);
		_exit(problems == SKIP_STATUS || problems < 50 ? problems : 50);
	}
	close(fds[1]);
	n = read(fds[0], why, sizeof why - 1);
	why[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status))
		fail_msg("the child died of signal %d", WTERMSIG(status));
	if (why[0])
		print_message("%s\n", why);
	return WEXITSTATUS(status);
}

/* ------------------------------------------------------- in the parent */

typedef struct {
	char *dir;    /* the test's folder, 0755 so that nobody reaches it */
	char *root;   /* dir/root: ckpt-1 and ckpt-2 */
} fixture;

static char tree_buf[16384];
static size_t tree_len;

static int tree_entry(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)type;
	(void)f;
	tree_len += (size_t)snprintf(tree_buf + tree_len, sizeof tree_buf - tree_len,
	                             "%s %o %lld %lld.%09ld\n", path, (unsigned)(st->st_mode & 07777),
	                             (long long)st->st_size, (long long)st->st_mtim.tv_sec,
	                             st->st_mtim.tv_nsec);
	return tree_len >= sizeof tree_buf - 1;
}

/* Names, modes, sizes and times of change of everything under dir
 * (malloc'ed). */
static char *tree_of(const char *dir)
{
	tree_len = 0;
	tree_buf[0] = '\0';
	assert_int_equal(nftw(dir, tree_entry, 16, FTW_PHYS), 0);
	return strdup(tree_buf);
}

static int writable; /* set_mode's argument */

static int set_mode(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)f;
	if (type == FTW_SL)
		return 0;
	/* Folders and files: read-only for everyone, or back to writable. */
	return chmod(path, S_ISDIR(st->st_mode) ? (writable ? 0755 : 0555)
	                                        : (writable ? 0644 : 0444));
}

static void set_writable(const char *dir, int on)
{
	writable = on;
	assert_int_equal(nftw(dir, set_mode, 16, FTW_PHYS), 0);
}

static int setup(void **state)
{
	fixture *fx = calloc(1, sizeof *fx);

	if (!fx)
		return -1;
	fx->dir = tu_mkdtemp();
	fx->root = tu_path(fx->dir, "root");
	if (chmod(fx->dir, 0755) != 0 || mkdir(fx->root, 0755) != 0 ||
	    save_step(fx->root, 1) != DVAR_OK || save_step(fx->root, 2) != DVAR_OK)
		return -1;
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	fixture *fx = *state;

	set_writable(fx->dir, 1);
	tu_rmtree(fx->dir);
	free(fx->dir);
	free(fx->root);
	free(fx);
	return 0;
}

/* The test's folder must be reachable by the unprivileged user. */
static void reach(void *arg)
{
	if (access(arg, R_OK | X_OK) != 0) {
		fprintf(stderr, "%s is not readable by uid %d: %s\n", (char *)arg, (int)getuid(),
		        strerror(errno));
		problems = SKIP_STATUS;
	}
}

static int reachable(const fixture *fx)
{
	if (in_child(1, reach, fx->dir) != 0) {
		print_message("skipped: the test's folder %s is not reachable by an unprivileged "
		              "user (TMPDIR under a private folder?)\n", fx->dir);
		return 0;
	}
	return 1;
}

static void read_and_save(void *arg)
{
	const char *root = arg;

	read_root(root);
	save_fails(root, EACCES);
}

/* A leftover of a save whose process is gone, as a crash leaves it: only a
 * writer may sweep it (docs/FORMAT.md, "Temporary names"). */
static void add_leftover(const char *root)
{
	char host[256] = "", name[400], *path;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	gethostname(host, sizeof host - 1);
	host[32] = '\0';
	for (char *c = host; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
			*c = '_';
	snprintf(name, sizeof name, ".ckpt-3.dvartmp-%s-%ld-abcdefghijkl", host, (long)pid);
	path = tu_path(root, name);
	assert_int_equal(mkdir(path, 0755), 0);
	free(path);
	num_leftovers = 1;
}

/* (1) Read-only files and folders, read by a user who owns none of them
 * (as root: nobody). A save into the root fails and leaves nothing. A
 * leftover of a dead writer stays: reading sweeps nothing. */
static void test_format_perms__readonly_tree(void **state)
{
	fixture *fx = *state;
	char *before, *after;

	if (!reachable(fx))
		skip();
	add_leftover(fx->root);
	set_writable(fx->root, 0);
	before = tree_of(fx->dir);
	assert_int_equal(in_child(1, read_and_save, fx->root), 0);
	after = tree_of(fx->dir);
	assert_string_equal(after, before);
	free(after);

	/* Read by this process's user too (as root the bits do not stop a
	 * write): reading creates, changes and removes nothing. */
	read_root(fx->root);
	assert_int_equal(problems, 0);
	after = tree_of(fx->dir);
	assert_string_equal(after, before);
	free(after);
	free(before);
	num_leftovers = 0;
}

/* A TensorFlow checkpoint (fixtures/tf/half_plus_two), read-only, read by
 * nobody: its LevelDB table index opens without a lock file. */
static void read_tf(void *arg)
{
	dvar_reader *r = NULL;
	char buf[64];

	if (dvar_reader_open(&r, arg, NULL) != DVAR_OK) {
		problem("opening %s: %s", (char *)arg, dvar_error_last()->message);
		return;
	}
	for (size_t i = 0; i < dvar_reader_num_vars(r); i++) {
		dvar_var_info info;

		if (dvar_reader_var(r, i, &info) != DVAR_OK || info.raw_bytes > sizeof buf ||
		    dvar_reader_read(r, i, NULL, buf, (size_t)info.raw_bytes) != DVAR_OK)
			problem("reading variable %zu of %s: %s", i, (char *)arg,
			        dvar_error_last()->message);
	}
	if (dvar_reader_num_vars(r) == 0)
		problem("%s holds no variables", (char *)arg);
	dvar_reader_free(r);
}

static void test_format_perms__readonly_tf(void **state)
{
	fixture *fx = *state;
	const char *src = getenv("DVAR_SOURCE_DIR");
	const char *files[] = { "variables.index", "variables.data-00000-of-00001" };
	char *tf = tu_path(fx->dir, "tf"), *prefix = tu_path(tf, "variables");

	if (!src) {
		print_message("skipped: DVAR_SOURCE_DIR is not set (run through ctest)\n");
		skip();
	}
	if (!reachable(fx))
		skip();
	assert_int_equal(mkdir(tf, 0755), 0);
	for (int k = 0; k < 2; k++) {
		char from[1024], *to = tu_path(tf, files[k]), *data;
		size_t len;
		FILE *f;

		snprintf(from, sizeof from, "%s/fixtures/tf/half_plus_two/%s", src, files[k]);
		f = fopen(from, "rb");
		assert_non_null(f);
		data = malloc(1 << 20);
		len = fread(data, 1, 1 << 20, f);
		fclose(f);
		f = fopen(to, "wb");
		assert_non_null(f);
		assert_int_equal(fwrite(data, 1, len, f), len);
		assert_int_equal(fclose(f), 0);
		free(data);
		free(to);
	}
	set_writable(tf, 0);
	assert_int_equal(in_child(1, read_tf, prefix), 0);
	assert_int_equal(in_child(1, read_tf, tf), 0);
	free(prefix);
	free(tf);
}

/* Opening and listing a root in a private folder fail with the path and
 * EACCES's text, and nothing worse. */
static void open_private(void *arg)
{
	const char *root = arg;
	const char *eacces = strerror(EACCES);
	dvar_reader *r = NULL;
	dvar_root_list *l = NULL;
	int rc;

	if ((rc = dvar_reader_open(&r, root, NULL)) == DVAR_OK)
		problem("%s opened in a private folder", root);
	else if (!strstr(dvar_error_last()->message, root) ||
	         !strstr(dvar_error_last()->message, eacces))
		problem("opening %s failed with %s: '%s', which does not name it and '%s'", root,
		        dvar_strerror(rc), dvar_error_last()->message, eacces);
	else
		printf("opening a root in a private folder: %s: %s\n", dvar_strerror(rc),
		       dvar_error_last()->message);
	dvar_reader_free(r);
	if ((rc = dvar_root_list_open(&l, root)) == DVAR_OK)
		problem("%s listed in a private folder", root);
	else if (!strstr(dvar_error_last()->message, root) ||
	         !strstr(dvar_error_last()->message, eacces))
		problem("listing %s failed with '%s'", root, dvar_error_last()->message);
	dvar_root_list_free(l);
}

/* (1) A checkpoint in another user's private (0700) folder. Not root: the
 * folder is made 0000, which denies its owner too. */
static void test_format_perms__private_folder(void **state)
{
	fixture *fx = *state;
	char *priv = tu_path(fx->dir, "private"), *root = tu_path(priv, "root");
	int bad;

	if (!reachable(fx))
		skip();
	assert_int_equal(mkdir(priv, 0700), 0);
	assert_int_equal(mkdir(root, 0755), 0);
	assert_int_equal(save_step(root, 1), DVAR_OK);
	if (geteuid() != 0)
		assert_int_equal(chmod(priv, 0), 0);
	bad = in_child(1, open_private, root);
	assert_int_equal(chmod(priv, 0700), 0);
	assert_int_equal(bad, 0);
	free(root);
	free(priv);
}

/* A data file this user may not read: opening or reading fails naming the
 * file and EACCES's text. */
static void read_unreadable(void *arg)
{
	const char *root = arg;
	const char *msg;
	dvar_reader *r = NULL;
	float *a = malloc(N * sizeof *a);
	int rc = dvar_reader_open(&r, root, NULL);

	if (rc == DVAR_OK)
		rc = dvar_reader_read(r, 0, NULL, a, N * sizeof *a);
	msg = dvar_error_last()->message;
	if (rc == DVAR_OK)
		problem("%s read with its data file unreadable", root);
	else if (!strstr(msg, "ckpt-1/data-00000-of-00001") || !strstr(msg, strerror(EACCES)))
		problem("reading %s failed with '%s', which does not name the data file and '%s'",
		        root, msg, strerror(EACCES));
	else
		printf("an unreadable data file: %s\n", msg);
	dvar_reader_free(r);
	free(a);
}

static void test_format_perms__unreadable_file(void **state)
{
	fixture *fx = *state;
	char *root1 = tu_path(fx->dir, "root1"), *ckpt = tu_path(root1, "ckpt-1");
	char *data = tu_path(ckpt, "data-00000-of-00001");
	int bad;

	if (!reachable(fx))
		skip();
	/* A root of ckpt-1 alone whose data file is its owner's only. */
	assert_int_equal(mkdir(root1, 0755), 0);
	assert_int_equal(save_step(root1, 1), DVAR_OK);
	assert_int_equal(chmod(data, geteuid() == 0 ? 0600 : 0), 0);
	bad = in_child(1, read_unreadable, root1);
	assert_int_equal(chmod(data, 0644), 0);
	assert_int_equal(bad, 0);
	free(root1);
	free(ckpt);
	free(data);
}

/* (2) Through a read-only bind mount of the test's folder, in a mount
 * namespace of the child's own. */
struct ro_mount {
	const char *src, *dst;
	char *root;
};

static int bind_readonly(const char *src, const char *dst, char *why, size_t cap)
{
	if (geteuid() != 0) {
		/* A user namespace makes this user root of its own mounts. */
		char map[64];
		uid_t uid = getuid();
		gid_t gid = getgid();
		int fd;

		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
			snprintf(why, cap, "unshare(CLONE_NEWUSER | CLONE_NEWNS): %s", strerror(errno));
			return -1;
		}
		if ((fd = open("/proc/self/setgroups", O_WRONLY)) >= 0) {
			if (write(fd, "deny", 4) < 0)
				(void)0;
			close(fd);
		}
		snprintf(map, sizeof map, "0 %d 1", (int)uid);
		if ((fd = open("/proc/self/uid_map", O_WRONLY)) < 0 ||
		    write(fd, map, strlen(map)) < 0) {
			snprintf(why, cap, "writing uid_map: %s", strerror(errno));
			return -1;
		}
		close(fd);
		snprintf(map, sizeof map, "0 %d 1", (int)gid);
		if ((fd = open("/proc/self/gid_map", O_WRONLY)) >= 0) {
			if (write(fd, map, strlen(map)) < 0)
				(void)0;
			close(fd);
		}
	} else if (unshare(CLONE_NEWNS) != 0) {
		snprintf(why, cap, "unshare(CLONE_NEWNS): %s", strerror(errno));
		return -1;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		snprintf(why, cap, "making / private: %s", strerror(errno));
		return -1;
	}
	if (mount(src, dst, NULL, MS_BIND, NULL) != 0 ||
	    mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) != 0) {
		snprintf(why, cap, "a read-only bind mount of %s: %s", src, strerror(errno));
		return -1;
	}
	return 0;
}

static void read_mounted(void *arg)
{
	struct ro_mount *m = arg;
	char why[512] = "";

	if (bind_readonly(m->src, m->dst, why, sizeof why) != 0) {
		fprintf(stderr, "%s\n", why);
		problems = SKIP_STATUS;
		return;
	}
	read_root(m->root);
	save_fails(m->root, EROFS);
}

static void test_format_perms__readonly_mount(void **state)
{
	fixture *fx = *state;
	char *mnt = tu_path(fx->dir, "mnt");
	struct ro_mount m = { fx->root, mnt, NULL };
	char *before, *after;
	int bad;

	assert_int_equal(mkdir(mnt, 0755), 0);
	m.root = mnt; /* the root, seen through the mount */
	before = tree_of(fx->root);
	bad = in_child(0, read_mounted, &m);
	if (bad == SKIP_STATUS) {
		print_message("skipped: no read-only bind mount here (see the reason above)\n");
		free(before);
		free(mnt);
		skip();
	}
	assert_int_equal(bad, 0);
	after = tree_of(fx->root);
	assert_string_equal(after, before);
	free(after);
	free(before);
	free(mnt);
}

/* The CLI reading a read-only root, unprivileged. */
struct cli_run {
	const char *cli, *out, *err;
	const char *const *argv;
};

/* Its output files are opened before it drops its privileges. */
static void exec_cli(void *arg)
{
	struct cli_run *c = arg;
	int o = open(c->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int e = open(c->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	char why[256];

	if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 ||
	    drop_privileges(why, sizeof why) != 0)
		_exit(100);
	execv(c->cli, (char *const *)c->argv);
	_exit(101);
}

/* Run `dvar ARGS...` unprivileged: its exit status; stdout and stderr in
 * *out and *err (malloc'ed). */
static int run_cli(const fixture *fx, const char *const *argv, char **out, char **err)
{
	char *po = tu_path(fx->dir, "cli.out"), *pe = tu_path(fx->dir, "cli.err");
	struct cli_run c = { argv[0], po, pe, argv };
	size_t len;
	int status = in_child(0, exec_cli, &c);

	assert_int_equal(dvar_fs_read_file(po, out, &len, 1 << 20), DVAR_OK);
	assert_int_equal(dvar_fs_read_file(pe, err, &len, 1 << 20), DVAR_OK);
	unlink(po);
	unlink(pe);
	free(po);
	free(pe);
	return status;
}

static void test_format_perms__cli(void **state)
{
	fixture *fx = *state;
	const char *cli = getenv("DVAR_CLI");
	char *outdir = tu_path(fx->dir, "out"), *npy = tu_path(outdir, "npy");
	char *priv = tu_path(fx->dir, "private"), *proot = tu_path(priv, "root");
	char *manifest = tu_path(npy, "manifest.json"), *out, *err;
	struct stat st;

	if (!cli) {
		print_message("skipped: DVAR_CLI (the dvar program) is not set (run through ctest)\n");
		skip();
	}
	if (!reachable(fx))
		skip();
	assert_int_equal(mkdir(outdir, 0777), 0);
	assert_int_equal(chmod(outdir, 0777), 0); /* past the umask: nobody writes there */
	set_writable(fx->root, 0);
	{
		const char *argv[] = { cli, "ls", fx->root, NULL };

		assert_int_equal(run_cli(fx, argv, &out, &err), 0);
		assert_non_null(strstr(out, "ckpt-1"));
		assert_non_null(strstr(out, "ckpt-2"));
		free(out);
		free(err);
	}
	{
		const char *argv[] = { cli, "verify", fx->root, NULL };

		assert_int_equal(run_cli(fx, argv, &out, &err), 0);
		free(out);
		free(err);
	}
	{
		const char *argv[] = { cli, "inspect", fx->root, NULL };

		assert_int_equal(run_cli(fx, argv, &out, &err), 0);
		assert_non_null(strstr(out, "float32"));
		free(out);
		free(err);
	}
	{
		const char *argv[] = { cli, "export", "--format", "npy", fx->root, npy, NULL };

		assert_int_equal(run_cli(fx, argv, &out, &err), 0);
		assert_int_equal(stat(manifest, &st), 0);
		free(out);
		free(err);
	}
	/* A root in a private folder: a runtime error naming it and EACCES. */
	assert_int_equal(mkdir(priv, 0700), 0);
	assert_int_equal(mkdir(proot, 0755), 0);
	assert_int_equal(save_step(proot, 1), DVAR_OK);
	if (geteuid() != 0)
		assert_int_equal(chmod(priv, 0), 0);
	{
		const char *argv[] = { cli, "ls", proot, NULL };
		int status = run_cli(fx, argv, &out, &err);

		assert_int_equal(chmod(priv, 0700), 0);
		print_message("dvar ls %s: status %d: %s", proot, status, err);
		assert_int_equal(status, 3);
		assert_non_null(strstr(err, proot));
		assert_non_null(strstr(err, strerror(EACCES)));
		free(out);
		free(err);
	}
	free(manifest);
	free(proot);
	free(priv);
	free(npy);
	free(outdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_perms__readonly_tree, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_perms__readonly_tf, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_perms__private_folder, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_perms__unreadable_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_perms__readonly_mount, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_perms__cli, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
