/*
 * format/tfproto.c - the bytes of a TensorBundle's index entries and string
 * tensors (format/tf.h; ../shared/reference/tf-behavior.md §4.3-§4.5): a
 * small protobuf wire-format decoder and encoder, BundleHeaderProto and
 * BundleEntryProto (with its TensorShapeProto and TensorSliceProtos) on
 * top of it, and the varint-prefixed layout of DT_STRING data.
 *
 * Nothing here trusts its input: every read stays inside the bytes given,
 * every allocation is bounded by what those bytes can justify (dimensions
 * by DVAR_MAX_RANK, slices by TF_MAX_SLICES, arrays by the bytes left), and
 * every failure is a status with a message saying what and where.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/tf.h"

/* A partitioned tensor with more slices than this is refused (bounds memory). */
#define TF_MAX_SLICES 100000u

/* ---------------------------------------------------------------- wire format */

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_FIXED32 = 5 };

typedef struct {
	const unsigned char *p, *end;
	const char *what;   /* "index entry 'w'" */
} pb;

static int pb_error(const pb *b, uint32_t field, const char *name, const char *why)
{
	if (field)
		return dvar_error_set(DVAR_ECORRUPT, "%s: field %u (%s): %s", b->what, field, name, why);
	return dvar_error_set(DVAR_ECORRUPT, "%s: %s", b->what, why);
}

/* 0, or -1 truncated, -2 longer than 10 bytes / more than 64 bits. */
static int get_varint(const unsigned char **pp, const unsigned char *end, uint64_t *out)
{
	const unsigned char *p = *pp;
	uint64_t v = 0;
	for (int i = 0; i < 10; i++) {
		if (p == end)
			return -1;
		unsigned char c = *p++;
		if (i == 9 && c > 1)
			return -2;
		v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*out = v;
			*pp = p;
			return 0;
		}
	}
	return -2;
}

static int pb_varint(pb *b, uint64_t *out, uint32_t field, const char *name)
{
	int e = get_varint(&b->p, b->end, out);
	if (e == -1)
		return pb_error(b, field, name, "truncated varint");
	if (e == -2)
		return pb_error(b, field, name, "malformed varint (more than 10 bytes or 64 bits)");
	return DVAR_OK;
}

static int pb_tag(pb *b, uint32_t *field, int *wt)
{
	uint64_t t;
	int e = get_varint(&b->p, b->end, &t);
	if (e)
		return pb_error(b, 0, NULL, e == -1 ? "truncated field tag" : "malformed field tag");
	*field = (uint32_t)(t >> 3);
	*wt = (int)(t & 7);
	if (t >> 3 == 0 || t >> 3 > 0x1fffffff)
		return pb_error(b, 0, NULL, "bad field number in tag");
	if (*wt == WT_SGROUP || *wt == WT_EGROUP)
		return pb_error(b, *field, "?", "group wire type is not supported");
	if (*wt > WT_FIXED32)
		return pb_error(b, *field, "?", "invalid wire type");
	return DVAR_OK;
}

/* The next field's tag: 1 while b has one and *rc is DVAR_OK, else 0 (*rc set
 * when the tag is bad). Every message loop reads its fields through this. */
static int pb_next(pb *b, uint32_t *field, int *wt, int *rc)
{
	return !*rc && b->p < b->end && !(*rc = pb_tag(b, field, wt));
}

static int pb_skip(pb *b, uint32_t field, int wt)
{
	uint64_t v;
	size_t left = (size_t)(b->end - b->p);
	switch (wt) {
	case WT_VARINT:
		return pb_varint(b, &v, field, "unknown");
	case WT_FIXED64:
		if (left < 8)
			return pb_error(b, field, "unknown", "truncated fixed64");
		b->p += 8;
		return DVAR_OK;
	case WT_FIXED32:
		if (left < 4)
			return pb_error(b, field, "unknown", "truncated fixed32");
		b->p += 4;
		return DVAR_OK;
	default: {
		int rc = pb_varint(b, &v, field, "unknown");
		if (rc)
			return rc;
		if (v > (uint64_t)(b->end - b->p))
			return pb_error(b, field, "unknown", "length exceeds the bytes left");
		b->p += v;
		return DVAR_OK;
	}
	}
}

static int pb_want(pb *b, uint32_t field, const char *name, int wt, int want)
{
	if (wt != want) {
		char why[64];
		snprintf(why, sizeof(why), "wire type %d, expected %d", wt, want);
		return pb_error(b, field, name, why);
	}
	return DVAR_OK;
}

static int pb_int64(pb *b, uint32_t field, const char *name, int wt, int64_t *out)
{
	uint64_t v;
	int rc = pb_want(b, field, name, wt, WT_VARINT);
	if (!rc && !(rc = pb_varint(b, &v, field, name)))
		*out = (int64_t)v;
	return rc;
}

static int pb_int32(pb *b, uint32_t field, const char *name, int wt, int32_t *out)
{
	int64_t v;
	int rc = pb_int64(b, field, name, wt, &v);
	if (rc)
		return rc;
	if (v < INT32_MIN || v > INT32_MAX)
		return pb_error(b, field, name, "value out of range for int32");
	*out = (int32_t)v;
	return DVAR_OK;
}

/* A length-delimited field's bytes as a sub-reader (same what). */
static int pb_sub(pb *b, uint32_t field, const char *name, int wt, pb *sub)
{
	uint64_t len;
	int rc = pb_want(b, field, name, wt, WT_LEN);
	if (!rc)
		rc = pb_varint(b, &len, field, name);
	if (rc)
		return rc;
	if (len > (uint64_t)(b->end - b->p)) {
		char why[96];
		snprintf(why, sizeof(why), "length %llu exceeds the %zu bytes left",
		         (unsigned long long)len, (size_t)(b->end - b->p));
		return pb_error(b, field, name, why);
	}
	sub->p = b->p;
	sub->end = b->p + len;
	sub->what = b->what;
	b->p += len;
	return DVAR_OK;
}

static int put_tag(dvar_bytes *o, uint32_t field, int wt)
{
	return dvar_bytes_put_varint(o, (uint64_t)field << 3 | (uint64_t)wt);
}

/* A varint field (int32 / int64 / enum: negative values sign-extended to 10 bytes). */
static int put_int(dvar_bytes *o, uint32_t field, int64_t v)
{
	int rc = put_tag(o, field, WT_VARINT);
	return rc ? rc : dvar_bytes_put_varint(o, (uint64_t)v);
}

static int put_int_nz(dvar_bytes *o, uint32_t field, int64_t v)
{
	return v ? put_int(o, field, v) : DVAR_OK;
}

static int put_len(dvar_bytes *o, uint32_t field, const dvar_bytes *msg)
{
	int rc = put_tag(o, field, WT_LEN);
	if (!rc)
		rc = dvar_bytes_put_varint(o, msg->len);
	return rc ? rc : dvar_bytes_put(o, msg->data, msg->len);
}

/* ---------------------------------------------------------------- header */

void dvar_tf_header_clear(dvar_tf_header *h)
{
	free(h->bad_consumers);
	memset(h, 0, sizeof(*h));
}

static int version_decode(pb *b, dvar_tf_header *h)
{
	size_t cap = h->num_bad_consumers;
	int rc = DVAR_OK;
	uint32_t f;
	int wt;
	while (pb_next(b, &f, &wt, &rc)) {
		if (f == 1) {
			rc = pb_int32(b, f, "version.producer", wt, &h->producer);
		} else if (f == 2) {
			rc = pb_int32(b, f, "version.min_consumer", wt, &h->min_consumer);
		} else if (f == 3) {
			/* repeated int32: packed (proto3's default) or one value per tag */
			static const char name[] = "version.bad_consumers";
			int packed = wt == WT_LEN, first = 1;
			pb src = { 0 };
			if (packed)
				rc = pb_sub(b, f, name, wt, &src);
			else
				rc = pb_want(b, f, name, wt, WT_VARINT);
			while (!rc && (packed ? src.p < src.end : first)) {
				int32_t v = 0;
				first = 0;
				if ((rc = pb_int32(packed ? &src : b, f, name, WT_VARINT, &v)))
					break;
				int32_t *np = dvar_grow(h->bad_consumers, h->num_bad_consumers, &cap,
				                           sizeof(int32_t), 4);
				if (!np) {
					rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
					break;
				}
				h->bad_consumers = np;
				h->bad_consumers[h->num_bad_consumers++] = v;
			}
		} else {
			rc = pb_skip(b, f, wt);
		}
	}
	return rc;
}

int dvar_tf_header_decode(dvar_tf_header *out, const void *p, size_t n)
{
	pb b = { p, (const unsigned char *)p + n, "index header (BundleHeaderProto)" };
	int rc = DVAR_OK;
	memset(out, 0, sizeof(*out));
	if (n && !p)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_header_decode: NULL bytes");
	uint32_t f;
	int wt;
	while (pb_next(&b, &f, &wt, &rc)) {
		pb sub;
		switch (f) {
		case 1: rc = pb_int32(&b, f, "num_shards", wt, &out->num_shards); break;
		case 2: rc = pb_int32(&b, f, "endianness", wt, &out->endianness); break;
		case 3:
			if (!(rc = pb_sub(&b, f, "version", wt, &sub)))
				rc = version_decode(&sub, out);
			break;
		default: rc = pb_skip(&b, f, wt); break;
		}
	}
	if (rc)
		dvar_tf_header_clear(out);
	return rc;
}

int dvar_tf_header_encode(dvar_bytes *out, const dvar_tf_header *h)
{
	dvar_bytes v = { 0 }, packed = { 0 };
	int rc = put_int_nz(out, 1, h->num_shards);
	if (!rc) rc = put_int_nz(out, 2, h->endianness);
	if (!rc) rc = put_int_nz(&v, 1, h->producer);
	if (!rc) rc = put_int_nz(&v, 2, h->min_consumer);
	for (size_t i = 0; !rc && i < h->num_bad_consumers; i++)
		rc = dvar_bytes_put_varint(&packed, (uint64_t)(int64_t)h->bad_consumers[i]);
	if (!rc && h->num_bad_consumers)
		rc = put_len(&v, 3, &packed);
	/* The writer always sets version, so it is always present. */
	if (!rc) rc = put_len(out, 3, &v);
	free(v.data);
	free(packed.data);
	return rc;
}

int dvar_tf_header_check(const dvar_tf_header *h, const char *what)
{
	/* TensorFlow's CheckVersions(versions, kTensorBundleVersion, kTensorBundleMinProducer). */
	if (h->producer < 0)
		return dvar_error_set(DVAR_EVERSION, "%s: Checkpoint producer version %d below min producer 0 "
		                      "supported by TensorFlow (dvar reads TensorBundle versions 0 to %d)",
		                      what, h->producer, DVAR_TF_BUNDLE_VERSION);
	if (h->min_consumer > DVAR_TF_BUNDLE_VERSION)
		return dvar_error_set(DVAR_EVERSION, "%s: Checkpoint min consumer version %d above current "
		                      "version %d for TensorFlow (dvar reads TensorBundle version %d)", what,
		                      h->min_consumer, DVAR_TF_BUNDLE_VERSION, DVAR_TF_BUNDLE_VERSION);
	for (size_t i = 0; i < h->num_bad_consumers; i++)
		if (h->bad_consumers[i] == DVAR_TF_BUNDLE_VERSION)
			return dvar_error_set(DVAR_EVERSION, "%s: Checkpoint disallows consumer version %d.  "
			                      "Please upgrade TensorFlow: this version is likely buggy.", what,
			                      DVAR_TF_BUNDLE_VERSION);
	if (h->endianness == 1)
		return dvar_error_set(DVAR_ENOTSUPP, "%s is a big-endian TensorBundle (written on a "
		                      "big-endian machine); dvar reads only little-endian bundles", what);
	if (h->endianness != 0)
		return dvar_error_set(DVAR_ECORRUPT, "%s: header has an unknown endianness %d", what,
		                      h->endianness);
	if (h->num_shards < 1 || h->num_shards > DVAR_MAX_PARTS + 1)
		return dvar_error_set(DVAR_ECORRUPT, "%s: header says %d data files (shards); expected 1 "
		                      "to %d", what, h->num_shards, DVAR_MAX_PARTS + 1);
	return DVAR_OK;
}

/* ---------------------------------------------------------------- entries */

void dvar_tf_entry_clear(dvar_tf_entry *e)
{
	free(e->slices);
	memset(e, 0, sizeof(*e));
}

static int shape_decode(pb *b, dvar_shape *shape)
{
	int rc = DVAR_OK;
	uint32_t f;
	int wt;
	while (pb_next(b, &f, &wt, &rc)) {
		pb dim;
		if (f == 2) {
			if ((rc = pb_sub(b, f, "shape.dim", wt, &dim)))
				break;
			if (shape->rank == DVAR_MAX_RANK)
				return dvar_error_set(DVAR_ENOTSUPP, "%s: the tensor has more than %d dimensions; "
				                      "dvar handles tensors of rank up to %d", b->what,
				                      DVAR_MAX_RANK, DVAR_MAX_RANK);
			int64_t size = 0;
			uint32_t g;
			int dwt;
			while (pb_next(&dim, &g, &dwt, &rc)) {
				if (g == 1)
					rc = pb_int64(&dim, g, "shape.dim.size", dwt, &size);
				else
					rc = pb_skip(&dim, g, dwt); /* name */
			}
			if (!rc && size < 0)
				rc = pb_error(b, f, "shape.dim.size", "negative (unknown) dimension");
			if (!rc)
				shape->dims[shape->rank++] = size;
		} else if (f == 3) {
			uint64_t v;
			if (!(rc = pb_want(b, f, "shape.unknown_rank", wt, WT_VARINT)) &&
			    !(rc = pb_varint(b, &v, f, "shape.unknown_rank")) && v)
				rc = pb_error(b, f, "shape.unknown_rank", "the shape's rank is unknown");
		} else {
			rc = pb_skip(b, f, wt);
		}
	}
	return rc;
}

static int slice_decode(pb *b, dvar_tf_slice *s)
{
	int rc = DVAR_OK;
	memset(s, 0, sizeof(*s));
	uint32_t f;
	int wt;
	while (pb_next(b, &f, &wt, &rc)) {
		pb ext;
		if (f != 1) {
			rc = pb_skip(b, f, wt);
			continue;
		}
		if ((rc = pb_sub(b, f, "slices.extent", wt, &ext)))
			break;
		if (s->rank == DVAR_MAX_RANK)
			return pb_error(b, f, "slices.extent", "a slice of more than 8 dimensions");
		int64_t start = 0, length = -1;
		uint32_t g;
		int ewt;
		while (pb_next(&ext, &g, &ewt, &rc)) {
			if (g == 1) {
				rc = pb_int64(&ext, g, "slices.extent.start", ewt, &start);
				if (!rc && start < 0)
					rc = pb_error(b, g, "slices.extent.start", "negative start");
			} else if (g == 2) {
				rc = pb_int64(&ext, g, "slices.extent.length", ewt, &length);
				if (!rc && length < 0)
					rc = pb_error(b, g, "slices.extent.length", "negative length");
			} else {
				rc = pb_skip(&ext, g, ewt);
			}
		}
		s->start[s->rank] = start;
		s->length[s->rank] = length;
		s->rank++;
	}
	return rc;
}

int dvar_tf_entry_decode(dvar_tf_entry *out, const void *p, size_t n, const char *what)
{
	char w[DVAR_MAX_NAME + 64];
	snprintf(w, sizeof(w), "index entry '%s'", what ? what : "?");
	pb b = { p, (const unsigned char *)p + n, w };
	size_t cap = 0;
	int rc = DVAR_OK;
	memset(out, 0, sizeof(*out));
	if (n && !p)
		return dvar_error_set(DVAR_EINVAL, "dvar_tf_entry_decode: NULL bytes");
	uint32_t f;
	int wt;
	while (pb_next(&b, &f, &wt, &rc)) {
		pb sub;
		switch (f) {
		case 1: rc = pb_int32(&b, f, "dtype", wt, &out->dtype); break;
		case 2:
			if (!(rc = pb_sub(&b, f, "shape", wt, &sub)))
				rc = shape_decode(&sub, &out->shape);
			break;
		case 3: rc = pb_int32(&b, f, "shard_id", wt, &out->shard_id); break;
		case 4: rc = pb_int64(&b, f, "offset", wt, &out->offset); break;
		case 5: rc = pb_int64(&b, f, "size", wt, &out->size); break;
		case 6:
			if (!(rc = pb_want(&b, f, "crc32c", wt, WT_FIXED32))) {
				if (b.end - b.p < 4) {
					rc = pb_error(&b, f, "crc32c", "truncated fixed32");
					break;
				}
				out->crc32c = (uint32_t)b.p[0] | (uint32_t)b.p[1] << 8 |
				              (uint32_t)b.p[2] << 16 | (uint32_t)b.p[3] << 24;
				b.p += 4;
			}
			break;
		case 7:
			if ((rc = pb_sub(&b, f, "slices", wt, &sub)))
				break;
			if (out->num_slices == TF_MAX_SLICES) {
				rc = dvar_error_set(DVAR_ENOTSUPP, "%s lists more than %u slices", w, TF_MAX_SLICES);
				break;
			}
			dvar_tf_slice *s = dvar_grow(out->slices, out->num_slices, &cap, sizeof(*s), 4);
			if (!s) {
				rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
				break;
			}
			out->slices = s;
			if (!(rc = slice_decode(&sub, &out->slices[out->num_slices])))
				out->num_slices++;
			break;
		default: rc = pb_skip(&b, f, wt); break;
		}
	}
	if (!rc) {
		if (out->dtype <= 0)
			rc = dvar_error_set(DVAR_ECORRUPT, "%s: dtype %d is not a data type", w, out->dtype);
		else if (out->shard_id < 0 || out->offset < 0 || out->size < 0)
			rc = dvar_error_set(DVAR_ECORRUPT, "%s: negative shard_id %d, offset %lld or size %lld",
			                    w, out->shard_id, (long long)out->offset, (long long)out->size);
	}
	if (rc)
		dvar_tf_entry_clear(out);
	return rc;
}

static int slice_encode(dvar_bytes *out, const dvar_tf_slice *s)
{
	dvar_bytes ext = { 0 };
	int rc = DVAR_OK;
	for (int d = 0; !rc && d < s->rank; d++) {
		ext.len = 0;
		/* Full dimension: an empty Extent; else start (omitted when 0) and length (always). */
		if (s->length[d] >= 0) {
			rc = put_int_nz(&ext, 1, s->start[d]);
			if (!rc) rc = put_int(&ext, 2, s->length[d]);
		}
		if (!rc) rc = put_len(out, 1, &ext);
	}
	free(ext.data);
	return rc;
}

int dvar_tf_entry_encode(dvar_bytes *out, const dvar_tf_entry *e)
{
	dvar_bytes shape = { 0 }, dim = { 0 }, sl = { 0 };
	int rc = put_int_nz(out, 1, e->dtype);
	for (int d = 0; !rc && d < e->shape.rank; d++) {
		dim.len = 0;
		rc = put_int_nz(&dim, 1, e->shape.dims[d]);
		if (!rc) rc = put_len(&shape, 2, &dim);
	}
	if (!rc) rc = put_len(out, 2, &shape);   /* always present, even for scalars */
	if (!rc) rc = put_int_nz(out, 3, e->shard_id);
	if (!rc) rc = put_int_nz(out, 4, e->offset);
	if (!rc) rc = put_int_nz(out, 5, e->size);
	if (!rc && e->crc32c) {
		unsigned char c[4] = { (unsigned char)e->crc32c, (unsigned char)(e->crc32c >> 8),
		                       (unsigned char)(e->crc32c >> 16), (unsigned char)(e->crc32c >> 24) };
		rc = put_tag(out, 6, WT_FIXED32);
		if (!rc) rc = dvar_bytes_put(out, c, 4);
	}
	for (size_t i = 0; !rc && i < e->num_slices; i++) {
		sl.len = 0;
		rc = slice_encode(&sl, &e->slices[i]);
		if (!rc) rc = put_len(out, 7, &sl);
	}
	free(shape.data);
	free(dim.data);
	free(sl.data);
	return rc;
}

int dvar_tf_slice_resolve(const dvar_tf_slice *t, const dvar_shape *shape, dvar_slice *out,
                          const char *what)
{
	memset(out, 0, sizeof(*out));
	if (t->rank != shape->rank)
		return dvar_error_set(DVAR_ECORRUPT, "%s: a slice of rank %d of a tensor of rank %d", what,
		                      t->rank, shape->rank);
	out->rank = t->rank;
	for (int d = 0; d < t->rank; d++) {
		if (t->length[d] < 0) {
			if (t->start[d] != 0 || t->length[d] != -1)
				return dvar_error_set(DVAR_ECORRUPT, "%s: dimension %d of a slice is full but "
				                      "starts at %lld", what, d, (long long)t->start[d]);
			out->start[d] = 0;
			out->length[d] = shape->dims[d];
		} else {
			if (t->start[d] < 0 || t->start[d] > shape->dims[d] ||
			    t->length[d] > shape->dims[d] - t->start[d])
				return dvar_error_set(DVAR_ECORRUPT, "%s: extent %lld,%lld in dimension %d lies "
				                      "outside the tensor's %lld", what, (long long)t->start[d],
				                      (long long)t->length[d], d, (long long)shape->dims[d]);
			out->start[d] = t->start[d];
			out->length[d] = t->length[d];
		}
	}
	return DVAR_OK;
}

void dvar_tf_slice_from(const dvar_slice *s, const dvar_shape *shape, dvar_tf_slice *out)
{
	memset(out, 0, sizeof(*out));
	out->rank = s->rank;
	for (int d = 0; d < s->rank; d++) {
		if (s->start[d] == 0 && d < shape->rank && s->length[d] == shape->dims[d]) {
			out->start[d] = 0;
			out->length[d] = -1;
		} else {
			out->start[d] = s->start[d];
			out->length[d] = s->length[d];
		}
	}
}

/* ---------------------------------------------------------------- strings */

static uint32_t lengths_crc(uint64_t n, const uint64_t *lens)
{
	uint32_t crc = 0;
	for (uint64_t i = 0; i < n; i++) {
		unsigned char b[8];
		for (int k = 0; k < 8; k++)
			b[k] = (unsigned char)(lens[i] >> (8 * k));
		crc = dvar_crc32c_extend(crc, b, lens[i] <= UINT32_MAX ? 4 : 8);
	}
	return crc;
}

int dvar_tf_strings_decode(const void *p, size_t size, uint64_t n, uint64_t *lens,
                           size_t *bytes_at, const char *what)
{
	const unsigned char *b = p, *at = b, *end = b + size;
	uint64_t total = 0;
	*bytes_at = 0;
	if (n > size)
		return dvar_error_set(DVAR_ECORRUPT, "%s: %zu bytes cannot hold %llu string lengths", what,
		                      size, (unsigned long long)n);
	for (uint64_t i = 0; i < n; i++) {
		int e = get_varint(&at, end, &lens[i]);
		if (e)
			return dvar_error_set(DVAR_ECORRUPT, "%s: the length of string %llu is %s", what,
			                      (unsigned long long)i, e == -1 ? "truncated" : "malformed");
		if (lens[i] > size)
			return dvar_error_set(DVAR_ECORRUPT, "%s: string %llu claims %llu bytes of a %zu-byte "
			                      "entry", what, (unsigned long long)i, (unsigned long long)lens[i], size);
		total += lens[i];   /* each <= size, n <= size: no overflow */
	}
	if (end - at < 4)
		return dvar_error_set(DVAR_ECORRUPT, "%s: the string entry is truncated before its length "
		                      "checksum", what);
	uint32_t stored = (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 |
	                  (uint32_t)at[3] << 24;
	uint32_t actual = lengths_crc(n, lens);
	if (dvar_tf_crc_unmask(stored) != actual)
		return dvar_error_set(DVAR_ECORRUPT, "%s: The length checksum does not match: expected %08u "
		                      "but actual is %08u", what, dvar_tf_crc_unmask(stored), actual);
	at += 4;
	if ((uint64_t)(end - at) != total)
		return dvar_error_set(DVAR_ECORRUPT, "%s: the string lengths add up to %llu bytes, the entry "
		                      "holds %zu after them", what, (unsigned long long)total,
		                      (size_t)(end - at));
	*bytes_at = (size_t)(at - b);
	return DVAR_OK;
}

uint32_t dvar_tf_strings_crc(const void *p, size_t size, uint64_t n, const uint64_t *lens,
                             size_t bytes_at)
{
	const unsigned char *b = p;
	uint32_t crc = lengths_crc(n, lens);
	crc = dvar_crc32c_extend(crc, b + bytes_at - 4, 4);
	return dvar_crc32c_extend(crc, b + bytes_at, size - bytes_at);
}

int dvar_tf_strings_encode(dvar_bytes *out, uint64_t n, const uint64_t *lens, const void *bytes,
                           uint32_t *crc)
{
	uint64_t total = 0;
	int rc = DVAR_OK;
	for (uint64_t i = 0; !rc && i < n; i++) {
		rc = dvar_bytes_put_varint(out, lens[i]);
		total += lens[i];
	}
	uint32_t lc = lengths_crc(n, lens);
	if (!rc) rc = dvar_bytes_put_u32(out, dvar_tf_crc_mask(lc));
	if (!rc && total > SIZE_MAX)
		rc = dvar_error_set(DVAR_ENOMEM, "string tensor of %llu bytes", (unsigned long long)total);
	if (!rc) rc = dvar_bytes_put(out, bytes, (size_t)total);
	if (!rc && crc) {
		unsigned char m[4];
		uint32_t mm = dvar_tf_crc_mask(lc);
		for (int k = 0; k < 4; k++)
			m[k] = (unsigned char)(mm >> (8 * k));
		*crc = dvar_crc32c_extend(dvar_crc32c_extend(lc, m, 4), bytes, (size_t)total);
	}
	return rc;
}
