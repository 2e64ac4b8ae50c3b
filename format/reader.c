/*
 * format/reader.c - opens a checkpoint read-only and reads any
 * hyperrectangle of any variable from whatever slices were saved: each saved
 * slice's chunks are cut into boxes that are contiguous on disk, only the
 * chunks (for raw chunks, only the 64 KiB blocks) that meet the request are
 * read, every checksum is verified, and the pieces are copied into place in
 * parallel. Bytes that are one run of the destination are read straight
 * into it (whole chunks, the whole blocks of a partial one), large uncached
 * ones with O_DIRECT. Restore, reshard, export and `dvar cat` are all this
 * one read.
 * A slice stored raw and contiguous can also be mapped instead (dvar_reader_map).
 *
 * A TensorFlow checkpoint (TensorBundle) reads through the same code:
 * format/tf.c turns its index into the same entries, each tensor (or saved
 * slice of a partitioned one) one chunk of codec DVAR_CODEC_WHOLE: a read
 * of all of it checks its CRC; a read of part of it reads only the span
 * needed, which the tensor's one CRC cannot check (docs/FORMAT.md,
 * "TensorFlow checkpoints").
 */
#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/ahead.h"
#include "format/format.h"
#include "format/tf.h"

/* A thread's buffers: page-aligned, so that a chunk read into one lies as
 * it does in the page cache (see read_buffered). */
typedef struct {
	unsigned char *packed, *raw, *bounce, *direct;
	size_t packed_cap, raw_cap;
} scratch;

static void scratch_release(void *p)
{
	scratch *s = p;
	free(s->packed);
	free(s->raw);
	free(s->bounce);
	free(s->direct);
	free(s);
}

typedef struct {
	char *path;
	int fd;       /* -1 when it could not be opened */
	int err;      /* errno of the failed open */
	uint64_t size;
	/* O_DIRECT reads, set up on the first large one: the file opened with
	 * O_DIRECT, and mapped to ask mincore what is cached (never touched). */
	atomic_int direct;     /* 0: not set up yet, 1: ready, -1: unavailable or refused */
	int direct_fd;
	void *map;
} data_file;

/* A TF entry being read in order, part by part: its CRC so far. */
typedef struct {
	const dvar_slice_entry *s; /* NULL: a free slot */
	uint64_t next;             /* the byte the next part must start at */
	uint32_t crc;              /* over bytes [0, next) */
} tf_run;

#define TF_RUNS 64   /* entries followed at once (a walk over a partitioned tensor) */

struct dvar_reader {
	char *dir;            /* the checkpoint directory, or a TensorBundle's prefix */
	int is_tf;            /* a TensorFlow checkpoint (TensorBundle) */
	dvar_read_options opts;
	dvar_header header;
	dvar_var_entry *vars; /* in name order */
	size_t num_vars;
	data_file *files;
	dvar_reader *base;    /* a delta's: the next link of its chain, sharing pool */
	int shares_pool;      /* a base: the pool is the delta's */
	dvar_pool *pool;
	pthread_t owner;
	double last_progress;
	atomic_uint_least64_t bytes_read;
	atomic_uint_least64_t bytes_direct;  /* of which read with O_DIRECT */
	atomic_uint_least64_t bytes_bounced; /* of which through a bounce buffer (read_buffered) */
	atomic_uint_least64_t progress_done;
	uint64_t progress_total;
	dvar_stash *scratches; /* scratch *, reused across tasks and reads */
	pthread_mutex_t runs_lock;
	pthread_mutex_t direct_lock; /* setting up a file's O_DIRECT reads */
	int buffered_width;    /* threads for reads through the page cache (read_width) */
	tf_run runs[TF_RUNS];
	unsigned next_run;     /* the slot a new run takes when all are busy */
};

/* ---------------------------------------------------------------- open */

typedef struct {
	char *name;
	uint32_t j;
	dvar_slice_entry entry;
} pending_slice;

typedef struct {
	char *name;
	uint32_t j;
	dvar_piece piece;
} pending_piece;

typedef struct {
	dvar_reader *r;
	int have_header;
	pending_slice *slices;
	size_t num_slices, cap_slices;
	pending_piece *pieces;
	size_t num_pieces, cap_pieces;
	size_t cap_vars;
} scan_state;

/* The name and number of a key "<prefix>" + name + 00 + u32 BE, or 0 when it is not one. */
static int numbered_key(const char *k, size_t klen, char prefix, char **name, uint32_t *j)
{
	if (klen <= 6 || k[0] != prefix || k[klen - 5] != '\0' || memchr(k + 1, 0, klen - 6) ||
	    klen - 6 > DVAR_MAX_NAME)
		return 0;
	const unsigned char *be = (const unsigned char *)k + klen - 4;
	*j = (uint32_t)be[0] << 24 | (uint32_t)be[1] << 16 | (uint32_t)be[2] << 8 | be[3];
	*name = strndup(k + 1, klen - 6);
	return 1;
}

static int visit(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
	scan_state *st = ud;
	dvar_reader *r = st->r;
	const char *k = key;
	int rc;
	if (!st->have_header) {
		if (klen != 0)
			return dvar_error_set(DVAR_ECORRUPT, "index has no header entry: not a dvar checkpoint");
		st->have_header = 1;
		return dvar_header_decode(&r->header, val, vlen);
	}
	if (klen > 1 && k[0] == 'v' && !memchr(k + 1, 0, klen - 1) && klen - 1 <= DVAR_MAX_NAME) {
		char name[DVAR_MAX_NAME + 1];
		memcpy(name, k + 1, klen - 1);
		name[klen - 1] = '\0';
		dvar_var_entry *p = dvar_grow(r->vars, r->num_vars, &st->cap_vars, sizeof(*p), 16);
		if (!p)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		r->vars = p;
		if ((rc = dvar_var_decode(&r->vars[r->num_vars], name, val, vlen, r->header.version >= 3)))
			return rc;
		r->num_vars++;
		return DVAR_OK;
	}
	char *kname = NULL;
	uint32_t kj = 0;
	if (r->header.version >= 3 && numbered_key(k, klen, 'p', &kname, &kj)) {
		if (!kname)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		pending_piece *p = dvar_grow(st->pieces, st->num_pieces, &st->cap_pieces, sizeof(*p), 16);
		if (!p) {
			free(kname);
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		}
		st->pieces = p;
		pending_piece *pp = &st->pieces[st->num_pieces];
		pp->name = kname;
		pp->j = kj;
		char what[DVAR_MAX_NAME + 64];
		snprintf(what, sizeof(what), "of variable '%s' row piece #%u", kname, kj);
		if ((rc = dvar_piece_decode(&pp->piece, val, vlen, what))) {
			free(kname);
			return rc;
		}
		st->num_pieces++;
		return DVAR_OK;
	}
	if (numbered_key(k, klen, 's', &kname, &kj)) {
		if (!kname)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		pending_slice *p = dvar_grow(st->slices, st->num_slices, &st->cap_slices, sizeof(*p), 16);
		if (!p) {
			free(kname);
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		}
		st->slices = p;
		pending_slice *ps = &st->slices[st->num_slices];
		ps->name = kname;
		ps->j = kj;
		char what[DVAR_MAX_NAME + 64];
		snprintf(what, sizeof(what), "of variable '%s' slice #%u", ps->name, ps->j);
		if ((rc = dvar_slice_entry_decode(&ps->entry, val, vlen, what))) {
			free(ps->name);
			return rc;
		}
		st->num_slices++;
		return DVAR_OK;
	}
	/* Keys a newer writer added are skipped; in our own version they are damage. */
	if (r->header.version > DVAR_FORMAT_VERSION)
		return DVAR_OK;
	return dvar_error_set(DVAR_ECORRUPT, "index holds an unknown key of %zu bytes", klen);
}

static int find_index(const dvar_reader *r, const char *name, size_t *out)
{
	size_t lo = 0, hi = r->num_vars;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(r->vars[mid].name, name);
		if (c == 0) {
			*out = mid;
			return 1;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static int attach_slices(dvar_reader *r, scan_state *st)
{
	/* Declared counts must match the entries present before anything is allocated for them. */
	uint64_t declared = 0;
	for (size_t i = 0; i < r->num_vars; i++)
		declared += r->vars[i].num_slices;
	if (declared != st->num_slices)
		return dvar_error_set(DVAR_ECORRUPT, "index lists %llu slices in its variable entries but "
		                      "holds %zu slice entries", (unsigned long long)declared, st->num_slices);
	for (size_t i = 0; i < r->num_vars; i++) {
		dvar_var_entry *v = &r->vars[i];
		size_t n = v->num_slices;
		v->num_slices = 0; /* counts the slices attached so far */
		if (n && !(v->slices = calloc(n, sizeof(dvar_slice_entry))))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		v->num_slices = n;
		for (size_t j = 0; j < n; j++)
			v->slices[j].num_chunks = SIZE_MAX; /* marks "not seen" */
	}
	for (size_t k = 0; k < st->num_slices; k++) {
		pending_slice *ps = &st->slices[k];
		size_t i;
		if (!find_index(r, ps->name, &i) || ps->j >= r->vars[i].num_slices ||
		    r->vars[i].slices[ps->j].num_chunks != SIZE_MAX)
			return dvar_error_set(DVAR_ECORRUPT, "index holds slice #%u of variable '%s', "
			                      "which its variable entry does not list", ps->j, ps->name);
		if (ps->entry.slice.rank != r->vars[i].shape.rank)
			return dvar_error_set(DVAR_ECORRUPT, "index entry of variable '%s' slice #%u has rank %d, "
			                      "the variable %d", ps->name, ps->j, ps->entry.slice.rank,
			                      r->vars[i].shape.rank);
		r->vars[i].slices[ps->j] = ps->entry;
		memset(&ps->entry, 0, sizeof(ps->entry));
	}
	for (size_t i = 0; i < r->num_vars; i++) {
		dvar_var_entry *v = &r->vars[i];
		for (size_t j = 0; j < v->num_slices; j++)
			if (v->slices[j].num_chunks == SIZE_MAX) {
				v->slices[j].num_chunks = 0;
				return dvar_error_set(DVAR_ECORRUPT, "index lacks slice #%zu of variable '%s'",
				                      j, v->name);
			}
	}
	if (r->num_vars != r->header.num_vars)
		return dvar_error_set(DVAR_ECORRUPT, "index header counts %llu variables, the index holds %zu",
		                      (unsigned long long)r->header.num_vars, r->num_vars);
	return DVAR_OK;
}

/* The row pieces of a delta's variables, as attach_slices does for slices. */
static int attach_pieces(dvar_reader *r, scan_state *st)
{
	uint64_t declared = 0;
	for (size_t i = 0; i < r->num_vars; i++)
		declared += r->vars[i].num_pieces;
	if (declared != st->num_pieces)
		return dvar_error_set(DVAR_ECORRUPT, "index lists %llu row pieces in its variable entries "
		                      "but holds %zu", (unsigned long long)declared, st->num_pieces);
	for (size_t i = 0; i < r->num_vars; i++) {
		dvar_var_entry *v = &r->vars[i];
		size_t n = v->num_pieces;
		v->num_pieces = 0;
		if (n && !(v->pieces = calloc(n, sizeof(dvar_piece))))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		v->num_pieces = n;
		for (size_t j = 0; j < n; j++)
			v->pieces[j].num_rows = UINT64_MAX; /* marks "not seen" */
	}
	for (size_t k = 0; k < st->num_pieces; k++) {
		pending_piece *pp = &st->pieces[k];
		size_t i;
		if (!find_index(r, pp->name, &i) || pp->j >= r->vars[i].num_pieces ||
		    r->vars[i].pieces[pp->j].num_rows != UINT64_MAX)
			return dvar_error_set(DVAR_ECORRUPT, "index holds row piece #%u of variable '%s', "
			                      "which its variable entry does not list", pp->j, pp->name);
		r->vars[i].pieces[pp->j] = pp->piece;
		memset(&pp->piece, 0, sizeof(pp->piece));
	}
	for (size_t i = 0; i < r->num_vars; i++)
		for (size_t j = 0; j < r->vars[i].num_pieces; j++)
			if (r->vars[i].pieces[j].num_rows == UINT64_MAX) {
				r->vars[i].pieces[j].num_rows = 0;
				return dvar_error_set(DVAR_ECORRUPT, "index lacks row piece #%zu of variable '%s'",
				                      j, r->vars[i].name);
			}
	return DVAR_OK;
}

static int open_files(dvar_reader *r)
{
	if (!(r->files = calloc(r->header.num_files, sizeof(data_file))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (uint32_t f = 0; f < r->header.num_files; f++) {
		data_file *df = &r->files[f];
		char name[32];
		df->fd = -1;
		df->direct_fd = -1;
		dvar_data_file_name(name, sizeof(name), f, r->header.num_files);
		df->path = r->is_tf ? dvar_tf_data_path(r->dir, f, r->header.num_files)
		                    : dvar_path_join(r->dir, name);
		if (!df->path)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		/* A missing or short file fails the reads that need it, naming it,
		 * and leaves the index readable for inspect and verify. */
		struct stat st;
		if ((df->fd = open(df->path, O_RDONLY | O_CLOEXEC)) < 0) {
			df->err = errno;
		} else if (fstat(df->fd, &st) != 0) {
			df->err = errno;
			close(df->fd);
			df->fd = -1;
		} else {
			df->size = (uint64_t)st.st_size;
		}
	}
	return DVAR_OK;
}

/* Why df, which did not open, cannot be read, into why; the code: a
 * missing file is damage to the checkpoint, any other failure an I/O one. */
static int file_unusable(const data_file *df, char *why, size_t cap)
{
	if (df->err == ENOENT) {
		snprintf(why, cap, "data file is missing: %s", strerror(df->err));
		return DVAR_ECORRUPT;
	}
	snprintf(why, cap, "data file cannot be opened: %s", strerror(df->err));
	return DVAR_EIO;
}

int dvar_read_options_init(dvar_read_options *opts, unsigned int version)
{
	static const dvar_read_options init = DVAR_READ_OPTIONS_INIT;
	return dvar_options_init(opts, sizeof *opts, &init, "dvar_read_options", version,
	                         DVAR_READ_OPTIONS_VERSION);
}

int dvar_read_options_take(dvar_read_options *out, const dvar_read_options *opts)
{
	static const dvar_read_options init = DVAR_READ_OPTIONS_INIT;
	*out = init;
	if (!opts)
		return DVAR_OK;
	if (dvar_check_version("dvar_read_options", opts->version, DVAR_READ_OPTIONS_VERSION))
		return DVAR_EINVAL;
	/* A version 1 struct ends before flags. */
	memcpy(out, opts, opts->version == 1 ? offsetof(dvar_read_options, flags) : sizeof(*out));
	if (out->flags & ~DVAR_READ_CACHED)
		return dvar_error_set(DVAR_EINVAL, "dvar_read_options: unknown flags 0x%x",
		                      out->flags & ~DVAR_READ_CACHED);
	return DVAR_OK;
}

static int open_reader(dvar_reader **out, const char *path, const dvar_read_options *opts,
                       dvar_pool *pool, size_t depth, char *index_bytes, size_t index_len);

/*
 * A delta's chain: its base is the checkpoint the header names, in the same
 * directory, whose index is the one the delta was written over (the CRC),
 * whose own chain is the rest of ours, and which holds every variable this
 * delta leaves unchanged or patches, with the same dtype and shape.
 */
static int open_base(dvar_reader *r, size_t depth)
{
	const dvar_link *link = &r->header.chain[0];
	char *parent = dvar_path_parent(r->dir), *dir = parent ? dvar_path_join(parent, link->name) : NULL;
	dvar_header h;
	uint32_t crc = 0;
	char *bytes = NULL;
	size_t len = 0;
	int rc;
	free(parent);
	if (!dir)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (!dvar_fs_is_dir(dir)) {
		rc = dvar_error_set(DVAR_ENOTFOUND, "it is a delta over '%s', which is missing", dir);
		goto done;
	}
	if ((rc = dvar_link_read(dir, &h, &crc, &bytes, &len))) {
		dvar_error_prefix("it is a delta over '%s', which is damaged", dir);
		goto done;
	}
	int same = crc == link->index_crc && h.chain_len + 1 == r->header.chain_len;
	for (size_t k = 0; same && k < h.chain_len; k++)
		same = strcmp(h.chain[k].name, r->header.chain[k + 1].name) == 0 &&
		       h.chain[k].index_crc == r->header.chain[k + 1].index_crc;
	dvar_header_clear(&h);
	if (!same) {
		rc = dvar_error_set(DVAR_ECORRUPT, "it is a delta over '%s', but that is not the "
		                    "checkpoint it was written over (its index differs)", dir);
		goto done;
	}
	/* Progress is the delta's reader's to report, over everything it reads. */
	dvar_read_options quiet = r->opts;
	quiet.progress = NULL;
	/* From the bytes just checked: the index is read once. */
	rc = open_reader(&r->base, dir, &quiet, r->pool, depth + 1, bytes, len);
	bytes = NULL;
	if (rc)
		goto done;
	for (size_t i = 0; i < r->num_vars && !rc; i++) {
		dvar_var_entry *v = &r->vars[i];
		const dvar_var_entry *b;
		if (v->delta == DVAR_DELTA_WHOLE)
			continue;
		if (!find_index(r->base, v->name, &v->base_index))
			rc = dvar_error_set(DVAR_ECORRUPT, "variable '%s' is a change over '%s', which does not "
			                    "hold it", v->name, dir);
		else if (b = &r->base->vars[v->base_index],
		         b->dtype != v->dtype || !dvar_shape_equal(&b->shape, &v->shape))
			rc = dvar_error_set(DVAR_ECORRUPT, "variable '%s' is a change over '%s', which holds "
			                    "it with another dtype or shape", v->name, dir);
	}
done:
	free(bytes);
	free(dir);
	return rc;
}

int dvar_reader_open(dvar_reader **out, const char *path, const dvar_read_options *opts)
{
	if (!out || !path)
		return dvar_error_set(DVAR_EINVAL, "dvar_reader_open: NULL argument");
	*out = NULL;
	dvar_read_options o;
	if (dvar_read_options_take(&o, opts))
		return DVAR_EINVAL;
	return open_reader(out, path, &o, NULL, 0, NULL, 0);
}

/* A reader of path with opts (this library's version); pool: the delta's
 * whose link it is (depth below it), or NULL for its own; index_bytes: its
 * index, already read (taken and freed), or NULL to read it. */
static int open_reader(dvar_reader **out, const char *path, const dvar_read_options *opts,
                       dvar_pool *pool, size_t depth, char *index_bytes, size_t index_len)
{
	dvar_reader *r = calloc(1, sizeof(*r));
	scan_state st = { r, 0, NULL, 0, 0, NULL, 0, 0, 0 };
	char *index = NULL;
	int rc;
	if (!r) {
		free(index_bytes);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	r->opts = *opts;
	r->owner = pthread_self();
	r->buffered_width = r->opts.threads > 0 ? 0 : dvar_cpus();
	pthread_mutex_init(&r->runs_lock, NULL);
	pthread_mutex_init(&r->direct_lock, NULL);
	if (!(r->scratches = dvar_stash_create())) {
		pthread_mutex_destroy(&r->runs_lock);
		pthread_mutex_destroy(&r->direct_lock);
		free(r);
		free(index_bytes);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	/* A TensorFlow checkpoint: a prefix, or a directory whose state file names one. */
	if ((rc = dvar_tf_locate(path, &r->dir)) < 0)
		goto fail;
	if (rc == 1) {
		r->is_tf = 1;
		if ((rc = dvar_tf_open_index(r->dir, &r->header, &r->vars, &r->num_vars)) ||
		    (rc = open_files(r)) ||
		    (rc = dvar_pool_create(&r->pool, dvar_pool_io_threads(r->opts.threads))))
			goto fail;
		*out = r;
		goto fail;   /* rc is DVAR_OK: only the cleanup */
	}
	if ((rc = dvar_resolve_checkpoint(path, &r->dir)))
		goto fail;
	if (!(index = dvar_path_join(r->dir, DVAR_INDEX_NAME))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	if (!index_bytes && (rc = dvar_fs_read_file(index, &index_bytes, &index_len, DVAR_INDEX_MAX)))
		goto fail;
	if ((rc = dvar_index_scan_bytes(index, index_bytes, index_len, visit, &st)))
		goto fail;
	if (!st.have_header) {
		rc = dvar_error_set(DVAR_ECORRUPT, "index is empty: not a dvar checkpoint");
		goto fail;
	}
	if ((rc = attach_slices(r, &st)) || (rc = attach_pieces(r, &st)))
		goto fail;
	for (size_t i = 0; i < r->num_vars; i++)
		if ((rc = dvar_var_check(&r->vars[i], r->header.num_files, "index entry")))
			goto fail;
	if (r->header.chain_len && depth + r->header.chain_len > DVAR_MAX_CHAIN) {
		rc = dvar_error_set(DVAR_ECORRUPT, "its chain of deltas is longer than %d links",
		                    DVAR_MAX_CHAIN);
		goto fail;
	}
	if ((rc = open_files(r)))
		goto fail;
	if (pool) {
		r->pool = pool;
		r->shares_pool = 1;
	} else if ((rc = dvar_pool_create(&r->pool, dvar_pool_io_threads(r->opts.threads)))) {
		goto fail;
	}
	if (r->header.chain_len && (rc = open_base(r, depth)))
		goto fail;
	*out = r;
fail:
	for (size_t k = 0; k < st.num_slices; k++) {
		free(st.slices[k].name);
		dvar_slice_entry_clear(&st.slices[k].entry);
	}
	free(st.slices);
	for (size_t k = 0; k < st.num_pieces; k++) {
		free(st.pieces[k].name);
		dvar_piece_clear(&st.pieces[k].piece);
	}
	free(st.pieces);
	free(index_bytes);
	if (rc) {
		if (r->dir)
			dvar_error_prefix("%scheckpoint '%s'", r->is_tf ? "TensorFlow " : "", r->dir);
		dvar_reader_free(r);
	}
	free(index);
	return rc;
}

void dvar_reader_free(dvar_reader *r)
{
	if (!r)
		return;
	dvar_reader_free(r->base);
	if (!r->shares_pool)
		dvar_pool_free(r->pool);
	for (uint32_t f = 0; r->files && f < r->header.num_files; f++) {
		if (r->files[f].fd >= 0)
			close(r->files[f].fd);
		if (atomic_load(&r->files[f].direct) && r->files[f].direct_fd >= 0)
			close(r->files[f].direct_fd);
		if (r->files[f].map)
			munmap(r->files[f].map, (size_t)r->files[f].size);
		free(r->files[f].path);
	}
	free(r->files);
	for (size_t i = 0; i < r->num_vars; i++)
		dvar_var_entry_clear(&r->vars[i]);
	free(r->vars);
	dvar_stash_free(r->scratches, scratch_release);
	dvar_header_clear(&r->header);
	pthread_mutex_destroy(&r->runs_lock);
	pthread_mutex_destroy(&r->direct_lock);
	free(r->dir);
	free(r);
}

const char *dvar_reader_path(const dvar_reader *r)
{
	return r ? r->dir : NULL;
}

size_t dvar_reader_num_vars(const dvar_reader *r)
{
	return r ? r->num_vars : 0;
}

static int check_var_index(const dvar_reader *r, size_t i)
{
	if (!r)
		return dvar_error_set(DVAR_EINVAL, "NULL reader");
	if (i >= r->num_vars)
		return dvar_error_set(DVAR_EINVAL, "variable index %zu is out of range (%zu variables)",
		                      i, r->num_vars);
	return DVAR_OK;
}

/*
 * Variable v of r followed down the chain: past the links that leave it
 * unchanged and, with patches, past those that patch rows of it too, to
 * the entry (and its link) whose slices are what it reads as (all of it,
 * or before the patches). Without patches, a patched entry ends the walk.
 */
static const dvar_var_entry *holder_of(const dvar_reader *r, const dvar_var_entry *v,
                                       const dvar_reader **link, int patches)
{
	while (v->delta == DVAR_DELTA_SAME || (patches && v->delta == DVAR_DELTA_ROWS)) {
		v = &r->base->vars[v->base_index];
		r = r->base;
	}
	if (link)
		*link = r;
	return v;
}

/* Where the layout of v's full value is saved: its slices, as the chain's
 * full checkpoint (or the delta that last wrote it whole) has them. */
static const dvar_var_entry *holder(const dvar_reader *r, const dvar_var_entry *v,
                                    const dvar_reader **link)
{
	return holder_of(r, v, link, 1);
}

int dvar_reader_var(const dvar_reader *r, size_t i, dvar_var_info *out)
{
	int rc = check_var_index(r, i);
	if (rc || !out)
		return rc ? rc : dvar_error_set(DVAR_EINVAL, "NULL argument");
	const dvar_var_entry *v = &r->vars[i];
	/* A delta's variable is described as saved in full, where that is. */
	const dvar_var_entry *h = holder(r, v, NULL);
	out->name = v->name;
	out->dtype = v->dtype;
	out->shape = v->shape;
	out->num_slices = h->num_slices;
	out->raw_bytes = h->raw_bytes;
	out->stored_bytes = h->stored_bytes;
	out->num_chunks = 0;
	for (size_t j = 0; j < h->num_slices; j++)
		out->num_chunks += h->slices[j].num_chunks;
	return DVAR_OK;
}

size_t dvar_reader_num_links(const dvar_reader *r)
{
	size_t n = 0;
	for (; r; r = r->base)
		n++;
	return n;
}

int dvar_reader_link(const dvar_reader *r, size_t k, dvar_link_info *out)
{
	if (!r || !out)
		return dvar_error_set(DVAR_EINVAL, "dvar_reader_link: NULL argument");
	const dvar_reader *l = r;
	for (size_t n = 0; l && n < k; n++)
		l = l->base;
	if (!l)
		return dvar_error_set(DVAR_EINVAL, "checkpoint '%s' has %zu links, not %zu", r->dir,
		                      dvar_reader_num_links(r), k + 1);
	memset(out, 0, sizeof(*out));
	out->path = l->dir;
	out->is_delta = l->base != NULL;
	for (uint32_t f = 0; f < l->header.num_files; f++)
		out->bytes += l->header.file_sizes[f];
	for (size_t i = 0; i < l->num_vars; i++) {
		const dvar_var_entry *v = &l->vars[i];
		if (v->delta == DVAR_DELTA_SAME)
			out->vars_unchanged++;
		else if (v->delta == DVAR_DELTA_ROWS)
			out->vars_patched++;
		else
			out->vars_whole++;
	}
	return DVAR_OK;
}

int dvar_reader_var_delta(const dvar_reader *r, size_t i, dvar_var_delta *out)
{
	int rc = check_var_index(r, i);
	if (rc || !out)
		return rc ? rc : dvar_error_set(DVAR_EINVAL, "NULL argument");
	const dvar_var_entry *v = &r->vars[i];
	memset(out, 0, sizeof(*out));
	out->kind = v->delta == DVAR_DELTA_SAME ? DVAR_DELTA_UNCHANGED :
	            v->delta == DVAR_DELTA_ROWS ? DVAR_DELTA_PATCHED : DVAR_DELTA_FULL;
	out->raw_bytes = v->raw_bytes;
	out->stored_bytes = v->stored_bytes;
	for (size_t k = 0; k < v->num_pieces; k++)
		out->rows += v->pieces[k].num_rows;
	return DVAR_OK;
}

int dvar_reader_find(const dvar_reader *r, const char *name, size_t *out)
{
	if (!r || !name || !out)
		return dvar_error_set(DVAR_EINVAL, "dvar_reader_find: NULL argument");
	if (!find_index(r, name, out))
		return dvar_error_set(DVAR_ENOTFOUND, "variable '%s' not found in checkpoint '%s'", name, r->dir);
	return DVAR_OK;
}

int dvar_reader_var_slice(const dvar_reader *r, size_t i, size_t j, dvar_slice *out)
{
	int rc = check_var_index(r, i);
	if (rc || !out)
		return rc ? rc : dvar_error_set(DVAR_EINVAL, "NULL argument");
	const dvar_var_entry *h = holder(r, &r->vars[i], NULL);
	if (j >= h->num_slices)
		return dvar_error_set(DVAR_EINVAL, "variable '%s' has %zu slices, not %zu", h->name,
		                      h->num_slices, j + 1);
	*out = h->slices[j].slice;
	return DVAR_OK;
}

uint64_t dvar_reader_bytes_read(const dvar_reader *r)
{
	uint64_t n = 0;
	for (; r; r = r->base)
		n += atomic_load(&r->bytes_read);
	return n;
}

size_t dvar_reader_var_num_attrs(const dvar_reader *r, size_t i)
{
	return r && i < r->num_vars ? r->vars[i].num_attrs : 0;
}

int dvar_reader_var_attr_at(const dvar_reader *r, size_t i, size_t k, const char **key,
                            const char **value)
{
	int rc = check_var_index(r, i);
	if (rc)
		return rc;
	if (k >= r->vars[i].num_attrs)
		return dvar_error_set(DVAR_EINVAL, "variable '%s' has %zu attributes, not %zu",
		                      r->vars[i].name, r->vars[i].num_attrs, k + 1);
	if (key)
		*key = r->vars[i].attrs[k].key;
	if (value)
		*value = r->vars[i].attrs[k].value;
	return DVAR_OK;
}

int dvar_reader_var_attr(const dvar_reader *r, size_t i, const char *key, const char **value)
{
	int rc = check_var_index(r, i);
	if (rc || !key)
		return rc ? rc : dvar_error_set(DVAR_EINVAL, "NULL attribute key");
	const dvar_var_entry *v = &r->vars[i];
	for (size_t k = 0; k < v->num_attrs; k++)
		if (strcmp(v->attrs[k].key, key) == 0) {
			if (value)
				*value = v->attrs[k].value;
			return DVAR_OK;
		}
	return dvar_error_set(DVAR_ENOTFOUND, "variable '%s' has no attribute '%s'", v->name, key);
}

/* ---------------------------------------------------------------- chunks */

static scratch *scratch_get(dvar_reader *r)
{
	scratch *s = dvar_stash_pop(r->scratches);
	if (!s && !(s = calloc(1, sizeof(*s))))
		dvar_error_set(DVAR_ENOMEM, "out of memory");
	return s;
}

static int grow(unsigned char **p, size_t *cap, size_t need)
{
	if (*cap >= need)
		return DVAR_OK;
	free(*p);
	*cap = 0;
	if (!(*p = dvar_page_alloc(need, 0)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory (%zu bytes of chunk buffer)", need);
	*cap = need;
	return DVAR_OK;
}

static void progress(dvar_reader *r, uint64_t bytes)
{
	uint64_t done = atomic_fetch_add(&r->progress_done, bytes) + bytes;
	if (!r->opts.progress || !pthread_equal(pthread_self(), r->owner))
		return;
	double now = dvar_now();
	if (now - r->last_progress < 1.0 / 6)
		return;
	r->last_progress = now;
	r->opts.progress(r->opts.progress_userdata, done, r->progress_total);
}

/* "variable 'w' slice 0,4:- chunk 3 (/ck/data-00000-of-00001 at offset 4096): why" */
static int chunk_error(const dvar_reader *r, const dvar_var_entry *v, const dvar_slice_entry *s,
                       size_t ci, int code, const char *why)
{
	char sl[256];
	dvar_slice_format(&s->slice, &v->shape, sl, sizeof(sl));
	if (s->chunks[ci].codec == DVAR_CODEC_WHOLE) {
		/* A TensorBundle entry: "variable 'w' (/m/ckpt.data-00000-of-00001 at offset 8, 4 bytes)" */
		int full = dvar_slice_is_full(&s->slice, &v->shape);
		return dvar_error_set(code, "variable '%s'%s%s (%s at offset %llu, %llu bytes): %s", v->name,
		                      full ? "" : " slice ", full ? "" : sl, r->files[s->file].path,
		                      (unsigned long long)s->chunks[ci].offset,
		                      (unsigned long long)s->chunks[ci].stored, why);
	}
	return dvar_error_set(code, "variable '%s' slice %s chunk %zu (%s at offset %llu): %s", v->name,
	                      *sl ? sl : "-", ci, r->files[s->file].path,
	                      (unsigned long long)s->chunks[ci].offset, why);
}

#define WHY_MAX DVAR_ERROR_MESSAGE_MAX

/* ---------------------------------------------------------------- O_DIRECT */

/*
 * A large read of data that is not in the page cache goes straight from the
 * disk into the destination with O_DIRECT: no copy out of the page cache
 * (half the CPU of a cold buffered read here), and no readahead racing the
 * reads in flight. A destination not aligned like the file (NumPy's arrays
 * start 16 bytes into a page) takes it through a page-aligned buffer: a
 * memcpy costs less than the cache's copy, and the reads stay 4 MiB long
 * (1 GiB cold into such an array: 0.81 s, median of four runs, against
 * 1.21 through the cache, as fast as into an aligned one). Data already cached is read
 * through the cache, as is whatever O_DIRECT cannot take: unaligned heads
 * and tails, file systems that refuse it (then quietly).
 */
#define DIRECT_ALIGN 4096u          /* offsets, lengths and addresses, for every device */
#define DIRECT_MIN ((uint64_t)1 << 20) /* smaller reads gain nothing and lose readahead */

static atomic_int direct_mode = DVAR_DIRECT_AUTO;

void dvar_reader__direct(int mode)
{
	atomic_store(&direct_mode, mode);
}

uint64_t dvar_reader__bytes_via(const dvar_reader *r, int way)
{
	uint64_t n = 0;
	for (; r; r = r->base)
		n += atomic_load(way == DVAR_VIA_DIRECT ? &r->bytes_direct : &r->bytes_bounced);
	return n;
}

/* Whether r's reads may go around the page cache at all. */
static int around_cache(const dvar_reader *r)
{
	return atomic_load(&direct_mode) != DVAR_DIRECT_OFF && !(r->opts.flags & DVAR_READ_CACHED);
}

/* Whether df can be read with O_DIRECT, setting it up on first use. */
static int direct_ready(dvar_reader *r, data_file *df)
{
	int st = atomic_load(&df->direct);
	if (st)
		return st > 0;
	pthread_mutex_lock(&r->direct_lock);
	if (!(st = atomic_load(&df->direct))) {
		void *m = MAP_FAILED;
		/* The file the reader holds open, not whatever is at its path now:
		 * retention may have deleted it, and a new save reused the name. */
		char self[64];
		snprintf(self, sizeof(self), "/proc/self/fd/%d", df->fd);
		df->direct_fd = open(self, O_RDONLY | O_DIRECT | O_CLOEXEC);
		if (df->direct_fd >= 0 && df->size <= SIZE_MAX)
			m = mmap(NULL, (size_t)df->size, PROT_READ, MAP_SHARED, df->fd, 0);
		if (m == MAP_FAILED) {
			if (df->direct_fd >= 0)
				close(df->direct_fd);
			df->direct_fd = -1;
			st = -1;
		} else {
			df->map = m;
			st = 1;
		}
		atomic_store(&df->direct, st);
	}
	pthread_mutex_unlock(&r->direct_lock);
	return st > 0;
}

/* Whether no page of [off, off + len) of df is in the page cache. */
static int not_cached(const data_file *df, uint64_t off, uint64_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned char vec[1024]; /* a 4 MiB read asks once */
	if (page <= 0)
		page = 4096;
	uint64_t p0 = off / (uint64_t)page, p1 = (off + len + (uint64_t)page - 1) / (uint64_t)page;
	for (uint64_t p = p0; p < p1; p += sizeof(vec)) {
		uint64_t n = p1 - p < sizeof(vec) ? p1 - p : sizeof(vec);
		if (mincore((char *)df->map + p * (uint64_t)page, (size_t)(n * (uint64_t)page), vec))
			return 0;
		for (uint64_t k = 0; k < n; k++)
			if (vec[k] & 1)
				return 0;
	}
	return 1;
}

/* [off, off + len) of df into dst with O_DIRECT (all aligned): DVAR_OK,
 * or 1 when the file system refuses it, which then reads it buffered. */
static int read_direct(dvar_reader *r, data_file *df, unsigned char *dst, uint64_t len, uint64_t off)
{
	uint64_t done = 0;
	while (done < len) {
		ssize_t n = atomic_load(&direct_mode) == DVAR_DIRECT_REFUSED
		            ? (errno = EINVAL, -1)
		            : pread(df->direct_fd, dst + done, (size_t)(len - done), (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EINVAL && done == 0) {
			atomic_store(&df->direct, -1);
			return 1;
		}
		if (n <= 0 || (uint64_t)n % DIRECT_ALIGN)
			break; /* errors and short reads: the rest buffered, which says what is wrong */
		done += (uint64_t)n;
	}
	atomic_fetch_add(&r->bytes_direct, done);
	if (done < len)
		return dvar_fs_pread_all(df->fd, dst + done, (size_t)(len - done), off + done, df->path);
	return DVAR_OK;
}

/* The pieces of an O_DIRECT read through a thread's buffer: as long as the
 * requests the disk takes (the chunks' default size). */
#define DIRECT_PIECE ((size_t)4 << 20)

/* As read_direct, for a dst not aligned like the file: a piece at a time
 * through sc's page-aligned buffer; 1 (read it buffered) also when that
 * buffer cannot be had. */
static int read_direct_via(dvar_reader *r, data_file *df, scratch *sc, unsigned char *dst,
                           uint64_t len, uint64_t off)
{
	if (!sc->direct && !(sc->direct = dvar_page_alloc(DIRECT_PIECE, 0)))
		return 1;
	for (uint64_t done = 0; done < len;) {
		size_t n = len - done < DIRECT_PIECE ? (size_t)(len - done) : DIRECT_PIECE;
		int rc = read_direct(r, df, sc->direct, n, off + done);
		if (rc)
			return rc;
		memcpy(dst + done, sc->direct, n);
		done += n;
	}
	return DVAR_OK;
}

/*
 * The kernel copies from the page cache with rep movsb, which runs at a
 * third of its speed (1.7-2.1 GB/s against 6.7 here, AMD Zen 3) when the
 * destination lies 1 to 31 bytes past the source within a page: each load
 * waits for the store just before it (4K aliasing). NumPy's large arrays
 * start 16 bytes into a page, and chunks start on one. Such a read goes
 * through a bounce buffer placed BOUNCE_SHIFT bytes past the destination
 * within a page, clear of the window for the kernel's copy into it and for
 * memcpy out of it (2.5-3x faster than the direct read, measured). The
 * window is taken as 64 bytes, for copies that move a cache line at a time.
 */
#define ALIAS_WINDOW 64
#define BOUNCE_SHIFT 48
#define BOUNCE_PIECE ((size_t)128 << 10) /* stays in L2 between the two copies */

static int read_buffered(dvar_reader *r, data_file *df, unsigned char *dst, uint64_t len,
                         uint64_t off, scratch *sc /* NULL: no bounce */)
{
	size_t gap = (size_t)(((uintptr_t)dst - off) % DIRECT_ALIGN);
	if (!sc || gap == 0 || gap >= ALIAS_WINDOW || len < DIRECT_ALIGN)
		return dvar_fs_pread_all(df->fd, dst, (size_t)len, off, df->path);
	if (!sc->bounce && !(sc->bounce = dvar_page_alloc(BOUNCE_PIECE + DIRECT_ALIGN, 0)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	unsigned char *b = sc->bounce + ((uintptr_t)dst + BOUNCE_SHIFT) % DIRECT_ALIGN;
	for (uint64_t done = 0; done < len;) {
		size_t n = len - done < BOUNCE_PIECE ? (size_t)(len - done) : BOUNCE_PIECE;
		int rc = dvar_fs_pread_all(df->fd, b, n, off + done, df->path);
		if (rc)
			return rc;
		memcpy(dst + done, b, n);
		done += n;
	}
	atomic_fetch_add(&r->bytes_bounced, len);
	return DVAR_OK;
}

/*
 * len bytes at off of df into dst: the aligned middle of a large uncached
 * read with O_DIRECT when other reads are in flight beside it (deep),
 * everything else through the page cache. Alone, a read is better off with
 * the kernel's readahead, which O_DIRECT does without.
 */
static int read_at(dvar_reader *r, data_file *df, unsigned char *dst, uint64_t len, uint64_t off,
                   int deep, scratch *sc)
{
	int mode = atomic_load(&direct_mode);
	uint64_t head = (DIRECT_ALIGN - off % DIRECT_ALIGN) % DIRECT_ALIGN;
	uint64_t mid = len > head ? (len - head) / DIRECT_ALIGN * DIRECT_ALIGN : 0;
	int aligned = ((uintptr_t)dst + head) % DIRECT_ALIGN == 0, rc;
	if (around_cache(r) && (deep || mode == DVAR_DIRECT_ALWAYS) && mid >= DIRECT_MIN &&
	    (aligned || sc) && direct_ready(r, df) &&
	    (mode != DVAR_DIRECT_AUTO || not_cached(df, off + head, mid))) {
		rc = aligned ? read_direct(r, df, dst + head, mid, off + head)
		             : read_direct_via(r, df, sc, dst + head, mid, off + head);
		if (rc == DVAR_OK && head)
			rc = dvar_fs_pread_all(df->fd, dst, (size_t)head, off, df->path);
		if (rc == DVAR_OK && head + mid < len)
			rc = dvar_fs_pread_all(df->fd, dst + head + mid, (size_t)(len - head - mid),
			                       off + head + mid, df->path);
		if (rc != 1)
			return rc;
	}
	return read_buffered(r, df, dst, len, off, sc);
}

/*
 * The checksum of a TensorBundle entry (a WHOLE chunk of len bytes at p) of
 * variable v, saved slice s: fixed-width dtypes over the bytes; string
 * tensors as TF's WriteStringTensor computes it (lengths, length checksum,
 * bytes); dtypes whose layout dvar does not know (variant, resource) are
 * not checked.
 */
static int check_whole(const dvar_var_entry *v, const dvar_slice_entry *s, const dvar_chunk *c,
                       const unsigned char *p, uint64_t len, char *why)
{
	if (v->dtype == DVAR_TF_DT_STRING) {
		uint64_t n;
		size_t at;
		dvar_slice_num_elements(&s->slice, &n);
		if (n > len) {
			snprintf(why, WHY_MAX, "%llu bytes cannot hold %llu string lengths",
			         (unsigned long long)len, (unsigned long long)n);
			return DVAR_ECORRUPT;
		}
		uint64_t *lens = malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
		if (!lens) {
			snprintf(why, WHY_MAX, "out of memory");
			return DVAR_ENOMEM;
		}
		int rc = dvar_tf_strings_decode(p, (size_t)len, n, lens, &at, "string tensor");
		uint32_t crc = rc ? 0 : dvar_tf_strings_crc(p, (size_t)len, n, lens, at);
		free(lens);
		if (rc) {
			snprintf(why, WHY_MAX, "%s", dvar_error_last()->message);
			return rc;
		}
		if (crc != c->crc) {
			snprintf(why, WHY_MAX, "checksum mismatch: stored 0x%08x, computed 0x%08x", c->crc, crc);
			return DVAR_ECORRUPT;
		}
		return DVAR_OK;
	}
	if (!dvar_tf_dtype_size(v->dtype))
		return DVAR_OK;
	uint32_t crc = dvar_crc32c(p, (size_t)len);
	if (crc != c->crc) {
		snprintf(why, WHY_MAX, "checksum mismatch: stored 0x%08x, computed 0x%08x", c->crc, crc);
		return DVAR_ECORRUPT;
	}
	return DVAR_OK;
}

/*
 * Part [lo, hi) of a TF entry, just read to p. A command walking a big
 * tensor reads it in parts, in order: the entry's CRC is carried from each
 * part to the next and checked when the last one is read. A part that does
 * not continue a run from byte 0 is not checked.
 */
static int follow_run(dvar_reader *r, const dvar_slice_entry *s, const dvar_chunk *c, uint64_t lo,
                      uint64_t hi, const unsigned char *p, char *why)
{
	uint32_t part = dvar_crc32c(p, (size_t)(hi - lo)), crc;
	tf_run *run = NULL;
	pthread_mutex_lock(&r->runs_lock);
	for (size_t k = 0; k < TF_RUNS && !run; k++)
		if (r->runs[k].s == s)
			run = &r->runs[k];
	if (lo == 0) {
		for (size_t k = 0; k < TF_RUNS && !run; k++)
			if (!r->runs[k].s)
				run = &r->runs[k];
		if (!run)
			run = &r->runs[r->next_run++ % TF_RUNS];
		*run = (tf_run){ s, hi, part };
		pthread_mutex_unlock(&r->runs_lock);
		return DVAR_OK;
	}
	if (!run || run->next != lo) {
		if (run)
			run->s = NULL;
		pthread_mutex_unlock(&r->runs_lock);
		return DVAR_OK;
	}
	run->crc = crc = dvar_crc32c_combine(run->crc, part, hi - lo);
	run->next = hi;
	if (hi == c->stored)
		run->s = NULL;
	pthread_mutex_unlock(&r->runs_lock);
	if (hi == c->stored && crc != c->crc) {
		snprintf(why, WHY_MAX, "checksum mismatch: stored 0x%08x, computed 0x%08x (over the "
		         "parts read in order)", c->crc, crc);
		return DVAR_ECORRUPT;
	}
	return DVAR_OK;
}

/*
 * Bytes [lo, hi) of chunk ci's raw content into out, checksums verified.
 * Raw chunks read only the blocks covering [lo, hi): lo must be a block
 * boundary. lz4 chunks are read and checked whole: lo = 0, hi = raw length.
 * WHOLE chunks (TF entries) read just [lo, hi); their one CRC covers the
 * whole entry, so it is checked when [lo, hi) is all of it, or ends a run
 * of parts read in order (follow_run). deep: other reads are in flight
 * beside this one (read_at). sc: the thread's buffers; NULL for a WHOLE
 * chunk, read then without a bounce buffer. On failure, why says what is
 * wrong with the chunk (chunk_error adds where).
 */
static int load_chunk(dvar_reader *r, const dvar_var_entry *v, const dvar_slice_entry *s, size_t ci,
                      uint64_t lo, uint64_t hi, unsigned char *out, scratch *sc, int deep, char *why)
{
	const dvar_chunk *c = &s->chunks[ci];
	data_file *df = &r->files[s->file];
	uint64_t raw_len = dvar_chunk_raw_len(s, ci);
	int rc;
	if (df->fd < 0)
		return file_unusable(df, why, WHY_MAX);
	int ranged = c->codec != DVAR_CODEC_LZ4;
	uint64_t off = ranged ? c->offset + lo : c->offset;
	uint64_t len = ranged ? hi - lo : c->stored;
	/* A short file fails even a partial read of a TF entry: it cannot be whole. */
	if (c->offset + c->stored > df->size && r->is_tf) {
		snprintf(why, WHY_MAX, "data file is truncated: it has %llu bytes, the entry needs bytes "
		         "up to %llu", (unsigned long long)df->size,
		         (unsigned long long)(c->offset + c->stored));
		return DVAR_ECORRUPT;
	}
	if (off + len > df->size) {
		snprintf(why, WHY_MAX, "data file is truncated: it has %llu bytes, the chunk needs bytes "
		         "up to %llu (the index expects %llu)", (unsigned long long)df->size,
		         (unsigned long long)(off + len), (unsigned long long)r->header.file_sizes[s->file]);
		return DVAR_ECORRUPT;
	}
	unsigned char *dst = out;
	if (c->codec == DVAR_CODEC_LZ4) {
		if ((rc = grow(&sc->packed, &sc->packed_cap, (size_t)len)))
			goto failed;
		dst = sc->packed;
	}
	if ((rc = read_at(r, df, dst, len, off, deep, sc)))
		goto failed;
	atomic_fetch_add(&r->bytes_read, len);
	if (c->codec == DVAR_CODEC_WHOLE)
		return lo == 0 && hi == c->stored ? check_whole(v, s, c, out, len, why)
		                                  : follow_run(r, s, c, lo, hi, out, why);
	if (c->codec == DVAR_CODEC_LZ4) {
		int n = LZ4_decompress_safe((const char *)sc->packed, (char *)out, (int)len, (int)raw_len);
		if (n != (int)raw_len) {
			snprintf(why, WHY_MAX, "lz4 data does not decompress to the chunk's %llu bytes",
			         (unsigned long long)raw_len);
			return DVAR_ECORRUPT;
		}
		uint32_t crc = dvar_crc32c(out, raw_len);
		if (crc != c->crc) {
			snprintf(why, WHY_MAX, "checksum mismatch: stored %08x, computed %08x", c->crc, crc);
			return DVAR_ECORRUPT;
		}
		return DVAR_OK;
	}
	const uint32_t *blocks = s->block_crcs + c->first_block;
	uint32_t whole = 0;
	for (uint64_t b = lo / DVAR_BLOCK_SIZE, p = lo; p < hi; b++, p += DVAR_BLOCK_SIZE) {
		size_t blen = hi - p < DVAR_BLOCK_SIZE ? (size_t)(hi - p) : DVAR_BLOCK_SIZE;
		uint32_t crc = dvar_crc32c(out + (p - lo), blen);
		if (crc != blocks[b]) {
			snprintf(why, WHY_MAX, "checksum mismatch in block %llu (bytes %llu..%llu): stored %08x, "
			         "computed %08x", (unsigned long long)b, (unsigned long long)p,
			         (unsigned long long)(p + blen), blocks[b], crc);
			return DVAR_ECORRUPT;
		}
		whole = p ? dvar_crc32c_combine(whole, crc, blen) : crc;
	}
	/* A whole chunk is also held to its chunk checksum, catching index damage. */
	if (lo == 0 && hi == raw_len && whole != c->crc) {
		snprintf(why, WHY_MAX, "block checksums disagree with the chunk checksum %08x", c->crc);
		return DVAR_ECORRUPT;
	}
	return DVAR_OK;
failed:
	snprintf(why, WHY_MAX, "%s", dvar_error_last()->message);
	return rc;
}

/* ---------------------------------------------------------------- boxes */

/* Row-major strides of a slice's own buffer, in elements. */
static void strides_of(const dvar_slice *s, uint64_t *st)
{
	uint64_t acc = 1;
	for (int d = s->rank - 1; d >= 0; d--) {
		st[d] = acc;
		acc *= (uint64_t)s->length[d];
	}
}

typedef int (*box_fn)(void *ud, const dvar_slice *box, uint64_t flat);

/*
 * Cut the flat element range [a, b) of slice s's buffer into at most
 * 2*rank+1 boxes that are each contiguous in that buffer (leading
 * dimensions of length 1, one partial dimension, full trailing ones), in
 * order, as slices of the full shape.
 */
static int for_each_box(const dvar_slice *s, uint64_t a, uint64_t b, box_fn fn, void *ud)
{
	uint64_t st[DVAR_MAX_RANK];
	int rank = s->rank, rc;
	if (rank == 0)
		return a < b ? fn(ud, s, 0) : DVAR_OK;
	strides_of(s, st);
	while (a < b) {
		uint64_t idx[DVAR_MAX_RANK], rem = a;
		for (int d = 0; d < rank; d++) {
			idx[d] = rem / st[d];
			rem %= st[d];
		}
		int j = rank - 1;
		while (j > 0 && a % st[j - 1] == 0 && a + st[j - 1] <= b)
			j--;
		uint64_t n = (b - a) / st[j];
		if (n > (uint64_t)s->length[j] - idx[j])
			n = (uint64_t)s->length[j] - idx[j];
		dvar_slice box = *s;
		for (int d = 0; d < rank; d++) {
			if (d <= j)
				box.start[d] = s->start[d] + (int64_t)idx[d];
			if (d < j)
				box.length[d] = 1;
		}
		box.length[j] = (int64_t)n;
		if ((rc = fn(ud, &box, a)))
			return rc;
		a += n * st[j];
	}
	return DVAR_OK;
}

/* Flat element index within slice s of a point given in full coordinates. */
static uint64_t flat_in(const dvar_slice *s, const int64_t *point)
{
	uint64_t st[DVAR_MAX_RANK], f = 0;
	strides_of(s, st);
	for (int d = 0; d < s->rank; d++)
		f += (uint64_t)(point[d] - s->start[d]) * st[d];
	return f;
}

/*
 * When the whole of s lies in t and is one contiguous run of t's buffer,
 * return 1 and the run's first element in t.
 */
static int contiguous_in(const dvar_slice *s, const dvar_slice *t, uint64_t *first)
{
	dvar_slice x;
	uint64_t n = 0, m = 0;
	if (dvar_slice_intersect(s, t, &x) != 1 || dvar_slice_num_elements(&x, &n) ||
	    dvar_slice_num_elements(s, &m) || n != m)
		return 0;
	int d = 0;
	while (d < s->rank && s->length[d] == 1)
		d++;
	for (int k = d + 1; k < s->rank; k++)
		if (s->length[k] != t->length[k])
			return 0;
	*first = flat_in(t, s->start);
	return 1;
}

/* ---------------------------------------------------------------- read */

typedef struct {
	size_t slice, chunk;
	uint64_t lo, hi;  /* bytes of the chunk to load */
	int direct;       /* load straight into the destination */
	/* Not direct: the bytes of the chunk the request needs, and when they
	 * are one run of the destination, where it starts (else UINT64_MAX). */
	uint64_t need_lo, need_hi, into;
} task;

typedef struct {
	dvar_reader *r;
	const dvar_var_entry *v;
	const dvar_slice *want;
	unsigned char *dst;
	size_t esize;
	task *tasks;
	size_t num_tasks, cap_tasks;
	size_t in_flight;        /* tasks run together, this read's and others' */
	size_t around;           /* tasks that may read around the page cache (read_at) */
	uint64_t *direct_first; /* per saved slice, when contiguous in want */
	/* for_each_box callbacks */
	uint64_t need_lo, need_hi;
	int any;
	uint64_t into;           /* where in want the first needed element goes */
	int run;                 /* what is needed so far is one run of want's buffer */
	uint64_t run_src, run_dst; /* elements just past that run, in the saved slice and in want */
	const dvar_slice *src_slice;
	dvar_ahead *ahead;       /* reading ahead of these tasks, or NULL */
	size_t ahead_first;      /* the read's index of this ctx's first task */
} read_ctx;

static int note_need(void *ud, const dvar_slice *box, uint64_t flat)
{
	read_ctx *ctx = ud;
	dvar_slice x;
	(void)flat;
	if (dvar_slice_intersect(box, ctx->want, &x) != 1)
		return DVAR_OK;
	int64_t last[DVAR_MAX_RANK];
	for (int d = 0; d < x.rank; d++)
		last[d] = x.start[d] + x.length[d] - 1;
	uint64_t lo = flat_in(ctx->src_slice, x.start), hi = flat_in(ctx->src_slice, last) + 1;
	/* Boxes come in order: the needed elements stay one run of both buffers
	 * while each part is contiguous in both and follows the last in both. */
	uint64_t n = 0, dlo = 0;
	dvar_slice_num_elements(&x, &n);
	int run = hi - lo == n && contiguous_in(&x, ctx->want, &dlo) &&
	          (!ctx->any || (ctx->run && lo == ctx->run_src && dlo == ctx->run_dst));
	ctx->run = run;
	ctx->run_src = hi;
	ctx->run_dst = dlo + n;
	if (!ctx->any || lo < ctx->need_lo)
		ctx->need_lo = lo;
	if (!ctx->any || hi > ctx->need_hi)
		ctx->need_hi = hi;
	if (!ctx->any)
		ctx->into = dlo;
	ctx->any = 1;
	return DVAR_OK;
}

static int add_task(read_ctx *ctx, task t)
{
	task *p = dvar_grow(ctx->tasks, ctx->num_tasks, &ctx->cap_tasks, sizeof(task), 64);
	if (!p)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	ctx->tasks = p;
	ctx->tasks[ctx->num_tasks++] = t;
	return DVAR_OK;
}

static int plan(read_ctx *ctx)
{
	const dvar_var_entry *v = ctx->v;
	int rc;
	for (size_t j = 0; j < v->num_slices; j++) {
		const dvar_slice_entry *s = &v->slices[j];
		dvar_slice x;
		if (dvar_slice_intersect(&s->slice, ctx->want, &x) != 1 || !s->num_chunks)
			continue;
		int direct = contiguous_in(&s->slice, ctx->want, &ctx->direct_first[j]);
		/* Only chunks between the intersection's first and last element can
		 * meet it: a small read of a large slice plans a few chunks, not all. */
		int64_t last[DVAR_MAX_RANK];
		for (int d = 0; d < x.rank; d++)
			last[d] = x.start[d] + x.length[d] - 1;
		size_t c_lo = (size_t)(flat_in(&s->slice, x.start) * ctx->esize / s->chunk_size);
		size_t c_hi = (size_t)(flat_in(&s->slice, last) * ctx->esize / s->chunk_size);
		if (direct) {
			c_lo = 0;
			c_hi = s->num_chunks - 1;
		}
		for (size_t ci = c_lo; ci <= c_hi && ci < s->num_chunks; ci++) {
			uint64_t raw_len = dvar_chunk_raw_len(s, ci);
			uint64_t base = (uint64_t)ci * s->chunk_size;
			task t = { j, ci, 0, raw_len, direct, 0, 0, UINT64_MAX };
			if (!direct) {
				ctx->any = 0;
				ctx->src_slice = &s->slice;
				for_each_box(&s->slice, base / ctx->esize, (base + raw_len) / ctx->esize, note_need, ctx);
				if (!ctx->any)
					continue;
				uint64_t lo = ctx->need_lo * ctx->esize - base, hi = ctx->need_hi * ctx->esize - base;
				t.need_lo = lo;
				t.need_hi = hi;
				if (ctx->run)
					t.into = ctx->into * ctx->esize;
				if (s->chunks[ci].codec == DVAR_CODEC_RAW) {
					t.lo = lo / DVAR_BLOCK_SIZE * DVAR_BLOCK_SIZE;
					t.hi = (hi + DVAR_BLOCK_SIZE - 1) / DVAR_BLOCK_SIZE * DVAR_BLOCK_SIZE;
					if (t.hi > raw_len)
						t.hi = raw_len;
				} else if (s->chunks[ci].codec == DVAR_CODEC_WHOLE) {
					/* A TF tensor is raw and contiguous: only the span the request
					 * needs, from its first element to its last. */
					t.lo = lo;
					t.hi = hi;
				}
			}
			/* Read in place, so read_at may take it around the page cache. */
			if ((direct || t.into != UINT64_MAX) && around_cache(ctx->r) &&
			    s->chunks[ci].codec != DVAR_CODEC_LZ4 && t.hi - t.lo >= DIRECT_MIN)
				ctx->around++;
			if ((rc = add_task(ctx, t)))
				return rc;
		}
	}
	return DVAR_OK;
}

typedef struct {
	read_ctx *ctx;
	const unsigned char *buf;
	uint64_t buf_flat; /* element of the saved slice at buf[0] */
} copy_ctx;

static int copy_box(void *ud, const dvar_slice *box, uint64_t flat)
{
	copy_ctx *cc = ud;
	dvar_slice x;
	if (dvar_slice_intersect(box, cc->ctx->want, &x) != 1)
		return DVAR_OK;
	return dvar_slice_copy(cc->ctx->v->dtype, &x, cc->buf + (flat - cc->buf_flat) * cc->ctx->esize, box,
	                       cc->ctx->dst, cc->ctx->want);
}

/* Bytes [lo, hi) of chunk ci (whole blocks) through scratch; bytes [a, b) of them to d. */
static int load_edge(read_ctx *ctx, const dvar_slice_entry *s, size_t ci, uint64_t lo, uint64_t hi,
                     uint64_t a, uint64_t b, unsigned char *d, scratch *sc, char *why)
{
	int rc = grow(&sc->raw, &sc->raw_cap, (size_t)(hi - lo));
	if (rc)
		snprintf(why, WHY_MAX, "%s", dvar_error_last()->message);
	else if (!(rc = load_chunk(ctx->r, ctx->v, s, ci, lo, hi, sc->raw, sc, 0, why)))
		memcpy(d, sc->raw + (a - lo), (size_t)(b - a));
	return rc;
}

/*
 * A task whose needed bytes [a, b) of its chunk are one run of the
 * destination: the whole checksum blocks among them load straight into
 * place, only the blocks at either edge (which hold bytes not wanted)
 * through scratch. 1 when the chunk cannot be read so (an lz4 chunk
 * needed in part, a run inside one block).
 */
static int load_into(read_ctx *ctx, const task *t, scratch *sc, char *why)
{
	const dvar_slice_entry *s = &ctx->v->slices[t->slice];
	const dvar_chunk *c = &s->chunks[t->chunk];
	uint64_t a = t->need_lo, b = t->need_hi, raw_len = dvar_chunk_raw_len(s, t->chunk);
	unsigned char *d = ctx->dst + t->into;
	int deep = ctx->in_flight > 1, rc = DVAR_OK;
	if (c->codec != DVAR_CODEC_RAW)
		return c->codec == DVAR_CODEC_WHOLE || (a == 0 && b == raw_len)
		       ? load_chunk(ctx->r, ctx->v, s, t->chunk, t->lo, t->hi, d, sc, deep, why) : 1;
	uint64_t m0 = (a + DVAR_BLOCK_SIZE - 1) / DVAR_BLOCK_SIZE * DVAR_BLOCK_SIZE;
	uint64_t m1 = b == raw_len ? b : b / DVAR_BLOCK_SIZE * DVAR_BLOCK_SIZE;
	if (m0 >= m1)
		return 1;
	if (a < m0)
		rc = load_edge(ctx, s, t->chunk, t->lo, m0, a, m0, d, sc, why);
	if (!rc)
		rc = load_chunk(ctx->r, ctx->v, s, t->chunk, m0, m1, d + (m0 - a), sc, deep, why);
	if (!rc && m1 < b)
		rc = load_edge(ctx, s, t->chunk, m1, t->hi, m1, b, d + (m1 - a), sc, why);
	return rc;
}

static int run_task(void *vctx, size_t i)
{
	read_ctx *ctx = vctx;
	const task *t = &ctx->tasks[i];
	const dvar_slice_entry *s = &ctx->v->slices[t->slice];
	uint64_t base = (uint64_t)t->chunk * s->chunk_size;
	scratch *sc = scratch_get(ctx->r);
	char why[WHY_MAX];
	int rc;
	dvar_ahead_started(ctx->ahead, ctx->ahead_first + i);
	if (!sc)
		return DVAR_ENOMEM;
	if (t->direct) {
		unsigned char *out = ctx->dst + ctx->direct_first[t->slice] * ctx->esize + base;
		if ((rc = load_chunk(ctx->r, ctx->v, s, t->chunk, 0, t->hi, out, sc, ctx->in_flight > 1, why)))
			chunk_error(ctx->r, ctx->v, s, t->chunk, rc, why);
	} else if (t->into != UINT64_MAX && (rc = load_into(ctx, t, sc, why)) != 1) {
		if (rc)
			chunk_error(ctx->r, ctx->v, s, t->chunk, rc, why);
	} else if (!(rc = grow(&sc->raw, &sc->raw_cap, (size_t)(t->hi - t->lo)))) {
		if ((rc = load_chunk(ctx->r, ctx->v, s, t->chunk, t->lo, t->hi, sc->raw, sc, 0, why))) {
			chunk_error(ctx->r, ctx->v, s, t->chunk, rc, why);
		} else {
			copy_ctx cc = { ctx, sc->raw, (base + t->lo) / ctx->esize };
			rc = for_each_box(&s->slice, (base + t->lo) / ctx->esize, (base + t->hi) / ctx->esize,
			                  copy_box, &cc);
		}
	}
	dvar_stash_push(ctx->r->scratches, sc, scratch_release);
	if (rc == DVAR_OK)
		progress(ctx->r, t->hi - t->lo);
	return rc;
}

/* Only dvar's dtypes read as values (a TensorBundle may hold others). */
static int check_readable(const dvar_var_entry *v)
{
	if (dvar_dtype_size(v->dtype))
		return DVAR_OK;
	if (v->dtype == DVAR_TF_DT_STRING)
		return dvar_error_set(DVAR_ENOTSUPP, "variable '%s' is a string tensor: read it with "
		                      "dvar_reader_read_strings", v->name);
	const char *tf = dvar_tf_dtype_name(v->dtype);
	return dvar_error_set(DVAR_ENOTSUPP, "variable '%s' has TensorFlow dtype %s%s%d%s, which dvar "
	                      "cannot read", v->name, tf ? tf : "", tf ? " (" : "", v->dtype, tf ? ")" : "");
}

/* The saved slices must cover want: count the elements they give. */
static int check_coverage(const dvar_var_entry *v, const dvar_slice *want)
{
	uint64_t need, got = 0, n;
	dvar_slice_num_elements(want, &need);
	for (size_t j = 0; j < v->num_slices; j++) {
		dvar_slice x;
		if (dvar_slice_intersect(&v->slices[j].slice, want, &x) == 1 &&
		    dvar_slice_num_elements(&x, &n) == DVAR_OK)
			got += n;
	}
	if (got == need)
		return DVAR_OK;
	char sl[256];
	dvar_slice_format(want, &v->shape, sl, sizeof(sl));
	return dvar_error_set(DVAR_ESHAPE, "variable '%s': slice %s is not covered by the %zu saved "
	                      "slices: %llu of %llu elements are missing", v->name, *sl ? sl : "-",
	                      v->num_slices, (unsigned long long)(need - got), (unsigned long long)need);
}

/* ctx planned to read want of v's saved slices into dst (want's own
 * row-major buffer); ctx_clear releases it, planned or not. */
static int ctx_plan(read_ctx *ctx, dvar_reader *r, const dvar_var_entry *v, const dvar_slice *want,
                    void *dst)
{
	memset(ctx, 0, sizeof(*ctx));
	int rc = check_coverage(v, want);
	if (rc)
		return rc;
	ctx->r = r;
	ctx->v = v;
	ctx->want = want;
	ctx->dst = dst;
	ctx->esize = dvar_dtype_size(v->dtype);
	if (v->num_slices && !(ctx->direct_first = calloc(v->num_slices, sizeof(uint64_t))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	return plan(ctx);
}

static void ctx_clear(read_ctx *ctx)
{
	free(ctx->tasks);
	free(ctx->direct_first);
}

static void progress_start(dvar_reader *r, const read_ctx *ctxs, size_t n)
{
	atomic_store(&r->progress_done, 0);
	r->progress_total = 0;
	for (size_t c = 0; c < n; c++)
		for (size_t k = 0; k < ctxs[c].num_tasks; k++)
			r->progress_total += ctxs[c].tasks[k].hi - ctxs[c].tasks[k].lo;
}

/*
 * Threads for a read of tasks, around of which may go past the page
 * cache: those need DVAR_IO_DEPTH reads in flight, which only the whole pool
 * gives. Reads through the page cache get their depth from the kernel's
 * readahead, and more of them at once than there are CPUs only split its
 * requests (1 GiB read cold into NumPy on 2 CPUs: about 410 requests with
 * four threads, 300 with two, and 10-15 % more time). Threads the caller
 * asked for are all used.
 */
static int read_width(const dvar_reader *r, size_t around)
{
	return around ? 0 : r->buffered_width;
}

/* The bytes of its data file task t of ctx reads, as load_chunk reads them. */
static dvar_ahead_range task_range(const read_ctx *ctx, const task *t)
{
	const dvar_slice_entry *s = &ctx->v->slices[t->slice];
	const dvar_chunk *c = &s->chunks[t->chunk];
	int ranged = c->codec != DVAR_CODEC_LZ4;
	return (dvar_ahead_range){ ctx->r->files[s->file].fd, ranged ? c->offset + t->lo : c->offset,
		                   ranged ? t->hi - t->lo : c->stored };
}

/* Reading ahead of the total tasks of ctxs[0, n), in the order the pool
 * takes them, when they all go through the page cache (around is 0):
 * O_DIRECT reads keep their own depth. Sets their ahead (NULL: none). */
static void ahead_of(read_ctx *ctxs, size_t n, size_t total, size_t around)
{
	dvar_ahead_range *g = around || total < 2 ? NULL : malloc(total * sizeof(*g));
	dvar_ahead *a;
	size_t k = 0;
	if (!g)
		return;
	for (size_t c = 0; c < n; c++) {
		ctxs[c].ahead_first = k;
		for (size_t i = 0; i < ctxs[c].num_tasks; i++)
			g[k++] = task_range(&ctxs[c], &ctxs[c].tasks[i]);
	}
	a = dvar_ahead_start(g, total);
	for (size_t c = 0; c < n; c++)
		ctxs[c].ahead = a;
}

/* want of v's saved slices into dst (want's own row-major buffer). */
static int read_slices(dvar_reader *r, const dvar_var_entry *v, const dvar_slice *want, void *dst)
{
	read_ctx ctx;
	int rc = ctx_plan(&ctx, r, v, want, dst);
	if (!rc) {
		ctx.in_flight = ctx.num_tasks;
		progress_start(r, &ctx, 1);
		ahead_of(&ctx, 1, ctx.num_tasks, ctx.around);
		rc = dvar_pool_for_width(r->pool, ctx.num_tasks, read_width(r, ctx.around), run_task, &ctx);
		dvar_ahead_stop(ctx.ahead);
	}
	ctx_clear(&ctx);
	return rc;
}

/* A piece's stream read as a variable of its own: one slice covering it. */
static void stream_view(dvar_var_entry *view, const dvar_var_entry *v, int dtype,
                        const dvar_slice_entry *s)
{
	memset(view, 0, sizeof(*view));
	view->name = v->name;
	view->dtype = dtype;
	view->shape.rank = s->slice.rank;
	for (int d = 0; d < s->slice.rank; d++)
		view->shape.dims[d] = s->slice.length[d];
	view->num_slices = 1;
	view->slices = (dvar_slice_entry *)s;
}

/* The ids of piece pc of v, read once and held to what the index says of them. */
static int piece_ids(dvar_reader *r, const dvar_var_entry *v, dvar_piece *pc)
{
	dvar_var_entry view;
	dvar_slice all;
	int64_t *ids;
	int rc;
	if (pc->loaded)
		return DVAR_OK;
	if (!(ids = malloc((size_t)pc->num_rows * sizeof(*ids))))
		return dvar_error_set(DVAR_ENOMEM, "variable '%s': out of memory for %llu row ids",
		                      v->name, (unsigned long long)pc->num_rows);
	stream_view(&view, v, DVAR_INT64, &pc->ids);
	dvar_slice_full(&all, &view.shape);
	if ((rc = read_slices(r, &view, &all, ids))) {
		free(ids);
		return rc;
	}
	for (uint64_t k = 0; k < pc->num_rows; k++)
		if (ids[k] < pc->first_row || ids[k] > pc->last_row || (k && ids[k] <= ids[k - 1]) ||
		    (k == 0 && ids[k] != pc->first_row) ||
		    (k + 1 == pc->num_rows && ids[k] != pc->last_row)) {
			long long bad = (long long)ids[k];
			free(ids);
			return dvar_error_set(DVAR_ECORRUPT, "checkpoint '%s' variable '%s': row id %llu of a "
			                      "row piece is %lld, out of order or outside rows %lld..%lld",
			                      r->dir, v->name, (unsigned long long)k, bad,
			                      (long long)pc->first_row, (long long)pc->last_row);
		}
	pc->loaded = ids;
	return DVAR_OK;
}

/* The first of the n increasing ids that is >= x. */
static uint64_t lower_bound(const int64_t *ids, uint64_t n, int64_t x)
{
	uint64_t lo = 0, hi = n;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (ids[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Rows of a patch copied at a time: bounds the memory a patch read takes. */
#define PATCH_BATCH_BYTES ((uint64_t)32 << 20)

/* Overwrite the rows of want (already holding the base's) that v's pieces replace. */
static int apply_pieces(dvar_reader *r, const dvar_var_entry *v, const dvar_slice *want,
                        unsigned char *dst)
{
	int64_t a = want->start[0], b = a + want->length[0];
	size_t esize = dvar_dtype_size(v->dtype);
	uint64_t row_elems = 1;
	unsigned char *tmp = NULL;
	int rc = DVAR_OK;
	for (int d = 1; d < want->rank; d++)
		row_elems *= (uint64_t)want->length[d];
	uint64_t row_bytes = row_elems * esize;
	if (a >= b || row_bytes == 0)
		return DVAR_OK;
	uint64_t batch = PATCH_BATCH_BYTES / row_bytes ? PATCH_BATCH_BYTES / row_bytes : 1;
	for (size_t k = 0; k < v->num_pieces && !rc; k++) {
		dvar_piece *pc = &v->pieces[k];
		if (pc->last_row < a || pc->first_row >= b)
			continue;
		if ((rc = piece_ids(r, v, pc)))
			break;
		uint64_t p0 = lower_bound(pc->loaded, pc->num_rows, a);
		uint64_t p1 = lower_bound(pc->loaded, pc->num_rows, b);
		dvar_var_entry view;
		stream_view(&view, v, v->dtype, &pc->rows);
		for (uint64_t q0 = p0; q0 < p1 && !rc; q0 += batch) {
			uint64_t q1 = q0 + batch < p1 ? q0 + batch : p1;
			dvar_slice part = *want;
			part.start[0] = (int64_t)q0;
			part.length[0] = (int64_t)(q1 - q0);
			if (!tmp && !(tmp = malloc((size_t)(batch * row_bytes)))) {
				rc = dvar_error_set(DVAR_ENOMEM, "variable '%s': out of memory", v->name);
				break;
			}
			if ((rc = read_slices(r, &view, &part, tmp)))
				break;
			for (uint64_t q = q0; q < q1; q++)
				memcpy(dst + (uint64_t)(pc->loaded[q] - a) * row_bytes, tmp + (q - q0) * row_bytes,
				       (size_t)row_bytes);
		}
	}
	free(tmp);
	return rc;
}

/*
 * Variable v of r: its own slices; or, in a delta, the base's value
 * (unchanged), or the base's with the rows the delta replaces.
 */
static int read_var(dvar_reader *r, const dvar_var_entry *v, const dvar_slice *want, void *dst)
{
	int rc;
	if (v->delta == DVAR_DELTA_WHOLE)
		return read_slices(r, v, want, dst);
	if ((rc = read_var(r->base, &r->base->vars[v->base_index], want, dst)))
		return rc;
	return v->delta == DVAR_DELTA_ROWS ? apply_pieces(r, v, want, dst) : DVAR_OK;
}

/* A read's arguments checked, and the slice it wants (the whole variable for NULL). */
static int check_request(dvar_reader *r, size_t i, const dvar_slice *slice, const void *dst,
                         size_t dst_bytes, dvar_slice *want)
{
	int rc = check_var_index(r, i);
	if (rc)
		return rc;
	const dvar_var_entry *v = &r->vars[i];
	if ((rc = check_readable(v)))
		return rc;
	if (slice)
		*want = *slice;
	else
		dvar_slice_full(want, &v->shape);
	if ((rc = dvar_slice_check(want, &v->shape)))
		return dvar_error_prefix("reading variable '%s'", v->name);
	dvar_shape ws;
	uint64_t bytes;
	dvar_slice_shape(want, &ws);
	dvar_shape_num_bytes(&ws, v->dtype, &bytes);
	if (dst_bytes != bytes)
		return dvar_error_set(DVAR_EINVAL, "reading variable '%s': the destination holds %llu bytes, "
		                      "the slice needs %llu", v->name, (unsigned long long)dst_bytes,
		                      (unsigned long long)bytes);
	if (bytes && !dst)
		return dvar_error_set(DVAR_EINVAL, "reading variable '%s': NULL destination", v->name);
	return DVAR_OK;
}

int dvar_reader_read(dvar_reader *r, size_t i, const dvar_slice *slice, void *dst, size_t dst_bytes)
{
	dvar_slice want;
	int rc = check_request(r, i, slice, dst, dst_bytes, &want);
	return rc ? rc : read_var(r, &r->vars[i], &want, dst);
}

/* The tasks of several planned reads, run as one list. */
typedef struct {
	read_ctx *ctxs;
	uint64_t *first; /* first[c]: the list's index of ctxs[c]'s first task; first[n] = all */
	size_t n;
} batch;

static int run_batch_task(void *vb, size_t i)
{
	const batch *b = vb;
	size_t c = dvar_segment_of(b->first, b->n, i);
	return run_task(&b->ctxs[c], (size_t)(i - b->first[c]));
}

int dvar_reader_read_many(dvar_reader *r, const dvar_read_request *reqs, size_t n)
{
	if (!r)
		return dvar_error_set(DVAR_EINVAL, "dvar_reader_read_many: reader is NULL");
	if (n && !reqs)
		return dvar_error_set(DVAR_EINVAL, "dvar_reader_read_many: %zu requests at NULL", n);
	if (n > SIZE_MAX / sizeof(read_ctx) - 1)
		return dvar_error_set(DVAR_EINVAL, "dvar_reader_read_many: %zu requests are more than "
		                      "memory can hold", n);
	dvar_slice *wants = malloc((n ? n : 1) * sizeof(*wants));
	read_ctx *ctxs = calloc(n ? n : 1, sizeof(*ctxs));
	uint64_t *first = malloc((n + 1) * sizeof(*first));
	size_t planned = 0, total = 0;
	int rc = wants && ctxs && first ? DVAR_OK : dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t k = 0; k < n && !rc; k++)
		rc = check_request(r, reqs[k].var, reqs[k].slice, reqs[k].dst, reqs[k].dst_bytes, &wants[k]);
	/* A delta's patched variables are read after the batch, one at a time. */
	for (size_t k = 0; k < n && !rc; k++) {
		const dvar_var_entry *v = &r->vars[reqs[k].var];
		if (v->delta != DVAR_DELTA_WHOLE)
			continue;
		first[planned] = total;
		rc = ctx_plan(&ctxs[planned], r, v, &wants[k], reqs[k].dst);
		total += ctxs[planned++].num_tasks;
	}
	if (!rc) {
		size_t around = 0;
		first[planned] = total;
		for (size_t c = 0; c < planned; c++) {
			ctxs[c].in_flight = total;
			around += ctxs[c].around;
		}
		progress_start(r, ctxs, planned);
		batch b = { ctxs, first, planned };
		ahead_of(ctxs, planned, total, around);
		rc = dvar_pool_for_width(r->pool, total, read_width(r, around), run_batch_task, &b);
		dvar_ahead_stop(planned ? ctxs[0].ahead : NULL);
	}
	for (size_t k = 0; k < n && !rc; k++)
		if (r->vars[reqs[k].var].delta != DVAR_DELTA_WHOLE)
			rc = read_var(r, &r->vars[reqs[k].var], &wants[k], reqs[k].dst);
	for (size_t c = 0; ctxs && c < n; c++)
		ctx_clear(&ctxs[c]);
	free(wants);
	free(ctxs);
	free(first);
	return rc;
}

/* ---------------------------------------------------------------- strings */

/*
 * String tensor i read whole into *out (malloc'ed, one byte more than it
 * needs, the caller's): the lengths of its n elements into lens, and
 * [*at, *at + *sum) of *out holds their bytes.
 */
static int load_strings(dvar_reader *r, size_t i, uint64_t *lens, uint64_t n, unsigned char **out,
                        size_t *at, uint64_t *sum)
{
	int rc = check_var_index(r, i);
	if (rc)
		return rc;
	const dvar_var_entry *v = &r->vars[i];
	uint64_t elems;
	if (v->dtype != DVAR_TF_DT_STRING)
		return dvar_error_set(DVAR_EINVAL, "variable '%s' is not a string tensor: read it with "
		                      "dvar_reader_read", v->name);
	if (dvar_shape_num_elements(&v->shape, &elems) || n != elems)
		return dvar_error_set(DVAR_ESHAPE, "variable '%s' holds %llu strings, not %llu", v->name,
		                      (unsigned long long)elems, (unsigned long long)n);
	if (n && !lens)
		return dvar_error_set(DVAR_EINVAL, "reading variable '%s': NULL lengths", v->name);
	if (v->num_slices != 1 || !dvar_slice_is_full(&v->slices[0].slice, &v->shape) ||
	    v->slices[0].num_chunks != 1)
		return dvar_error_set(DVAR_ENOTSUPP, "variable '%s' is a string tensor saved in %zu slices; "
		                      "only one saved whole can be read", v->name, v->num_slices);
	const dvar_slice_entry *s = &v->slices[0];
	uint64_t len = s->chunks[0].stored;
	char why[WHY_MAX];
	if (len >= SIZE_MAX)
		return dvar_error_set(DVAR_ENOMEM, "variable '%s' is too large to read here", v->name);
	unsigned char *buf = malloc((size_t)len + 1);
	if (!buf)
		return dvar_error_set(DVAR_ENOMEM, "out of memory (%llu bytes of string tensor '%s')",
		                      (unsigned long long)len, v->name);
	/* load_chunk checks every checksum; decoding again cannot fail, but is checked anyway. */
	*at = 0;
	if ((rc = load_chunk(r, v, s, 0, 0, len, buf, NULL, 0, why)))
		chunk_error(r, v, s, 0, rc, why);
	else if ((rc = dvar_tf_strings_decode(buf, (size_t)len, n, lens, at, v->name)))
		dvar_error_prefix("variable '%s'", v->name);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*sum = len - *at;
	return DVAR_OK;
}

int dvar_reader_read_strings(dvar_reader *r, size_t i, uint64_t *lens, uint64_t n, void *bytes,
                             size_t cap, uint64_t *total)
{
	unsigned char *buf;
	size_t at;
	uint64_t sum;
	int rc = load_strings(r, i, lens, n, &buf, &at, &sum);
	if (rc)
		return rc;
	if (total)
		*total = sum;
	if (bytes && cap < sum)
		rc = dvar_error_set(DVAR_ESHAPE, "reading variable '%s': the buffer holds %llu bytes, the "
		                    "strings take %llu", r->vars[i].name, (unsigned long long)cap,
		                    (unsigned long long)sum);
	else if (bytes && sum)
		memcpy(bytes, buf + at, (size_t)sum);
	free(buf);
	return rc;
}

int dvar_reader_read_strings_alloc(dvar_reader *r, size_t i, uint64_t **lens, char **bytes,
                                   uint64_t *total)
{
	unsigned char *buf;
	size_t at;
	uint64_t n, sum;
	int rc = check_var_index(r, i);
	if (lens)
		*lens = NULL;
	if (bytes)
		*bytes = NULL;
	if (rc || !lens || !bytes)
		return rc ? rc : dvar_error_set(DVAR_EINVAL, "dvar_reader_read_strings_alloc: NULL output");
	if (dvar_shape_num_elements(&r->vars[i].shape, &n) || n > SIZE_MAX / sizeof(uint64_t))
		return dvar_error_set(DVAR_ENOMEM, "variable '%s' has too many elements to read here",
		                      r->vars[i].name);
	if (!(*lens = malloc((size_t)(n ? n : 1) * sizeof(uint64_t))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory (%llu string lengths of '%s')",
		                      (unsigned long long)n, r->vars[i].name);
	if ((rc = load_strings(r, i, *lens, n, &buf, &at, &sum))) {
		free(*lens);
		*lens = NULL;
		return rc;
	}
	memmove(buf, buf + at, (size_t)sum);
	buf[sum] = 0;
	*bytes = (char *)buf;
	if (total)
		*total = sum;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- verify */

/* One saved stream to verify (a slice, or a piece's ids or rows), of a
 * link of the chain. */
typedef struct {
	dvar_reader *r;
	const dvar_var_entry *v;
	const dvar_slice_entry *s;
} verify_item;

typedef struct {
	dvar_reader *top; /* the reader verified: progress is its */
	const verify_item *items;
	size_t n;
	uint64_t *first;  /* first[k]: the loop's index of item k's first chunk; first[n] = all */
	int *codes;       /* per chunk of the loop */
	char **messages;
} verify_ctx;

static int verify_chunk(void *vctx, size_t i)
{
	verify_ctx *ctx = vctx;
	size_t k = dvar_segment_of(ctx->first, ctx->n, i), ci = (size_t)(i - ctx->first[k]);
	const verify_item *it = &ctx->items[k];
	scratch *sc = scratch_get(it->r);
	uint64_t len = dvar_chunk_raw_len(it->s, ci);
	char why[WHY_MAX];
	int rc = sc ? grow(&sc->raw, &sc->raw_cap, (size_t)len) : DVAR_ENOMEM;
	if (rc)
		snprintf(why, sizeof(why), "%s", dvar_error_last()->message);
	else
		rc = load_chunk(it->r, it->v, it->s, ci, 0, len, sc->raw, sc, 0, why);
	if (sc)
		dvar_stash_push(it->r->scratches, sc, scratch_release);
	ctx->codes[i] = rc;
	if (rc && !(ctx->messages[i] = strdup(why)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	progress(ctx->top, it->s->chunks[ci].stored);
	return rc == DVAR_ENOMEM ? rc : DVAR_OK;
}

/* Every chunk of items[0, n) in one pool loop, so that many one-chunk
 * variables verify as fast as one large one; the bad ones reported in
 * order. */
static int verify_items(dvar_reader *top, const verify_item *items, size_t n,
                        dvar_bad_chunk_fn bad, void *userdata, uint64_t *nbad)
{
	verify_ctx ctx = { top, items, n, malloc((n + 1) * sizeof(uint64_t)), NULL, NULL };
	size_t total = 0;
	int rc;
	for (size_t k = 0; ctx.first && k < n; k++) {
		ctx.first[k] = total;
		total += items[k].s->num_chunks;
	}
	if (ctx.first)
		ctx.first[n] = total;
	ctx.codes = calloc(total ? total : 1, sizeof(int));
	ctx.messages = calloc(total ? total : 1, sizeof(char *));
	if (!ctx.first || !ctx.codes || !ctx.messages)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	else
		rc = dvar_pool_for(top->pool, total, verify_chunk, &ctx);
	for (size_t k = 0; !rc && k < n; k++)
		for (size_t ci = 0, i = (size_t)ctx.first[k]; ci < items[k].s->num_chunks; ci++, i++) {
			if (!ctx.codes[i])
				continue;
			(*nbad)++;
			if (bad) {
				const dvar_slice_entry *s = items[k].s;
				dvar_bad_chunk b = { items[k].v->name, items[k].r->files[s->file].path,
					             s->chunks[ci].offset, ci, ctx.codes[i], ctx.messages[i] };
				bad(userdata, &b);
			}
		}
	for (size_t i = 0; ctx.messages && i < total; i++)
		free(ctx.messages[i]);
	free(ctx.first);
	free(ctx.codes);
	free(ctx.messages);
	return rc;
}

/* A piece whose chunks are sound must also hold ids in order, inside its range. */
static int verify_piece(dvar_reader *top, dvar_reader *r, const dvar_var_entry *v,
                        dvar_piece *pc, dvar_bad_chunk_fn bad, void *userdata, uint64_t *nbad)
{
	uint64_t before = *nbad;
	verify_item streams[2] = { { r, v, &pc->ids }, { r, v, &pc->rows } };
	int rc = verify_items(top, streams, 2, bad, userdata, nbad);
	if (rc || *nbad != before)
		return rc;
	if ((rc = piece_ids(r, v, pc)) == DVAR_OK || rc == DVAR_ENOMEM)
		return rc;
	(*nbad)++;
	if (bad) {
		dvar_bad_chunk b = { v->name, r->files[pc->ids.file].path,
		                     pc->ids.num_chunks ? pc->ids.chunks[0].offset : 0, 0, rc,
		                     dvar_error_last()->message };
		bad(userdata, &b);
	}
	return DVAR_OK;
}

int dvar_reader_verify(dvar_reader *r, dvar_bad_chunk_fn bad, void *userdata, uint64_t *num_bad)
{
	if (!r)
		return dvar_error_set(DVAR_EINVAL, "NULL reader");
	uint64_t nbad = 0;
	int rc = DVAR_OK;
	atomic_store(&r->progress_done, 0);
	r->progress_total = 0;
	/* Every link of a delta's chain: this one's bytes, then its base's. */
	for (const dvar_reader *l = r; l; l = l->base)
		for (size_t i = 0; i < l->num_vars; i++)
			r->progress_total += l->vars[i].stored_bytes;
	/* Every saved slice of every link in one loop; then the pieces, whose ids
	 * are checked once their chunks are sound. */
	size_t n = 0;
	for (const dvar_reader *l = r; l; l = l->base)
		for (size_t i = 0; i < l->num_vars; i++)
			n += l->vars[i].num_slices;
	verify_item *items = malloc((n ? n : 1) * sizeof(*items));
	if (!items)
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
	n = 0;
	for (dvar_reader *l = r; l && items; l = l->base)
		for (size_t i = 0; i < l->num_vars; i++)
			for (size_t j = 0; j < l->vars[i].num_slices; j++)
				items[n++] = (verify_item){ l, &l->vars[i], &l->vars[i].slices[j] };
	if (!rc)
		rc = verify_items(r, items, n, bad, userdata, &nbad);
	free(items);
	for (dvar_reader *l = r; l && !rc; l = l->base)
		for (size_t i = 0; i < l->num_vars && !rc; i++)
			for (size_t k = 0; k < l->vars[i].num_pieces && !rc; k++)
				rc = verify_piece(r, l, &l->vars[i], &l->vars[i].pieces[k], bad, userdata,
				                  &nbad);
	if (num_bad)
		*num_bad = nbad;
	if (rc == DVAR_OK)
		dvar_error_clear();
	return rc;
}

/* ---------------------------------------------------------------- map */

typedef struct {
	dvar_reader *r;
	const dvar_var_entry *v;
	const dvar_slice_entry *s;
	dvar_ahead *ahead; /* asks the kernel for the chunks ahead (NULL: none) */
} map_verify_ctx;

/* Chunk ci of a slice about to be mapped, read and checked as a read
 * checks it: through the page cache, which the mapping then shows (deep 0:
 * never around it), so that an I/O error is an error here, where touching
 * the mapping would be a SIGBUS. */
static int map_verify_chunk(void *vctx, size_t ci)
{
	map_verify_ctx *ctx = vctx;
	const dvar_slice_entry *s = ctx->s;
	uint64_t len = dvar_chunk_raw_len(s, ci);
	scratch *sc = scratch_get(ctx->r);
	char why[WHY_MAX];
	int rc = sc ? grow(&sc->raw, &sc->raw_cap, (size_t)len) : DVAR_ENOMEM;
	dvar_ahead_started(ctx->ahead, ci);
	if (rc == DVAR_OK &&
	    (rc = load_chunk(ctx->r, ctx->v, s, ci, 0, len, sc->raw, sc, 0, why)) != DVAR_OK)
		rc = chunk_error(ctx->r, ctx->v, s, ci, rc, why);
	if (sc)
		dvar_stash_push(ctx->r->scratches, sc, scratch_release);
	return rc;
}

/* DVAR_OK when slice s can be mapped: raw chunks, back to back, in order. */
static int check_mappable(const dvar_reader *r, const dvar_var_entry *v, size_t j)
{
	const dvar_slice_entry *s = &v->slices[j];
	char sl[256];
	dvar_slice_format(&s->slice, &v->shape, sl, sizeof(sl));
	for (size_t ci = 0; ci < s->num_chunks; ci++) {
		const dvar_chunk *c = &s->chunks[ci];
		uint64_t want = s->chunks[0].offset + (uint64_t)ci * s->chunk_size;
		if (c->codec == DVAR_CODEC_WHOLE)
			return dvar_error_set(DVAR_ENOTSUPP, "cannot map variable '%s': a TensorFlow checkpoint's "
			                      "tensors are not page-aligned: export it first (`dvar export "
			                      "--single-shard`)", v->name);
		if (c->codec != DVAR_CODEC_RAW)
			return dvar_error_set(DVAR_ENOTSUPP, "cannot map variable '%s' slice %s: chunk %zu of "
			                      "%zu is lz4-compressed; only raw chunks can be mapped (write with "
			                      "DVAR_COMPRESS_NONE, e.g. `dvar export --single-shard`)", v->name,
			                      *sl ? sl : "-", ci, s->num_chunks);
		if (c->offset != want)
			return dvar_error_set(DVAR_ENOTSUPP, "cannot map variable '%s' slice %s: its chunks are "
			                      "not contiguous in %s (chunk %zu is at offset %llu, not %llu right "
			                      "after chunk %zu); rewrite it with DVAR_COMPRESS_NONE", v->name,
			                      *sl ? sl : "-", r->files[s->file].path, ci,
			                      (unsigned long long)c->offset, (unsigned long long)want, ci - 1);
	}
	return DVAR_OK;
}

int dvar_reader_map(dvar_reader *r, size_t i, size_t j, uint32_t flags, dvar_mapping *out)
{
	int rc = check_var_index(r, i);
	if (rc || !out)
		return rc ? rc : dvar_error_set(DVAR_EINVAL, "dvar_reader_map: NULL argument");
	memset(out, 0, sizeof(*out));
	if (flags & ~DVAR_MAP_VERIFY)
		return dvar_error_set(DVAR_EINVAL, "dvar_reader_map: unknown flags 0x%x", flags);
	/* An unchanged variable maps where it is saved. */
	const dvar_reader *link;
	const dvar_var_entry *v = holder_of(r, &r->vars[i], &link, 0);
	if (v->delta == DVAR_DELTA_ROWS)
		return dvar_error_set(DVAR_ENOTSUPP, "cannot map variable '%s': checkpoint '%s' holds only "
		                      "its changed rows, over '%s'; export it whole first", v->name,
		                      link->dir, link->base->dir);
	r = (dvar_reader *)link;
	if (j == DVAR_MAP_WHOLE) {
		if (v->num_slices != 1)
			return dvar_error_set(DVAR_ENOTSUPP, "cannot map variable '%s' whole: it is saved as %zu "
			                      "slices, and a mapping is one contiguous run of one slice; map "
			                      "each slice, or merge them with `dvar export --single-shard`",
			                      v->name, v->num_slices);
		if (!dvar_slice_is_full(&v->slices[0].slice, &v->shape)) {
			char sl[256];
			dvar_slice_format(&v->slices[0].slice, &v->shape, sl, sizeof(sl));
			return dvar_error_set(DVAR_ENOTSUPP, "cannot map variable '%s' whole: its only saved "
			                      "slice %s does not cover it", v->name, sl);
		}
		j = 0;
	} else if (j >= v->num_slices) {
		return dvar_error_set(DVAR_EINVAL, "variable '%s' has %zu slices, not %zu", v->name,
		                      v->num_slices, j + 1);
	}
	const dvar_slice_entry *s = &v->slices[j];
	if ((rc = check_mappable(r, v, j)))
		return rc;
	if (!s->num_chunks)
		return DVAR_OK; /* nothing to map */
	const data_file *df = &r->files[s->file];
	char why[WHY_MAX];
	struct stat st;
	uint64_t off = s->chunks[0].offset;
	if (df->fd < 0)
		return chunk_error(r, v, s, 0, file_unusable(df, why, sizeof(why)), why);
	/* Mapping past the end of a file faults on touch: check its size now. */
	if (fstat(df->fd, &st) != 0)
		return dvar_error_set_errno(DVAR_EIO, errno, "stat '%s'", df->path);
	if ((uint64_t)st.st_size < off + s->raw_bytes) {
		snprintf(why, sizeof(why), "data file is truncated: it has %llu bytes, the slice needs "
		         "bytes up to %llu", (unsigned long long)st.st_size,
		         (unsigned long long)(off + s->raw_bytes));
		return chunk_error(r, v, s, s->num_chunks - 1, DVAR_ECORRUPT, why);
	}
	long page = sysconf(_SC_PAGESIZE);
	uint64_t base = page > 0 ? off / (uint64_t)page * (uint64_t)page : off;
	size_t length = (size_t)(off - base + s->raw_bytes);
	void *m = mmap(NULL, length, PROT_READ, MAP_SHARED, df->fd, (off_t)base);
	if (m == MAP_FAILED)
		return dvar_error_set_errno(DVAR_EIO, errno, "map %zu bytes of '%s' at offset %llu", length,
		                            df->path, (unsigned long long)base);
	const unsigned char *data = (const unsigned char *)m + (off - base);
	if (flags & DVAR_MAP_VERIFY) {
		map_verify_ctx ctx = { r, v, s, NULL };
		dvar_ahead_range *g = s->num_chunks > 1 ? malloc(s->num_chunks * sizeof(*g)) : NULL;
		for (size_t ci = 0; g && ci < s->num_chunks; ci++)
			g[ci] = (dvar_ahead_range){ df->fd, s->chunks[ci].offset, dvar_chunk_raw_len(s, ci) };
		if (g)
			ctx.ahead = dvar_ahead_start(g, s->num_chunks);
		rc = dvar_pool_for(r->pool, s->num_chunks, map_verify_chunk, &ctx);
		dvar_ahead_stop(ctx.ahead);
		if (rc) {
			munmap(m, length);
			return rc;
		}
	}
	out->data = data;
	out->size = (size_t)s->raw_bytes;
	out->base_ = m;
	out->length_ = length;
	return DVAR_OK;
}

void dvar_reader_unmap(dvar_mapping *m)
{
	if (!m)
		return;
	if (m->base_)
		munmap(m->base_, m->length_);
	memset(m, 0, sizeof(*m));
}

/* ---------------------------------------------------------------- private */

const dvar_var_entry *dvar_reader_entry(const dvar_reader *r, size_t i)
{
	/* Unchanged in a delta: the entry where it is saved; patched: its own
	 * (no slices), which digests read through. */
	if (i >= r->num_vars)
		return NULL;
	return holder_of(r, &r->vars[i], NULL, 0);
}

int dvar_reader_is_tf(const dvar_reader *r)
{
	return r->is_tf;
}
