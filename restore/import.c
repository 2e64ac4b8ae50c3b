/*
 * restore/import.c - dvar_import: a checkpoint from .npy, .npz and
 * safetensors files. First every file is opened and its header checked,
 * and every name and shard count resolved, so that a bad input fails before
 * anything is written; then each file is opened again (and must be the one
 * that was checked) and its arrays are streamed in pieces through one
 * buffer into streamed writer slices, so memory stays at a few chunks
 * whatever the inputs' sizes. The writer commits atomically: a failure or a
 * cancellation frees it uncommitted and nothing is left at out.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/format.h"
#include "restore/restore.h"

/* One input file, as it was when its header was checked. */
typedef struct {
	const char *path;
	struct stat st;
	dvar_zip_member *members; /* .npz: its directory */
	size_t num_members;
	size_t first, count;      /* its arrays, in the import's array list */
} source;

/* One array to write. */
typedef struct {
	char *name;                    /* the variable's (malloc'ed) */
	const dvar_zip_member *member; /* .npz: the member holding it; else NULL */
	int dtype;
	dvar_shape shape;
	uint64_t offset;               /* of its data: in the file, or in the member */
	uint64_t bytes;
	int64_t *offsets;              /* the div layout of its shards; NULL: not sharded */
	int64_t num_shards;
} array;

typedef struct {
	const dvar_import_options *opts;
	dvar_op op;
	source *src;
	size_t num_src;
	array *arr;
	size_t num_arr, cap_arr;
	unsigned char *buf; /* headers, then the pieces */
	size_t cap;
	char what[DVAR_ERROR_MESSAGE_MAX]; /* the import, in cancellation messages */
} importer;

static int out_of_memory(const char *path)
{
	return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory", path);
}

/* ------------------------------------------------------- checking */

/* A new array of source s named prefix/name (prefix NULL: name), taking
 * name (malloc'ed; NULL when that failed). */
static int add_array(importer *im, source *s, const char *prefix, char *name, array **out)
{
	array *a = NULL;

	if (name && (a = dvar_grow(im->arr, im->num_arr, &im->cap_arr, sizeof(*a), 16)))
		im->arr = a;
	if (name && im->num_arr < im->cap_arr) {
		a = &im->arr[im->num_arr];
		memset(a, 0, sizeof(*a));
		a->name = name;
		if (prefix) {
			size_t lp = strlen(prefix), ln = strlen(name);
			if ((a->name = malloc(lp + 1 + ln + 1))) {
				memcpy(a->name, prefix, lp);
				a->name[lp] = '/';
				memcpy(a->name + lp + 1, name, ln + 1);
			}
			free(name);
		}
		name = NULL;
	}
	if (!a || !a->name) {
		free(name);
		return out_of_memory(s->path);
	}
	im->num_arr++;
	s->count++;
	*out = a;
	return DVAR_OK;
}

static void note_trailing(const importer *im, const char *what, uint64_t trailing)
{
	if (trailing)
		dvar_op_note(&im->op, "%s has %llu bytes after the array data; they are ignored",
		             what, (unsigned long long)trailing);
}

/* The array of a .npy header (of member m of an .npz, or NULL), named as add_array names it. */
static int add_npy(importer *im, source *s, const char *prefix, char *name,
                   const dvar_npy_info *info, const dvar_zip_member *m)
{
	array *a = NULL;
	int rc = add_array(im, s, prefix, name, &a);

	if (rc != DVAR_OK)
		return rc;
	a->member = m;
	a->dtype = info->dtype;
	a->shape = info->shape;
	a->offset = info->offset;
	a->bytes = info->bytes;
	return DVAR_OK;
}

/* A .npy file: one array, named name or after the file. */
static int check_npy(importer *im, source *s, const char *name, size_t len)
{
	char what[DVAR_ERROR_MESSAGE_MAX];
	dvar_npy_info info;
	int rc;

	snprintf(what, sizeof(what), "'%s'", s->path);
	if ((rc = dvar_npy_parse(what, im->buf, len, (uint64_t)s->st.st_size, &info)) != DVAR_OK)
		return rc;
	note_trailing(im, what, info.trailing);
	if (name)
		return add_npy(im, s, NULL, strdup(name), &info, NULL);
	/* The file's name less its directory and ".npy". */
	const char *base = strrchr(s->path, '/') ? strrchr(s->path, '/') + 1 : s->path;
	size_t n = strlen(base);
	if (n > 4 && strcmp(base + n - 4, ".npy") == 0)
		n -= 4;
	return add_npy(im, s, NULL, strndup(base, n), &info, NULL);
}

/* An .npz archive: every member named "*.npy" is an array (the name less
 * ".npy"); others are left out with a note. */
static int check_npz(importer *im, source *s, int fd, const char *prefix)
{
	char what[DVAR_ERROR_MESSAGE_MAX];
	int rc = dvar_zip_list(fd, s->path, (uint64_t)s->st.st_size, &s->members,
	                       &s->num_members);

	for (size_t i = 0; rc == DVAR_OK && i < s->num_members; i++) {
		const dvar_zip_member *m = &s->members[i];
		size_t n = strlen(m->name);
		dvar_zip_stream *z = NULL;
		dvar_npy_info info;
		if (n < 4 || strcmp(m->name + n - 4, ".npy") != 0) {
			dvar_op_note(&im->op, "'%s': member '%s' left out: not a .npy file", s->path,
			             m->name);
			continue;
		}
		size_t len = m->usize < DVAR_NPY_READ_MAX ? (size_t)m->usize : DVAR_NPY_READ_MAX;
		snprintf(what, sizeof(what), "'%s': member '%s'", s->path, m->name);
		rc = dvar_zip_open(&z, fd, s->path, (uint64_t)s->st.st_size, m);
		if (rc == DVAR_OK)
			rc = dvar_zip_read(z, im->buf, len);
		dvar_zip_close(z);
		if (rc == DVAR_OK)
			rc = dvar_npy_parse(what, im->buf, len, m->usize, &info);
		if (rc != DVAR_OK)
			break;
		note_trailing(im, what, info.trailing);
		rc = add_npy(im, s, prefix, strndup(m->name, n - 4), &info, m);
	}
	return rc;
}

/* A safetensors file: every tensor, in the order of their data. */
static int check_safetensors(importer *im, source *s, int fd, const char *prefix)
{
	dvar_st_tensor *t;
	size_t n, i;
	array *a;
	int rc = dvar_st_read_header(fd, s->path, (uint64_t)s->st.st_size, &t, &n);

	for (i = 0; rc == DVAR_OK && i < n; i++) {
		rc = add_array(im, s, prefix, t[i].name, &a);
		t[i].name = NULL; /* the array has it now, or it was freed */
		if (rc == DVAR_OK) {
			a->dtype = t[i].dtype;
			a->shape = t[i].shape;
			a->offset = t[i].offset;
			a->bytes = t[i].bytes;
		}
	}
	dvar_st_tensors_free(t, n);
	return rc;
}

/* Open path read-only as a regular file; *st describes it. */
static int open_file(const char *path, int *fd, struct stat *st)
{
	if ((*fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return dvar_error_set_errno(errno == ENOENT ? DVAR_ENOTFOUND : DVAR_EIO, errno, "'%s'",
		                            path);
	if (fstat(*fd, st) != 0 || !S_ISREG(st->st_mode)) {
		close(*fd);
		*fd = -1;
		return dvar_error_set(DVAR_EINVAL, "'%s' is not a regular file", path);
	}
	return DVAR_OK;
}

/* Open the source, tell its format by its first bytes and check its header. */
static int check_source(importer *im, source *s, const dvar_import_source *in)
{
	static const unsigned char npy_magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };
	int fd, rc;

	s->path = in->path;
	s->first = im->num_arr;
	if (!in->path)
		return dvar_error_set(DVAR_EINVAL, "dvar_import: a source without a path");
	if ((rc = open_file(in->path, &fd, &s->st)) != DVAR_OK)
		return rc;
	uint64_t size = (uint64_t)s->st.st_size;
	size_t len = size < DVAR_NPY_READ_MAX ? (size_t)size : DVAR_NPY_READ_MAX;
	if (size == 0)
		rc = dvar_error_set(DVAR_ECORRUPT, "'%s' is empty: not a .npy, .npz or .safetensors "
		                                   "file", s->path);
	else
		rc = dvar_fs_pread_all(fd, im->buf, len, 0, s->path);
	if (rc == DVAR_OK) {
		const unsigned char *b = im->buf;
		/* A zip archive starts with a member's local header, or (empty) its end record;
		 * safetensors with its header's length and '{'. */
		if (len >= sizeof(npy_magic) && memcmp(b, npy_magic, sizeof(npy_magic)) == 0)
			rc = check_npy(im, s, in->name, len);
		else if (len >= 4 && b[0] == 'P' && b[1] == 'K' &&
		         ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6)))
			rc = check_npz(im, s, fd, in->name);
		else if (len > 8 && b[8] == '{')
			rc = check_safetensors(im, s, fd, in->name);
		else
			rc = dvar_error_set(DVAR_ECORRUPT, "'%s': not a .npy, .npz or .safetensors file "
			                                   "(bad magic)", s->path);
	}
	close(fd);
	return rc;
}

/* By name; arrays of one name in the order of the sources (one block of arrays). */
static int by_name(const void *a, const void *b)
{
	const array *x = *(const array *const *)a, *y = *(const array *const *)b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x > y) - (x < y);
}

static int is_named(const void *name, const void *a)
{
	return strcmp(name, (*(const array *const *)a)->name);
}

/* The source array a came from. */
static const source *source_of(const importer *im, const array *a)
{
	size_t k = (size_t)(a - im->arr), i = 0;
	while (k >= im->src[i].first + im->src[i].count)
		i++;
	return &im->src[i];
}

/* Names valid and unique; each shard count naming one array, once. */
static int check_names(importer *im)
{
	const dvar_import_options *o = im->opts;
	array **sorted = malloc((im->num_arr ? im->num_arr : 1) * sizeof(*sorted));
	int rc = DVAR_OK;

	if (!sorted)
		return dvar_error_set(DVAR_ENOMEM, "dvar_import: out of memory");
	for (size_t i = 0; i < im->num_arr; i++) {
		sorted[i] = &im->arr[i];
		size_t n = strlen(im->arr[i].name);
		if ((n == 0 || n > DVAR_MAX_NAME) && rc == DVAR_OK)
			rc = dvar_error_set(DVAR_EINVAL, "'%s': array name '%.40s%s' is %zu bytes; a "
			                                 "variable's name takes 1 to %d",
			                    source_of(im, &im->arr[i])->path, im->arr[i].name,
			                    n > 40 ? "..." : "", n, DVAR_MAX_NAME);
	}
	qsort(sorted, im->num_arr, sizeof(*sorted), by_name);
	for (size_t i = 1; rc == DVAR_OK && i < im->num_arr; i++)
		if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
			rc = dvar_error_set(DVAR_EINVAL, "two arrays are named '%s': from '%s' and '%s'",
			                    sorted[i]->name, source_of(im, sorted[i - 1])->path,
			                    source_of(im, sorted[i])->path);
	for (size_t k = 0; rc == DVAR_OK && k < o->num_shards; k++) {
		const dvar_shard_count *c = &o->shards[k];
		array **hit;
		if (!c->name) {
			rc = dvar_error_set(DVAR_EINVAL, "dvar_import: a shard count without a name");
			break;
		}
		hit = bsearch(c->name, sorted, im->num_arr, sizeof(*sorted), is_named);
		if (!hit)
			rc = dvar_error_set(DVAR_EINVAL, "shard count for '%s': no array of that name "
			                                 "is imported", c->name);
		else if ((*hit)->offsets)
			rc = dvar_error_set(DVAR_EINVAL, "shard count for '%s' given twice", c->name);
		else if ((rc = dvar_shard_layout(c->name, &(*hit)->shape, c->shards, &(*hit)->offsets,
		                                 &(*hit)->num_shards)) == DVAR_OK)
			dvar_shard_note(&im->op, c->name, &(*hit)->shape, c->shards,
			                (*hit)->num_shards);
	}
	free(sorted);
	return rc;
}

/* ------------------------------------------------------- writing */

/* Where the bytes of the arrays being written come from. */
typedef struct {
	const source *s;
	int fd;
	uint64_t pos;       /* plain files: the next byte's offset */
	dvar_zip_stream *z; /* .npz: the member's stream */
} feed;

/* The next len bytes (len <= the buffer's) into the buffer. */
static int pull(importer *im, feed *f, size_t len)
{
	if (f->z)
		return dvar_zip_read(f->z, im->buf, len);
	int rc = dvar_fs_pread_all(f->fd, im->buf, len, f->pos, f->s->path);
	f->pos += len;
	return rc;
}

/* Read past len bytes: a member's .npy header, or what follows its data
 * (read all the same, for the member's CRC check at its end). */
static int skip(importer *im, feed *f, uint64_t len)
{
	int rc = DVAR_OK;

	while (rc == DVAR_OK && len) {
		size_t n = len < im->cap ? (size_t)len : im->cap;
		rc = pull(im, f, n);
		len -= n;
	}
	return rc;
}

/* Array a as one slice, or one slice per shard, in pieces of the buffer's size. */
static int write_array(importer *im, dvar_writer *w, feed *f, const array *a)
{
	int64_t n = a->offsets ? a->num_shards : 1;
	uint64_t row = a->shape.rank && a->shape.dims[0] ? a->bytes / (uint64_t)a->shape.dims[0] : 0;
	int rc = DVAR_OK;

	for (int64_t k = 0; rc == DVAR_OK && k < n; k++) {
		dvar_slice sl;
		uint64_t left = a->bytes;
		if (n > 1) {
			dvar_shard_slice(&a->shape, a->offsets, k, &sl);
			left = (uint64_t)(a->offsets[k + 1] - a->offsets[k]) * row;
		}
		rc = dvar_writer_begin_slice(w, a->name, a->dtype, &a->shape, n > 1 ? &sl : NULL);
		while (rc == DVAR_OK && left) {
			size_t len = left < im->cap ? (size_t)left : im->cap;
			if ((rc = dvar_op_check(&im->op, im->what)) != DVAR_OK ||
			    (rc = pull(im, f, len)) != DVAR_OK ||
			    (rc = dvar_writer_write(w, im->buf, len)) != DVAR_OK)
				break;
			dvar_op_advance(&im->op, len);
			left -= len;
		}
		if (rc == DVAR_OK)
			rc = dvar_writer_end_slice(w);
	}
	if (rc == DVAR_OK)
		rc = dvar_set_shard_attrs(w, a->name, n);
	if (rc == DVAR_OK)
		dvar_op_written(&im->op, a->name, a->bytes);
	return rc;
}

/* Every array of source s, from the file as it was checked. */
static int write_source(importer *im, dvar_writer *w, const source *s)
{
	feed f = { .s = s };
	struct stat st;
	int rc = open_file(s->path, &f.fd, &st);

	if (rc != DVAR_OK)
		return rc;
	if (st.st_dev != s->st.st_dev || st.st_ino != s->st.st_ino ||
	    st.st_size != s->st.st_size || st.st_mtim.tv_sec != s->st.st_mtim.tv_sec ||
	    st.st_mtim.tv_nsec != s->st.st_mtim.tv_nsec)
		rc = dvar_error_set(DVAR_ECORRUPT, "'%s' changed while it was being imported",
		                    s->path);
	for (size_t i = s->first; rc == DVAR_OK && i < s->first + s->count; i++) {
		const array *a = &im->arr[i];
		f.pos = a->offset;
		f.z = NULL;
		if (a->member) {
			rc = dvar_zip_open(&f.z, f.fd, s->path, (uint64_t)st.st_size, a->member);
			if (rc == DVAR_OK)
				rc = skip(im, &f, a->offset);
		}
		if (rc == DVAR_OK)
			rc = write_array(im, w, &f, a);
		if (rc == DVAR_OK && a->member)
			rc = skip(im, &f, a->member->usize - a->offset - a->bytes);
		dvar_zip_close(f.z);
	}
	close(f.fd);
	return rc;
}

/* Open the writer, write every array, commit; on failure nothing is left. */
static int write_all(importer *im, const char *out)
{
	const dvar_import_options *o = im->opts;
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;
	/* A root the import creates must not outlive a failed import. */
	int root_existed = o->step >= 0 && dvar_fs_exists(out);
	int rc;

	wo.chunk_size = o->chunk_size;
	wo.compress = o->compress;
	wo.threads = dvar_op_threads(o->threads);
	wo.keep_last = o->keep_last;
	if (o->step >= 0)
		rc = dvar_writer_open_step(&w, out, o->step, &wo);
	else
		rc = dvar_writer_open(&w, out, &wo);
	for (size_t i = 0; rc == DVAR_OK && i < im->num_src; i++)
		rc = write_source(im, w, &im->src[i]);
	if (rc == DVAR_OK)
		rc = dvar_op_check(&im->op, im->what);
	if (rc == DVAR_OK)
		rc = dvar_writer_commit(w);
	dvar_writer_free(w);
	if (rc != DVAR_OK && o->step >= 0 && !root_existed) {
		/* The root this call made holds only its save lock by now. */
		char *lock = dvar_path_join(out, DVAR_LOCK_NAME);
		if (lock)
			unlink(lock);
		free(lock);
		rmdir(out);
	}
	return rc;
}

/* ------------------------------------------------------- the call */

int dvar_import_options_init(dvar_import_options *opts, unsigned int version)
{
	static const dvar_import_options init = DVAR_IMPORT_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_import_options", version,
	                         DVAR_IMPORT_OPTIONS_VERSION);
}

static int check_options(const char *out, const dvar_import_source *srcs, size_t n,
                         const dvar_import_options *o)
{
	int rc = dvar_check_version("dvar_import_options", o->version, DVAR_IMPORT_OPTIONS_VERSION);

	if (rc != DVAR_OK)
		return rc;
	if (!out || !*out)
		return dvar_error_set(DVAR_EINVAL, "dvar_import: no output path");
	if (!srcs || n == 0)
		return dvar_error_set(DVAR_EINVAL, "dvar_import: no files to import");
	if (o->step < -1)
		return dvar_error_set(DVAR_EINVAL, "dvar_import: step %lld; give a step >= 0, or -1 "
		                                   "for a plain checkpoint", (long long)o->step);
	if (o->keep_last < 0 || (o->keep_last > 0 && o->step < 0))
		return dvar_error_set(DVAR_EINVAL, "dvar_import: keep_last %d %s", o->keep_last,
		                      o->keep_last < 0 ? "is negative" : "needs a step");
	if (o->num_shards && !o->shards)
		return dvar_error_set(DVAR_EINVAL, "dvar_import: num_shards without shards");
	return DVAR_OK;
}

int dvar_import(const char *out, const dvar_import_source *srcs, size_t n,
                const dvar_import_options *opts)
{
	const dvar_import_options defaults = DVAR_IMPORT_OPTIONS_INIT;
	importer im = { .opts = opts ? opts : &defaults };
	uint64_t total = 0;
	int rc = check_options(out, srcs, n, im.opts);

	if (rc != DVAR_OK)
		return rc;
	dvar_op_init(&im.op, &im.opts->cb, 0);
	snprintf(im.what, sizeof(im.what), "import to '%s'", out);
	im.cap = DVAR_NPY_READ_MAX;
	if (!(im.buf = malloc(im.cap)) || !(im.src = calloc(n, sizeof(*im.src)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "dvar_import: out of memory");
		goto done;
	}
	for (; rc == DVAR_OK && im.num_src < n; im.num_src++)
		rc = check_source(&im, &im.src[im.num_src], &srcs[im.num_src]);
	if (rc == DVAR_OK)
		rc = check_names(&im);
	if (rc != DVAR_OK)
		goto done;
	/* One piece buffer: the largest array, up to DVAR_PIECE_BYTES. */
	uint64_t largest = 0;
	for (size_t i = 0; i < im.num_arr; i++) {
		total += im.arr[i].bytes;
		largest = im.arr[i].bytes > largest ? im.arr[i].bytes : largest;
	}
	if (largest > im.cap) {
		size_t cap = largest < DVAR_PIECE_BYTES ? (size_t)largest : DVAR_PIECE_BYTES;
		unsigned char *buf = realloc(im.buf, cap);
		if (!buf) {
			rc = dvar_error_set(DVAR_ENOMEM, "dvar_import: out of memory for a %zu-byte "
			                                 "buffer", cap);
			goto done;
		}
		im.buf = buf;
		im.cap = cap;
	}
	im.op.total = total;
	if ((rc = dvar_op_check(&im.op, im.what)) == DVAR_OK)
		rc = write_all(&im, out);
done:
	for (size_t i = 0; i < im.num_arr; i++) {
		free(im.arr[i].name);
		free(im.arr[i].offsets);
	}
	for (size_t i = 0; i < im.num_src; i++)
		dvar_zip_members_free(im.src[i].members, im.src[i].num_members);
	free(im.arr);
	free(im.src);
	free(im.buf);
	return rc;
}
