/*
 * tests/unit/store/store_tu.h - what the store tests share: a strategy and
 * its topology, directories every worker sees, a barrier, looking into a
 * root, and a file size limit that makes one worker's writes fail. Every
 * helper that talks to other workers is collective: all ranks call it, in
 * order.
 */
#ifndef DVAR_STORE_TU_H
#define DVAR_STORE_TU_H

#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>

#include "dvar/dvar.h"

typedef struct {
	dvar_strategy *s;
	int R, W, worker, N;
} stu_topo;

/* A strategy with R local replicas (workers: every process of the run). */
int stu_topo_open(stu_topo *t, int replicas);

/* The same with every strategy option given (o->replicas among them). */
int stu_topo_create(stu_topo *t, const dvar_strategy_options *o);

/* Collective: the sum of every worker's value; also a barrier. -1 on failure. */
int64_t stu_sum_over_workers(dvar_strategy *s, int64_t value);

/* Collective: a fresh directory the chief makes and every worker is told
 * (malloc'ed; free it with stu_drop_shared_dir). */
char *stu_shared_dir(dvar_strategy *s);

/* Collective: every worker is done with dir; the chief removes it. Frees dir. */
void stu_drop_shared_dir(dvar_strategy *s, char *dir);

/* 1 when root/name exists. */
int stu_exists_in(const char *root, const char *name);

/* How many entries of root start with prefix ("." and ".." too, for ""). */
int stu_count_prefix(const char *root, const char *prefix);

/* stu_count_prefix, also writing to out the names it counts other than "."
 * and "..", each after a space. */
int stu_list_prefix(const char *root, const char *prefix, FILE *out);

/* The checkpoint the root's pointer file names ("" when none). */
void stu_latest_of(const char *root, char *out, size_t cap);

/*
 * A file size limit of `bytes` on this worker when `on` is set (its writes
 * past it fail with EFBIG, as on a full disk), with SIGXFSZ ignored on every
 * worker; stu_fsize_restore puts both back.
 */
typedef struct {
	struct rlimit old;
	void (*old_handler)(int);
	int on;
} stu_fsize;

void stu_fsize_limit(stu_fsize *f, int on, rlim_t bytes);
void stu_fsize_restore(stu_fsize *f);

#endif
