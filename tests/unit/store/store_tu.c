/*
 * tests/unit/store/store_tu.c - helpers the store tests share (store_tu.h).
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "store_tu.h"

#define PATH_BYTES 512

int stu_topo_open(stu_topo *t, int replicas)
{
	dvar_strategy_options o = DVAR_STRATEGY_OPTIONS_INIT;

	o.replicas = replicas;
	return stu_topo_create(t, &o);
}

int stu_topo_create(stu_topo *t, const dvar_strategy_options *o)
{
	int rc;

	if ((rc = dvar_strategy_create(&t->s, o)) != DVAR_OK)
		return rc;
	t->R = dvar_strategy_local_replicas(t->s);
	t->W = dvar_strategy_num_workers(t->s);
	t->worker = dvar_strategy_worker_id(t->s);
	t->N = dvar_strategy_num_replicas_in_sync(t->s);
	return DVAR_OK;
}

static int sum_replica(dvar_replica *ctx, void *arg)
{
	int64_t *value = arg;
	int64_t v = dvar_replica_local_id(ctx) == 0 ? *value : 0;
	int rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_INT64, &v, &v, 1);

	if (rc == DVAR_OK && dvar_replica_local_id(ctx) == 0)
		*value = v;
	return rc;
}

int64_t stu_sum_over_workers(dvar_strategy *s, int64_t value)
{
	if (dvar_strategy_run(s, sum_replica, &value) != DVAR_OK)
		return -1;
	return value;
}

static int path_replica(dvar_replica *ctx, void *arg)
{
	char scratch[PATH_BYTES];
	char *buf = dvar_replica_local_id(ctx) == 0 ? arg : scratch;

	if (buf == scratch)
		memset(scratch, 0, sizeof scratch);
	return dvar_replica_broadcast(ctx, 0, DVAR_UINT8, buf, PATH_BYTES);
}

char *stu_shared_dir(dvar_strategy *s)
{
	char *path = calloc(1, PATH_BYTES);

	assert_non_null(path);
	if (dvar_strategy_worker_id(s) == 0) {
		char *d = tu_mkdtemp();

		snprintf(path, PATH_BYTES, "%s", d);
		free(d);
	}
	assert_int_equal(dvar_strategy_run(s, path_replica, path), DVAR_OK);
	return path;
}

void stu_drop_shared_dir(dvar_strategy *s, char *dir)
{
	stu_sum_over_workers(s, 0);
	if (dvar_strategy_worker_id(s) == 0)
		tu_rmtree(dir);
	free(dir);
}

int stu_exists_in(const char *root, const char *name)
{
	char *p = tu_path(root, name);
	struct stat st;
	int found = stat(p, &st) == 0;

	free(p);
	return found;
}

int stu_count_prefix(const char *root, const char *prefix)
{
	return stu_list_prefix(root, prefix, NULL);
}

int stu_list_prefix(const char *root, const char *prefix, FILE *out)
{
	DIR *d = opendir(root);
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		n++;
		if (out && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			fprintf(out, " %s", e->d_name);
	}
	closedir(d);
	return n;
}

void stu_latest_of(const char *root, char *out, size_t cap)
{
	dvar_reader *r = NULL;

	out[0] = '\0';
	if (dvar_reader_open(&r, root, NULL) == DVAR_OK) {
		const char *p = strrchr(dvar_reader_path(r), '/');

		snprintf(out, cap, "%s", p ? p + 1 : dvar_reader_path(r));
	}
	dvar_reader_free(r);
}

void stu_fsize_limit(stu_fsize *f, int on, rlim_t bytes)
{
	struct rlimit small;

	assert_int_equal(getrlimit(RLIMIT_FSIZE, &f->old), 0);
	f->old_handler = signal(SIGXFSZ, SIG_IGN);
	f->on = on;
	small = f->old;
	small.rlim_cur = bytes;
	if (on)
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
}

void stu_fsize_restore(stu_fsize *f)
{
	if (f->on)
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &f->old), 0);
	signal(SIGXFSZ, f->old_handler);
}
