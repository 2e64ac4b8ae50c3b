/*
 * format/root.c - a checkpoint root: ckpt-<step>/ directories and the
 * `checkpoint` pointer file naming the latest one and the ones kept. The
 * pointer file uses TensorFlow's CheckpointState text form, so
 * tf.train.latest_checkpoint reads it too:
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
#include <sys/stat.h>

#include "format/format.h"

#define POINTER_MAX (1u << 20)
#define KEY_LATEST "model_checkpoint_path"
#define KEY_ALL "all_model_checkpoint_paths"

void dvar_pointer_clear(dvar_pointer *p)
{
	free(p->latest);
	for (size_t i = 0; i < p->num_kept; i++)
		free(p->kept[i]);
	free(p->kept);
	memset(p, 0, sizeof(*p));
}

/* A quoted string with C escapes; only names we could have written are accepted. */
static char *parse_quoted(const char *s, const char **end)
{
	if (*s != '"')
		return NULL;
	size_t n = 0;
	char *out = malloc(strlen(s));
	if (!out)
		return NULL;
	for (s++; *s && *s != '"'; s++) {
		if (*s == '\\') {
			s++;
			if (*s != '\\' && *s != '"' && *s != '\'') {
				free(out);
				return NULL;
			}
		}
		out[n++] = *s;
	}
	if (*s != '"' || n == 0 || memchr(out, '/', n)) {
		free(out);
		return NULL;
	}
	out[n] = '\0';
	*end = s + 1;
	return out;
}

int dvar_pointer_read(dvar_pointer *out, const char *root)
{
	memset(out, 0, sizeof(*out));
	char *path = dvar_path_join(root, DVAR_POINTER_NAME), *text = NULL;
	size_t len;
	int rc;
	if (!path)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if ((rc = dvar_fs_read_file(path, &text, &len, POINTER_MAX)))
		goto done;
	if (memchr(text, '\0', len)) {
		rc = dvar_error_set(DVAR_ECORRUPT, "pointer file '%s' is not text", path);
		goto done;
	}
	int lineno = 0;
	for (char *line = text, *next; line && *line; line = next) {
		lineno++;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		while (*line == ' ' || *line == '\t' || *line == '\r')
			line++;
		if (!*line || *line == '#')
			continue;
		char *colon = strchr(line, ':');
		const char *vend = NULL;
		char *value = colon ? (colon[1] == ' ' ? parse_quoted(colon + 2, &vend) : parse_quoted(colon + 1, &vend)) : NULL;
		if (colon)
			*colon = '\0';
		int is_latest = colon && strcmp(line, KEY_LATEST) == 0, is_all = colon && strcmp(line, KEY_ALL) == 0;
		if (vend)
			while (*vend == ' ' || *vend == '\t' || *vend == '\r')
				vend++;
		if (!value || *vend) {
			free(value);
			/* TensorFlow's timestamps and fields we do not use are fine. */
			if (colon && !is_latest && !is_all)
				continue;
			rc = dvar_error_set(DVAR_ECORRUPT, "pointer file '%s' line %d is malformed", path, lineno);
			goto done;
		}
		if (is_latest) {
			free(out->latest);
			out->latest = value;
		} else if (is_all) {
			char **kept = realloc(out->kept, (out->num_kept + 1) * sizeof(char *));
			if (!kept) {
				free(value);
				rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
				goto done;
			}
			out->kept = kept;
			out->kept[out->num_kept++] = value;
		} else {
			free(value);
		}
	}
	if (!out->latest)
		rc = dvar_error_set(DVAR_ECORRUPT, "pointer file '%s' names no latest checkpoint (%s)", path, KEY_LATEST);
done:
	if (rc)
		dvar_pointer_clear(out);
	free(text);
	free(path);
	return rc;
}

int dvar_pointer_write(const char *root, const dvar_pointer *p)
{
	dvar_bytes b = { 0 };
	int rc = DVAR_OK;
	char line[DVAR_MAX_NAME + 64];
	snprintf(line, sizeof(line), KEY_LATEST ": \"%s\"\n", p->latest);
	rc = dvar_bytes_put(&b, line, strlen(line));
	for (size_t i = 0; !rc && i < p->num_kept; i++) {
		snprintf(line, sizeof(line), KEY_ALL ": \"%s\"\n", p->kept[i]);
		rc = dvar_bytes_put(&b, line, strlen(line));
	}
	if (!rc)
		rc = dvar_fs_write_atomic(root, DVAR_POINTER_NAME, b.data, b.len);
	free(b.data);
	return rc;
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
	if (!dvar_fs_exists(path)) {
		rc = dvar_error_set(DVAR_ENOTFOUND, "'%s' does not exist", path);
	} else if (dvar_fs_exists(index)) {
		if (!(*out = strdup(path)))
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	} else if (dvar_fs_exists(pointer)) {
		dvar_pointer p;
		if ((rc = dvar_pointer_read(&p, path)))
			goto done;
		if (!(*out = dvar_path_join(path, p.latest)))
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		else if (!dvar_fs_is_dir(*out))
			rc = dvar_error_set(DVAR_ENOTFOUND, "root '%s': its latest checkpoint '%s' does not exist",
			                    path, p.latest);
		dvar_pointer_clear(&p);
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

int dvar_root_publish(const char *root, const char *name, int keep_last)
{
	dvar_pointer old, next = { 0 };
	int rc = dvar_pointer_read(&old, root);
	if (rc == DVAR_ENOTFOUND) {
		memset(&old, 0, sizeof(old));
		dvar_error_clear();
	} else if (rc) {
		return rc;
	}
	size_t n = 0;
	char **list = calloc(old.num_kept + 1, sizeof(char *));
	if (!list) {
		dvar_pointer_clear(&old);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < old.num_kept; i++)
		if (strcmp(old.kept[i], name) != 0)
			list[n++] = old.kept[i];
	list[n++] = (char *)name;
	size_t drop = keep_last > 0 && n > (size_t)keep_last ? n - (size_t)keep_last : 0;
	next.latest = (char *)name;
	next.kept = list + drop;
	next.num_kept = n - drop;
	DVAR_FAULT_POINT("before-pointer");
	rc = dvar_pointer_write(root, &next);
	DVAR_FAULT_POINT("pointer-written");
	for (size_t i = 0; !rc && i < drop; i++)
		rc = delete_checkpoint(root, list[i]);
	free(list);
	dvar_pointer_clear(&old);
	return rc;
}

/* ---------------------------------------------------------------- listing */

struct dvar_root_list {
	dvar_root_entry *entries;
	size_t count;
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

static int entry_cmp(const void *a, const void *b)
{
	const dvar_root_entry *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return strcmp(x->name, y->name);
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
	dvar_pointer p;
	int have_pointer = dvar_pointer_read(&p, root) == DVAR_OK;
	int rc = DVAR_OK;
	dvar_root_list *l = calloc(1, sizeof(*l));
	size_t cap = 0;
	struct dirent *e;
	if (!l)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	while (!rc && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue; /* ., .., and temporary or half-deleted checkpoints */
		char *dir = dvar_path_join(root, e->d_name);
		char *index = dir ? dvar_path_join(dir, DVAR_INDEX_NAME) : NULL;
		int is_ckpt = index && dvar_fs_exists(index);
		uint64_t bytes = is_ckpt ? dvar_fs_dir_bytes(dir) : 0;
		free(index);
		free(dir);
		if (!is_ckpt)
			continue;
		if (l->count == cap) {
			cap = cap ? cap * 2 : 16;
			dvar_root_entry *grown = realloc(l->entries, cap * sizeof(*grown));
			if (!grown) {
				rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
				break;
			}
			l->entries = grown;
		}
		dvar_root_entry *en = &l->entries[l->count];
		memset(en, 0, sizeof(*en));
		if (!(en->name = strdup(e->d_name))) {
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			break;
		}
		l->count++;
		en->step = step_of(en->name);
		en->bytes = bytes;
		if (have_pointer) {
			en->is_latest = strcmp(p.latest, en->name) == 0;
			for (size_t k = 0; k < p.num_kept; k++)
				en->is_kept |= strcmp(p.kept[k], en->name) == 0;
		}
	}
	closedir(d);
	if (have_pointer)
		dvar_pointer_clear(&p);
	if (rc) {
		dvar_root_list_free(l);
		return rc;
	}
	if (l->count)
		qsort(l->entries, l->count, sizeof(dvar_root_entry), entry_cmp);
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

void dvar_root_list_free(dvar_root_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->count; i++)
		free((char *)l->entries[i].name);
	free(l->entries);
	free(l);
}
