/*
 * tests/fault/nosync.c - DVAR_WRITE_NO_FSYNC means no fsync: saves into a
 * checkpoint root (data files, the index, the pointer file, retention)
 * run under the fault shim (fault.c, LD_PRELOAD) counting calls only, and
 * not one fsync or fdatasync may be among them; the same saves without the
 * flag must make some, or the shim saw nothing and the test proves nothing.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dvar/dvar.h"

static void (*fault_arm)(int on, long at, int kind);
static long (*fault_calls)(void);
static void (*fault_scope)(const char *prefix);
static const char *(*fault_log)(long n);

static void die(const char *what)
{
	const dvar_error *e = dvar_error_last();
	fprintf(stderr, "nosync: %s: %s\n", what, e->code ? e->message : "failed");
	exit(1);
}

/* Two saves of step 1 and 2 into root, keeping the last one: the second
 * deletes the first. */
static void saves(const char *root, unsigned flags)
{
	static float v[1 << 16];
	dvar_write_options o = DVAR_WRITE_OPTIONS_INIT;
	dvar_shape big = { 1, { 1 << 16 } }, small = { 1, { 7 } };

	o.flags = flags;
	o.keep_last = 1;
	for (int64_t step = 1; step <= 2; step++) {
		dvar_writer *w = NULL;
		for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++)
			v[k] = (float)(k * step);
		if (dvar_writer_open_step(&w, root, step, &o) ||
		    dvar_writer_add(w, "big", DVAR_FLOAT32, &big, NULL, v) ||
		    dvar_writer_add(w, "small", DVAR_FLOAT32, &small, NULL, v) || dvar_writer_commit(w))
			die("save");
		dvar_writer_free(w);
	}
}

/* The counted calls of the saves into root (flags), and how many were fsync or fdatasync. */
static long syncs_of(const char *root, unsigned flags, long *calls)
{
	long syncs = 0;

	fault_scope(root);
	fault_arm(1, 0, 0);
	saves(root, flags);
	fault_arm(0, 0, 0);
	*calls = fault_calls();
	for (long n = 1; n <= *calls; n++) {
		const char *c = fault_log(n);
		if (c && (!strncmp(c, "fsync ", 6) || !strncmp(c, "fdatasync ", 10))) {
			if (flags & DVAR_WRITE_NO_FSYNC)
				fprintf(stderr, "nosync: with DVAR_WRITE_NO_FSYNC: %s\n", c);
			syncs++;
		}
	}
	return syncs;
}

int main(int argc, char **argv)
{
	char work[PATH_MAX], root[PATH_MAX + 16];
	long calls, syncs;

	if (argc != 2) {
		fprintf(stderr, "usage: nosync WORK\n");
		return 2;
	}
	fault_arm = (void (*)(int, long, int))dlsym(RTLD_DEFAULT, "dvar_fault_arm");
	fault_calls = (long (*)(void))dlsym(RTLD_DEFAULT, "dvar_fault_calls");
	fault_scope = (void (*)(const char *))dlsym(RTLD_DEFAULT, "dvar_fault_scope");
	fault_log = (const char *(*)(long))dlsym(RTLD_DEFAULT, "dvar_fault_log");
	if (!fault_arm || !fault_calls || !fault_scope || !fault_log) {
		fprintf(stderr, "nosync: run it with LD_PRELOAD=libdvar_fault.so\n");
		return 2;
	}
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", argv[1]);
	if (system(cmd) != 0 || mkdir(argv[1], 0777) != 0 || !realpath(argv[1], work))
		die(argv[1]);

	snprintf(root, sizeof root, "%s/synced", work);
	syncs = syncs_of(root, 0, &calls);
	printf("without DVAR_WRITE_NO_FSYNC: %ld calls, %ld fsync/fdatasync\n", calls, syncs);
	if (syncs == 0) {
		fprintf(stderr, "nosync: the shim saw no fsync in a synced save\n");
		return 1;
	}
	snprintf(root, sizeof root, "%s/unsynced", work);
	syncs = syncs_of(root, DVAR_WRITE_NO_FSYNC, &calls);
	printf("with DVAR_WRITE_NO_FSYNC: %ld calls, %ld fsync/fdatasync\n", calls, syncs);
	system(cmd);
	return syncs == 0 && calls > 0 ? 0 : 1;
}
