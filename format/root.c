/*
 * format/root.c - a checkpoint root: ckpt-<step>/ directories and the
 * `checkpoint` pointer file naming the latest one and the ones kept. The
 * pointer file uses TensorFlow's CheckpointState text form (parsed by
 * state.c), so tf.train.latest_checkpoint reads it too:
 *
 *   model_checkpoint_path: "ckpt-200"
 *   all_model_checkpoint_paths: "ckpt-100"
 *   all_model_checkpoint_paths: "ckpt-200"
 *
 * It is replaced atomically, and only after the checkpoint it names is
 * committed; old checkpoints are deleted only after that.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/format.h"

/* A name the pointer file may hold: a directory right under the root. */
static int check_name(const char *path, const char *name)
{
	if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return dvar_error_set(DVAR_ECORRUPT, "pointer file '%s' names '%s', which is not a "
		                      "checkpoint directory of its root", path, name);
	return DVAR_OK;
}

int dvar_pointer_read(dvar_checkpoint_state *out, const char *root)
{
	int rc = dvar_checkpoint_state_read(out, root);
	if (rc)
		return rc;
	char *path = dvar_path_join(root, DVAR_POINTER_NAME);
	if (!path)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	else
		rc = check_name(path, out->latest);
	for (size_t i = 0; !rc && i < out->num_all; i++)
		rc = check_name(path, out->all[i]);
	if (rc)
		dvar_checkpoint_state_clear(out);
	free(path);
	return rc;
}

int dvar_pointer_write(const char *root, const dvar_checkpoint_state *p, int sync)
{
	dvar_bytes b = { 0 };
	int rc = DVAR_OK;
	char line[DVAR_MAX_NAME + 64];
	snprintf(line, sizeof(line), DVAR_STATE_LATEST ": \"%s\"\n", p->latest);
	rc = dvar_bytes_put(&b, line, strlen(line));
	for (size_t i = 0; !rc && i < p->num_all; i++) {
		snprintf(line, sizeof(line), DVAR_STATE_ALL ": \"%s\"\n", p->all[i]);
		rc = dvar_bytes_put(&b, line, strlen(line));
	}
	if (!rc)
		rc = dvar_fs_write_atomic(root, DVAR_POINTER_NAME, b.data, b.len, sync);
	free(b.data);
	return rc;
}

struct dvar_root_list {
	dvar_root_entry *entries;
	size_t count;
	dvar_root_leftover *leftovers;  /* name, target and host owned */
	size_t num_leftovers;
};

static int64_t step_of(const char *name)
{
	const char *dash = strrchr(name, '-');
	if (!dash || !dash[1])
		return -1;
	char *end;
	errno = 0;
	long long v = strtoll(dash + 1, &end, 10);
	return *end || errno || v < 0 ? -1 : (int64_t)v;
}

static int name_cmp(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	int64_t sx = step_of(x), sy = step_of(y);
	if (sx != sy)
		return sx < sy ? -1 : 1;
	return strcmp(x, y);
}

void dvar_names_sort(char **names, size_t n)
{
	if (n)
		qsort(names, n, sizeof(char *), name_cmp);
}

void dvar_names_join(char *buf, size_t cap, char *const *names, size_t n)
{
	enum { SHOWN = 8 };
	size_t shown = n > SHOWN ? SHOWN : n, at = 0;
	buf[0] = '\0';
	for (size_t k = 0; k < shown && at < cap; k++) {
		const char *sep = k == 0 ? "" : k + 1 < shown || n > shown ? ", " : " and ";
		int w = snprintf(buf + at, cap - at, "%s%s", sep, names[k]);
		at += w > 0 ? (size_t)w : 0;
	}
	if (n > shown && at < cap)
		snprintf(buf + at, cap - at, " and %zu more", n - shown);
}

/* The error for a root whose pointer names a checkpoint that is not there:
 * the checkpoints it does hold, so that the user can pick one. */
static int latest_missing(const char *root, const char *latest)
{
	dvar_root_list *l = NULL;
	char **names = NULL;
	size_t n = 0;
	if (dvar_root_list_open(&l, root) == DVAR_OK && (n = dvar_root_list_count(l)) &&
	    !(names = malloc(n * sizeof(char *))))
		n = 0;
	for (size_t k = 0; k < n; k++)
		names[k] = (char *)l->entries[k].name;
	char list[DVAR_ERROR_MESSAGE_MAX / 2];
	int rc;
	if (n) {
		dvar_names_join(list, sizeof(list), names, n);
		rc = dvar_error_set(DVAR_ENOTFOUND, "root '%s': its latest checkpoint '%s' (named by its "
		                    "%s file) does not exist; it holds %s: give one, e.g. '%s/%s'", root,
		                    latest, DVAR_POINTER_NAME, list, root, names[n - 1]);
	} else {
		rc = dvar_error_set(DVAR_ENOTFOUND, "root '%s': its latest checkpoint '%s' (named by its "
		                    "%s file) does not exist, and it holds no other checkpoint", root,
		                    latest, DVAR_POINTER_NAME);
	}
	free(names);
	dvar_root_list_free(l);
	return rc;
}

/* 1 when p exists, 0 when it does not, -1 (error set) when this user cannot
 * tell: a folder on the way that it may not search (EACCES), which must not
 * pass for a missing checkpoint. */
static int probe(const char *p)
{
	struct stat st;
	if (stat(p, &st) == 0)
		return 1;
	if (errno == ENOENT || errno == ENOTDIR)
		return 0;
	dvar_error_set_errno(DVAR_EIO, errno, "look up '%s'", p);
	return -1;
}

int dvar_resolve_checkpoint(const char *path, char **out)
{
	*out = NULL;
	char *index = dvar_path_join(path, DVAR_INDEX_NAME);
	char *pointer = dvar_path_join(path, DVAR_POINTER_NAME);
	int rc = DVAR_OK;
	if (!index || !pointer) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	int found = probe(path), has_index = found > 0 ? probe(index) : 0;
	int has_pointer = has_index == 0 && found > 0 ? probe(pointer) : 0;
	if (found < 0 || has_index < 0 || has_pointer < 0) {
		rc = DVAR_EIO;
	} else if (!found) {
		rc = dvar_error_set(DVAR_ENOTFOUND, "'%s' does not exist", path);
	} else if (has_index) {
		if (!(*out = strdup(path)))
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	} else if (has_pointer) {
		dvar_checkpoint_state p;
		if ((rc = dvar_pointer_read(&p, path)))
			goto done;
		if (!(*out = dvar_path_join(path, p.latest)))
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		else if (!dvar_fs_is_dir(*out))
			rc = latest_missing(path, p.latest);
		dvar_checkpoint_state_clear(&p);
	} else {
		rc = dvar_error_set(DVAR_ENOTFOUND, "'%s' is neither a checkpoint (no %s) nor a checkpoint "
		                    "root (no %s file)", path, DVAR_INDEX_NAME, DVAR_POINTER_NAME);
	}
done:
	if (rc) {
		free(*out);
		*out = NULL;
	}
	free(index);
	free(pointer);
	return rc;
}

/* Delete a checkpoint: rename it out of sight first, so that a crash never
 * leaves a half-deleted directory that still looks committed. */
static int delete_checkpoint(const char *root, const char *name)
{
	char hidden[DVAR_MAX_NAME + 32];
	snprintf(hidden, sizeof(hidden), ".%s.deleting", name);
	char *from = dvar_path_join(root, name), *to = dvar_path_join(root, hidden);
	int rc = DVAR_OK;
	if (!from || !to)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	else if (dvar_fs_is_dir(from)) {
		dvar_fs_rmtree(to);
		if (rename(from, to) != 0)
			rc = dvar_error_set_errno(DVAR_EIO, errno, "rename '%s' to '%s'", from, to);
		else
			rc = dvar_fs_rmtree(to);
	}
	free(from);
	free(to);
	return rc;
}

int dvar_root_listed(const char *root, const char *name, int *listed)
{
	dvar_checkpoint_state st;
	int rc = dvar_pointer_read(&st, root);
	*listed = 0;
	if (rc == DVAR_ENOTFOUND) {
		dvar_error_clear();
		return DVAR_OK;
	}
	if (rc)
		return rc;
	*listed = strcmp(st.latest, name) == 0;
	for (size_t i = 0; i < st.num_all && !*listed; i++)
		*listed = strcmp(st.all[i], name) == 0;
	dvar_checkpoint_state_clear(&st);
	return DVAR_OK;
}

int dvar_root_drop_unlisted(const char *root, const char *name)
{
	char *dir = dvar_path_join(root, name);
	int rc, listed, there = dir && dvar_fs_is_dir(dir);
	free(dir);
	if (!there)
		return DVAR_OK;
	if ((rc = dvar_root_listed(root, name, &listed)))
		return rc;
	return listed ? DVAR_OK : delete_checkpoint(root, name);
}

/*
 * Mark in keep[0..drop) the checkpoints that a kept one, list[drop..n),
 * needs: every link of its chain. 0 when every kept checkpoint's chain was
 * read; an error when one could not be, and then nothing may be deleted.
 */
static int keep_chains(const char *root, char **list, size_t n, size_t drop, int *keep)
{
	for (size_t i = drop; i < n; i++) {
		char *dir = dvar_path_join(root, list[i]);
		dvar_header h;
		uint32_t crc;
		int rc = dir ? dvar_link_peek(dir, &h, &crc) : DVAR_ENOMEM;
		free(dir);
		if (rc)
			return rc;
		for (size_t k = 0; k < h.chain_len; k++)
			for (size_t j = 0; j < drop; j++)
				keep[j] |= strcmp(list[j], h.chain[k].name) == 0;
		dvar_header_clear(&h);
	}
	return DVAR_OK;
}

/* 1 when name is one of names[0..n). */
static int named(const char *name, char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return 1;
	return 0;
}

typedef struct {
	char *name;
	size_t links;
} orphan;

/* Longest chain first: a delta before the deltas it is written over. */
static int by_links_down(const void *x, const void *y)
{
	size_t a = ((const orphan *)x)->links, b = ((const orphan *)y)->links;
	return a < b ? 1 : a > b ? -1 : 0;
}

/*
 * Delete the checkpoints in root that no pointer lists (a save that failed
 * after its directory was committed leaves one) and whose chain reaches a
 * checkpoint about to be deleted, gone[0..n): they could not be opened
 * after it, and no retention would ever delete them. Longest chain first,
 * as the caller deletes gone[]. A directory whose index cannot be read is
 * left alone.
 */
static int drop_orphans(const char *root, char **listed, size_t num_listed, char **gone, size_t n)
{
	DIR *d = opendir(root);
	struct dirent *e;
	orphan *found = NULL;
	size_t num = 0, cap = 0;
	int rc = DVAR_OK;
	if (!d)
		return dvar_error_set_errno(DVAR_EIO, errno, "open checkpoint root '%s'", root);
	while (!rc && (e = readdir(d))) {
		dvar_tmp_info t;
		if (e->d_name[0] == '.' || dvar_tmp_parse(e->d_name, &t) ||
		    named(e->d_name, listed, num_listed) || named(e->d_name, gone, n))
			continue;
		char *dir = dvar_path_join(root, e->d_name);
		dvar_header h;
		uint32_t crc;
		if (!dir || dvar_link_peek(dir, &h, &crc) != DVAR_OK) {
			dvar_error_clear();
			free(dir);
			continue;
		}
		free(dir);
		int needs_gone = 0;
		for (size_t k = 0; k < h.chain_len && !needs_gone; k++)
			needs_gone = named(h.chain[k].name, gone, n);
		if (needs_gone) {
			orphan *grown = dvar_grow(found, num, &cap, sizeof(*found), 4);
			if (!grown || !(grown[num].name = strdup(e->d_name)))
				rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			if (grown)
				found = grown;
			if (!rc)
				found[num++].links = h.chain_len;
		}
		dvar_header_clear(&h);
	}
	closedir(d);
	if (num)
		qsort(found, num, sizeof(*found), by_links_down);
	for (size_t i = 0; i < num; i++) {
		if (!rc)
			rc = delete_checkpoint(root, found[i].name);
		free(found[i].name);
	}
	free(found);
	return rc;
}

int dvar_root_lock(const char *root, int *fd)
{
	char *path = dvar_path_join(root, DVAR_LOCK_NAME);
	char holder[128] = "", host[64] = "";
	int rc = DVAR_OK;

	*fd = -1;
	if (!path)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if ((*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666)) < 0) {
		rc = dvar_error_set_errno(DVAR_EIO, errno, "open the lock of checkpoint root '%s'", root);
	} else if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		ssize_t n = pread(*fd, holder, sizeof(holder) - 1, 0);
		holder[n > 0 ? n : 0] = '\0';
		holder[strcspn(holder, "\n")] = '\0';
		close(*fd);
		*fd = -1;
		if (e == EWOULDBLOCK)
			rc = dvar_error_set(DVAR_EBUSY, "checkpoint root '%s' is being saved into by "
			                    "another writer (%s); saves into one root go one at a time",
			                    root, holder[0] ? holder : "its process is not known");
		else
			rc = dvar_error_set_errno(DVAR_EIO, e, "lock checkpoint root '%s'", root);
	} else {
		/* Who holds it, for the message another writer gets. */
		gethostname(host, sizeof(host) - 1);
		int len = snprintf(holder, sizeof(holder), "pid %ld on host %s\n", (long)getpid(), host);
		if (ftruncate(*fd, 0) == 0 && pwrite(*fd, holder, (size_t)len, 0) < 0)
			dvar_error_clear(); /* the lock holds without its note */
	}
	free(path);
	return rc;
}

int dvar_root_publish(const char *root, const char *name, int keep_last, int sync)
{
	dvar_checkpoint_state old, next = { 0 };
	int rc = dvar_pointer_read(&old, root);
	if (rc == DVAR_ENOTFOUND) {
		memset(&old, 0, sizeof(old));
		dvar_error_clear();
	} else if (rc) {
		return rc;
	}
	size_t n = 0;
	char **list = calloc(old.num_all + 1, sizeof(char *));
	if (!list) {
		dvar_checkpoint_state_clear(&old);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < old.num_all; i++)
		if (strcmp(old.all[i], name) != 0)
			list[n++] = old.all[i];
	list[n++] = (char *)name;
	size_t drop = keep_last > 0 && n > (size_t)keep_last ? n - (size_t)keep_last : 0;
	/* A checkpoint beyond keep_last that a kept delta is written over stays
	 * listed until no kept checkpoint needs it; when a kept one's chain
	 * cannot be read, nothing is deleted this time. */
	int *keep = calloc(drop ? drop : 1, sizeof(*keep));
	char **kept = calloc(n, sizeof(*kept));
	size_t nk = 0;
	if (!keep || !kept) {
		free(keep);
		free(kept);
		free(list);
		dvar_checkpoint_state_clear(&old);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	if (drop && keep_chains(root, list, n, drop, keep) != DVAR_OK) {
		for (size_t j = 0; j < drop; j++)
			keep[j] = 1;
		dvar_error_clear();
	}
	for (size_t i = 0; i < n; i++)
		if (i >= drop || keep[i])
			kept[nk++] = list[i];
	next.latest = (char *)name;
	next.all = kept;
	next.num_all = nk;
	DVAR_FAULT_POINT("before-pointer");
	rc = dvar_pointer_write(root, &next, sync);
	DVAR_FAULT_POINT("pointer-written");
	/* Deltas go before the checkpoints they are written over (published
	 * after them: newest first), so deleting cut short never leaves one on
	 * disk whose base is gone. */
	size_t ngone = 0;
	for (size_t i = 0; i < drop; i++)
		if (!keep[i])
			list[ngone++] = list[i];
	if (!rc && ngone)
		rc = drop_orphans(root, kept, nk, list, ngone);
	for (size_t i = ngone; !rc && i > 0; i--)
		rc = delete_checkpoint(root, list[i - 1]);
	free(keep);
	free(kept);
	free(list);
	dvar_checkpoint_state_clear(&old);
	return rc;
}

/* ---------------------------------------------------------------- listing */

static int entry_cmp(const void *a, const void *b)
{
	const dvar_root_entry *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int leftover_cmp(const void *a, const void *b)
{
	return strcmp(((const dvar_root_leftover *)a)->name, ((const dvar_root_leftover *)b)->name);
}

/* Record root/name, a temporary name t says of, as a leftover. */
static int add_leftover(dvar_root_list *l, const char *root, const char *name,
                        const dvar_tmp_info *t)
{
	char *path = dvar_path_join(root, name);
	dvar_root_leftover *grown = realloc(l->leftovers, (l->num_leftovers + 1) * sizeof(*grown));
	struct stat st;
	if (grown)
		l->leftovers = grown;
	if (!path || !grown) {
		free(path);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	dvar_root_leftover *o = &l->leftovers[l->num_leftovers];
	memset(o, 0, sizeof(*o));
	if (lstat(path, &st) == 0)
		o->bytes = S_ISDIR(st.st_mode) ? dvar_fs_dir_bytes(path)
		           : S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
	free(path);
	o->pid = t->pid;
	o->writer_alive = dvar_tmp_writer_alive(t);
	if (!(o->name = strdup(name)) || !(o->target = strndup(name + 1, t->target_len)) ||
	    !(o->host = strdup(t->host))) {
		free((char *)o->name);
		free((char *)o->target);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	l->num_leftovers++;
	return DVAR_OK;
}

int dvar_root_list_open(dvar_root_list **out, const char *root)
{
	if (!out || !root)
		return dvar_error_set(DVAR_EINVAL, "dvar_root_list_open: NULL argument");
	*out = NULL;
	DIR *d = opendir(root);
	if (!d)
		return dvar_error_set_errno(errno == ENOENT ? DVAR_ENOTFOUND : DVAR_EIO, errno,
		                            "open checkpoint root '%s'", root);
	dvar_checkpoint_state p;
	int have_pointer = dvar_pointer_read(&p, root) == DVAR_OK;
	int rc = DVAR_OK;
	dvar_root_list *l = calloc(1, sizeof(*l));
	size_t cap = 0;
	struct dirent *e;
	if (!l)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	while (!rc && (e = readdir(d))) {
		dvar_tmp_info t;
		if (dvar_tmp_parse(e->d_name, &t)) {
			rc = add_leftover(l, root, e->d_name, &t);
			continue;
		}
		if (e->d_name[0] == '.')
			continue; /* ., .., and half-deleted checkpoints */
		char *dir = dvar_path_join(root, e->d_name);
		char *index = dir ? dvar_path_join(dir, DVAR_INDEX_NAME) : NULL;
		int is_ckpt = index && dvar_fs_exists(index);
		uint64_t bytes = is_ckpt ? dvar_fs_dir_bytes(dir) : 0;
		dvar_header h = { 0 };
		uint32_t crc;
		/* A damaged index lists as a checkpoint without a base; reading it says more. */
		if (is_ckpt && dvar_link_peek(dir, &h, &crc) != DVAR_OK)
			dvar_error_clear();
		free(index);
		free(dir);
		if (!is_ckpt)
			continue;
		if (l->count == cap) {
			cap = cap ? cap * 2 : 16;
			dvar_root_entry *grown = realloc(l->entries, cap * sizeof(*grown));
			if (!grown) {
				dvar_header_clear(&h);
				rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
				break;
			}
			l->entries = grown;
		}
		dvar_root_entry *en = &l->entries[l->count];
		memset(en, 0, sizeof(*en));
		if (!(en->name = strdup(e->d_name)) ||
		    (h.chain_len && !(en->base = strdup(h.chain[0].name)))) {
			free((char *)en->name);
			dvar_header_clear(&h);
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			break;
		}
		dvar_header_clear(&h);
		l->count++;
		en->step = step_of(en->name);
		en->bytes = bytes;
		if (have_pointer) {
			en->is_latest = strcmp(p.latest, en->name) == 0;
			for (size_t k = 0; k < p.num_all; k++)
				en->is_kept |= strcmp(p.all[k], en->name) == 0;
		}
	}
	closedir(d);
	if (have_pointer)
		dvar_checkpoint_state_clear(&p);
	if (rc) {
		dvar_root_list_free(l);
		return rc;
	}
	if (l->count)
		qsort(l->entries, l->count, sizeof(dvar_root_entry), entry_cmp);
	if (l->num_leftovers)
		qsort(l->leftovers, l->num_leftovers, sizeof(dvar_root_leftover), leftover_cmp);
	*out = l;
	return DVAR_OK;
}

size_t dvar_root_list_count(const dvar_root_list *l)
{
	return l ? l->count : 0;
}

int dvar_root_list_get(const dvar_root_list *l, size_t i, dvar_root_entry *out)
{
	if (!l || !out || i >= l->count)
		return dvar_error_set(DVAR_EINVAL, "root listing has %zu entries, not %zu", l ? l->count : 0, i + 1);
	*out = l->entries[i];
	return DVAR_OK;
}

size_t dvar_root_list_num_leftovers(const dvar_root_list *l)
{
	return l ? l->num_leftovers : 0;
}

int dvar_root_list_leftover(const dvar_root_list *l, size_t i, dvar_root_leftover *out)
{
	if (!l || !out || i >= l->num_leftovers)
		return dvar_error_set(DVAR_EINVAL, "root listing has %zu leftovers, not %zu",
		                      l ? l->num_leftovers : 0, i + 1);
	*out = l->leftovers[i];
	return DVAR_OK;
}

void dvar_root_list_free(dvar_root_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->count; i++) {
		free((char *)l->entries[i].name);
		free((char *)l->entries[i].base);
	}
	free(l->entries);
	for (size_t i = 0; i < l->num_leftovers; i++) {
		free((char *)l->leftovers[i].name);
		free((char *)l->leftovers[i].target);
		free((char *)l->leftovers[i].host);
	}
	free(l->leftovers);
	free(l);
}
