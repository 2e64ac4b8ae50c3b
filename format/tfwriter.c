/*
 * format/tfwriter.c - writes a TensorFlow TensorBundle (PREFIX.index plus
 * PREFIX.data-00000-of-00001) the way TensorFlow's BundleWriter does:
 * tensors are appended to the data file as they stream in, checksummed on
 * the way (masked CRC-32C, no alignment padding), while their entries wait
 * in memory; the commit sorts the keys bytewise, writes them into a LevelDB
 * table behind the header entry, and renames the data file and then the
 * index from their temporary names into place.
 *
 * The bytes follow ../shared/reference/tf-behavior.md §4 (the encoders are
 * in tf.c): §4.2 the table (index.cc's builder has TensorFlow's options,
 * and the one rule LevelDB's lacks, a block ended before any entry of
 * 2 * block_size bytes or more, is applied here), §4.3 the header, §4.4
 * the entries, §4.6 AddSlice's two kinds of entries, §4.7 the atomic
 * writing.
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

/* Bytes gathered before a write to the data file. */
#define WRITE_BUFFER (1u << 20)

/* One key of the bundle: a tensor's entry, or a partitioned tensor's full entry. */
typedef struct {
	char *key;
	size_t klen;
	dvar_tf_entry e;      /* for a full entry: dtype, shape and slices only */
	dvar_slice *dslices;  /* a full entry's slices as dvar slices (e.num_slices) */
	size_t cap_slices;
	int64_t rows_end;     /* of dslices (dvar_slice_overlaps) */
} tf_item;

struct dvar_tf_writer {
	char *prefix;
	char *data_path, *index_path;  /* final names */
	char *data_tmp, *index_tmp;    /* what is written until the commit */
	char *dir;                     /* dirname(prefix), fsynced after the renames */
	char *made_dir;                /* the topmost directory open created, or NULL */
	int sync;                      /* fsync the files (not DVAR_WRITE_NO_FSYNC) */
	dvar_progress_fn progress;
	void *progress_userdata;
	double last_progress;
	int fd;
	uint64_t size;                 /* bytes in the data file, buffered ones included */

	unsigned char *buf;            /* WRITE_BUFFER bytes */
	size_t buf_len;                /* bytes waiting in buf */

	tf_item *items;
	size_t num_items, cap_items;
	uint32_t *table;               /* open addressing: item index + 1, 0 = empty */
	size_t table_cap;

	/* The open tensor (dvar_tf_writer_begin): the entry of items[open_item]
	 * receives offset, size and checksum at the end. */
	dvar_stream stream;
	size_t open_item;              /* the entry receiving the bytes */
	size_t open_name;              /* the item whose key names it (a slice's: the full entry) */
	uint32_t open_crc;

	int broken;
	int committed;
};

/* ---------------------------------------------------------------- keys */

static uint64_t hash_key(const char *k, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
	return h;
}

static tf_item *find_item(const dvar_tf_writer *w, const char *k, size_t n)
{
	if (!w->table_cap)
		return NULL;
	for (size_t i = hash_key(k, n) & (w->table_cap - 1);; i = (i + 1) & (w->table_cap - 1)) {
		if (!w->table[i])
			return NULL;
		tf_item *it = &w->items[w->table[i] - 1];
		if (it->klen == n && memcmp(it->key, k, n) == 0)
			return it;
	}
}

static void table_put(dvar_tf_writer *w, size_t index)
{
	const tf_item *it = &w->items[index];
	size_t i = hash_key(it->key, it->klen) & (w->table_cap - 1);
	while (w->table[i])
		i = (i + 1) & (w->table_cap - 1);
	w->table[i] = (uint32_t)index + 1;
}

/* A new item for key (n bytes, copied); *out points at it until the next new_item. */
static int new_item(dvar_tf_writer *w, const char *k, size_t n, tf_item **out)
{
	if (w->num_items >= UINT32_MAX - 1)
		return dvar_error_set(DVAR_EINVAL, "a bundle holds at most %u keys", UINT32_MAX - 2);
	if ((w->num_items + 1) * 2 > w->table_cap) {
		size_t cap = w->table_cap ? w->table_cap * 2 : 64;
		uint32_t *t = calloc(cap, sizeof(uint32_t));
		if (!t)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		free(w->table);
		w->table = t;
		w->table_cap = cap;
		for (size_t i = 0; i < w->num_items; i++)
			table_put(w, i);
	}
	tf_item *p = dvar_grow(w->items, w->num_items, &w->cap_items, sizeof(*p), 16);
	if (!p)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	w->items = p;
	tf_item *it = &w->items[w->num_items];
	memset(it, 0, sizeof(*it));
	if (!(it->key = malloc(n + 1)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	memcpy(it->key, k, n);
	it->key[n] = '\0';
	it->klen = n;
	table_put(w, w->num_items++);
	*out = it;
	return DVAR_OK;
}

/* Forget the newest item (a slice that failed before any byte was written). */
static void drop_last_item(dvar_tf_writer *w)
{
	tf_item *it = &w->items[w->num_items - 1];
	for (size_t i = 0; i < w->table_cap; i++)
		if (w->table[i] == w->num_items) {
			/* Re-insert the cluster after the hole so that probing still finds it. */
			w->table[i] = 0;
			for (size_t j = (i + 1) & (w->table_cap - 1); w->table[j];
			     j = (j + 1) & (w->table_cap - 1)) {
				uint32_t v = w->table[j];
				w->table[j] = 0;
				table_put(w, v - 1);
			}
			break;
		}
	free(it->key);
	free(it->e.slices);
	free(it->dslices);
	w->num_items--;
}

/* ---------------------------------------------------------------- open */

/*
 * Create dir and its missing parents; *made receives the topmost directory
 * that was missing (malloc'ed), NULL when dir existed.
 */
static int make_dir(const char *dir, char **made)
{
	*made = NULL;
	if (dvar_fs_is_dir(dir))
		return DVAR_OK;
	char *top = strdup(dir);
	if (!top)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	/* Walk up while the parent is missing too. */
	for (;;) {
		char *slash = strrchr(top, '/');
		if (!slash || slash == top)
			break;
		*slash = '\0';
		if (dvar_fs_exists(top)) {
			*slash = '/';
			break;
		}
	}
	int rc = dvar_fs_mkdirs(dir);
	if (rc) {
		free(top);
		return rc;
	}
	*made = top;
	return DVAR_OK;
}

/* Remove made and the directories below it on the way to dir, when empty. */
static void unmake_dir(const char *dir, const char *made)
{
	char *p = strdup(dir);
	if (!p)
		return;
	size_t stop = strlen(made);
	while (strlen(p) >= stop) {
		if (rmdir(p) != 0)
			break;
		char *slash = strrchr(p, '/');
		if (!slash)
			break;
		*slash = '\0';
	}
	free(p);
}

int dvar_tf_writer_open(dvar_tf_writer **out, const char *prefix, const dvar_write_options *opts)
{
	if (!out || !prefix)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_writer_open: NULL argument");
	*out = NULL;
	if (opts && dvar_check_version("dvar_write_options", opts->version, DVAR_WRITE_OPTIONS_VERSION))
		return DVAR_EINVAL;
	size_t n = strlen(prefix);
	if (!n || prefix[n - 1] == '/')
		return dvar_error_set(DVAR_EINVAL, "TensorFlow checkpoint prefix '%s' must name files "
		                      "('dir/model.ckpt'), not %s", prefix, n ? "a directory" : "nothing");
	dvar_tf_writer *w = calloc(1, sizeof(*w));
	int rc = DVAR_OK;
	if (!w)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	w->fd = -1;
	w->sync = !opts || !(opts->flags & DVAR_WRITE_NO_FSYNC);
	if (opts) {
		w->progress = opts->progress;
		w->progress_userdata = opts->progress_userdata;
	}
	if (!(w->prefix = strdup(prefix)) || !(w->index_path = dvar_tf_concat(prefix, ".index")) ||
	    !(w->data_path = dvar_tf_data_path(prefix, 0, 1)) || !(w->dir = dvar_path_parent(prefix)) ||
	    !(w->buf = malloc(WRITE_BUFFER))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	if (dvar_fs_exists(w->index_path)) {
		rc = dvar_error_set(DVAR_EEXISTS, "TensorFlow checkpoint '%s' already exists ('%s')",
		                    prefix, w->index_path);
		goto fail;
	}
	if (dvar_fs_exists(w->data_path)) {
		rc = dvar_error_set(DVAR_EEXISTS, "'%s' already exists (a data file without its index: "
		                    "the remains of a failed save? remove it)", w->data_path);
		goto fail;
	}
	if ((rc = make_dir(w->dir, &w->made_dir)))
		goto fail;
	/* dvar's temporary names, not TensorFlow's PREFIX.*.tempstate<N>: nothing
	 * of TensorFlow reads them, and these name their writer, are swept when
	 * it is gone, and are hidden from PREFIX.data-* globs. */
	dvar_tmp_sweep(w->dir);
	if ((rc = dvar_tmp_name(w->data_path, NULL, &w->data_tmp)) ||
	    (rc = dvar_tmp_name(w->index_path, NULL, &w->index_tmp)))
		goto fail;
	if ((w->fd = open(w->data_tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) < 0) {
		rc = dvar_error_set_errno(DVAR_EIO, errno, "create '%s'", w->data_path);
		goto fail;
	}
	*out = w;
	return DVAR_OK;
fail:
	dvar_tf_writer_free(w);
	return rc;
}

/* ---------------------------------------------------------------- tensors */

static int check_usable(const dvar_tf_writer *w)
{
	if (w->committed)
		return dvar_error_set(DVAR_EINVAL, "TensorFlow checkpoint '%s' is already committed",
		                      w->prefix);
	if (w->broken)
		return dvar_error_set(DVAR_EINVAL, "writer of TensorFlow checkpoint '%s' is unusable "
		                      "after an earlier error", w->prefix);
	if (w->stream.open)
		return dvar_error_set(DVAR_EINVAL, "writer of TensorFlow checkpoint '%s': tensor '%s' is "
		                      "open; dvar_tf_writer_end must come first", w->prefix,
		                      w->items[w->open_name].key);
	return DVAR_OK;
}

/*
 * The TensorSliceProto TensorFlow's Python writes for s: start and length
 * of every dimension, except that a dimension of size 0 is whole (its
 * extents must have positive lengths).
 */
static int tf_slice_of(const dvar_slice *s, const dvar_shape *full, const char *key,
                       dvar_tf_slice *out)
{
	memset(out, 0, sizeof(*out));
	out->rank = s->rank;
	for (int32_t d = 0; d < s->rank; d++) {
		if (full->dims[d] == 0) {
			out->start[d] = 0;
			out->length[d] = -1;
			continue;
		}
		if (s->length[d] == 0) {
			char sl[256];
			dvar_slice_describe(sl, sizeof(sl), s, full);
			return dvar_error_set(DVAR_EINVAL, "tensor '%s': slice %s has length 0 in dimension %d "
			                      "of size %lld; TensorFlow's slices have positive lengths", key,
			                      sl, (int)d, (long long)full->dims[d]);
		}
		out->start[d] = s->start[d];
		out->length[d] = s->length[d];
	}
	return DVAR_OK;
}

/* The slice-free checks of begin: key, dtype, shape, slice inside it. */
static int check_tensor(const char *key, int dtype, const dvar_shape *full, const dvar_slice *slice,
                        dvar_shape *shape, dvar_slice *sl)
{
	int rc;
	if (!*key)
		return dvar_error_set(DVAR_EINVAL, "a TensorFlow checkpoint key must not be empty (\"\" "
		                      "is the header's)");
	if (!dvar_dtype_size(dtype))
		return dvar_error_set(DVAR_EINVAL, "tensor '%s': dtype %d is not a dvar dtype (string "
		                      "tensors go through dvar_tf_writer_add_strings)", key, dtype);
	uint64_t n;
	if ((rc = dvar_shape_init(shape, full->rank, full->dims)) ||
	    (rc = dvar_shape_num_bytes(shape, dtype, &n))) {
		dvar_error_prefix("tensor '%s'", key);
		return dvar_error_restore(DVAR_EINVAL, dvar_error_last()->message);
	}
	if (slice)
		*sl = *slice;
	else
		dvar_slice_full(sl, shape);
	if ((rc = dvar_slice_check(sl, shape))) {
		dvar_error_prefix("tensor '%s'", key);
		return dvar_error_restore(DVAR_EINVAL, dvar_error_last()->message);
	}
	return DVAR_OK;
}

/*
 * The checks AddSlice's CHECKs stand for, before slice sl of the
 * partitioned tensor key is added: key is not a plain entry, and its earlier
 * slices (if any) have the same dtype and full shape and do not overlap sl.
 * *at receives the index of key's full entry, SIZE_MAX when it is new.
 */
static int check_slice(dvar_tf_writer *w, const char *key, size_t klen, int dtype,
                       const dvar_shape *shape, const dvar_slice *sl, size_t *at)
{
	char a[256], b[256];
	tf_item *full = find_item(w, key, klen);
	*at = full ? (size_t)(full - w->items) : SIZE_MAX;
	if (!full)
		return DVAR_OK;
	if (!full->e.num_slices)
		return dvar_error_set(DVAR_EINVAL, "Adding duplicate key: %s (added as a whole tensor "
		                      "before, now a slice of it)", key);
	if (full->e.dtype != dtype || !dvar_shape_equal(&full->e.shape, shape)) {
		dvar_shape_format(&full->e.shape, a, sizeof(a));
		dvar_shape_format(shape, b, sizeof(b));
		return dvar_error_set(DVAR_EINVAL, "tensor '%s': its slices were added as %s %s, now "
		                      "one as %s %s", key, dvar_dtype_name(full->e.dtype), a,
		                      dvar_dtype_name(dtype), b);
	}
	size_t j;
	if (dvar_slice_overlaps(sl, full->dslices, full->e.num_slices, sizeof(*full->dslices),
	                        &full->rows_end, &j)) {
		dvar_slice_describe(a, sizeof(a), sl, shape);
		dvar_slice_describe(b, sizeof(b), &full->dslices[j], shape);
		return dvar_error_set(DVAR_EINVAL, "tensor '%s': slice %s overlaps slice %s added "
		                      "before", key, a, b);
	}
	return DVAR_OK;
}

/* Record slice sl (ts) in key's full entry items[at], created when at is SIZE_MAX. */
static int add_slice(dvar_tf_writer *w, const char *key, size_t klen, int dtype,
                     const dvar_shape *shape, const dvar_slice *sl, const dvar_tf_slice *ts,
                     size_t at)
{
	int rc, created = 0;
	tf_item *it = at == SIZE_MAX ? NULL : &w->items[at];
	if (!it) {
		if ((rc = new_item(w, key, klen, &it)))
			return rc;
		it->e.dtype = dtype;
		it->e.shape = *shape;
		created = 1;
		/* Its first slice overlaps nothing (check_slice had no entry to look
		 * at) but sets its rows_end. */
		size_t j;
		dvar_slice_overlaps(sl, it->dslices, 0, sizeof(*sl), &it->rows_end, &j);
	}
	if (it->e.num_slices == it->cap_slices) {
		size_t cap = it->cap_slices ? it->cap_slices * 2 : 4;
		dvar_tf_slice *p = realloc(it->e.slices, cap * sizeof(*p));
		if (p)
			it->e.slices = p;
		dvar_slice *q = p ? realloc(it->dslices, cap * sizeof(*q)) : NULL;
		if (q)
			it->dslices = q;
		if (!p || !q) {
			if (created)
				drop_last_item(w);
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		}
		it->cap_slices = cap;
	}
	it->e.slices[it->e.num_slices] = *ts;
	it->dslices[it->e.num_slices] = *sl;
	it->e.num_slices++;
	return DVAR_OK;
}

int dvar_tf_writer_begin(dvar_tf_writer *w, const char *key, int dtype, const dvar_shape *full,
                         const dvar_slice *slice)
{
	int rc;
	if (!w || !key || !full)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_writer_begin: NULL argument");
	if ((rc = check_usable(w)))
		return rc;
	dvar_shape shape;
	dvar_slice sl;
	if ((rc = check_tensor(key, dtype, full, slice, &shape, &sl)))
		return rc;
	size_t klen = strlen(key);
	dvar_shape sshape;
	dvar_slice_shape(&sl, &sshape);
	uint64_t bytes = 0;
	dvar_shape_num_bytes(&sshape, dtype, &bytes);

	/* A slice that is the whole tensor is a plain entry (IsFullSlice). */
	int whole = dvar_slice_is_full(&sl, &shape);
	dvar_bytes skey = { 0 };
	size_t at, item;
	tf_item *it;
	if (!whole) {
		dvar_tf_slice ts;
		if ((rc = check_slice(w, key, klen, dtype, &shape, &sl, &at)) ||
		    (rc = tf_slice_of(&sl, &shape, key, &ts)))
			return rc;
		if ((rc = dvar_tf_slice_key_encode(&skey, key, klen, &ts)))
			return dvar_error_prefix("tensor '%s'", key);
		/* Another key could be spelt as this slice's key. */
		if (find_item(w, (const char *)skey.data, skey.len)) {
			free(skey.data);
			return dvar_error_set(DVAR_EINVAL, "Adding duplicate key: the key of a slice of "
			                      "'%s' was added before", key);
		}
		/* The slice's own entry first: undoing add_slice would be harder. */
		if ((rc = new_item(w, (const char *)skey.data, skey.len, &it))) {
			free(skey.data);
			return rc;
		}
		free(skey.data);
		item = w->num_items - 1;
		if ((rc = add_slice(w, key, klen, dtype, &shape, &sl, &ts, at))) {
			drop_last_item(w);
			return rc;
		}
		w->open_name = at == SIZE_MAX ? w->num_items - 1 : at;
	} else {
		if (find_item(w, key, klen))
			return dvar_error_set(DVAR_EINVAL, "Adding duplicate key: %s", key);
		if ((rc = new_item(w, key, klen, &it)))
			return rc;
		item = w->open_name = w->num_items - 1;
	}
	it = &w->items[item];
	it->e.dtype = dtype;
	it->e.shape = sshape;
	it->e.shard_id = 0;
	it->e.offset = (int64_t)w->size;
	dvar_stream_begin(&w->stream, &sl, &shape, bytes, "it");
	w->open_item = item;
	w->open_crc = 0;
	return DVAR_OK;
}

static int flush_buffer(dvar_tf_writer *w)
{
	if (!w->buf_len)
		return DVAR_OK;
	int rc = dvar_fs_pwrite_all(w->fd, w->buf, w->buf_len, w->size - w->buf_len, w->data_path);
	w->buf_len = 0;
	return rc;
}

/* A failure while a tensor was open: only dvar_tf_writer_free is left. */
static int fail_open(dvar_tf_writer *w)
{
	w->broken = 1;
	w->stream.open = 0;
	return dvar_error_prefix("tensor '%s'", w->items[w->open_name].key);
}

/* The bytes of the data file so far, at most six times a second. */
static void report_progress(dvar_tf_writer *w)
{
	double now = dvar_now();
	if (!w->progress || now - w->last_progress < 1.0 / 6)
		return;
	w->last_progress = now;
	w->progress(w->progress_userdata, w->size, 0);
}

/* len bytes at p onto the end of the data file, through the write buffer. */
static int append(dvar_tf_writer *w, const unsigned char *p, size_t len)
{
	while (len) {
		if (!w->buf_len && len >= WRITE_BUFFER) {
			/* Large pieces go straight to the file. */
			int rc = dvar_fs_pwrite_all(w->fd, p, len, w->size, w->data_path);
			if (!rc)
				w->size += len;
			report_progress(w);
			return rc;
		}
		size_t n = WRITE_BUFFER - w->buf_len < len ? WRITE_BUFFER - w->buf_len : len;
		memcpy(w->buf + w->buf_len, p, n);
		w->buf_len += n;
		w->size += n;
		p += n;
		len -= n;
		if (w->buf_len == WRITE_BUFFER) {
			int rc = flush_buffer(w);
			if (rc)
				return rc;
		}
	}
	report_progress(w);
	return DVAR_OK;
}

int dvar_tf_writer_write(dvar_tf_writer *w, const void *data, size_t len)
{
	if (!w || (!data && len))
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_writer_write: NULL argument");
	if (!w->stream.open)
		return dvar_error_set(DVAR_EINVAL, "writer of TensorFlow checkpoint '%s': no tensor is "
		                      "open (dvar_tf_writer_begin)", w->prefix);
	if (dvar_stream_take(&w->stream, len))
		return fail_open(w);
	w->open_crc = dvar_crc32c_extend(w->open_crc, data, len);
	if (append(w, data, len))
		return fail_open(w);
	return DVAR_OK;
}

int dvar_tf_writer_end(dvar_tf_writer *w)
{
	if (!w)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_writer_end: NULL writer");
	if (!w->stream.open)
		return dvar_error_set(DVAR_EINVAL, "writer of TensorFlow checkpoint '%s': no tensor is "
		                      "open (dvar_tf_writer_begin)", w->prefix);
	if (dvar_stream_end(&w->stream))
		return fail_open(w);
	dvar_tf_entry *e = &w->items[w->open_item].e;
	e->size = (int64_t)w->stream.bytes;
	e->crc32c = dvar_tf_crc_mask(w->open_crc);
	return DVAR_OK;
}

int dvar_tf_writer_add(dvar_tf_writer *w, const char *key, int dtype, const dvar_shape *full,
                       const dvar_slice *slice, const void *data)
{
	int rc;
	if (!w || !key || !full)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_writer_add: NULL argument");
	if (!data) {
		/* Only an empty tensor may come without data. */
		dvar_shape shape, sshape;
		dvar_slice sl;
		uint64_t bytes = 0;
		if ((rc = check_tensor(key, dtype, full, slice, &shape, &sl)))
			return rc;
		dvar_slice_shape(&sl, &sshape);
		dvar_shape_num_bytes(&sshape, dtype, &bytes);
		if (bytes)
			return dvar_error_set(DVAR_EINVAL, "tensor '%s': data is NULL", key);
	}
	if ((rc = dvar_tf_writer_begin(w, key, dtype, full, slice)))
		return rc;
	if ((rc = dvar_tf_writer_write(w, data, (size_t)w->stream.bytes)))
		return rc;
	return dvar_tf_writer_end(w);
}

int dvar_tf_writer_add_strings(dvar_tf_writer *w, const char *key, const dvar_shape *shape,
                               const uint64_t *lens, const void *bytes)
{
	int rc;
	if (!w || !key || !shape)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_writer_add_strings: NULL argument");
	if ((rc = check_usable(w)))
		return rc;
	if (!*key)
		return dvar_error_set(DVAR_EINVAL, "a TensorFlow checkpoint key must not be empty (\"\" "
		                      "is the header's)");
	dvar_shape s;
	uint64_t n = 0, total = 0;
	if ((rc = dvar_shape_init(&s, shape->rank, shape->dims)) ||
	    (rc = dvar_shape_num_elements(&s, &n))) {
		dvar_error_prefix("string tensor '%s'", key);
		return dvar_error_restore(DVAR_EINVAL, dvar_error_last()->message);
	}
	if (n && !lens)
		return dvar_error_set(DVAR_EINVAL, "string tensor '%s': lens is NULL", key);
	for (uint64_t i = 0; i < n; i++) {
		if (lens[i] > UINT64_MAX - total)
			return dvar_error_set(DVAR_EINVAL, "string tensor '%s': the lengths overflow", key);
		total += lens[i];
	}
	if (total && !bytes)
		return dvar_error_set(DVAR_EINVAL, "string tensor '%s': bytes is NULL", key);
	size_t klen = strlen(key);
	if (find_item(w, key, klen))
		return dvar_error_set(DVAR_EINVAL, "Adding duplicate key: %s", key);
	/* TensorFlow's WriteStringTensor layout, and its CRC (over the lengths as
	 * fixed-width integers, not as stored): encoded whole in memory. */
	dvar_bytes enc = { 0 };
	uint32_t crc = 0;
	if ((rc = dvar_tf_strings_encode(&enc, n, lens, bytes, &crc))) {
		free(enc.data);
		return dvar_error_prefix("string tensor '%s'", key);
	}
	tf_item *it;
	if ((rc = new_item(w, key, klen, &it))) {
		free(enc.data);
		return rc;
	}
	it->e.dtype = DVAR_TF_DT_STRING;
	it->e.shape = s;
	it->e.offset = (int64_t)w->size;
	it->e.size = (int64_t)enc.len;
	it->e.crc32c = dvar_tf_crc_mask(crc);
	rc = append(w, enc.data, enc.len);
	free(enc.data);
	if (rc) {
		w->broken = 1;
		return dvar_error_prefix("string tensor '%s'", key);
	}
	return DVAR_OK;
}

/* ---------------------------------------------------------------- commit */

typedef struct {
	const char *key;
	size_t klen;
	dvar_bytes val;
} kv;

static int kv_cmp(const void *a, const void *b)
{
	const kv *x = a, *y = b;
	return dvar_key_cmp(x->key, x->klen, y->key, y->klen);
}

/* The index table at path: the header, then every entry in bytewise key order. */
static int write_index(dvar_tf_writer *w, const char *path)
{
	size_t n = w->num_items + 1;
	kv *kvs = calloc(n, sizeof(kv));
	dvar_index_builder *b = NULL;
	int rc;
	if (!kvs)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	dvar_tf_header h = { 0 };
	h.num_shards = 1;
	h.producer = DVAR_TF_BUNDLE_VERSION;
	kvs[0].key = "";
	rc = dvar_tf_header_encode(&kvs[0].val, &h);
	for (size_t i = 0; !rc && i < w->num_items; i++) {
		kvs[i + 1].key = w->items[i].key;
		kvs[i + 1].klen = w->items[i].klen;
		if ((rc = dvar_tf_entry_encode(&kvs[i + 1].val, &w->items[i].e)))
			dvar_error_prefix("entry '%s'", w->items[i].key);
	}
	if (rc)
		goto done;
	qsort(kvs, n, sizeof(kv), kv_cmp);
	if ((rc = dvar_index_builder_open(&b, path)))
		goto done;
	for (size_t i = 0; !rc && i < n; i++) {
		/* TensorFlow's TableBuilder (LevelDB's lacks this): an entry of
		 * twice the block size or more starts a block of its own. */
		if (i > 0 && kvs[i].klen + kvs[i].val.len >= 2 * (size_t)DVAR_INDEX_BLOCK_SIZE &&
		    (rc = dvar_index_builder_flush(b)))
			break;
		rc = dvar_index_builder_add(b, kvs[i].key, kvs[i].klen, kvs[i].val.data, kvs[i].val.len);
	}
	if (!rc)
		rc = dvar_index_builder_finish(b, w->sync);
done:
	dvar_index_builder_free(b);
	for (size_t i = 0; i < n; i++)
		free(kvs[i].val.data);
	free(kvs);
	return rc;
}

static int commit(dvar_tf_writer *w)
{
	int rc;
	if ((rc = flush_buffer(w)))
		return rc;
	if (w->sync && fsync(w->fd) != 0)
		return dvar_error_set_errno(DVAR_EIO, errno, "fsync '%s'", w->data_path);
	if (close(w->fd) != 0) {
		w->fd = -1;
		return dvar_error_set_errno(DVAR_EIO, errno, "close '%s'", w->data_path);
	}
	w->fd = -1;
	/* The index builder fsyncs (when w->sync) and closes its file. */
	if ((rc = write_index(w, w->index_tmp)))
		return rc;
	DVAR_FAULT_POINT("tf-index-written");
	if ((rc = dvar_fs_rename_noreplace(w->data_tmp, w->data_path)))
		return rc;
	DVAR_FAULT_POINT("tf-data-renamed");
	if ((rc = dvar_fs_rename_noreplace(w->index_tmp, w->index_path))) {
		/* The data file is ours (noreplace): take it back. */
		unlink(w->data_path);
		return rc;
	}
	w->committed = 1;
	free(w->made_dir); /* nothing to remove any more */
	w->made_dir = NULL;
	return w->sync ? dvar_fs_fsync_path(w->dir) : DVAR_OK;
}

int dvar_tf_writer_commit(dvar_tf_writer *w)
{
	if (!w)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_writer_commit: NULL writer");
	int rc = check_usable(w);
	if (rc)
		return rc;
	if ((rc = commit(w)) && !w->committed) {
		w->broken = 1;
		dvar_error_prefix("TensorFlow checkpoint '%s' not committed", w->prefix);
	}
	return rc;
}

void dvar_tf_writer_free(dvar_tf_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (!w->committed) {
		/* Keep the caller's error: cleanup is best effort. */
		if (w->data_tmp)
			unlink(w->data_tmp);
		if (w->index_tmp)
			unlink(w->index_tmp);
		if (w->made_dir)
			unmake_dir(w->dir, w->made_dir);
	}
	for (size_t i = 0; i < w->num_items; i++) {
		free(w->items[i].key);
		free(w->items[i].e.slices);
		free(w->items[i].dslices);
	}
	free(w->items);
	free(w->table);
	free(w->buf);
	free(w->prefix);
	free(w->data_path);
	free(w->index_path);
	free(w->data_tmp);
	free(w->index_tmp);
	free(w->dir);
	free(w->made_dir);
	free(w);
}
