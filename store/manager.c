/*
 * store/manager.c - the checkpoint manager: a training loop's view of one
 * root. It saves a fixed list of variables every K steps through dvar_save
 * (or dvar_save_async), keeps the last N checkpoints through the writer's
 * keep_last, and restores the root's latest checkpoint or a given step.
 *
 * Every call is collective, so every decision must come out the same on
 * every worker. The manager decides from what every worker holds alike: its
 * options, the steps it saved itself, and the statuses of dvar_save,
 * dvar_save_wait and dvar_save_poll, which are agreed across workers. The
 * one file-system view it needs, which checkpoint to restore, is the
 * chief's, handed to the others in an agreement; per-worker views of a
 * shared file system can differ for a while after a commit.
 *
 * Ownership: the manager owns copies of the root, the variable array and the
 * options; the variables, tensors and their data stay the caller's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "format/format.h"
#include "store/store.h"

#define NO_STEP (-1)
/* Checkpoints named in a "the root holds no ckpt-S" message, at most. */
#define LISTED_NAMES 8

struct dvar_manager {
	dvar_strategy *s;
	char *root;
	dvar_variable **vars;
	size_t n;
	int64_t every;      /* K >= 1 */
	int async;
	dvar_write_options wopts;
	dvar_save_options sopts;    /* .write is &wopts */
	dvar_read_options ropts;
	dvar_restore_options ropts_restore; /* .read is &ropts or NULL */
	/* The last step saved (or found committed) through this manager: a
	 * second save of it is skipped without touching the file system. */
	int64_t last_saved;
	/* The step of this manager's asynchronous save not finished yet. */
	int64_t pending;
	/* Deltas (version 2 options): the chain since its full checkpoint. */
	int delta, full_every;
	double max_ratio;
	int chained;          /* a committed save of this manager heads a chain */
	int deltas;           /* deltas committed since the chain's full one */
	uint64_t full_bytes, chain_bytes;
};

/* ---------------------------------------------------------------- opening */

/* Everything a worker checks on its own; the copies go into m. */
static int prepare(dvar_manager *m, const char *root, dvar_variable *const *vars,
                   size_t n, const dvar_manager_options *opts)
{
	dvar_write_options wdefaults = DVAR_WRITE_OPTIONS_INIT;
	dvar_save_options sdefaults = DVAR_SAVE_OPTIONS_INIT;
	dvar_restore_options rdefaults = DVAR_RESTORE_OPTIONS_INIT;
	const dvar_save_options *so = opts ? opts->save : NULL;
	const dvar_restore_options *ro = opts ? opts->restore : NULL;

	if (opts && dvar_check_version("dvar_manager_options", opts->version,
	                               DVAR_MANAGER_OPTIONS_VERSION))
		return DVAR_EINVAL;
	if (!root || root[0] == '\0')
		return dvar_error_set(DVAR_EINVAL, "no checkpoint root given");
	if (opts && opts->save_every < 0)
		return dvar_error_set(DVAR_EINVAL,
		                      "save_every is %lld; it must be >= 0 (0 saves every step)",
		                      (long long)opts->save_every);
	if (opts && opts->keep_last < 0)
		return dvar_error_set(DVAR_EINVAL, "keep_last is %d; it must be >= 0 (0 keeps all)",
		                      opts->keep_last);
	if ((so && dvar_check_version("dvar_save_options", so->version, DVAR_SAVE_OPTIONS_VERSION)) ||
	    (so && so->write &&
	     dvar_check_version("dvar_write_options", so->write->version,
	                        DVAR_WRITE_OPTIONS_VERSION)) ||
	    (ro &&
	     dvar_check_version("dvar_restore_options", ro->version, DVAR_RESTORE_OPTIONS_VERSION)) ||
	    (ro && ro->read && dvar_read_options_take(&m->ropts, ro->read)))
		return DVAR_EINVAL;
	if (n && !vars)
		return dvar_error_set(DVAR_EINVAL, "%zu variables but vars is NULL", n);
	if (!n && !(so && (so->num_tensors || so->num_sharded || so->num_iterators)))
		return dvar_error_set(DVAR_EINVAL, "nothing to save: no variables, tensors, sharded "
		                      "variables or iterators");
	/* dvar_save checks these too, but only at the first save. */
	for (size_t i = 0; i < n; i++) {
		if (!vars[i])
			return dvar_error_set(DVAR_EINVAL, "variable #%zu is NULL", i);
		if (dvar_variable_strategy(vars[i]) != m->s)
			return dvar_error_set(DVAR_EINVAL,
			                      "variable '%s' belongs to another strategy",
			                      dvar_variable_name(vars[i]));
	}

	m->every = opts && opts->save_every > 0 ? opts->save_every : 1;
	m->async = opts && opts->async;
	if (opts && opts->version >= 2) {
		if (opts->full_every < 0 || opts->max_chain_ratio < 0)
			return dvar_error_set(DVAR_EINVAL, "full_every %d and max_chain_ratio %g must be "
			                      ">= 0", opts->full_every, opts->max_chain_ratio);
		m->delta = opts->delta != 0;
		m->full_every = opts->full_every;
		m->max_ratio = opts->max_chain_ratio > 0 ? opts->max_chain_ratio : 1.0;
	}
	if (m->delta && so && (so->flags & DVAR_SAVE_EVERY_WORKER))
		return dvar_error_set(DVAR_EINVAL, "deltas need one shared root: not with "
		                      "DVAR_SAVE_EVERY_WORKER");
	m->sopts = so ? *so : sdefaults;
	m->wopts = so && so->write ? *so->write : wdefaults;
	/* Retention is the manager's: its N replaces whatever the caller's
	 * write options said. */
	m->wopts.keep_last = opts ? opts->keep_last : 0;
	m->sopts.write = &m->wopts;
	m->ropts_restore = ro ? *ro : rdefaults;
	if (ro && ro->read)
		m->ropts_restore.read = &m->ropts; /* taken above */
	if (!(m->root = strdup(root)) || !(m->vars = malloc((n ? n : 1) * sizeof *m->vars)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (n)
		memcpy(m->vars, vars, n * sizeof *vars);
	m->n = n;
	return DVAR_OK;
}

void dvar_manager_free(dvar_manager *m)
{
	if (!m)
		return;
	free(m->root);
	free(m->vars);
	free(m);
}

int dvar_manager_options_init(dvar_manager_options *opts, unsigned int version)
{
	static const dvar_manager_options init = DVAR_MANAGER_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_manager_options", version,
	                         DVAR_MANAGER_OPTIONS_VERSION);
}

int dvar_manager_open(dvar_manager **out, dvar_strategy *s, const char *root,
                      dvar_variable *const *vars, size_t n, const dvar_manager_options *opts)
{
	dvar_manager *m;
	int rc;

	if (!out)
		return dvar_error_set(DVAR_EINVAL, "dvar_manager_open: out is NULL");
	*out = NULL;
	if (!s)
		return dvar_error_set(DVAR_EINVAL, "dvar_manager_open: strategy is NULL");
	if ((m = calloc(1, sizeof *m)) != NULL) {
		m->s = s;
		m->last_saved = NO_STEP;
		m->pending = NO_STEP;
		rc = prepare(m, root, vars, n, opts);
	} else {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	/* The chief creates the shared root (every worker its own with
	 * DVAR_SAVE_EVERY_WORKER); a failure anywhere fails every worker. */
	if (rc == DVAR_OK && (dvar_strategy_worker_id(s) == 0 ||
	                      (m->sopts.flags & DVAR_SAVE_EVERY_WORKER)))
		rc = dvar_fs_mkdirs(root);
	rc = dvar_store_agree(s, rc, NULL, 0, NULL, NULL);
	if (rc != DVAR_OK) {
		dvar_manager_free(m);
		return dvar_error_prefix("opening a checkpoint manager for '%s'",
		                         root ? root : "(null)");
	}
	*out = m;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- saving */

/* A save of this manager was committed: where its chain stands (what
 * dvar_save_last says is the same on every worker). */
static void note_committed(dvar_manager *m)
{
	dvar_save_info in;

	if (!m->delta || dvar_save_last(m->s, &in) != DVAR_OK)
		return;
	m->chained = 1;
	if (!in.is_delta) {
		m->deltas = 0;
		m->full_bytes = in.bytes;
		m->chain_bytes = 0;
	} else {
		m->deltas++;
		m->chain_bytes += in.bytes;
	}
}

/* A restore of path: the next delta goes over it, and its chain (read off
 * its links: every worker reads the same directory) counts as this one's. */
static void note_restored(dvar_manager *m, const char *path)
{
	dvar_reader *r;
	dvar_link_info li;
	size_t n;

	if (!m->delta || dvar_reader_open(&r, path, m->ropts_restore.read) != DVAR_OK) {
		dvar_error_clear();
		return;
	}
	n = dvar_reader_num_links(r);
	m->chained = 1;
	m->deltas = (int)(n - 1);
	m->chain_bytes = 0;
	for (size_t k = 0; k < n && dvar_reader_link(r, k, &li) == DVAR_OK; k++) {
		if (k + 1 < n)
			m->chain_bytes += li.bytes;
		else
			m->full_bytes = li.bytes;
	}
	dvar_reader_free(r);
}

/* The flags of the next save: a delta, or the start of a new chain. */
static unsigned int save_flags(const dvar_manager *m)
{
	int full = !m->chained || m->full_every == 1 ||
	           (m->full_every > 1 && m->deltas + 1 >= m->full_every) ||
	           (double)m->chain_bytes > m->max_ratio * (double)m->full_bytes;

	if (!m->delta)
		return m->sopts.flags;
	return m->sopts.flags | DVAR_SAVE_DELTA | (full ? DVAR_SAVE_NEW_CHAIN : 0);
}

/*
 * The pending save of step m->pending finished with status rc (agreed on
 * every worker). A checkpoint of that step committed already (DVAR_EEXISTS)
 * is what the manager wanted: not an error.
 */
static int finished(dvar_manager *m, int rc)
{
	int64_t step = m->pending;

	m->pending = NO_STEP;
	if (rc == DVAR_EEXISTS) {
		dvar_error_clear();
		rc = DVAR_OK;
	}
	if (rc != DVAR_OK)
		return dvar_error_prefix("the asynchronous save of step %lld failed",
		                         (long long)step);
	m->last_saved = step;
	note_committed(m);
	return DVAR_OK;
}

/* Finish this manager's pending save, if any, and return its status. */
static int finish_pending(dvar_manager *m)
{
	if (m->pending == NO_STEP)
		return DVAR_OK;
	return finished(m, dvar_save_wait(m->s));
}

static int check_step(int64_t step)
{
	if (step < 0)
		return dvar_error_set(DVAR_EINVAL, "step %lld is negative", (long long)step);
	return DVAR_OK;
}

/*
 * Save step unless this manager saved it already. A pending save is
 * finished first; when it failed, its error is returned and nothing new is
 * started (as dvar_save_async does).
 */
static int save_step(dvar_manager *m, int64_t step, int *saved)
{
	int rc;

	if (step == m->last_saved || step == m->pending)
		return DVAR_OK;
	if ((rc = finish_pending(m)) != DVAR_OK)
		return rc;
	dvar_save_options so = m->sopts;
	so.flags = save_flags(m);
	if (m->async)
		rc = dvar_save_async(m->s, m->root, step, m->vars, m->n, &so);
	else
		rc = dvar_save(m->s, m->root, step, m->vars, m->n, &so);
	/* Committed under the root already (by an earlier run, say): the same
	 * verdict on every worker, since dvar_save agrees on it. */
	if (rc == DVAR_EEXISTS) {
		dvar_error_clear();
		m->last_saved = step;
		return DVAR_OK;
	}
	if (rc != DVAR_OK)
		return rc;
	if (m->async) {
		m->pending = step;
	} else {
		m->last_saved = step;
		note_committed(m);
	}
	if (saved)
		*saved = 1;
	return DVAR_OK;
}

int dvar_manager_step(dvar_manager *m, int64_t step, int *saved)
{
	int rc, done = 0;

	if (saved)
		*saved = 0;
	if (!m)
		return dvar_error_set(DVAR_EINVAL, "dvar_manager_step: manager is NULL");
	if ((rc = check_step(step)) != DVAR_OK)
		return dvar_error_prefix("checkpoint manager for '%s'", m->root);
	if (step % m->every == 0 && step != m->last_saved && step != m->pending)
		return save_step(m, step, saved);
	if (m->pending == NO_STEP)
		return DVAR_OK;
	/* Commit the pending save as soon as every worker has written its part. */
	rc = dvar_save_poll(m->s, &done);
	return done ? finished(m, rc) : rc;
}

int dvar_manager_save(dvar_manager *m, int64_t step)
{
	if (!m)
		return dvar_error_set(DVAR_EINVAL, "dvar_manager_save: manager is NULL");
	if (check_step(step) != DVAR_OK)
		return dvar_error_prefix("checkpoint manager for '%s'", m->root);
	return save_step(m, step, NULL);
}

int dvar_manager_wait(dvar_manager *m)
{
	if (!m)
		return dvar_error_set(DVAR_EINVAL, "dvar_manager_wait: manager is NULL");
	return finish_pending(m);
}

/* ---------------------------------------------------------------- restoring */

/* "ckpt-10, ckpt-20" or "none": what a root holds, for a message. */
static void held_names(const dvar_root_list *l, char *out, size_t cap)
{
	size_t count = dvar_root_list_count(l), at = 0;

	snprintf(out, cap, "none");
	for (size_t i = 0; i < count && at < cap; i++) {
		dvar_root_entry e;

		if (dvar_root_list_get(l, i, &e) != DVAR_OK)
			continue;
		if (i == LISTED_NAMES) {
			snprintf(out + at, cap - at, ", ... (%zu in all)", count);
			break;
		}
		at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? ", " : "", e.name);
	}
}

/*
 * The chief's part of a restore: which checkpoint directory of root holds
 * step (or is the latest), as a name under root, and its step (-1 when its
 * name carries none). DVAR_ENOTFOUND, naming the root, when there is none.
 */
static int resolve(const char *root, int64_t step, char *name, size_t cap, int64_t *found)
{
	dvar_root_list *l = NULL;
	dvar_reader *r = NULL;
	char want[64], held[256];
	size_t count;
	int rc;

	rc = dvar_root_list_open(&l, root);
	if (rc == DVAR_ENOTFOUND)
		return dvar_error_set(DVAR_ENOTFOUND, "the root does not exist");
	if (rc != DVAR_OK)
		return rc;
	count = dvar_root_list_count(l);
	snprintf(want, sizeof want, "ckpt-%lld", (long long)step);
	for (size_t i = 0; i < count; i++) {
		dvar_root_entry e;

		if (dvar_root_list_get(l, i, &e) != DVAR_OK)
			continue;
		if (step == DVAR_MANAGER_LATEST ? !e.is_latest : strcmp(e.name, want) != 0)
			continue;
		snprintf(name, cap, "%s", e.name);
		*found = e.step;
		dvar_root_list_free(l);
		return DVAR_OK;
	}
	held_names(l, held, sizeof held);
	dvar_root_list_free(l);
	if (step != DVAR_MANAGER_LATEST)
		return dvar_error_set(DVAR_ENOTFOUND, "the root holds no %s (it holds %s)", want,
		                      held);
	if (count == 0)
		return dvar_error_set(DVAR_ENOTFOUND, "the root holds no checkpoint yet");
	/* Checkpoints but no latest among them: the reader says why (a
	 * missing or damaged pointer file). */
	rc = dvar_reader_open(&r, root, NULL);
	dvar_reader_free(r);
	if (rc != DVAR_OK)
		return rc;
	return dvar_error_set(DVAR_ENOTFOUND, "the root names none of its checkpoints (%s) as the "
	                      "latest", held);
}

/*
 * Agree on the chief's answer: every worker gets its path and step, or its
 * error. *own is 1 when the directory is the manager's ckpt-<step> name.
 */
static int agree_on_checkpoint(dvar_manager *m, int64_t step, char **path,
                               int64_t *found, int *own)
{
	char want[64];
	int W = dvar_strategy_num_workers(m->s);
	size_t *offs = malloc(((size_t)W + 1) * sizeof *offs);
	unsigned char payload[8 + DVAR_MAX_NAME + 1], *all = NULL;
	char name[DVAR_MAX_NAME + 1];
	size_t len = 0;
	int rc = DVAR_OK;

	*path = NULL;
	if (!offs)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (rc == DVAR_OK && dvar_strategy_worker_id(m->s) == 0 &&
	    (rc = resolve(m->root, step, name, sizeof name, found)) == DVAR_OK) {
		len = 8 + strlen(name);
		memcpy(payload, found, 8);
		memcpy(payload + 8, name, len - 8);
	}
	rc = dvar_store_agree(m->s, rc, payload, len, offs ? &all : NULL, offs);
	if (rc == DVAR_OK) {
		len = offs[1] - offs[0];
		memcpy(found, all + offs[0], 8);
		memcpy(name, all + offs[0] + 8, len - 8);
		name[len - 8] = '\0';
		snprintf(want, sizeof want, "ckpt-%lld", (long long)*found);
		*own = strcmp(name, want) == 0;
		if (!(*path = dvar_path_join(m->root, name)))
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	free(all);
	free(offs);
	return rc;
}

int dvar_manager_restore(dvar_manager *m, int64_t step, int64_t *restored)
{
	int64_t found = NO_STEP;
	char *path = NULL;
	int rc, own = 0;

	if (!m)
		return dvar_error_set(DVAR_EINVAL, "dvar_manager_restore: manager is NULL");
	if (step < 0 && step != DVAR_MANAGER_LATEST)
		return dvar_error_set(DVAR_EINVAL, "restoring step %lld of '%s': a step >= 0 or "
		                      "DVAR_MANAGER_LATEST is needed", (long long)step, m->root);
	/* The latest must include what this manager has saved. */
	if ((rc = finish_pending(m)) != DVAR_OK)
		return rc;
	rc = agree_on_checkpoint(m, step, &path, &found, &own);
	if (rc != DVAR_OK) {
		if (step == DVAR_MANAGER_LATEST)
			return dvar_error_prefix("restoring the latest checkpoint of '%s'",
			                         m->root);
		return dvar_error_prefix("restoring step %lld of '%s'", (long long)step, m->root);
	}
	rc = dvar_restore(m->s, path, m->vars, m->n, &m->ropts_restore);
	if (rc == DVAR_OK)
		note_restored(m, path);
	free(path);
	if (rc != DVAR_OK)
		return rc;
	/* Committed: saving this step again would find it there. */
	if (own)
		m->last_saved = found;
	if (restored)
		*restored = found;
	return DVAR_OK;
}
