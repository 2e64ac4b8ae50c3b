/*
 * format/entry.c - encoding and decoding of the index's keys and values
 * (header, variable and slice entries) with LevelDB-style varints. Decoders
 * trust nothing: every count is bounded by the bytes left before anything
 * is allocated, so a corrupt index gives DVAR_ECORRUPT, never a crash.
 * Also the part entries that the processes writing one checkpoint together
 * hand to their chief, which get the same distrust.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"

/* ---------------------------------------------------------------- writing */

int dvar_bytes_reserve(dvar_bytes *b, size_t extra)
{
	if (b->cap - b->len >= extra)
		return DVAR_OK;
	size_t cap = b->cap ? b->cap : 64;
	while (cap - b->len < extra)
		cap *= 2;
	unsigned char *p = realloc(b->data, cap);
	if (!p)
		return dvar_error_set(DVAR_ENOMEM, "out of memory (%zu bytes)", cap);
	b->data = p;
	b->cap = cap;
	return DVAR_OK;
}

int dvar_bytes_put(dvar_bytes *b, const void *p, size_t n)
{
	int rc = dvar_bytes_reserve(b, n);
	if (rc == DVAR_OK && n) {
		memcpy(b->data + b->len, p, n);
		b->len += n;
	}
	return rc;
}

int dvar_bytes_put_varint(dvar_bytes *b, uint64_t v)
{
	unsigned char buf[10];
	size_t n = 0;
	while (v >= 0x80) {
		buf[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	buf[n++] = (unsigned char)v;
	return dvar_bytes_put(b, buf, n);
}

int dvar_bytes_put_u32(dvar_bytes *b, uint32_t v)
{
	unsigned char buf[4] = { (unsigned char)v, (unsigned char)(v >> 8),
	                         (unsigned char)(v >> 16), (unsigned char)(v >> 24) };
	return dvar_bytes_put(b, buf, 4);
}

int dvar_key_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
	size_t n = alen < blen ? alen : blen;
	int c = n ? memcmp(a, b, n) : 0; /* the header's key "" may have no bytes at all */
	return c ? c : (alen > blen) - (alen < blen);
}

int dvar_key_var(dvar_bytes *out, const char *name)
{
	int rc = dvar_bytes_put(out, "v", 1);
	return rc ? rc : dvar_bytes_put(out, name, strlen(name));
}

static int key_numbered(dvar_bytes *out, const char *prefix, const char *name, uint32_t j)
{
	/* Big-endian so that a variable's entries sort in the order they were saved. */
	unsigned char be[5] = { 0, (unsigned char)(j >> 24), (unsigned char)(j >> 16),
	                        (unsigned char)(j >> 8), (unsigned char)j };
	int rc;
	if ((rc = dvar_bytes_put(out, prefix, 1)) || (rc = dvar_bytes_put(out, name, strlen(name))))
		return rc;
	return dvar_bytes_put(out, be, sizeof(be));
}

int dvar_key_slice(dvar_bytes *out, const char *name, uint32_t j)
{
	return key_numbered(out, "s", name, j);
}

int dvar_key_piece(dvar_bytes *out, const char *name, uint32_t j)
{
	return key_numbered(out, "p", name, j);
}

int dvar_header_encode(dvar_bytes *out, const dvar_header *h)
{
	int rc = dvar_bytes_put(out, DVAR_MAGIC, 4);
	if (!rc) rc = dvar_bytes_put_u32(out, h->version);
	if (!rc) rc = dvar_bytes_put_u32(out, h->min_reader);
	if (!rc) rc = dvar_bytes_put_varint(out, h->num_files);
	for (uint32_t i = 0; !rc && i < h->num_files; i++)
		rc = dvar_bytes_put_varint(out, h->file_sizes[i]);
	if (!rc) rc = dvar_bytes_put_varint(out, h->block_size);
	if (!rc) rc = dvar_bytes_put_varint(out, h->num_vars);
	if (!rc && h->version >= DVAR_FORMAT_DELTA) {
		rc = dvar_bytes_put_varint(out, h->chain_len);
		for (size_t i = 0; !rc && i < h->chain_len; i++) {
			size_t nl = strlen(h->chain[i].name);
			rc = dvar_bytes_put_varint(out, nl);
			if (!rc) rc = dvar_bytes_put(out, h->chain[i].name, nl);
			if (!rc) rc = dvar_bytes_put_u32(out, h->chain[i].index_crc);
		}
	}
	return rc;
}

int dvar_var_encode(dvar_bytes *out, const dvar_var_entry *v, int deltas)
{
	int rc = dvar_bytes_put_varint(out, (uint64_t)v->dtype);
	if (!rc) rc = dvar_bytes_put_varint(out, (uint64_t)v->shape.rank);
	for (int d = 0; !rc && d < v->shape.rank; d++)
		rc = dvar_bytes_put_varint(out, (uint64_t)v->shape.dims[d]);
	if (!rc) rc = dvar_bytes_put_varint(out, v->num_slices);
	if (!rc) rc = dvar_bytes_put_varint(out, v->raw_bytes);
	if (!rc) rc = dvar_bytes_put_varint(out, v->stored_bytes);
	if (!rc) rc = dvar_bytes_put_varint(out, v->num_attrs);
	for (size_t i = 0; !rc && i < v->num_attrs; i++) {
		size_t kl = strlen(v->attrs[i].key), vl = strlen(v->attrs[i].value);
		rc = dvar_bytes_put_varint(out, kl);
		if (!rc) rc = dvar_bytes_put(out, v->attrs[i].key, kl);
		if (!rc) rc = dvar_bytes_put_varint(out, vl);
		if (!rc) rc = dvar_bytes_put(out, v->attrs[i].value, vl);
	}
	if (!rc && deltas) {
		rc = dvar_bytes_put_varint(out, v->delta);
		if (!rc) rc = dvar_bytes_put_varint(out, v->num_pieces);
	}
	return rc;
}

int dvar_slice_entry_encode(dvar_bytes *out, const dvar_slice_entry *s)
{
	int rc = dvar_bytes_put_varint(out, (uint64_t)s->slice.rank);
	for (int d = 0; !rc && d < s->slice.rank; d++) {
		rc = dvar_bytes_put_varint(out, (uint64_t)s->slice.start[d]);
		if (!rc) rc = dvar_bytes_put_varint(out, (uint64_t)s->slice.length[d]);
	}
	if (!rc) rc = dvar_bytes_put_varint(out, s->file);
	if (!rc) rc = dvar_bytes_put_varint(out, s->raw_bytes);
	if (!rc) rc = dvar_bytes_put_varint(out, s->chunk_size);
	if (!rc) rc = dvar_bytes_put_varint(out, s->num_chunks);
	for (size_t i = 0; !rc && i < s->num_chunks; i++) {
		const dvar_chunk *c = &s->chunks[i];
		rc = dvar_bytes_put_varint(out, c->offset);
		if (!rc) rc = dvar_bytes_put_varint(out, c->stored);
		if (!rc) rc = dvar_bytes_put(out, &c->codec, 1);
		if (!rc) rc = dvar_bytes_put_u32(out, c->crc);
	}
	for (size_t i = 0; !rc && i < s->num_block_crcs; i++)
		rc = dvar_bytes_put_u32(out, s->block_crcs[i]);
	return rc;
}

/* A length-prefixed piece of bytes: varint length, bytes. */
static int put_sized(dvar_bytes *out, const dvar_bytes *bytes)
{
	int rc = dvar_bytes_put_varint(out, bytes->len);
	return rc ? rc : dvar_bytes_put(out, bytes->data, bytes->len);
}

int dvar_piece_encode(dvar_bytes *out, const dvar_piece *pc)
{
	dvar_bytes e = { 0 };
	int rc = dvar_bytes_put_varint(out, (uint64_t)pc->first_row);
	if (!rc) rc = dvar_bytes_put_varint(out, (uint64_t)pc->last_row);
	if (!rc) rc = dvar_bytes_put_varint(out, pc->num_rows);
	if (!rc) rc = dvar_slice_entry_encode(&e, &pc->ids);
	if (!rc) rc = put_sized(out, &e);
	e.len = 0;
	if (!rc) rc = dvar_slice_entry_encode(&e, &pc->rows);
	if (!rc) rc = put_sized(out, &e);
	free(e.data);
	return rc;
}

/* ---------------------------------------------------------------- reading */

typedef struct {
	const unsigned char *p, *end;
	const char *what;
} reader;

static int truncated(const reader *r)
{
	return dvar_error_set(DVAR_ECORRUPT, "index entry %s is truncated or malformed", r->what);
}

static int get_varint(reader *r, uint64_t *out)
{
	uint64_t v = 0;
	*out = 0;
	for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
		unsigned char b = *r->p++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return DVAR_OK;
		}
	}
	return truncated(r);
}

/* A varint that must fit in [0, max]. */
static int get_bounded(reader *r, uint64_t max, uint64_t *out, const char *field)
{
	int rc = get_varint(r, out);
	if (rc == DVAR_OK && *out > max)
		return dvar_error_set(DVAR_ECORRUPT, "index entry %s: %s %llu is out of range",
		                      r->what, field, (unsigned long long)*out);
	return rc;
}

/* A length of bytes that follow: at most what is left after the varint itself. */
static int get_length(reader *r, uint64_t *out, const char *field)
{
	int rc = get_varint(r, out);
	if (rc == DVAR_OK && *out > (uint64_t)(r->end - r->p))
		return dvar_error_set(DVAR_ECORRUPT, "index entry %s: %s %llu is out of range (past its end)",
		                      r->what, field, (unsigned long long)*out);
	return rc;
}

static int get_u32(reader *r, uint32_t *out)
{
	if (r->end - r->p < 4)
		return truncated(r);
	*out = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
	       (uint32_t)r->p[3] << 24;
	r->p += 4;
	return DVAR_OK;
}

static int finished(const reader *r)
{
	if (r->p != r->end)
		return dvar_error_set(DVAR_ECORRUPT, "index entry %s has %zu unexpected trailing bytes",
		                      r->what, (size_t)(r->end - r->p));
	return DVAR_OK;
}

/* Version 3's chain: a delta's links, each a checkpoint name of the same
 * directory (what dvar_root checks of names) and its index's CRC-32C. */
static int decode_chain(reader *r, dvar_header *out)
{
	uint64_t n, len;
	int rc;
	if ((rc = get_bounded(r, DVAR_MAX_CHAIN, &n, "chain length")))
		return rc;
	if (n == 0 && out->version == DVAR_FORMAT_DELTA)
		return dvar_error_set(DVAR_ECORRUPT, "index header: a version 3 checkpoint (a delta) "
		                      "with no base in its chain");
	/* Every link takes at least 6 bytes: bound the count before allocating. */
	if (n > (uint64_t)(r->end - r->p) / 6)
		return truncated(r);
	if (n && !(out->chain = calloc((size_t)n, sizeof(dvar_link))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (uint64_t i = 0; i < n; i++) {
		if ((rc = get_length(r, &len, "link name length")))
			return rc;
		if (len == 0 || len > 255 || memchr(r->p, 0, (size_t)len) || memchr(r->p, '/', (size_t)len) ||
		    (len <= 2 && r->p[0] == '.' && (len == 1 || r->p[1] == '.')))
			return dvar_error_set(DVAR_ECORRUPT, "index header: link #%llu of the chain has a "
			                      "bad name", (unsigned long long)i);
		if (!(out->chain[i].name = strndup((const char *)r->p, (size_t)len)))
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		out->chain_len = (size_t)i + 1;
		r->p += len;
		if ((rc = get_u32(r, &out->chain[i].index_crc)))
			return rc;
	}
	return DVAR_OK;
}

int dvar_header_decode(dvar_header *out, const void *p, size_t n)
{
	reader r = { p, (const unsigned char *)p + n, "header" };
	uint64_t v;
	int rc;
	memset(out, 0, sizeof(*out));
	if (n < 12 || memcmp(p, DVAR_MAGIC, 4) != 0)
		return dvar_error_set(DVAR_ECORRUPT, "the index header has no dvar magic: not a dvar checkpoint");
	r.p += 4;
	get_u32(&r, &out->version);
	get_u32(&r, &out->min_reader);
	if (out->min_reader > DVAR_FORMAT_VERSION)
		return dvar_error_set(DVAR_EVERSION,
		                      "checkpoint format version %u needs a reader of version %u or newer; "
		                      "this dvar reads version %u", out->version, out->min_reader,
		                      DVAR_FORMAT_VERSION);
	if ((rc = get_bounded(&r, UINT32_MAX, &v, "data file count")))
		return rc;
	if (v == 0 || v > (uint64_t)(r.end - r.p))
		return dvar_error_set(DVAR_ECORRUPT, "index header: bad data file count %llu",
		                      (unsigned long long)v);
	out->num_files = (uint32_t)v;
	if (!(out->file_sizes = calloc(out->num_files, sizeof(uint64_t))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < out->num_files; i++)
		if ((rc = get_bounded(&r, INT64_MAX, &out->file_sizes[i], "data file size")))
			goto fail;
	if ((rc = get_bounded(&r, UINT32_MAX, &v, "block size")))
		goto fail;
	out->block_size = (uint32_t)v;
	if (out->block_size != DVAR_BLOCK_SIZE) {
		rc = dvar_error_set(DVAR_ECORRUPT, "index header: checksum block size %u, expected %u",
		                    out->block_size, DVAR_BLOCK_SIZE);
		goto fail;
	}
	if ((rc = get_varint(&r, &out->num_vars)))
		goto fail;
	if (out->version >= DVAR_FORMAT_DELTA && (rc = decode_chain(&r, out)))
		goto fail;
	/* A newer writer may append fields its older readers can skip. */
	if (out->version <= DVAR_FORMAT_VERSION && (rc = finished(&r)))
		goto fail;
	return DVAR_OK;
fail:
	dvar_header_clear(out);
	return rc;
}

int dvar_var_decode(dvar_var_entry *out, const char *name, const void *p, size_t n, int deltas)
{
	char what[DVAR_MAX_NAME + 32];
	snprintf(what, sizeof(what), "of variable '%s'", name);
	reader r = { p, (const unsigned char *)p + n, what };
	uint64_t v, rank, attrs;
	int rc;
	memset(out, 0, sizeof(*out));
	if ((rc = get_bounded(&r, INT32_MAX, &v, "dtype")))
		return rc;
	out->dtype = (int)v;
	if (!dvar_dtype_size(out->dtype))
		return dvar_error_set(DVAR_ECORRUPT, "index entry %s: unknown dtype %d", what, out->dtype);
	if ((rc = get_bounded(&r, DVAR_MAX_RANK, &rank, "rank")))
		return rc;
	out->shape.rank = (int32_t)rank;
	for (uint64_t d = 0; d < rank; d++) {
		if ((rc = get_bounded(&r, INT64_MAX, &v, "dimension")))
			return rc;
		out->shape.dims[d] = (int64_t)v;
	}
	if ((rc = get_bounded(&r, UINT32_MAX, &v, "slice count")))
		return rc;
	out->num_slices = (size_t)v;
	if ((rc = get_varint(&r, &out->raw_bytes)) || (rc = get_varint(&r, &out->stored_bytes)))
		return rc;
	if ((rc = get_bounded(&r, DVAR_ATTRS_MAX, &attrs, "attribute count")))
		return rc;
	if (attrs && !(out->attrs = calloc((size_t)attrs, sizeof(dvar_attr))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (uint64_t i = 0; i < attrs; i++) {
		dvar_attr *a = &out->attrs[i];
		uint64_t kl, vl;
		const unsigned char *k;
		if ((rc = get_length(&r, &kl, "attribute key length")))
			goto fail;
		k = r.p;
		r.p += kl;
		if ((rc = get_length(&r, &vl, "attribute value length")))
			goto fail;
		if (dvar_attr_check((const char *)k, (size_t)kl, (const char *)r.p, (size_t)vl)) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry %s: attribute #%llu: %s", what,
			                    (unsigned long long)i, dvar_error_last()->message);
			goto fail;
		}
		if (!(a->key = strndup((const char *)k, (size_t)kl)) ||
		    !(a->value = strndup((const char *)r.p, (size_t)vl))) {
			out->num_attrs = (size_t)i + 1;
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			goto fail;
		}
		r.p += vl;
		out->num_attrs = (size_t)i + 1;
		/* Sorted and unique, so that equal attribute sets encode the same. */
		if (i && strcmp(out->attrs[i - 1].key, a->key) >= 0) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry %s: attribute keys are not in "
			                    "increasing order ('%s' after '%s')", what, a->key,
			                    out->attrs[i - 1].key);
			goto fail;
		}
	}
	if (deltas) {
		if ((rc = get_bounded(&r, DVAR_DELTA_ROWS, &v, "delta kind")))
			goto fail;
		out->delta = (uint32_t)v;
		if ((rc = get_bounded(&r, UINT32_MAX, &v, "piece count")))
			goto fail;
		out->num_pieces = (size_t)v;
	}
	if ((rc = finished(&r)))
		goto fail;
	if (!(out->name = strdup(name))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	return DVAR_OK;
fail:
	dvar_var_entry_clear(out);
	return rc;
}

/* ---------------------------------------------------------------- attributes */

int dvar_attr_check(const char *key, size_t klen, const char *value, size_t vlen)
{
	if (klen == 0 || klen > DVAR_ATTR_KEY_MAX || memchr(key, 0, klen))
		return dvar_error_set(DVAR_EINVAL, "attribute key must be 1 to %d bytes without NUL, "
		                      "got %zu bytes", DVAR_ATTR_KEY_MAX, klen);
	if (vlen > DVAR_ATTR_VALUE_MAX || (vlen && memchr(value, 0, vlen)))
		return dvar_error_set(DVAR_EINVAL, "value of attribute '%.*s' must be 0 to %d bytes "
		                      "without NUL, got %zu bytes", (int)klen, key, DVAR_ATTR_VALUE_MAX, vlen);
	return DVAR_OK;
}

int dvar_var_set_attr(dvar_var_entry *v, const char *key, const char *value)
{
	int rc = dvar_attr_check(key, strlen(key), value, strlen(value));
	if (rc)
		return rc;
	size_t i = 0;
	while (i < v->num_attrs && strcmp(v->attrs[i].key, key) < 0)
		i++;
	char *val = strdup(value);
	if (!val)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	if (i < v->num_attrs && strcmp(v->attrs[i].key, key) == 0) {
		free(v->attrs[i].value);
		v->attrs[i].value = val;
		return DVAR_OK;
	}
	if (v->num_attrs == DVAR_ATTRS_MAX) {
		free(val);
		return dvar_error_set(DVAR_EINVAL, "variable '%s' has %d attributes already, the most "
		                      "allowed", v->name, DVAR_ATTRS_MAX);
	}
	char *k = strdup(key);
	dvar_attr *grown = k ? realloc(v->attrs, (v->num_attrs + 1) * sizeof(dvar_attr)) : NULL;
	if (!grown) {
		free(k);
		free(val);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	v->attrs = grown;
	memmove(&v->attrs[i + 1], &v->attrs[i], (v->num_attrs - i) * sizeof(dvar_attr));
	v->attrs[i].key = k;
	v->attrs[i].value = val;
	v->num_attrs++;
	return DVAR_OK;
}

int dvar_attrs_equal(const dvar_var_entry *a, const dvar_var_entry *b)
{
	if (a->num_attrs != b->num_attrs)
		return 0;
	for (size_t i = 0; i < a->num_attrs; i++)
		if (strcmp(a->attrs[i].key, b->attrs[i].key) || strcmp(a->attrs[i].value, b->attrs[i].value))
			return 0;
	return 1;
}

uint64_t dvar_chunk_raw_len(const dvar_slice_entry *s, size_t i)
{
	uint64_t start = (uint64_t)i * s->chunk_size;
	uint64_t left = s->raw_bytes - start;
	return left < s->chunk_size ? left : s->chunk_size;
}

uint32_t dvar_chunk_num_blocks(const dvar_slice_entry *s, size_t i)
{
	return (uint32_t)((dvar_chunk_raw_len(s, i) + DVAR_BLOCK_SIZE - 1) / DVAR_BLOCK_SIZE);
}

int dvar_slice_entry_decode(dvar_slice_entry *out, const void *p, size_t n, const char *what)
{
	reader r = { p, (const unsigned char *)p + n, what };
	uint64_t v, rank;
	int rc;
	memset(out, 0, sizeof(*out));
	if ((rc = get_bounded(&r, DVAR_MAX_RANK, &rank, "rank")))
		return rc;
	out->slice.rank = (int32_t)rank;
	for (uint64_t d = 0; d < rank; d++) {
		if ((rc = get_bounded(&r, INT64_MAX, &v, "slice start")))
			return rc;
		out->slice.start[d] = (int64_t)v;
		if ((rc = get_bounded(&r, INT64_MAX, &v, "slice length")))
			return rc;
		out->slice.length[d] = (int64_t)v;
	}
	if ((rc = get_bounded(&r, UINT32_MAX, &v, "data file")))
		return rc;
	out->file = (uint32_t)v;
	if ((rc = get_bounded(&r, INT64_MAX, &out->raw_bytes, "byte count")) ||
	    (rc = get_bounded(&r, DVAR_MAX_CHUNK, &out->chunk_size, "chunk size")) ||
	    (rc = get_varint(&r, &v)))
		return rc;
	uint64_t want = out->chunk_size ? (out->raw_bytes + out->chunk_size - 1) / out->chunk_size : 0;
	if (v != want || (out->raw_bytes && !out->chunk_size))
		return dvar_error_set(DVAR_ECORRUPT, "index entry %s: %llu chunks of %llu bytes cannot hold %llu bytes",
		                      what, (unsigned long long)v, (unsigned long long)out->chunk_size,
		                      (unsigned long long)out->raw_bytes);
	/* Every chunk takes at least 7 bytes: bound the count before allocating. */
	if (v > (uint64_t)(r.end - r.p) / 7)
		return truncated(&r);
	out->num_chunks = (size_t)v;
	if (v && !(out->chunks = calloc(v, sizeof(dvar_chunk))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	size_t blocks = 0;
	for (size_t i = 0; i < out->num_chunks; i++) {
		dvar_chunk *c = &out->chunks[i];
		uint64_t raw = dvar_chunk_raw_len(out, i);
		if ((rc = get_bounded(&r, INT64_MAX, &c->offset, "chunk offset")) ||
		    (rc = get_bounded(&r, INT64_MAX - c->offset, &c->stored, "chunk size")))
			goto fail;
		if (r.p == r.end) {
			rc = truncated(&r);
			goto fail;
		}
		c->codec = *r.p++;
		if ((rc = get_u32(&r, &c->crc)))
			goto fail;
		if (c->offset % DVAR_PACK_ALIGN || c->codec > DVAR_CODEC_LZ4 ||
		    (c->codec == DVAR_CODEC_RAW && c->stored != raw) ||
		    (c->codec == DVAR_CODEC_LZ4 && (c->stored == 0 || c->stored >= raw))) {
			rc = dvar_error_set(DVAR_ECORRUPT, "index entry %s: chunk %zu has an impossible "
			                    "offset %llu, size %llu or codec %u", what, i,
			                    (unsigned long long)c->offset, (unsigned long long)c->stored, c->codec);
			goto fail;
		}
		if (c->codec == DVAR_CODEC_RAW) {
			c->first_block = (uint32_t)blocks;
			blocks += dvar_chunk_num_blocks(out, i);
		}
	}
	if (blocks > (size_t)(r.end - r.p) / 4) {
		rc = truncated(&r);
		goto fail;
	}
	out->num_block_crcs = blocks;
	if (blocks && !(out->block_crcs = malloc(blocks * sizeof(uint32_t)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < blocks; i++)
		get_u32(&r, &out->block_crcs[i]);
	if ((rc = finished(&r)))
		goto fail;
	return DVAR_OK;
fail:
	dvar_slice_entry_clear(out);
	return rc;
}

/* A length-prefixed slice entry of a piece. */
static int get_sized_entry(reader *r, dvar_slice_entry *out, const char *what)
{
	uint64_t len;
	int rc = get_length(r, &len, "entry length");
	if (rc == DVAR_OK && (rc = dvar_slice_entry_decode(out, r->p, (size_t)len, what)) == DVAR_OK)
		r->p += len;
	return rc;
}

int dvar_piece_decode(dvar_piece *out, const void *p, size_t n, const char *what)
{
	reader r = { p, (const unsigned char *)p + n, what };
	char sub[DVAR_MAX_NAME + 128];
	uint64_t v;
	int rc;
	memset(out, 0, sizeof(*out));
	if ((rc = get_bounded(&r, INT64_MAX, &v, "first row")))
		return rc;
	out->first_row = (int64_t)v;
	if ((rc = get_bounded(&r, INT64_MAX, &v, "last row")))
		return rc;
	out->last_row = (int64_t)v;
	if ((rc = get_bounded(&r, INT64_MAX, &out->num_rows, "row count")))
		return rc;
	snprintf(sub, sizeof(sub), "%s (its ids)", what);
	if ((rc = get_sized_entry(&r, &out->ids, sub)))
		goto fail;
	snprintf(sub, sizeof(sub), "%s (its rows)", what);
	if ((rc = get_sized_entry(&r, &out->rows, sub)) || (rc = finished(&r)))
		goto fail;
	return DVAR_OK;
fail:
	dvar_piece_clear(out);
	return rc;
}

void dvar_links_free(dvar_link *links, size_t n)
{
	for (size_t i = 0; links && i < n; i++)
		free(links[i].name);
	free(links);
}

int dvar_links_copy(dvar_link **out, const dvar_link *links, size_t n)
{
	*out = NULL;
	if (!n)
		return DVAR_OK;
	dvar_link *c = calloc(n, sizeof(*c));
	if (!c)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		c[i].index_crc = links[i].index_crc;
		if (!(c[i].name = strdup(links[i].name))) {
			dvar_links_free(c, n);
			return dvar_error_set(DVAR_ENOMEM, "out of memory");
		}
	}
	*out = c;
	return DVAR_OK;
}

void dvar_header_clear(dvar_header *h)
{
	free(h->file_sizes);
	dvar_links_free(h->chain, h->chain_len);
	memset(h, 0, sizeof(*h));
}

void dvar_piece_clear(dvar_piece *pc)
{
	dvar_slice_entry_clear(&pc->ids);
	dvar_slice_entry_clear(&pc->rows);
	free(pc->loaded);
	memset(pc, 0, sizeof(*pc));
}

void dvar_slice_entry_clear(dvar_slice_entry *s)
{
	free(s->chunks);
	free(s->block_crcs);
	memset(s, 0, sizeof(*s));
}

void dvar_var_entry_clear(dvar_var_entry *v)
{
	for (size_t i = 0; v->slices && i < v->num_slices; i++)
		dvar_slice_entry_clear(&v->slices[i]);
	free(v->slices);
	for (size_t i = 0; v->pieces && i < v->num_pieces; i++)
		dvar_piece_clear(&v->pieces[i]);
	free(v->pieces);
	for (size_t i = 0; v->attrs && i < v->num_attrs; i++) {
		free(v->attrs[i].key);
		free(v->attrs[i].value);
	}
	free(v->attrs);
	free(v->name);
	memset(v, 0, sizeof(*v));
}

void dvar_data_file_name(char *buf, size_t cap, uint32_t file, uint32_t num_files)
{
	snprintf(buf, cap, "data-%05u-of-%05u", file, num_files);
}

/* ---------------------------------------------------------------- checks */

/* One stream of a piece: the slice it claims (rank, start 0, lengths) and
 * its bytes, chunk size and file. */
static int check_stream(const dvar_var_entry *v, size_t k, const dvar_slice_entry *s,
                        const dvar_shape *shape, size_t esize, uint32_t num_files, const char *what,
                        const char *which)
{
	uint64_t n;
	int ok = s->slice.rank == shape->rank && s->file < num_files && s->chunk_size % esize == 0;
	for (int d = 0; ok && d < shape->rank; d++)
		ok = s->slice.start[d] == 0 && s->slice.length[d] == shape->dims[d];
	if (ok && (dvar_shape_num_elements(shape, &n) || n * esize != s->raw_bytes))
		ok = 0;
	if (!ok)
		return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s' row piece #%zu: its %s do "
		                      "not fit %llu rows", what, v->name, k, which,
		                      (unsigned long long)shape->dims[0]);
	return DVAR_OK;
}

/* pieces sorted by first row, for the overlap check */
static int piece_cmp(const void *a, const void *b)
{
	const dvar_piece *x = *(const dvar_piece *const *)a, *y = *(const dvar_piece *const *)b;
	return (x->first_row > y->first_row) - (x->first_row < y->first_row);
}

/* A row patch's pieces: ids inside the variable, streams of the right
 * size, no two pieces whose rows interleave; their bytes add to *raw and
 * *stored. */
static int check_pieces(const dvar_var_entry *v, uint32_t num_files, const char *what,
                        uint64_t *raw, uint64_t *stored)
{
	size_t esize = dvar_dtype_size(v->dtype);
	const dvar_piece **order;
	int rc = DVAR_OK;
	if (!v->num_pieces)
		return DVAR_OK;
	for (size_t k = 0; k < v->num_pieces; k++) {
		const dvar_piece *pc = &v->pieces[k];
		dvar_shape ids = { .rank = 1, .dims = { (int64_t)pc->num_rows } }, rows = v->shape;
		if (pc->num_rows == 0 || pc->num_rows > INT64_MAX || pc->first_row > pc->last_row ||
		    pc->last_row >= v->shape.dims[0] ||
		    pc->num_rows - 1 > (uint64_t)(pc->last_row - pc->first_row))
			return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s' row piece #%zu: %llu rows "
			                      "from %lld to %lld do not fit a variable of %lld rows", what,
			                      v->name, k, (unsigned long long)pc->num_rows,
			                      (long long)pc->first_row, (long long)pc->last_row,
			                      (long long)v->shape.dims[0]);
		rows.dims[0] = (int64_t)pc->num_rows;
		if ((rc = check_stream(v, k, &pc->ids, &ids, 8, num_files, what, "ids")) ||
		    (rc = check_stream(v, k, &pc->rows, &rows, esize, num_files, what, "rows")))
			return rc;
		*raw += pc->ids.raw_bytes + pc->rows.raw_bytes;
		for (size_t c = 0; c < pc->ids.num_chunks; c++)
			*stored += pc->ids.chunks[c].stored;
		for (size_t c = 0; c < pc->rows.num_chunks; c++)
			*stored += pc->rows.chunks[c].stored;
	}
	if (!(order = malloc(v->num_pieces * sizeof(*order))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t k = 0; k < v->num_pieces; k++)
		order[k] = &v->pieces[k];
	qsort(order, v->num_pieces, sizeof(*order), piece_cmp);
	for (size_t k = 1; k < v->num_pieces && !rc; k++)
		if (order[k]->first_row <= order[k - 1]->last_row)
			rc = dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s': row pieces #%zu and #%zu "
			                    "overlap (rows %lld..%lld and %lld..%lld)", what, v->name,
			                    (size_t)(order[k - 1] - v->pieces), (size_t)(order[k] - v->pieces),
			                    (long long)order[k - 1]->first_row, (long long)order[k - 1]->last_row,
			                    (long long)order[k]->first_row, (long long)order[k]->last_row);
	free(order);
	return rc;
}

int dvar_var_check(const dvar_var_entry *v, uint32_t num_files, const char *what)
{
	uint64_t raw = 0, stored = 0;
	int64_t rows_end = 0; /* of the slices checked so far (dvar_slice_overlaps) */
	size_t esize = dvar_dtype_size(v->dtype);
	uint64_t dummy;
	if (dvar_shape_num_bytes(&v->shape, v->dtype, &dummy))
		return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s': %s", what, v->name,
		                      dvar_error_last()->message);
	for (size_t j = 0; j < v->num_slices; j++) {
		const dvar_slice_entry *s = &v->slices[j];
		uint64_t n;
		if (s->slice.rank != v->shape.rank)
			return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s' slice #%zu has rank %d, "
			                      "the variable %d", what, v->name, j, s->slice.rank, v->shape.rank);
		if (dvar_slice_check(&s->slice, &v->shape))
			return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s' slice #%zu: %s",
			                      what, v->name, j, dvar_error_last()->message);
		dvar_slice_num_elements(&s->slice, &n);
		if (n * esize != s->raw_bytes || s->file >= num_files)
			return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s' slice #%zu: "
			                      "%llu bytes in data file %u do not fit %llu %s elements in %u files",
			                      what, v->name, j, (unsigned long long)s->raw_bytes, s->file,
			                      (unsigned long long)n, dvar_dtype_name(v->dtype), num_files);
		if (s->chunk_size % esize)
			return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s' slice #%zu: chunk size "
			                      "%llu is not a multiple of the element size", what, v->name, j,
			                      (unsigned long long)s->chunk_size);
		raw += s->raw_bytes;
		for (size_t c = 0; c < s->num_chunks; c++)
			stored += s->chunks[c].stored;
		size_t k;
		if (dvar_slice_overlaps(&s->slice, v->slices, j, sizeof(*v->slices), &rows_end, &k))
			return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s': saved slices "
			                      "#%zu and #%zu overlap", what, v->name, k, j);
	}
	if ((v->delta != DVAR_DELTA_WHOLE && v->num_slices) ||
	    (v->delta != DVAR_DELTA_ROWS && v->num_pieces) ||
	    (v->delta == DVAR_DELTA_ROWS && v->shape.rank == 0))
		return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s': a %s variable of rank %d "
		                      "with %zu slices and %zu row pieces", what, v->name,
		                      v->delta == DVAR_DELTA_SAME ? "unchanged" :
		                      v->delta == DVAR_DELTA_ROWS ? "patched" : "whole",
		                      v->shape.rank, v->num_slices, v->num_pieces);
	int rc = check_pieces(v, num_files, what, &raw, &stored);
	if (rc)
		return rc;
	if (raw != v->raw_bytes || stored != v->stored_bytes)
		return dvar_error_set(DVAR_ECORRUPT, "%s of variable '%s': byte counts do not "
		                      "add up over its slices", what, v->name);
	return DVAR_OK;
}

/* ---------------------------------------------------------------- parts */

static int name_cmp(const void *a, const void *b)
{
	return strcmp((*(dvar_var_entry *const *)a)->name, (*(dvar_var_entry *const *)b)->name);
}

int dvar_part_encode(dvar_bytes *out, const dvar_part *p, dvar_var_entry *const *vars)
{
	dvar_var_entry **sorted = malloc((p->num_vars ? p->num_vars : 1) * sizeof(*sorted));
	dvar_bytes e = { 0 };
	size_t tlen = strlen(p->token);
	int rc;
	if (!sorted)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	memcpy(sorted, vars, p->num_vars * sizeof(*sorted));
	qsort(sorted, p->num_vars, sizeof(*sorted), name_cmp);
	rc = dvar_bytes_put(out, DVAR_PART_MAGIC, 4);
	if (!rc) rc = dvar_bytes_put_u32(out, DVAR_PART_VERSION);
	if (!rc) rc = dvar_bytes_put_varint(out, p->part);
	if (!rc) rc = dvar_bytes_put_varint(out, p->nparts);
	if (!rc) rc = dvar_bytes_put_varint(out, tlen);
	if (!rc) rc = dvar_bytes_put(out, p->token, tlen);
	if (!rc) rc = dvar_bytes_put_varint(out, p->file_size);
	if (!rc) rc = dvar_bytes_put_varint(out, p->chain_len);
	for (size_t i = 0; !rc && i < p->chain_len; i++) {
		size_t nl = strlen(p->chain[i].name);
		rc = dvar_bytes_put_varint(out, nl);
		if (!rc) rc = dvar_bytes_put(out, p->chain[i].name, nl);
		if (!rc) rc = dvar_bytes_put_u32(out, p->chain[i].index_crc);
	}
	if (!rc) rc = dvar_bytes_put_varint(out, p->num_vars);
	for (size_t i = 0; !rc && i < p->num_vars; i++) {
		const dvar_var_entry *v = sorted[i];
		size_t nl = strlen(v->name);
		rc = dvar_bytes_put_varint(out, nl);
		if (!rc) rc = dvar_bytes_put(out, v->name, nl);
		e.len = 0;
		if (!rc) rc = dvar_var_encode(&e, v, 1);
		if (!rc) rc = put_sized(out, &e);
		for (size_t j = 0; !rc && j < v->num_slices; j++) {
			e.len = 0;
			rc = dvar_slice_entry_encode(&e, &v->slices[j]);
			if (!rc) rc = put_sized(out, &e);
		}
		for (size_t j = 0; !rc && j < v->num_pieces; j++) {
			e.len = 0;
			rc = dvar_piece_encode(&e, &v->pieces[j]);
			if (!rc) rc = put_sized(out, &e);
		}
	}
	if (!rc) rc = dvar_bytes_put_u32(out, dvar_crc32c(out->data, out->len));
	free(e.data);
	free(sorted);
	return rc;
}

/* A part's pieces of var, each in its own data file. */
static int decode_part_pieces(reader *r, const dvar_part *part, dvar_var_entry *var)
{
	size_t np = var->num_pieces;
	uint64_t len;
	int rc;
	var->num_pieces = 0; /* counts the pieces decoded so far */
	/* A piece takes at least 13 bytes with its length. */
	if (np > (size_t)(r->end - r->p) / 13)
		return truncated(r);
	if (np && !(var->pieces = calloc(np, sizeof(dvar_piece))))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (size_t j = 0; j < np; j++) {
		char what[DVAR_MAX_NAME + 96];
		snprintf(what, sizeof(what), "of part %u variable '%s' row piece #%zu", part->part,
		         var->name ? var->name : "", j);
		if ((rc = get_length(r, &len, "entry length")) ||
		    (rc = dvar_piece_decode(&var->pieces[j], r->p, (size_t)len, what)))
			return rc;
		r->p += len;
		var->num_pieces = j + 1;
		const dvar_slice_entry *se[2] = { &var->pieces[j].ids, &var->pieces[j].rows };
		for (int k = 0; k < 2; k++) {
			if (se[k]->file != part->part)
				return dvar_error_set(DVAR_ECORRUPT, "part %u entries: variable '%s' row piece "
				                      "#%zu is in data file %u", part->part, var->name, j,
				                      se[k]->file);
			for (size_t c = 0; c < se[k]->num_chunks; c++)
				if (se[k]->chunks[c].offset + se[k]->chunks[c].stored > part->file_size)
					return dvar_error_set(DVAR_ECORRUPT, "part %u entries: variable '%s' row "
					                      "piece #%zu lies beyond the data file's %llu bytes",
					                      part->part, var->name, j,
					                      (unsigned long long)part->file_size);
		}
	}
	return DVAR_OK;
}

int dvar_part_decode(dvar_part *out, const void *p, size_t n)
{
	const unsigned char *b = p;
	reader r = { NULL, NULL, "of part entries" };
	char what[DVAR_MAX_NAME + 64];
	uint64_t v, len;
	uint32_t version = 0, crc, want;
	int rc;
	memset(out, 0, sizeof(*out));
	if (!p || n < 12 || memcmp(p, DVAR_PART_MAGIC, 4) != 0)
		return dvar_error_set(DVAR_ECORRUPT, "part entries of %zu bytes are not dvar part entries", n);
	r.p = b + 4;
	r.end = b + n - 4;
	want = (uint32_t)b[n - 4] | (uint32_t)b[n - 3] << 8 | (uint32_t)b[n - 2] << 16 |
	       (uint32_t)b[n - 1] << 24;
	if ((crc = dvar_crc32c(p, n - 4)) != want)
		return dvar_error_set(DVAR_ECORRUPT, "part entries are damaged: checksum %08x, computed %08x",
		                      want, crc);
	get_u32(&r, &version);
	if (version != DVAR_PART_VERSION)
		return dvar_error_set(DVAR_EVERSION, "part entries of version %u; this dvar reads version %u",
		                      version, DVAR_PART_VERSION);
	if ((rc = get_bounded(&r, DVAR_MAX_PARTS, &v, "part count")))
		return rc;
	out->part = (uint32_t)v;
	if ((rc = get_bounded(&r, DVAR_MAX_PARTS, &v, "part count")))
		return rc;
	out->nparts = (uint32_t)v;
	if (out->nparts == 0 || out->part >= out->nparts)
		return dvar_error_set(DVAR_ECORRUPT, "part entries name part %u of %u", out->part, out->nparts);
	if ((rc = get_bounded(&r, DVAR_MAX_TOKEN, &len, "token length")))
		return rc;
	if (len > DVAR_MAX_TOKEN || len > (uint64_t)(r.end - r.p))
		return truncated(&r);
	memcpy(out->token, r.p, (size_t)len);
	out->token[len] = '\0';
	r.p += len;
	if (!len || strspn(out->token, DVAR_TOKEN_CHARS) != len)
		return dvar_error_set(DVAR_ECORRUPT, "part %u entries: bad token", out->part);
	if ((rc = get_bounded(&r, INT64_MAX, &out->file_size, "data file size")))
		return rc;
	if (out->file_size % DVAR_ALIGN)
		return dvar_error_set(DVAR_ECORRUPT, "part %u entries: data file size %llu is not a multiple "
		                      "of %u", out->part, (unsigned long long)out->file_size, DVAR_ALIGN);
	{
		dvar_header h = { 0 };
		rc = decode_chain(&r, &h);
		out->chain = h.chain;
		out->chain_len = h.chain_len;
		if (rc)
			goto fail;
	}
	/* Every variable takes at least 9 bytes: bound the count before
	 * allocating. From here on a failure frees the chain too (fail). */
	if ((rc = get_varint(&r, &v)))
		goto fail;
	if (v > (uint64_t)(r.end - r.p) / 9) {
		rc = truncated(&r);
		goto fail;
	}
	if (v && !(out->vars = calloc((size_t)v, sizeof(dvar_var_entry)))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto fail;
	}
	out->num_vars = (size_t)v;
	snprintf(what, sizeof(what), "part %u entry", out->part);
	for (size_t i = 0; i < out->num_vars; i++) {
		dvar_var_entry *var = &out->vars[i];
		char name[DVAR_MAX_NAME + 1];
		if ((rc = get_bounded(&r, DVAR_MAX_NAME, &len, "name length")))
			goto fail;
		if (len == 0 || len > (uint64_t)(r.end - r.p) || memchr(r.p, 0, (size_t)len)) {
			rc = dvar_error_set(DVAR_ECORRUPT, "part %u entries: variable #%zu has a bad name",
			                    out->part, i);
			goto fail;
		}
		memcpy(name, r.p, (size_t)len);
		name[len] = '\0';
		r.p += len;
		if (i && strcmp(out->vars[i - 1].name, name) >= 0) {
			rc = dvar_error_set(DVAR_ECORRUPT, "part %u entries: variable '%s' is out of order or "
			                    "repeated", out->part, name);
			goto fail;
		}
		if ((rc = get_length(&r, &len, "entry length")) ||
		    (rc = dvar_var_decode(var, name, r.p, (size_t)len, 1)))
			goto fail;
		r.p += len;
		size_t ns = var->num_slices;
		/* A slice entry takes at least 5 bytes, 6 with its length. */
		if (ns > (size_t)(r.end - r.p) / 6) {
			var->num_slices = 0;
			rc = truncated(&r);
			goto fail;
		}
		var->num_slices = 0; /* counts the slices decoded so far */
		if (ns && !(var->slices = calloc(ns, sizeof(dvar_slice_entry)))) {
			rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
			goto fail;
		}
		for (size_t j = 0; j < ns; j++) {
			char swhat[DVAR_MAX_NAME + 96];
			snprintf(swhat, sizeof(swhat), "of part %u variable '%s' slice #%zu", out->part, name, j);
			if ((rc = get_length(&r, &len, "entry length")) ||
			    (rc = dvar_slice_entry_decode(&var->slices[j], r.p, (size_t)len, swhat)))
				goto fail;
			r.p += len;
			var->num_slices = j + 1;
			const dvar_slice_entry *se = &var->slices[j];
			if (se->file != out->part) {
				rc = dvar_error_set(DVAR_ECORRUPT, "part %u entries: variable '%s' slice #%zu is in "
				                    "data file %u", out->part, name, j, se->file);
				goto fail;
			}
			for (size_t c = 0; c < se->num_chunks; c++)
				if (se->chunks[c].offset + se->chunks[c].stored > out->file_size) {
					rc = dvar_error_set(DVAR_ECORRUPT, "part %u entries: variable '%s' slice #%zu "
					                    "chunk %zu lies beyond the data file's %llu bytes", out->part,
					                    name, j, c, (unsigned long long)out->file_size);
					goto fail;
				}
		}
		if ((rc = decode_part_pieces(&r, out, var)) || (rc = dvar_var_check(var, out->nparts, what)))
			goto fail;
	}
	if ((rc = finished(&r)))
		goto fail;
	return DVAR_OK;
fail:
	dvar_part_clear(out);
	return rc;
}

void dvar_part_clear(dvar_part *p)
{
	for (size_t i = 0; p->vars && i < p->num_vars; i++)
		dvar_var_entry_clear(&p->vars[i]);
	free(p->vars);
	dvar_links_free(p->chain, p->chain_len);
	memset(p, 0, sizeof(*p));
}
