/*
 * format/tf.c - a TensorFlow TensorBundle as a whole (format/tf.h;
 * ../shared/reference/tf-behavior.md §4): what its entries' dtypes and
 * masked CRC-32C mean, locating a bundle through the `checkpoint` state file
 * (parsed by state.c), and opening a bundle's index as dvar's in-memory
 * entries. Its messages are decoded by tfproto.c, its slice keys by
 * slicekey.c.
 *
 * Nothing here trusts its input: every entry is checked against the
 * bundle's header and shape before it becomes a dvar slice, and every
 * failure is a status with a message saying what and where.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/tf.h"

/* ---------------------------------------------------------------- checksums */

uint32_t dvar_tf_crc_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + DVAR_TF_MASK_DELTA;
}

uint32_t dvar_tf_crc_unmask(uint32_t masked)
{
	uint32_t rot = masked - DVAR_TF_MASK_DELTA;
	return (rot >> 17) | (rot << 15);
}

/* ---------------------------------------------------------------- dtypes */

const char *dvar_tf_dtype_name(int dtype)
{
	static const char *const names[] = {
		[1] = "float", [2] = "double", [3] = "int32", [4] = "uint8", [5] = "int16",
		[6] = "int8", [7] = "string", [8] = "complex64", [9] = "int64", [10] = "bool",
		[11] = "qint8", [12] = "quint8", [13] = "qint32", [14] = "bfloat16",
		[15] = "qint16", [16] = "quint16", [17] = "uint16", [18] = "complex128",
		[19] = "half", [20] = "resource", [21] = "variant", [22] = "uint32",
		[23] = "uint64", [24] = "float8_e5m2", [25] = "float8_e4m3fn",
		[26] = "float8_e4m3fnuz", [27] = "float8_e4m3b11fnuz", [28] = "float8_e5m2fnuz",
		[29] = "int4", [30] = "uint4",
	};
	if (dtype > 0 && (size_t)dtype < sizeof(names) / sizeof(names[0]))
		return names[dtype];
	return NULL;
}

size_t dvar_tf_dtype_size(int dtype)
{
	size_t s = dvar_dtype_size(dtype);
	if (s)
		return s;
	switch (dtype) {
	case 8: return 8;    /* complex64 */
	case 18: return 16;  /* complex128 */
	case 11: case 12: return 1;   /* qint8, quint8 */
	case 15: case 16: return 2;   /* qint16, quint16 */
	case 13: return 4;   /* qint32 */
	case 24: case 25: case 26: case 27: case 28: case 29: case 30: return 1; /* float8s, int4s */
	default: return 0;
	}
}

/* ---------------------------------------------------------------- locating */

char *dvar_tf_data_path(const char *prefix, uint32_t shard, uint32_t num_shards)
{
	size_t n = strlen(prefix) + 40;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s.data-%05u-of-%05u", prefix, shard, num_shards);
	return p;
}

static int is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *dvar_tf_concat(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 1);
	if (p) {
		memcpy(p, a, la);
		memcpy(p + la, b, lb + 1);
	}
	return p;
}

/* prefix + ".index" is a regular file: 1 / 0 / DVAR_ENOMEM. */
static int has_index(const char *prefix)
{
	char *ix = dvar_tf_concat(prefix, ".index");
	if (!ix)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	int yes = is_file(ix);
	free(ix);
	return yes;
}

/* The TF prefixes in dir (each NAME of a regular file NAME.index), sorted by step. */
static int list_prefixes(const char *dir, char ***out, size_t *n)
{
	char **v = NULL;
	size_t cap = 0;
	int rc = DVAR_OK;
	struct dirent *e;
	*out = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return DVAR_OK;   /* unreadable: nothing to offer */
	while (rc == DVAR_OK && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (e->d_name[0] == '.' || len <= 6 || strcmp(e->d_name + len - 6, ".index") != 0)
			continue;
		char *name = strndup(e->d_name, len - 6), *full = dvar_path_join(dir, e->d_name);
		char **grown = name && full ? dvar_grow(v, *n, &cap, sizeof(char *), 8) : NULL;
		if (!grown) {
			free(name);
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		} else if (!is_file(full)) {
			v = grown;
			free(name);
		} else {
			v = grown;
			v[(*n)++] = name;
		}
		free(full);
	}
	closedir(d);
	if (rc != DVAR_OK) {
		for (size_t k = 0; k < *n; k++)
			free(v[k]);
		free(v);
		*n = 0;
		return rc;
	}
	dvar_names_sort(v, *n);
	*out = v;
	return DVAR_OK;
}

static void free_names(char **v, size_t n)
{
	for (size_t k = 0; k < n; k++)
		free(v[k]);
	free(v);
}

/*
 * A directory without a state file: a SavedModel (DIR/variables/variables),
 * or a directory of one prefix (a SavedModel's variables/); several
 * prefixes are ambiguous, so the error names them.
 */
static int locate_in_dir(const char *dir, char **prefix)
{
	char *saved = dvar_path_join(dir, "variables/variables");
	char **names = NULL;
	size_t n = 0;
	int rc;
	if (!saved)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if ((rc = has_index(saved)) != 0) {
		if (rc > 0)
			*prefix = saved;
		else
			free(saved);
		return rc;
	}
	free(saved);
	if ((rc = list_prefixes(dir, &names, &n)) != DVAR_OK)
		return rc;
	if (n == 1) {
		rc = (*prefix = dvar_path_join(dir, names[0])) ? 1
		     : dvar_error_set(DVAR_ENOMEM, "out of memory");
	} else if (n > 1) {
		char list[DVAR_ERROR_MESSAGE_MAX / 2];
		dvar_names_join(list, sizeof(list), names, n);
		rc = dvar_error_set(DVAR_EINVAL, "'%s' holds %s: give one, e.g. '%s/%s'", dir, list, dir,
		                    names[n - 1]);
	}
	free_names(names, n);
	return rc;
}

int dvar_tf_locate(const char *path, char **prefix)
{
	int rc;
	*prefix = NULL;
	if (!path || !*path)
		return 0;
	if ((rc = has_index(path)) != 0) {
		if (rc < 0)
			return rc;
		if (!(*prefix = strdup(path)))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		return 1;
	}
	/* The index file itself, "model.ckpt-100.index": its prefix. */
	size_t plen = strlen(path);
	if (plen > 6 && strcmp(path + plen - 6, ".index") == 0 && is_file(path)) {
		if (!(*prefix = strndup(path, plen - 6)))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		return 1;
	}
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0;
	char *dindex = dvar_path_join(path, DVAR_INDEX_NAME);
	char *state = dvar_path_join(path, DVAR_POINTER_NAME);
	char *latest = NULL, *cand = NULL, *alt = NULL;
	char **names = NULL;
	size_t num_names = 0;
	dvar_checkpoint_state cs;
	dvar_root_list *dl = NULL;
	rc = 0;
	if (!dindex || !state) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	/* A dvar checkpoint directory: not ours to read. */
	if (dvar_fs_exists(dindex))
		goto done;
	if (!is_file(state)) {
		rc = locate_in_dir(path, prefix);
		goto done;
	}
	if (dvar_checkpoint_state_read(&cs, path)) {
		dvar_error_clear();
		goto done;   /* the dvar reader reports what is wrong with it */
	}
	latest = cs.latest;
	cs.latest = NULL;
	dvar_checkpoint_state_clear(&cs);
	cand = latest[0] == '/' ? strdup(latest) : dvar_path_join(path, latest);
	if (!cand) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = has_index(cand)) != 0) {
		if (rc > 0) {
			*prefix = cand;
			cand = NULL;
		}
		goto done;
	}
	if (dvar_fs_is_dir(cand))
		goto done;   /* a dvar root: its latest is a checkpoint directory */
	/* A state file written with absolute paths, moved since: try its basename here. */
	const char *base = strrchr(latest, '/');
	if (latest[0] == '/' && base && base[1]) {
		if (!(alt = dvar_path_join(path, base + 1))) {
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			goto done;
		}
		if ((rc = has_index(alt)) != 0) {
			if (rc > 0) {
				*prefix = alt;
				alt = NULL;
			}
			goto done;
		}
	}
	/* A dvar root whose pointer is broken: the dvar reader says so in its terms. */
	if (dvar_root_list_open(&dl, path) == DVAR_OK && dvar_root_list_count(dl) > 0)
		goto done;
	dvar_error_clear();
	if ((rc = list_prefixes(path, &names, &num_names)) != DVAR_OK)
		goto done;
	char list[DVAR_ERROR_MESSAGE_MAX / 2] = "no checkpoint";
	if (num_names)
		dvar_names_join(list, sizeof(list), names, num_names);
	rc = dvar_error_set(DVAR_ENOTFOUND, "'%s': its latest checkpoint '%s' does not exist: the "
	                    "checkpoint state file names it, but there is neither a TensorFlow checkpoint "
	                    "('%s.index') nor a dvar checkpoint directory; the directory holds %s", path,
	                    latest, cand, list);
done:
	dvar_root_list_free(dl);
	free_names(names, num_names);
	free(dindex);
	free(state);
	free(latest);
	free(cand);
	free(alt);
	return rc;
}

/* ---------------------------------------------------------------- opening a bundle */

typedef struct {
	unsigned char *key;   /* the slice key as stored */
	size_t klen;
	dvar_tf_entry e;
	int used;
} tf_pending;

typedef struct {
	char *name;
	dvar_tf_entry e;
} tf_plain;

typedef struct {
	const char *index_path;
	int have_header;
	dvar_tf_header h;
	tf_pending *slices;
	size_t num_slices, cap_slices;
	tf_plain *vars;
	size_t num_vars, cap_vars;
} tf_scan;

static int scan_visit(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
	tf_scan *st = ud;
	const unsigned char *k = key;
	char shown[160];
	int rc;
	if (!st->have_header) {
		if (klen != 0)
			return dvar_error_set(DVAR_ECORRUPT, "Unable to read file (%s). Perhaps the file is corrupt "
			                      "or was produced by a newer version of TensorFlow with format "
			                      "changes (failed to seek to header entry)", st->index_path);
		if ((rc = dvar_tf_header_decode(&st->h, val, vlen)))
			return dvar_error_set(rc, "Unable to read file (%s). Perhaps the file is corrupt or was "
			                      "produced by a newer version of TensorFlow with format changes "
			                      "(unable to parse header): %s", st->index_path,
			                      dvar_error_last()->message);
		st->have_header = 1;
		return DVAR_OK;
	}
	dvar_tf_key_printable(k, klen, shown, sizeof(shown));
	if (klen && k[0] == 0) {
		char *full;
		size_t flen;
		dvar_tf_slice sl;
		if ((rc = dvar_tf_slice_key_decode(key, klen, &full, &flen, &sl)) < 0)
			return rc;
		free(full);
		tf_pending *p = dvar_grow(st->slices, st->num_slices, &st->cap_slices, sizeof(*p), 16);
		if (!p)
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		st->slices = p;
		tf_pending *ps = &st->slices[st->num_slices];
		memset(ps, 0, sizeof(*ps));
		if (!(ps->key = malloc(klen)))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		memcpy(ps->key, key, klen);
		ps->klen = klen;
		if ((rc = dvar_tf_entry_decode(&ps->e, val, vlen, shown))) {
			free(ps->key);
			return rc;
		}
		st->num_slices++;
		if (ps->e.num_slices)
			return dvar_error_set(DVAR_ECORRUPT, "index entry '%s': a slice's data entry lists "
			                      "slices itself", shown);
		return DVAR_OK;
	}
	if (memchr(key, 0, klen))
		return dvar_error_set(DVAR_ENOTSUPP, "index key '%s' holds a NUL byte; dvar's variable "
		                      "names cannot", shown);
	if (klen > DVAR_MAX_NAME)
		return dvar_error_set(DVAR_ENOTSUPP, "index key '%s' is %zu bytes long; dvar's variable "
		                      "names are at most %d", shown, klen, DVAR_MAX_NAME);
	tf_plain *p = dvar_grow(st->vars, st->num_vars, &st->cap_vars, sizeof(*p), 16);
	if (!p)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	st->vars = p;
	tf_plain *pv = &st->vars[st->num_vars];
	memset(pv, 0, sizeof(*pv));
	if (!(pv->name = strndup(key, klen)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if ((rc = dvar_tf_entry_decode(&pv->e, val, vlen, pv->name))) {
		free(pv->name);
		return rc;
	}
	st->num_vars++;
	return DVAR_OK;
}

static int pending_cmp(const void *a, const void *b)
{
	const tf_pending *x = a, *y = b;
	return dvar_key_cmp(x->key, x->klen, y->key, y->klen);
}

/* Check a data entry (dtype, size, shard) that is to be read as slice `sl`. */
static int check_data(const dvar_tf_entry *e, int dtype, const dvar_shape *shape, int32_t num_shards,
                      const char *what)
{
	uint64_t n;
	if (dvar_shape_num_elements(shape, &n))
		return dvar_error_set(DVAR_ECORRUPT, "index entry '%s': %s", what, dvar_error_last()->message);
	if (e->shard_id >= num_shards)
		return dvar_error_set(DVAR_ECORRUPT, "index entry '%s' lies in shard %d of a bundle of %d",
		                      what, e->shard_id, num_shards);
	size_t es = dvar_tf_dtype_size(dtype);
	if (es) {
		if (n > (uint64_t)INT64_MAX / es || (uint64_t)e->size != n * es)
			return dvar_error_set(DVAR_ECORRUPT, "Invalid size in bundle entry: key %s; stored size "
			                      "%lld; expected size %llu", what, (long long)e->size,
			                      n > (uint64_t)INT64_MAX / es ? 0ULL : (unsigned long long)(n * es));
	} else if (dtype == DVAR_TF_DT_STRING && ((uint64_t)e->size < n || (uint64_t)e->size - n < 4)) {
		return dvar_error_set(DVAR_ECORRUPT, "Invalid size in bundle entry: key %s; stored size %lld; "
		                      "a string tensor of %llu elements takes at least %llu bytes", what,
		                      (long long)e->size, (unsigned long long)n, (unsigned long long)n + 4);
	}
	return DVAR_OK;
}

static int fill_slice(dvar_slice_entry *s, const dvar_slice *sl, const dvar_tf_entry *e)
{
	memset(s, 0, sizeof(*s));
	s->slice = *sl;
	s->file = (uint32_t)e->shard_id;
	s->raw_bytes = (uint64_t)e->size;
	s->chunk_size = e->size ? (uint64_t)e->size : 1;
	if (!e->size)
		return DVAR_OK;   /* nothing stored, nothing to read */
	if (!(s->chunks = calloc(1, sizeof(dvar_chunk))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	s->num_chunks = 1;
	s->chunks[0].offset = (uint64_t)e->offset;
	s->chunks[0].stored = (uint64_t)e->size;
	s->chunks[0].crc = dvar_tf_crc_unmask(e->crc32c);
	s->chunks[0].codec = DVAR_CODEC_WHOLE;
	return DVAR_OK;
}

static int build_var(tf_scan *st, tf_plain *pv, dvar_var_entry *v)
{
	const dvar_tf_entry *e = &pv->e;
	int rc;
	memset(v, 0, sizeof(*v));
	v->name = pv->name;
	pv->name = NULL;
	v->dtype = e->dtype;
	v->shape = e->shape;
	uint64_t n;
	if (dvar_shape_num_elements(&v->shape, &n))
		return dvar_error_set(DVAR_ECORRUPT, "index entry '%s': %s", v->name, dvar_error_last()->message);
	if (!e->num_slices) {
		dvar_slice full;
		dvar_slice_full(&full, &v->shape);
		if ((rc = check_data(e, v->dtype, &v->shape, st->h.num_shards, v->name)))
			return rc;
		if (!(v->slices = calloc(1, sizeof(dvar_slice_entry))))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		v->num_slices = 1;
		if ((rc = fill_slice(&v->slices[0], &full, e)))
			return rc;
		v->raw_bytes = v->stored_bytes = (uint64_t)e->size;
		return DVAR_OK;
	}
	/* A partitioned tensor: every listed slice has its data entry under its slice key. */
	if (!(v->slices = calloc(e->num_slices, sizeof(dvar_slice_entry))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	dvar_bytes key = { 0 };
	int64_t rows_end = 0;
	rc = DVAR_OK;
	for (size_t j = 0; j < e->num_slices && !rc; j++) {
		char what[DVAR_MAX_NAME + 300], sl[256];
		dvar_slice s;
		snprintf(what, sizeof(what), "index entry '%s' slice #%zu", v->name, j);
		if ((rc = dvar_tf_slice_resolve(&e->slices[j], &v->shape, &s, what)))
			break;
		dvar_slice_format(&s, &v->shape, sl, sizeof(sl));
		snprintf(what, sizeof(what), "%s (slice %s)", v->name, *sl ? sl : "-");
		key.len = 0;
		if ((rc = dvar_tf_slice_key_encode(&key, v->name, strlen(v->name), &e->slices[j])))
			break;
		tf_pending probe = { key.data, key.len, { 0 }, 0 };
		tf_pending *ps = st->num_slices ? bsearch(&probe, st->slices, st->num_slices,
		                                          sizeof(tf_pending), pending_cmp) : NULL;
		if (!ps) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry '%s' lists slice %s, whose data entry is "
			                    "missing", v->name, *sl ? sl : "-");
			break;
		}
		if (ps->used) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry '%s' lists slice %s twice", v->name,
			                    *sl ? sl : "-");
			break;
		}
		ps->used = 1;
		dvar_shape want;
		dvar_slice_shape(&s, &want);
		if (ps->e.dtype != v->dtype || !dvar_shape_equal(&ps->e.shape, &want)) {
			char a[128], b[128];
			dvar_shape_format(&ps->e.shape, a, sizeof(a));
			dvar_shape_format(&want, b, sizeof(b));
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry '%s': its data entry has dtype %d shape %s, "
			                    "the slice needs dtype %d shape %s", what, ps->e.dtype, a,
			                    v->dtype, b);
			break;
		}
		if ((rc = check_data(&ps->e, v->dtype, &want, st->h.num_shards, what)))
			break;
		size_t k;
		if (dvar_slice_overlaps(&s, v->slices, j, sizeof(*v->slices), &rows_end, &k)) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry '%s': slices #%zu and #%zu overlap",
			                    v->name, k, j);
			break;
		}
		if (!(rc = fill_slice(&v->slices[j], &s, &ps->e))) {
			v->num_slices = j + 1;
			v->raw_bytes += (uint64_t)ps->e.size;
		}
	}
	free(key.data);
	v->stored_bytes = v->raw_bytes;
	return rc;
}

int dvar_tf_open_index(const char *prefix, dvar_header *header, dvar_var_entry **vars,
                       size_t *num_vars)
{
	tf_scan st;
	int rc;
	memset(&st, 0, sizeof(st));
	memset(header, 0, sizeof(*header));
	*vars = NULL;
	*num_vars = 0;
	char *index = dvar_tf_concat(prefix, ".index");
	if (!index)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	st.index_path = index;
	dvar_var_entry *out = NULL;
	size_t nout = 0;
	if ((rc = dvar_index_scan(index, scan_visit, &st)))
		goto done;
	if (!st.have_header) {
		rc = dvar_error_set(DVAR_ECORRUPT, "Unable to read file (%s). Perhaps the file is corrupt or "
		                    "was produced by a newer version of TensorFlow with format changes "
		                    "(failed to seek to header entry)", index);
		goto done;
	}
	if ((rc = dvar_tf_header_check(&st.h, index)))
		goto done;
	/* The table is sorted bytewise: slice keys already are; keep the check cheap and sure. */
	for (size_t i = 1; i < st.num_slices; i++)
		if (pending_cmp(&st.slices[i - 1], &st.slices[i]) >= 0) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index '%s': keys out of order", index);
			goto done;
		}
	if (st.num_vars && !(out = calloc(st.num_vars, sizeof(dvar_var_entry)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < st.num_vars && !rc; i++) {
		rc = build_var(&st, &st.vars[i], &out[i]);
		nout = i + 1;
	}
	if (rc)
		goto done;
	header->num_files = (uint32_t)st.h.num_shards;
	if (!(header->file_sizes = calloc(header->num_files, sizeof(uint64_t)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	header->num_vars = st.num_vars;
	*vars = out;
	*num_vars = nout;
	out = NULL;
done:
	for (size_t i = 0; out && i < nout; i++)
		dvar_var_entry_clear(&out[i]);
	free(out);
	for (size_t i = 0; i < st.num_slices; i++) {
		free(st.slices[i].key);
		dvar_tf_entry_clear(&st.slices[i].e);
	}
	free(st.slices);
	for (size_t i = 0; i < st.num_vars; i++) {
		free(st.vars[i].name);
		dvar_tf_entry_clear(&st.vars[i].e);
	}
	free(st.vars);
	dvar_tf_header_clear(&st.h);
	free(index);
	return rc;
}
