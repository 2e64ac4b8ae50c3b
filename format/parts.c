/*
 * format/parts.c - the end of a dvar checkpoint's writer (writer.h): a part
 * closes its data file and encodes its entries (dvar_writer_finish_part);
 * the chief decodes every part's entries, checks that they are exactly this
 * save's parts and that their files are there, merges them into one index
 * (variables declared by several parts must agree; slices of different
 * parts must not overlap), writes it and commits by renaming the staging
 * directory. dvar_writer_commit is the one-part case.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/writer.h"

/* ---------------------------------------------------------------- the index */

typedef struct {
	dvar_bytes key, val;
} kv;

static int kv_cmp(const void *a, const void *b)
{
	const kv *x = a, *y = b;
	return dvar_key_cmp(x->key.data, x->key.len, y->key.data, y->key.len);
}

/* 1 when a chunk of s was packed (starts off a page). */
static int packed(const dvar_slice_entry *s)
{
	for (size_t c = 0; c < s->num_chunks; c++)
		if (s->chunks[c].offset % DVAR_ALIGN)
			return 1;
	return 0;
}

/* The oldest version that says what the index holds, so that an older
 * reader refuses what it would misread with DVAR_EVERSION: a full
 * checkpoint is version 2, as readers before deltas read it; a delta (a
 * chain) version 3; either holding a packed chunk version 4. */
static uint32_t index_version(const dvar_var_entry *vars, size_t num_vars, int delta)
{
	for (size_t i = 0; i < num_vars; i++) {
		const dvar_var_entry *v = &vars[i];
		for (size_t j = 0; j < v->num_slices; j++)
			if (packed(&v->slices[j]))
				return DVAR_FORMAT_PACKED;
		for (size_t j = 0; j < v->num_pieces; j++)
			if (packed(&v->pieces[j].ids) || packed(&v->pieces[j].rows))
				return DVAR_FORMAT_PACKED;
	}
	return delta ? DVAR_FORMAT_DELTA : DVAR_FORMAT_FULL;
}

static int write_index(const char *path, int sync, const dvar_var_entry *vars, size_t num_vars,
                       uint64_t *file_sizes, uint32_t num_files, const dvar_link *chain,
                       size_t chain_len)
{
	size_t n = 1;
	for (size_t i = 0; i < num_vars; i++)
		n += 1 + vars[i].num_slices + vars[i].num_pieces;
	kv *kvs = calloc(n, sizeof(kv));
	dvar_index_builder *b = NULL;
	int rc = DVAR_OK;
	if (!kvs)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");

	uint32_t version = index_version(vars, num_vars, chain_len > 0);
	dvar_header h = { version, version == DVAR_FORMAT_FULL ? DVAR_FORMAT_MIN_READER : version,
	                  num_files, file_sizes, DVAR_BLOCK_SIZE, num_vars, chain_len,
	                  (dvar_link *)chain };
	size_t k = 0;
	rc = dvar_header_encode(&kvs[k++].val, &h);
	for (size_t i = 0; !rc && i < num_vars; i++) {
		const dvar_var_entry *v = &vars[i];
		rc = dvar_key_var(&kvs[k].key, v->name);
		if (!rc) rc = dvar_var_encode(&kvs[k++].val, v, version >= DVAR_FORMAT_DELTA);
		for (size_t j = 0; !rc && j < v->num_slices; j++) {
			rc = dvar_key_slice(&kvs[k].key, v->name, (uint32_t)j);
			if (!rc) rc = dvar_slice_entry_encode(&kvs[k++].val, &v->slices[j]);
		}
		for (size_t j = 0; !rc && j < v->num_pieces; j++) {
			rc = dvar_key_piece(&kvs[k].key, v->name, (uint32_t)j);
			if (!rc) rc = dvar_piece_encode(&kvs[k++].val, &v->pieces[j]);
		}
	}
	if (rc)
		goto done;
	qsort(kvs, n, sizeof(kv), kv_cmp);
	if ((rc = dvar_index_builder_open(&b, path)))
		goto done;
	for (size_t i = 0; !rc && i < n; i++)
		rc = dvar_index_builder_add(b, kvs[i].key.data, kvs[i].key.len, kvs[i].val.data, kvs[i].val.len);
	if (!rc)
		rc = dvar_index_builder_finish(b, sync);
done:
	dvar_index_builder_free(b);
	for (size_t i = 0; i < n; i++) {
		free(kvs[i].key.data);
		free(kvs[i].val.data);
	}
	free(kvs);
	return rc;
}

/* ---------------------------------------------------------------- ending a part */

static int finish(dvar_writer *w, dvar_bytes *entries)
{
	int rc = dvar_writer_end_data(w);
	if (rc)
		return rc;
	if (!(w->opts.flags & DVAR_WRITE_NO_FSYNC)) {
		double t0 = dvar_now();
		if (fsync(w->fd) != 0) {
			w->broken = 1;
			return dvar_error_set_errno(DVAR_EIO, errno, "fsync '%s'", w->data_shown);
		}
		dvar_writer_note_flush((uint64_t)((dvar_now() - t0) * 1e9), atomic_load(&w->next_offset));
	}
	DVAR_FAULT_POINT("data-synced");
	close(w->fd);
	w->fd = -1;
	if (w->fd_direct >= 0)
		close(w->fd_direct);
	w->fd_direct = -1;
	w->finished = 1;
	dvar_part p = { w->part, w->nparts, { 0 }, w->chain_len, w->chain,
	                atomic_load(&w->next_offset), w->num_vars, NULL };
	snprintf(p.token, sizeof(p.token), "%s", w->token);
	dvar_var_entry **vars = malloc((w->num_vars ? w->num_vars : 1) * sizeof(*vars));
	if (!vars) {
		w->broken = 1;
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < w->num_vars; i++)
		vars[i] = &w->vars[i];
	rc = dvar_part_encode(entries, &p, vars);
	free(vars);
	if (rc)
		w->broken = 1;
	return rc;
}

int dvar_writer_finish_part(dvar_writer *w, void **entries, size_t *len)
{
	if (!w || !entries || !len)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_finish_part: NULL argument");
	*entries = NULL;
	*len = 0;
	int rc = dvar_writer_check_usable(w);
	dvar_bytes b = { 0 };
	if (!rc && !(rc = finish(w, &b))) {
		*entries = b.data;
		*len = b.len;
		return DVAR_OK;
	}
	free(b.data);
	return dvar_error_prefix("part %u of '%s'", w->part, w->final_dir);
}

/* ------------------------------------------------------- gathering the parts */

typedef struct {
	dvar_var_entry *v;
	uint32_t part;
} var_ref;

static int ref_cmp(const void *a, const void *b)
{
	const var_ref *x = a, *y = b;
	int c = strcmp(x->v->name, y->v->name);
	return c ? c : (x->part > y->part) - (x->part < y->part);
}

/*
 * Every data file of the save is there with the size its part says, and the
 * staging directory holds nothing else (a leftover of another save would
 * otherwise be committed with this one).
 */
static int check_files(const dvar_writer *w, const dvar_part *parts)
{
	for (uint32_t f = 0; f < w->nparts; f++) {
		char name[32];
		struct stat st;
		dvar_data_file_name(name, sizeof(name), f, w->nparts);
		char *path = dvar_path_join(w->tmp_dir, name);
		if (!path)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		int e = stat(path, &st) == 0 ? 0 : errno;
		int rc = DVAR_OK;
		if (e)
			rc = dvar_error_set_errno(e == ENOENT ? DVAR_ENOTFOUND : DVAR_EIO, e,
			                          "data file '%s' of part %u", path, f);
		else if ((uint64_t)st.st_size != parts[f].file_size)
			rc = dvar_error_set(DVAR_ECORRUPT, "data file '%s' has %llu bytes; part %u wrote %llu",
			                    path, (unsigned long long)st.st_size, f,
			                    (unsigned long long)parts[f].file_size);
		free(path);
		if (rc)
			return rc;
	}
	DIR *d = opendir(w->tmp_dir);
	if (!d)
		return dvar_error_set_errno(DVAR_EIO, errno, "open directory '%s'", w->tmp_dir);
	struct dirent *e;
	int rc = DVAR_OK;
	while (!rc && (e = readdir(d))) {
		unsigned f, of;
		char tail;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (sscanf(e->d_name, "data-%5u-of-%5u%c", &f, &of, &tail) == 2 && of == w->nparts &&
		    f < w->nparts && strlen(e->d_name) == 19)
			continue;
		rc = dvar_error_set(DVAR_EINVAL, "staging directory '%s' holds '%s', which no part of "
		                    "this save wrote", w->tmp_dir, e->d_name);
	}
	closedir(d);
	return rc;
}

/* The merged pieces, checked as a reader will check them (their streams
 * were checked with their parts). */
static int v_check_pieces(const dvar_var_entry *v)
{
	int rc = dvar_var_check(v, DVAR_MAX_PARTS, "the parts' entries");
	if (rc != DVAR_ECORRUPT)
		return rc; /* fine, or out of memory */
	return dvar_error_set(DVAR_ESHAPE, "%s", dvar_error_last()->message);
}

/* Variable v of the merged index from refs[0..n): all parts that declare it. */
static int merge_var(dvar_var_entry *out, const var_ref *refs, size_t n)
{
	const dvar_var_entry *first = refs[0].v;
	size_t total = 0, pieces = 0;
	*out = *first; /* borrows name, attributes, slice and piece contents from the parts */
	out->slices = NULL;
	out->num_slices = 0;
	out->pieces = NULL;
	out->num_pieces = 0;
	out->raw_bytes = out->stored_bytes = 0;
	for (size_t k = 0; k < n; k++) {
		const dvar_var_entry *v = refs[k].v;
		if (v->dtype != first->dtype || !dvar_shape_equal(&v->shape, &first->shape)) {
			char s1[128], s2[128];
			dvar_shape_format(&first->shape, s1, sizeof(s1));
			dvar_shape_format(&v->shape, s2, sizeof(s2));
			return dvar_error_set(DVAR_ESHAPE, "variable '%s' is %s %s in part %u but %s %s in part %u",
			                      v->name, dvar_dtype_name(first->dtype), s1, refs[0].part,
			                      dvar_dtype_name(v->dtype), s2, refs[k].part);
		}
		if (!dvar_attrs_equal(v, first))
			return dvar_error_set(DVAR_EINVAL, "variable '%s' has different attributes in parts "
			                      "%u and %u", v->name, refs[0].part, refs[k].part);
		if (v->delta != first->delta)
			return dvar_error_set(DVAR_EINVAL, "variable '%s' is saved %s in part %u but %s in "
			                      "part %u", v->name,
			                      first->delta == DVAR_DELTA_SAME ? "unchanged" :
			                      first->delta == DVAR_DELTA_ROWS ? "as rows" : "whole",
			                      refs[0].part,
			                      v->delta == DVAR_DELTA_SAME ? "unchanged" :
			                      v->delta == DVAR_DELTA_ROWS ? "as rows" : "whole",
			                      refs[k].part);
		total += v->num_slices;
		pieces += v->num_pieces;
	}
	if (total > UINT32_MAX || pieces > UINT32_MAX)
		return dvar_error_set(DVAR_EINVAL, "variable '%s' has %zu slices and %zu row pieces, "
		                      "more than the format holds", first->name, total, pieces);
	if (!(out->slices = malloc((total ? total : 1) * sizeof(dvar_slice_entry))) ||
	    !(out->pieces = malloc((pieces ? pieces : 1) * sizeof(dvar_piece))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	/* A part's own slices were checked when it was decoded: an overlap is across
	 * parts, which the callers chose (DVAR_ESHAPE, as when one writer is given it). */
	int64_t rows_end = 0;
	for (size_t k = 0; k < n; k++) {
		const dvar_var_entry *v = refs[k].v;
		for (size_t j = 0; j < v->num_slices; j++) {
			const dvar_slice_entry *s = &v->slices[j];
			size_t m;
			if (dvar_slice_overlaps(&s->slice, out->slices, out->num_slices, sizeof(*out->slices),
			                        &rows_end, &m)) {
				const dvar_slice_entry *o = &out->slices[m];
				char a[256], b[256];
				dvar_slice_describe(a, sizeof(a), &s->slice, &v->shape);
				dvar_slice_describe(b, sizeof(b), &o->slice, &v->shape);
				return dvar_error_set(DVAR_ESHAPE, "variable '%s': slice %s of part %u overlaps "
				                      "slice %s of part %u", v->name, a, s->file, b, o->file);
			}
			out->slices[out->num_slices++] = *s;
		}
		for (size_t j = 0; j < v->num_pieces; j++)
			out->pieces[out->num_pieces++] = v->pieces[j];
		out->raw_bytes += v->raw_bytes;
		out->stored_bytes += v->stored_bytes;
	}
	/* Pieces of different parts must not share rows: the index's own check. */
	return v_check_pieces(out);
}

/* The merged variables in name order; each one's slices array is owned, the rest borrowed. */
static int merge_parts(dvar_part *parts, uint32_t nparts, dvar_var_entry **out, size_t *num)
{
	size_t n = 0, k = 0, m = 0;
	int rc = DVAR_OK;
	*out = NULL;
	*num = 0;
	for (uint32_t p = 0; p < nparts; p++)
		n += parts[p].num_vars;
	var_ref *refs = malloc((n ? n : 1) * sizeof(var_ref));
	dvar_var_entry *vars = calloc(n ? n : 1, sizeof(dvar_var_entry));
	if (!refs || !vars) {
		free(refs);
		free(vars);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	for (uint32_t p = 0; p < nparts; p++)
		for (size_t i = 0; i < parts[p].num_vars; i++)
			refs[k++] = (var_ref){ &parts[p].vars[i], p };
	qsort(refs, n, sizeof(var_ref), ref_cmp);
	for (size_t a = 0, b; !rc && a < n; a = b) {
		for (b = a + 1; b < n && strcmp(refs[b].v->name, refs[a].v->name) == 0; b++)
			;
		rc = merge_var(&vars[m], refs + a, b - a);
		m++;
	}
	free(refs);
	if (rc) {
		for (size_t i = 0; i < m; i++) {
			free(vars[i].slices);
			free(vars[i].pieces);
		}
		free(vars);
		return rc;
	}
	*out = vars;
	*num = m;
	return DVAR_OK;
}

/* Every part of a delta wrote it over the same chain as the chief. */
static int same_chain(const dvar_part *p, const dvar_writer *w)
{
	if (p->chain_len != w->chain_len)
		return 0;
	for (size_t i = 0; i < p->chain_len; i++)
		if (strcmp(p->chain[i].name, w->chain[i].name) ||
		    p->chain[i].index_crc != w->chain[i].index_crc)
			return 0;
	return 1;
}

/* Decode all entries and check that they are exactly this save's parts. */
static int decode_parts(const dvar_writer *w, const void *const *blobs, const size_t *lens, int n,
                        dvar_part *parts)
{
	dvar_part p;
	int rc;
	for (int i = 0; i < n; i++) {
		if ((rc = dvar_part_decode(&p, blobs[i], blobs[i] ? lens[i] : 0)))
			return dvar_error_prefix("part entries #%d", i);
		if (p.nparts != w->nparts || strcmp(p.token, w->token) != 0) {
			rc = dvar_error_set(DVAR_EINVAL, "part entries #%d belong to another save (part %u of "
			                    "%u, token '%s'); this save has %u parts, token '%s'", i, p.part,
			                    p.nparts, p.token, w->nparts, w->token);
			dvar_part_clear(&p);
			return rc;
		}
		if (parts[p.part].nparts) {
			rc = dvar_error_set(DVAR_EINVAL, "part %u is given twice (part entries #%d)", p.part, i);
			dvar_part_clear(&p);
			return rc;
		}
		if (!same_chain(&p, w)) {
			rc = dvar_error_set(DVAR_EINVAL, "part %u wrote %s%s, part %u %s%s", p.part,
			                    p.chain_len ? "a delta over " : "a full checkpoint",
			                    p.chain_len ? p.chain[0].name : "", w->part,
			                    w->chain_len ? "a delta over " : "a full checkpoint",
			                    w->chain_len ? w->chain[0].name : "");
			dvar_part_clear(&p);
			return rc;
		}
		parts[p.part] = p;
	}
	for (uint32_t f = 0; f < w->nparts; f++)
		if (!parts[f].nparts)
			return dvar_error_set(DVAR_EINVAL, "part %u of %u is missing (%d part entries given)",
			                      f, w->nparts, n);
	return DVAR_OK;
}

static int commit_parts(dvar_writer *w, const void *const *blobs, const size_t *lens, int n)
{
	int sync = !(w->opts.flags & DVAR_WRITE_NO_FSYNC);
	dvar_part *parts = calloc(w->nparts, sizeof(dvar_part));
	uint64_t *sizes = calloc(w->nparts, sizeof(uint64_t));
	dvar_var_entry *vars = NULL;
	size_t num_vars = 0;
	char *index = NULL;
	int rc;
	if (!parts || !sizes) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	if (n < 0) {
		rc = dvar_error_set(DVAR_EINVAL, "%d part entries given for a save of %u parts", n, w->nparts);
		goto done;
	}
	if ((rc = decode_parts(w, blobs, lens, n, parts)) || (rc = check_files(w, parts)) ||
	    (rc = merge_parts(parts, w->nparts, &vars, &num_vars)))
		goto done;
	for (uint32_t f = 0; f < w->nparts; f++)
		sizes[f] = parts[f].file_size;
	if (!(index = dvar_path_join(w->tmp_dir, DVAR_INDEX_NAME))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = write_index(index, sync, vars, num_vars, sizes, w->nparts, w->chain, w->chain_len)))
		goto done;
	DVAR_FAULT_POINT("index-written");
	if (sync && (rc = dvar_fs_fsync_path(w->tmp_dir)))
		goto done;
	if ((rc = dvar_fs_rename_noreplace(w->tmp_dir, w->final_dir))) {
		dvar_error_prefix("commit");
		goto done;
	}
	free(w->tmp_dir);
	w->tmp_dir = NULL;
	w->committed = 1;
	DVAR_FAULT_POINT("renamed");
	char *parent = dvar_path_parent(w->final_dir);
	if (!parent) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	rc = sync ? dvar_fs_fsync_path(parent) : DVAR_OK;
	free(parent);
	if (!rc && w->root)
		rc = dvar_root_publish(w->root, w->step_name, w->opts.keep_last, sync);
	/* Published and retained: the next save into the root may start. */
	if (w->lock_fd >= 0) {
		close(w->lock_fd);
		w->lock_fd = -1;
	}
done:
	for (size_t i = 0; i < num_vars; i++) {
		free(vars[i].slices);
		free(vars[i].pieces);
	}
	free(vars);
	for (uint32_t f = 0; parts && f < w->nparts; f++)
		dvar_part_clear(&parts[f]);
	free(parts);
	free(sizes);
	free(index);
	return rc;
}

/* The failure's message names a file of the staging directory: name the
 * checkpoint's instead, which is what the caller knows. */
static void in_user_terms(const dvar_writer *w, int rc)
{
	const char *msg = dvar_error_last()->message;
	const char *at = w->tmp_dir ? strstr(msg, w->tmp_dir) : NULL;
	char text[DVAR_ERROR_MESSAGE_MAX];

	if (!at)
		return;
	snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - msg), msg, w->final_dir,
	         at + strlen(w->tmp_dir));
	dvar_error_restore(rc, text);
}

/* Neither committed nor broken: both commits check this first. */
static int check_committable(const dvar_writer *w)
{
	if (w->committed)
		return dvar_error_set(DVAR_EINVAL, "checkpoint '%s' is already committed", w->final_dir);
	if (dvar_writer_cancelled(w))
		return dvar_error_set(DVAR_ECANCELED, "checkpoint '%s' not committed: cancelled",
		                      w->final_dir);
	if (w->broken)
		return dvar_error_set(DVAR_EIO, "checkpoint '%s' not committed: an earlier write failed",
		                      w->final_dir);
	return DVAR_OK;
}

int dvar_writer_commit_parts(dvar_writer *w, const void *const *entries, const size_t *lens, int n)
{
	int rc;
	if (!w || (n > 0 && (!entries || !lens)))
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_commit_parts: NULL argument");
	if ((rc = check_committable(w)))
		return rc;
	if (!w->finished)
		return dvar_error_set(DVAR_EINVAL, "checkpoint '%s' not committed: part %u must call "
		                      "dvar_writer_finish_part first", w->final_dir, w->part);
	rc = commit_parts(w, entries, lens, n);
	if (rc && !w->committed) {
		w->broken = 1;
		in_user_terms(w, rc);
		dvar_error_prefix("checkpoint '%s' not committed", w->final_dir);
	}
	return rc;
}

int dvar_writer_commit(dvar_writer *w)
{
	if (!w)
		return dvar_error_set(DVAR_EINVAL, "dvar_writer_commit: NULL writer");
	int rc = check_committable(w);
	if (rc)
		return rc;
	if (w->nparts != 1 || w->finished)
		return dvar_error_set(DVAR_EINVAL, "checkpoint '%s': a part writer commits with "
		                      "dvar_writer_finish_part and dvar_writer_commit_parts", w->final_dir);
	if (w->stream.open)
		return dvar_writer_check_usable(w);
	/* One part: its own entries are all there are. */
	dvar_bytes b = { 0 };
	if ((rc = finish(w, &b))) {
		w->broken = 1;
		free(b.data);
		return dvar_error_prefix("checkpoint '%s' not committed", w->final_dir);
	}
	const void *blob = b.data;
	rc = dvar_writer_commit_parts(w, &blob, &b.len, 1);
	free(b.data);
	return rc;
}
