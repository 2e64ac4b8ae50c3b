/*
 * cli/replace.c - the one rule of the commands that write a path: an
 * existing output is refused, and with --force replaced only once the new
 * one is complete. The library refuses an existing OUT, so the new output is
 * written under a temporary sibling name, then the old one is renamed aside,
 * the new one into place, and the old one removed.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* The files a TensorFlow prefix stands for, as dvar export writes them. */
static const char *const tf_suffixes[] = { ".index", ".data-00000-of-00001" };

static int num_paths(const cli_output *o)
{
	return o->tf ? 2 : 1;
}

static const char *suffix(const cli_output *o, int k)
{
	return o->tf ? tf_suffixes[k] : "";
}

/* "DIR/.dvar-WHAT-PID.BASE": a sibling of out, on the same file system, ending as
 * out does (export picks the format by a .safetensors ending). */
static char *sibling(const char *out, const char *what)
{
	const char *slash = strrchr(out, '/');
	size_t dir = slash ? (size_t)(slash - out + 1) : 0;
	size_t cap = strlen(out) + strlen(what) + 40;
	char *p = malloc(cap);

	if (p)
		snprintf(p, cap, "%.*s.dvar-%s-%ld.%s", (int)dir, out, what, (long)getpid(), out + dir);
	return p;
}

/* prefix + suffix, malloc'ed. */
static char *concat(const char *prefix, const char *suf)
{
	size_t cap = strlen(prefix) + strlen(suf) + 1;
	char *p = malloc(cap);

	if (p)
		snprintf(p, cap, "%s%s", prefix, suf);
	return p;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

/* Remove path, a directory with all it holds too. */
static void remove_all(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int cli_output_begin(cli_output *o, const char *cmd, const char *out, int tf, int force)
{
	struct stat st;

	o->out = out;
	o->target = out;
	o->tmp = NULL;
	o->tf = tf;
	for (int k = 0; k < num_paths(o); k++) {
		char *p = concat(out, suffix(o, k));
		if (!p)
			return cli_error(cmd, "out of memory");
		if (lstat(p, &st) != 0) {
			free(p);
			continue;
		}
		if (!force) {
			int rc = cli_error(cmd, "'%s' already exists; give a new %s, or --force to "
			                        "replace it", p, tf ? "prefix" : "path");
			free(p);
			return rc;
		}
		free(p);
		if (!(o->tmp = sibling(out, "new")))
			return cli_error(cmd, "out of memory");
		o->target = o->tmp;
		break;
	}
	return CLI_EXIT_OK;
}

int cli_output_commit(cli_output *o, const char *cmd)
{
	char *old[2] = { NULL, NULL }, *fresh[2] = { NULL, NULL }, *aside[2] = { NULL, NULL };
	char *aside_base = NULL;
	int n = num_paths(o), moved = 0, rc = CLI_EXIT_OK;
	struct stat st;

	if (!o->tmp)
		return CLI_EXIT_OK;
	if (!(aside_base = sibling(o->out, "old")))
		rc = cli_error(cmd, "out of memory");
	for (int k = 0; k < n && rc == CLI_EXIT_OK; k++)
		if (!(old[k] = concat(o->out, suffix(o, k))) ||
		    !(fresh[k] = concat(o->tmp, suffix(o, k))) ||
		    !(aside[k] = concat(aside_base, suffix(o, k))))
			rc = cli_error(cmd, "out of memory");
	/* Old aside, new in; on a failure what was moved goes back. */
	for (; moved < n && rc == CLI_EXIT_OK; moved++) {
		int had_old = lstat(old[moved], &st) == 0;
		if (had_old && rename(old[moved], aside[moved]) != 0) {
			rc = cli_error(cmd, "cannot replace '%s': %s", old[moved], strerror(errno));
			break;
		}
		if (rename(fresh[moved], old[moved]) != 0) {
			rc = cli_error(cmd, "cannot replace '%s': %s", old[moved], strerror(errno));
			if (had_old)
				rename(aside[moved], old[moved]);
			break;
		}
		if (!had_old)
			aside[moved][0] = '\0';
	}
	for (int k = moved - 1; rc != CLI_EXIT_OK && k >= 0; k--) {
		rename(old[k], fresh[k]);
		if (aside[k][0])
			rename(aside[k], old[k]);
	}
	for (int k = 0; k < n; k++) {
		if (rc == CLI_EXIT_OK && aside[k] && aside[k][0])
			remove_all(aside[k]);
		else if (rc != CLI_EXIT_OK && fresh[k])
			remove_all(fresh[k]);
		free(old[k]);
		free(fresh[k]);
		free(aside[k]);
	}
	free(aside_base);
	free(o->tmp);
	o->tmp = NULL;
	return rc;
}

void cli_output_abort(cli_output *o)
{
	free(o->tmp);
	o->tmp = NULL;
}
