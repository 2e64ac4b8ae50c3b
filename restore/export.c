/*
 * restore/export.c - dvar_export: every variable as one full tensor (or,
 * for TensorFlow with DVAR_EXPORT_KEEP_SHARDS, its shards as TF slices), as
 * a dvar checkpoint (uncompressed, each variable one contiguous page-aligned
 * run that dvar_reader_map maps), one safetensors file (8-byte
 * little-endian header length, a JSON header padded with spaces to a
 * multiple of 8, then the tensors back to back), a TensorFlow checkpoint
 * (dvar_tf_writer), or a directory of .npy files with a manifest. Each
 * variable streams in bounded pieces from whatever slices were saved; every
 * format appears at its path only when complete, and a failure or a
 * cancellation removes what was written.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/format.h"
#include "format/tf.h"
#include "restore/restore.h"

#define MANIFEST_NAME "manifest.json"
#define SAFETENSORS_SUFFIX ".safetensors"

/* One variable of the input as the export writes it. */
typedef struct {
	char *name;   /* its exported name (malloc'ed) */
	char *file;   /* NPY: its file in the directory (malloc'ed) */
	int skip;     /* left out */
} item;

typedef struct {
	const char *out;
	const dvar_export_options *o;
	dvar_export_format format;
	dvar_reader *r;
	item *items;
	size_t n;
	dvar_op op;
	dvar_copier c;
} exporter;

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int keep_shards(const exporter *e)
{
	return e->format == DVAR_EXPORT_TF && (e->o->flags & DVAR_EXPORT_KEEP_SHARDS);
}

/* Variable i (described by v) is complete in the output: tell the caller. */
static void written(const exporter *e, size_t i, const dvar_var_info *v)
{
	uint64_t bytes = v->raw_bytes;

	if (v->dtype != DVAR_DTYPE_STRING)
		dvar_shape_num_bytes(&v->shape, v->dtype, &bytes);
	dvar_op_written(&e->op, e->items[i].name, bytes);
}

/* ------------------------------------------------------------- options */

int dvar_export_options_init(dvar_export_options *opts, unsigned int version)
{
	static const dvar_export_options init = DVAR_EXPORT_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_export_options", version,
	                         DVAR_EXPORT_OPTIONS_VERSION);
}

static int check_options(const char *out, const dvar_export_options *o, dvar_export_format *fmt)
{
	int rc = dvar_check_version("dvar_export_options", o->version, DVAR_EXPORT_OPTIONS_VERSION);

	if (rc != DVAR_OK)
		return rc;
	*fmt = o->format;
	if (*fmt == DVAR_EXPORT_AUTO)
		*fmt = ends_with(out, SAFETENSORS_SUFFIX) ? DVAR_EXPORT_SAFETENSORS : DVAR_EXPORT_DVAR;
	if (*fmt < DVAR_EXPORT_DVAR || *fmt > DVAR_EXPORT_NPY)
		return dvar_error_set(DVAR_EINVAL, "export format %d is not one of dvar, safetensors, "
		                                   "tf, npy", (int)o->format);
	if ((*fmt == DVAR_EXPORT_DVAR || *fmt == DVAR_EXPORT_NPY) && ends_with(out, SAFETENSORS_SUFFIX))
		return dvar_error_set(DVAR_EINVAL, "'%s' ends in %s, but the format asked for is %s, "
		                                   "which writes a directory: give another name, or "
		                                   "the safetensors format", out, SAFETENSORS_SUFFIX,
		                      *fmt == DVAR_EXPORT_DVAR ? "dvar" : "npy");
	if ((o->flags & DVAR_EXPORT_KEEP_SHARDS) && *fmt != DVAR_EXPORT_TF)
		return dvar_error_set(DVAR_EINVAL, "keeping shards applies to the TensorFlow format "
		                                   "only");
	if (o->chunk_size && *fmt != DVAR_EXPORT_DVAR)
		return dvar_error_set(DVAR_EINVAL, "a chunk size applies to the dvar format only");
	if (o->num_drop_prefixes && !o->drop_prefixes)
		return dvar_error_set(DVAR_EINVAL, "dvar_export: drop_prefixes is NULL");
	for (size_t k = 0; k < o->num_drop_prefixes; k++)
		if (!o->drop_prefixes[k] || !o->drop_prefixes[k][0])
			return dvar_error_set(DVAR_EINVAL, "an empty prefix to drop would drop every "
			                                   "variable");
	return DVAR_OK;
}

/* Nothing of the export may exist yet: a TF bundle's own files neither. */
static int check_out(const char *out, dvar_export_format fmt)
{
	static const char *const tf_files[] = { ".index", ".data-00000-of-00001" };
	struct stat st;

	if (lstat(out, &st) == 0)
		return dvar_error_set(DVAR_EEXISTS, "'%s' already exists; give a new %s", out,
		                      fmt == DVAR_EXPORT_TF ? "prefix" : "path");
	for (size_t k = 0; fmt == DVAR_EXPORT_TF && k < 2; k++) {
		char *p = dvar_tf_concat(out, tf_files[k]);
		if (!p)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		int exists = lstat(p, &st) == 0;
		int rc = exists ? dvar_error_set(DVAR_EEXISTS, "'%s' already exists; give a new "
		                                               "prefix", p)
		                : DVAR_OK;
		free(p);
		if (rc != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

/* ------------------------------------------------------------- names */

static int dropped(const exporter *e, const char *name, unsigned char *used)
{
	const dvar_export_options *o = e->o;

	for (size_t k = 0; k < o->num_drop_prefixes; k++) {
		if (strncmp(name, o->drop_prefixes[k], strlen(o->drop_prefixes[k])) == 0) {
			used[k] = 1;
			return 1;
		}
	}
	return (o->flags & DVAR_EXPORT_DROP_OPTIMIZER) && dvar_is_optimizer_slot(name);
}

/* The .npy file of a variable: its name with [A-Za-z0-9._-] kept, '/' as
 * "__" and anything else '_', never empty nor starting with a dot, + ".npy". */
static char *npy_file_name(const char *name)
{
	size_t len = strlen(name);
	char *out = malloc(2 * len + 8), *o = out;

	if (!out)
		return NULL;
	if (name[0] == '.' || name[0] == '\0')
		*o++ = '_';
	for (const char *p = name; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == '/') {
			*o++ = '_';
			*o++ = '_';
		} else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		           (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_') {
			*o++ = (char)ch;
		} else {
			*o++ = '_';
		}
	}
	strcpy(o, ".npy");
	return out;
}

static int item_cmp_name(const void *a, const void *b)
{
	const item *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

/* Two kept items under one name (exported or file name) are an error. */
static int check_unique(exporter *e, int files)
{
	item **kept = malloc((e->n + 1) * sizeof(*kept));
	size_t n = 0;
	int rc = DVAR_OK;

	if (!kept)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < e->n; i++)
		if (!e->items[i].skip)
			kept[n++] = &e->items[i];
	if (files) {
		/* Compare the file names case-insensitively: some file systems do. */
		for (size_t i = 0; rc == DVAR_OK && i < n; i++)
			for (size_t j = 0; rc == DVAR_OK && j < i; j++)
				if (strcasecmp(kept[i]->file, kept[j]->file) == 0)
					rc = dvar_error_set(DVAR_EINVAL, "variables '%s' and '%s' would both be "
					                                 "written to '%s'", kept[j]->name,
					                    kept[i]->name, kept[i]->file);
	} else {
		qsort(kept, n, sizeof(*kept), item_cmp_name);
		for (size_t i = 1; rc == DVAR_OK && i < n; i++)
			if (strcmp(kept[i]->name, kept[i - 1]->name) == 0)
				rc = dvar_error_set(DVAR_EINVAL, "two variables would both be exported as "
				                                 "'%s'", kept[i]->name);
	}
	free(kept);
	return rc;
}

/* Which variables go out, under which names; the bytes they take. */
static int plan(exporter *e, uint64_t *total)
{
	const dvar_export_options *o = e->o;
	unsigned char *used = calloc(o->num_drop_prefixes + 1, 1);
	dvar_var_info v;
	int rc = DVAR_OK;

	e->n = dvar_reader_num_vars(e->r);
	e->items = calloc(e->n + 1, sizeof(item));
	*total = 0;
	if (!used || !e->items) {
		free(used);
		e->n = 0; /* nothing for the caller to clean up */
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	for (size_t i = 0; rc == DVAR_OK && i < e->n; i++) {
		item *it = &e->items[i];
		if ((rc = dvar_reader_var(e->r, i, &v)) != DVAR_OK)
			break;
		if (dropped(e, v.name, used)) {
			it->skip = 1;
			continue;
		}
		if (v.dtype == DVAR_DTYPE_STRING && e->format != DVAR_EXPORT_TF) {
			dvar_op_note(&e->op, "leaving out '%s', a string tensor (%s holds numeric "
			                     "tensors only)", v.name,
			             e->format == DVAR_EXPORT_DVAR ? "a dvar checkpoint" :
			             e->format == DVAR_EXPORT_NPY ? "a .npy export" : "safetensors");
			it->skip = 1;
			continue;
		}
		if (v.dtype != DVAR_DTYPE_STRING && !dvar_dtype_size(v.dtype)) {
			rc = dvar_error_tf_dtype(v.name, v.dtype);
			break;
		}
		it->name = o->flags & DVAR_EXPORT_SHORT_NAMES ? dvar_short_name(v.name)
		                                               : strdup(v.name);
		if (it->name && e->format == DVAR_EXPORT_NPY)
			it->file = npy_file_name(it->name);
		if (!it->name || (e->format == DVAR_EXPORT_NPY && !it->file)) {
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			break;
		}
		uint64_t bytes = v.raw_bytes;
		if (v.dtype != DVAR_DTYPE_STRING && !keep_shards(e))
			dvar_shape_num_bytes(&v.shape, v.dtype, &bytes);
		*total += bytes;
	}
	for (size_t k = 0; rc == DVAR_OK && k < o->num_drop_prefixes; k++)
		if (!used[k])
			rc = dvar_error_set(DVAR_ENOTFOUND, "no variable of checkpoint '%s' starts with "
			                                    "'%s', the prefix to drop",
			                    dvar_reader_path(e->r), o->drop_prefixes[k]);
	free(used);
	if (rc == DVAR_OK)
		rc = check_unique(e, 0);
	if (rc == DVAR_OK && e->format == DVAR_EXPORT_NPY)
		rc = check_unique(e, 1);
	return rc;
}

/* ------------------------------------------------------------- JSON */

/* 1 when the n bytes at s are valid UTF-8 (what JSON strings carry). */
static int utf8_valid(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char ch = s[i];
		size_t len = ch < 0x80 ? 1 : (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : (ch >> 3) == 30 ? 4 : 0;
		if (!len || i + len > n)
			return 0;
		for (size_t k = 1; k < len; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
		i += len;
	}
	return 1;
}

/* s (valid UTF-8) as a JSON string. */
static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		case '\b': fputs("\\b", f); break;
		case '\f': fputs("\\f", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

static void json_dims(FILE *f, const dvar_shape *shape)
{
	fputc('[', f);
	for (int d = 0; d < shape->rank; d++)
		fprintf(f, "%s%lld", d ? "," : "", (long long)shape->dims[d]);
	fputc(']', f);
}

/* ------------------------------------------------------------- temporary files */

/* The directory holding path (malloc'ed; "." for a bare name), NULL on ENOMEM. */
static char *parent_dir(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return strdup(".");
	return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* A temporary sibling of path (malloc'ed; docs/FORMAT.md, "Temporary
 * names"), after sweeping the leftovers of dead writers beside it. */
static char *temp_sibling(const char *path)
{
	char *tmp = NULL, *dir = parent_dir(path);

	if (dir)
		dvar_tmp_sweep(dir);
	free(dir);
	if (dvar_tmp_name(path, NULL, &tmp) != DVAR_OK)
		return NULL;
	return tmp;
}

/* Rename tmp to path, never replacing anything, then fsync the directory. */
static int publish(const char *tmp, const char *path)
{
	int rc = dvar_fs_rename_noreplace(tmp, path), err = errno;

	/* The rename's message names the temporary file: say it in the user's terms. */
	if (rc == DVAR_EEXISTS)
		return dvar_error_set(DVAR_EEXISTS, "'%s' appeared while it was being written; "
		                                    "nothing was replaced", path);
	if (rc != DVAR_OK)
		return dvar_error_set_errno(rc, err, "cannot create '%s'", path);
	char *dir = parent_dir(path);
	if (dir)
		dvar_fs_fsync_path(dir);
	free(dir);
	return DVAR_OK;
}

/* ------------------------------------------------------------- dvar */

static int export_dvar(exporter *e)
{
	dvar_write_options wo = DVAR_WRITE_OPTIONS_INIT;
	dvar_writer *w = NULL;
	dvar_var_info v;
	dvar_slice full;
	int rc;

	wo.chunk_size = e->o->chunk_size;
	wo.compress = DVAR_COMPRESS_NONE;
	wo.flags = DVAR_WRITE_PAGE_ALIGN;
	wo.threads = dvar_op_threads(e->o->threads);
	if ((rc = dvar_writer_open(&w, e->out, &wo)) != DVAR_OK)
		return rc;
	for (size_t i = 0; rc == DVAR_OK && i < e->n; i++) {
		if (e->items[i].skip || (rc = dvar_reader_var(e->r, i, &v)) != DVAR_OK)
			continue;
		dvar_slice_full(&full, &v.shape);
		rc = dvar_copy_region(&e->c, e->r, i, &v, e->items[i].name, w, &full);
		if (rc == DVAR_OK)
			rc = dvar_copy_attrs(e->r, i, w, e->items[i].name,
			                     dvar_var_is_sharded(e->r, i) ? 1 : 0);
		if (rc == DVAR_OK)
			written(e, i, &v);
	}
	if (rc == DVAR_OK && (rc = dvar_op_check(&e->op, e->out)) == DVAR_OK)
		rc = dvar_writer_commit(w);
	dvar_writer_free(w);
	return rc;
}

/* ------------------------------------------------------------- files */

/* A file written through stdio; errors name the user's path, not the temporary one. */
typedef struct {
	FILE *f;
	const char *shown;
} sink;

static int to_file(void *ctx, const void *data, uint64_t bytes)
{
	sink *s = ctx;

	if (fwrite(data, 1, (size_t)bytes, s->f) != bytes)
		return dvar_error_set_errno(DVAR_EIO, errno, "writing '%s'", s->shown);
	return DVAR_OK;
}

/* Create tmp for writing (mode 0666 less the umask, as a new file gets). */
static int open_file(sink *s, const char *tmp, const char *shown)
{
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);

	s->shown = shown;
	s->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
	if (!s->f) {
		int err = errno;
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		return dvar_error_set_errno(DVAR_EIO, err, "cannot create '%s'", shown);
	}
	return DVAR_OK;
}

/* Flush, fsync and close; rc is the status so far. */
static int close_file(sink *s, int rc)
{
	int err = 0;

	if (fflush(s->f) != 0 || fsync(fileno(s->f)) != 0)
		err = errno;
	if (fclose(s->f) != 0 && !err)
		err = errno;
	s->f = NULL;
	if (rc == DVAR_OK && err)
		rc = dvar_error_set_errno(DVAR_EIO, err, "writing '%s'", s->shown);
	return rc;
}

/* Variable i whole into s: for .npy files a bfloat16 one widened to float32. */
typedef struct {
	sink *s;
	int widen;
	float *wide;
} npy_sink;

static int to_npy(void *ctx, const void *data, uint64_t bytes)
{
	npy_sink *n = ctx;

	if (!n->widen)
		return to_file(n->s, data, bytes);
	const unsigned char *p = data;
	for (uint64_t at = 0; at < bytes;) {
		size_t k = 0;
		for (; k < 4096 && at < bytes; k++, at += 2) {
			uint32_t bits = (uint32_t)(p[at] | p[at + 1] << 8) << 16;
			memcpy(&n->wide[k], &bits, 4);
		}
		int rc = to_file(n->s, n->wide, k * 4);
		if (rc != DVAR_OK)
			return rc;
	}
	return DVAR_OK;
}

static int write_full(exporter *e, size_t i, const dvar_var_info *v, sink *s, int npy)
{
	float wide[4096];
	npy_sink ns = { s, npy && v->dtype == DVAR_BFLOAT16, wide };
	dvar_slice full;

	dvar_slice_full(&full, &v->shape);
	return dvar_copy_pieces(&e->c, e->r, i, v->dtype, &full, to_npy, &ns);
}

/* ------------------------------------------------------------- safetensors */

/*
 * The header: JSON without a trailing newline, padded with spaces so that
 * the data starts at a multiple of 8 (8 + its length). *hdr is malloc'ed.
 */
static int st_header(exporter *e, char **hdr, size_t *len)
{
	size_t mlen = 0;
	char *mem = NULL;
	FILE *f = open_memstream(&mem, &mlen);
	dvar_var_info v;
	uint64_t at = 0;
	int rc = DVAR_OK;

	if (!f)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	fputs("{\"__metadata__\":{\"format\":\"pt\"}", f);
	for (size_t i = 0; rc == DVAR_OK && i < e->n; i++) {
		const char *name = e->items[i].name;
		if (e->items[i].skip || (rc = dvar_reader_var(e->r, i, &v)) != DVAR_OK)
			continue;
		if (!utf8_valid((const unsigned char *)name, strlen(name)) ||
		    strcmp(name, "__metadata__") == 0) {
			rc = dvar_error_set(DVAR_EINVAL, "variable '%s' cannot be named in a safetensors "
			                                 "file (names must be UTF-8 and not "
			                                 "__metadata__); leave it out with a prefix to "
			                                 "drop", name);
			break;
		}
		uint64_t bytes = 0;
		dvar_shape_num_bytes(&v.shape, v.dtype, &bytes);
		fputc(',', f);
		json_string(f, name);
		fprintf(f, ":{\"dtype\":\"%s\",\"shape\":", dvar_st_dtype_name(v.dtype));
		json_dims(f, &v.shape);
		fprintf(f, ",\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
		        (unsigned long long)(at + bytes));
		at += bytes;
	}
	fputc('}', f);
	if (fclose(f) != 0 || !mem) {
		free(mem);
		return rc != DVAR_OK ? rc : dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	if (rc != DVAR_OK) {
		free(mem);
		return rc;
	}
	size_t padded = (mlen + 7) / 8 * 8;
	char *p = realloc(mem, padded + 1);
	if (!p) {
		free(mem);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	memset(p + mlen, ' ', padded - mlen);
	p[padded] = '\0';
	*hdr = p;
	*len = padded;
	return DVAR_OK;
}

static int st_write(exporter *e, sink *s)
{
	char *hdr = NULL;
	size_t hlen = 0;
	unsigned char n8[8];
	dvar_var_info v;
	int rc = st_header(e, &hdr, &hlen);

	if (rc != DVAR_OK)
		return rc;
	for (int b = 0; b < 8; b++)
		n8[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
	if ((rc = to_file(s, n8, 8)) == DVAR_OK)
		rc = to_file(s, hdr, hlen);
	free(hdr);
	for (size_t i = 0; rc == DVAR_OK && i < e->n; i++)
		if (!e->items[i].skip && (rc = dvar_reader_var(e->r, i, &v)) == DVAR_OK &&
		    (rc = write_full(e, i, &v, s, 0)) == DVAR_OK)
			written(e, i, &v);
	return rc;
}

/* Write a temporary sibling, fsync it, then rename it to out. */
static int export_safetensors(exporter *e)
{
	char *tmp = temp_sibling(e->out);
	sink s;
	int rc;

	if (!tmp)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if ((rc = open_file(&s, tmp, e->out)) != DVAR_OK) {
		free(tmp);
		return rc;
	}
	rc = close_file(&s, st_write(e, &s));
	if (rc == DVAR_OK && (rc = dvar_op_check(&e->op, e->out)) == DVAR_OK)
		rc = publish(tmp, e->out);
	if (rc != DVAR_OK)
		unlink(tmp);
	free(tmp);
	return rc;
}

/* ------------------------------------------------------------- npy */

/* One .npy file per variable in dir, and the manifest naming them. */
static int npy_files(exporter *e, const char *dir)
{
	char hdr[DVAR_NPY_HEADER_MAX];
	size_t hlen;
	dvar_var_info v;
	sink s = { NULL, NULL };
	int rc = DVAR_OK;

	for (size_t i = 0; rc == DVAR_OK && i < e->n; i++) {
		item *it = &e->items[i];
		if (it->skip || (rc = dvar_reader_var(e->r, i, &v)) != DVAR_OK)
			continue;
		int dtype = v.dtype == DVAR_BFLOAT16 ? DVAR_FLOAT32 : v.dtype;
		if (v.dtype == DVAR_BFLOAT16)
			dvar_op_note(&e->op, "'%s' is bfloat16, which numpy lacks: written as float32 "
			                     "(exactly)", it->name);
		char *path = dvar_path_join(dir, it->file), *shown = dvar_path_join(e->out, it->file);
		if (!path || !shown)
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		else if ((rc = dvar_npy_header(hdr, sizeof(hdr), &hlen, dtype, &v.shape)) == DVAR_OK &&
		         (rc = open_file(&s, path, shown)) == DVAR_OK) {
			rc = to_file(&s, hdr, hlen);
			if (rc == DVAR_OK)
				rc = write_full(e, i, &v, &s, 1);
			if ((rc = close_file(&s, rc)) == DVAR_OK)
				written(e, i, &v);
		}
		free(path);
		free(shown);
	}
	if (rc != DVAR_OK)
		return rc;

	/* The manifest: which file holds which variable, with its dtype and shape. */
	char *path = dvar_path_join(dir, MANIFEST_NAME), *shown = dvar_path_join(e->out, MANIFEST_NAME);
	if (!path || !shown)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	else if ((rc = open_file(&s, path, shown)) == DVAR_OK) {
		fputs("{\"format\":\"dvar-npy\",\"version\":1,\"variables\":{", s.f);
		int first = 1;
		for (size_t i = 0; rc == DVAR_OK && i < e->n; i++) {
			if (e->items[i].skip || (rc = dvar_reader_var(e->r, i, &v)) != DVAR_OK)
				continue;
			if (!utf8_valid((const unsigned char *)e->items[i].name, strlen(e->items[i].name))) {
				rc = dvar_error_set(DVAR_EINVAL, "variable '%s' cannot be named in the JSON "
				                                 "manifest (names must be UTF-8); leave it "
				                                 "out with a prefix to drop", e->items[i].name);
				break;
			}
			fputs(first ? "" : ",", s.f);
			first = 0;
			json_string(s.f, e->items[i].name);
			fputs(":{\"file\":", s.f);
			json_string(s.f, e->items[i].file);
			fprintf(s.f, ",\"dtype\":\"%s\",\"shape\":", dvar_dtype_name(v.dtype));
			json_dims(s.f, &v.shape);
			fputc('}', s.f);
		}
		fputs("}}\n", s.f);
		rc = close_file(&s, rc);
	}
	free(path);
	free(shown);
	return rc;
}

/* Write a temporary sibling directory, fsync it, then rename it to out. */
static int export_npy(exporter *e)
{
	char *tmp = temp_sibling(e->out);
	int rc;

	if (!tmp)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (mkdir(tmp, 0777) != 0) {
		rc = dvar_error_set_errno(DVAR_EIO, errno, "cannot create '%s'", e->out);
		free(tmp);
		return rc;
	}
	rc = npy_files(e, tmp);
	if (rc == DVAR_OK && (rc = dvar_op_check(&e->op, e->out)) == DVAR_OK &&
	    (rc = dvar_fs_fsync_path(tmp)) == DVAR_OK)
		rc = publish(tmp, e->out);
	if (rc != DVAR_OK)
		dvar_fs_rmtree(tmp);
	free(tmp);
	return rc;
}

/* ---------------------------------------------------------------------- tf */

static int to_tf(void *ctx, const void *data, uint64_t bytes)
{
	return dvar_tf_writer_write(ctx, data, (size_t)bytes);
}

/* region of variable i as the tensor (or slice) key of the bundle. */
static int tf_region(exporter *e, size_t i, const dvar_var_info *v, const char *key,
                     dvar_tf_writer *w, const dvar_slice *region)
{
	int rc = dvar_tf_writer_begin(w, key, v->dtype, &v->shape, region);

	if (rc == DVAR_OK)
		rc = dvar_copy_pieces(&e->c, e->r, i, v->dtype, region, to_tf, w);
	if (rc == DVAR_OK)
		rc = dvar_tf_writer_end(w);
	return rc;
}

/* String tensor i (of a TensorFlow input), read whole, into the bundle as it was. */
static int tf_strings(exporter *e, size_t i, const dvar_var_info *v, const char *key,
                      dvar_tf_writer *w)
{
	uint64_t *lens;
	char *bytes;
	int rc = dvar_reader_read_strings_alloc(e->r, i, &lens, &bytes, NULL);

	if (rc == DVAR_OK)
		rc = dvar_tf_writer_add_strings(w, key, &v->shape, lens, bytes);
	free(lens);
	free(bytes);
	if (rc == DVAR_OK)
		dvar_op_advance(&e->op, v->raw_bytes);
	return rc;
}

/*
 * Variable i into the bundle: one plain entry; with DVAR_EXPORT_KEEP_SHARDS
 * each saved slice as a TensorFlow slice (one that covers the variable is a
 * plain entry). Slices without elements carry nothing and are left out
 * (TensorFlow's slices have positive lengths); a variable without elements
 * is one plain entry.
 */
static int tf_var(exporter *e, size_t i, dvar_tf_writer *w)
{
	const char *key = e->items[i].name;
	dvar_var_info v;
	dvar_slice full, sl;
	uint64_t n = 0;
	int rc = dvar_reader_var(e->r, i, &v);

	if (rc != DVAR_OK)
		return rc;
	if (v.dtype == DVAR_DTYPE_STRING)
		return tf_strings(e, i, &v, key, w);
	dvar_slice_full(&full, &v.shape);
	dvar_shape_num_elements(&v.shape, &n);
	if (!keep_shards(e) || n == 0)
		return tf_region(e, i, &v, key, w, &full);
	for (size_t j = 0; rc == DVAR_OK && j < v.num_slices; j++) {
		if ((rc = dvar_reader_var_slice(e->r, i, j, &sl)) != DVAR_OK ||
		    (rc = dvar_slice_num_elements(&sl, &n)) != DVAR_OK || n == 0)
			continue;
		rc = tf_region(e, i, &v, key, w, &sl);
	}
	return rc;
}

static int export_tf(exporter *e)
{
	dvar_tf_writer *w = NULL;
	int rc = dvar_tf_writer_open(&w, e->out, NULL);

	for (size_t i = 0; rc == DVAR_OK && i < e->n; i++) {
		dvar_var_info v;
		if (!e->items[i].skip && (rc = tf_var(e, i, w)) == DVAR_OK &&
		    (rc = dvar_reader_var(e->r, i, &v)) == DVAR_OK)
			written(e, i, &v);
	}
	if (rc == DVAR_OK && (rc = dvar_op_check(&e->op, e->out)) == DVAR_OK)
		rc = dvar_tf_writer_commit(w);
	dvar_tf_writer_free(w);
	return rc;
}

/* ---------------------------------------------------------------------- */

int dvar_export(const char *in, const char *out, const dvar_export_options *opts)
{
	dvar_read_options ro = DVAR_READ_OPTIONS_INIT;
	exporter e;
	uint64_t total = 0;
	int rc;

	if (!in || !out || !opts)
		return dvar_error_set(DVAR_EINVAL, "dvar_export: in, out and opts are required");
	memset(&e, 0, sizeof(e));
	e.out = out;
	e.o = opts;
	if ((rc = check_options(out, opts, &e.format)) != DVAR_OK ||
	    (rc = check_out(out, e.format)) != DVAR_OK)
		return rc;
	ro.threads = dvar_op_threads(opts->threads);
	if ((rc = dvar_reader_open(&e.r, in, &ro)) != DVAR_OK)
		return rc;
	dvar_op_init(&e.op, &opts->cb, 0);
	if ((rc = plan(&e, &total)) == DVAR_OK) {
		e.op.total = total;
		dvar_copier_init(&e.c, &e.op);
		switch (e.format) {
		case DVAR_EXPORT_SAFETENSORS: rc = export_safetensors(&e); break;
		case DVAR_EXPORT_TF: rc = export_tf(&e); break;
		case DVAR_EXPORT_NPY: rc = export_npy(&e); break;
		default: rc = export_dvar(&e); break;
		}
		dvar_copier_free(&e.c);
	}
	for (size_t i = 0; i < e.n; i++) {
		free(e.items[i].name);
		free(e.items[i].file);
	}
	free(e.items);
	dvar_reader_free(e.r);
	return rc;
}
