/*
 * format/entry.c - encoding and decoding of the index's keys and values
 * (header, variable and slice entries) with LevelDB-style varints. Decoders
 * trust nothing: every count is bounded by the bytes left before anything
 * is allocated, so a corrupt index gives DVAR_ECORRUPT, never a crash.
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

int dvar_key_var(dvar_bytes *out, const char *name)
{
	int rc = dvar_bytes_put(out, "v", 1);
	return rc ? rc : dvar_bytes_put(out, name, strlen(name));
}

int dvar_key_slice(dvar_bytes *out, const char *name, uint32_t j)
{
	/* Big-endian so that a variable's slices sort in the order they were saved. */
	unsigned char be[5] = { 0, (unsigned char)(j >> 24), (unsigned char)(j >> 16),
	                        (unsigned char)(j >> 8), (unsigned char)j };
	int rc;
	if ((rc = dvar_bytes_put(out, "s", 1)) || (rc = dvar_bytes_put(out, name, strlen(name))))
		return rc;
	return dvar_bytes_put(out, be, sizeof(be));
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
	return rc;
}

int dvar_var_encode(dvar_bytes *out, const dvar_var_entry *v)
{
	int rc = dvar_bytes_put_varint(out, (uint64_t)v->dtype);
	if (!rc) rc = dvar_bytes_put_varint(out, (uint64_t)v->shape.rank);
	for (int d = 0; !rc && d < v->shape.rank; d++)
		rc = dvar_bytes_put_varint(out, (uint64_t)v->shape.dims[d]);
	if (!rc) rc = dvar_bytes_put_varint(out, v->num_slices);
	if (!rc) rc = dvar_bytes_put_varint(out, v->raw_bytes);
	if (!rc) rc = dvar_bytes_put_varint(out, v->stored_bytes);
	if (!rc) rc = dvar_bytes_put_varint(out, 0); /* attributes: none in version 1 */
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
	/* A newer writer may append fields its older readers can skip. */
	if (out->version <= DVAR_FORMAT_VERSION && (rc = finished(&r)))
		goto fail;
	return DVAR_OK;
fail:
	dvar_header_clear(out);
	return rc;
}

int dvar_var_decode(dvar_var_entry *out, const char *name, const void *p, size_t n)
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
	if ((rc = get_varint(&r, &attrs)))
		return rc;
	for (uint64_t i = 0; i < attrs * 2; i++) { /* key, value: skipped, reserved */
		if ((rc = get_bounded(&r, (uint64_t)(r.end - r.p), &v, "attribute length")))
			return rc;
		r.p += v;
	}
	if ((rc = finished(&r)))
		return rc;
	if (!(out->name = strdup(name)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	return DVAR_OK;
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
		if (c->offset % DVAR_ALIGN || c->codec > DVAR_CODEC_LZ4 ||
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

void dvar_header_clear(dvar_header *h)
{
	free(h->file_sizes);
	memset(h, 0, sizeof(*h));
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
	free(v->name);
	memset(v, 0, sizeof(*v));
}

void dvar_data_file_name(char *buf, size_t cap, uint32_t file, uint32_t num_files)
{
	snprintf(buf, cap, "data-%05u-of-%05u", file, num_files);
}
